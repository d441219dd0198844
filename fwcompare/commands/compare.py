"""``fwcompare compare``: two runs or machines cell by cell: time ratios with CIs,
cells in one only, the environments' differences; a regression gate with
--fail-above."""
from __future__ import annotations

import argparse
import json
import sys

from .base import BAD_INPUT, DONE, FAILED, positive_float

HELP = ("two runs or machines cell by cell: time ratios with CIs, cells in one only, the "
        "environments' differences; a regression gate with --fail-above")
EXAMPLES = (
    "fwcompare compare outputs/quick old-run/quick",
    ("fwcompare compare main/quick branch/quick --fail-above 1.05   (exit 1: a cell's interval"
     " lies wholly above 1.05)"),
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("a", help="output folder A: outputs/PROFILE or outputs/PROFILE/STUDY")
    p.add_argument("b", help="output folder B (time_b_over_a above 1: B is slower)")
    p.add_argument("--out", help="also write cells.csv, variants.csv, only_in_one.csv, "
                                 "env_diff.csv and compare.md here")
    p.add_argument("--fail-above", type=positive_float, metavar="RATIO",
                   help="exit 1 when a cell's B/A time ratio lies above RATIO for sure (its "
                        "95%% interval's lower end above it), or a cell measured in A "
                        "failed in B; those cells are printed first")
    p.add_argument("--fail-below", type=positive_float, metavar="RATIO",
                   help="exit 1 when a cell's B/A ratio lies below RATIO for sure (the "
                        "interval's upper end below it): B faster than expected")
    p.add_argument("--json", action="store_true",
                   help="print the comparison (and the gate's cells) as JSON")


def main(args) -> int:
    from .. import studies  # noqa: F401 (registers the studies' cell axes, which cells match on)
    from ..results.compare import CompareError, compare

    try:
        c = compare(args.a, args.b)
    except CompareError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    hits = c.regressions(args.fail_above, args.fail_below)
    for w in c.warnings if args.json else []:  # the text prints them itself
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    for w in c.gate_warnings(hits):
        print(f"fwcompare: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(c.to_json(args.fail_above, args.fail_below), indent=1))
    else:
        if len(hits):  # what stops the gate, first
            cols = ["study", "model", "variant", "dtype", "batch_size", "seq_len",
                    "time_b_over_a", "ci_low", "ci_high", "status_a", "status_b", "why"]
            print(f"FAIL: {len(hits)} cell(s) beyond the gate:\n"
                  + hits[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")
                  + "\n")
        print(c.text())
    if args.out:
        print("written: " + ", ".join(str(f) for f in c.write(args.out)),
              file=sys.stderr if args.json else sys.stdout)
    if len(hits):
        print(f"fwcompare: {len(hits)} cell(s) beyond the gate "
              f"({_gate_text(args)})", file=sys.stderr)
        return FAILED
    return DONE



def _gate_text(args) -> str:
    return " and ".join(t for t in (
        f"--fail-above {args.fail_above:g}" if args.fail_above is not None else "",
        f"--fail-below {args.fail_below:g}" if args.fail_below is not None else "") if t)
