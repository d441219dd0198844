"""What the commands share: their exit codes, the options that ask a study
your own question, the printing of a run's cells."""
from __future__ import annotations

import argparse
import sys

from ..frameworks import FRAMEWORKS
from ..suite.params import LIST_FLAGS

DONE, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


def overrides_of(args) -> dict:
    """The params the command line sets (``--models`` ... ``--set``)."""
    from ..suite.params import command_line_overrides

    return command_line_overrides({key: getattr(args, key) for key in LIST_FLAGS}, args.set)


def add_overrides(p: argparse.ArgumentParser, where: str) -> None:
    g = p.add_argument_group(
        "your own question", f"merged into the profile's params and checked as a params file "
        f"is (a bad value exits 2 before anything is measured); results go to "
        f"outputs/<profile>-<hash of the overrides>/, never into the profile's own folder. "
        f"{where}")
    g.add_argument("--models", metavar="A,B", help="zoo names (`fwcompare list models`) or "
                   "local checkpoint directories")
    g.add_argument("--frameworks", metavar="A,B", help=f"a subset of {','.join(FRAMEWORKS)}")
    g.add_argument("--batch-sizes", dest="batch_sizes", metavar="1,8", help="batch sizes")
    g.add_argument("--seq-lens", dest="seq_lens", metavar="128,512",
                   help="sequence lengths in tokens")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any params key, its value in YAML (repeatable): --set rounds=3, "
                        "--set 'modes={torch: [eager, compile]}', --set device=gpu --set "
                        "schedule=sequential")


def cells_failed(results) -> int:
    """FAILED when a cell's run failed (error, timeout), naming how many."""
    from ..results.store import RUN_FAILED

    if not len(results):
        return DONE
    failed = results[results["status"].isin(RUN_FAILED)]
    if len(failed):
        first = failed.iloc[0]
        print(f"fwcompare: {failed['cell_id'].nunique()} cell(s) failed "
              f"({' or '.join(RUN_FAILED)}; run again to retry them); the first, "
              f"{first['model']} {first['framework']}/{first['mode']} b={first['batch_size']} "
              f"s={first['seq_len']}: {' '.join(str(first['error']).split())[:300]}",
              file=sys.stderr)
        return FAILED
    return DONE


def print_cells(res) -> None:
    """A row per cell (the study's own axes where they leave their defaults:
    generation's ``new_tokens``, distributed's ``workers``), then why the
    cells that did not run ok did not, each reason once, and the folder."""
    from ..core.spec import axes
    from ..results.tables import summarize

    summary = summarize(res.results, res.samples)
    own = [a.name for a in axes() if a.name in summary
           and (summary[a.name].dropna() != a.default).any()]
    cols = ["model", "variant", "batch_size", "seq_len", *own, "status", "median_s",
            "ci_low_s", "ci_high_s", "equiv_max_abs_err"]
    print(summary[cols].to_string(index=False) if len(summary) else "no cells")
    if len(summary) and "error" in summary:
        bad = summary[(summary["status"] != "ok") & summary["error"].fillna("").astype(bool)]
        for (status, error), n in bad.groupby(["status", "error"], sort=False).size().items():
            print(f"{status} ({n} cell{'s' if n != 1 else ''}): {error}")
    print(f"results: {res.output_dir / 'results'}")


def positive_float(text: str, zero: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (v >= 0 if zero else v > 0) or v == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or more' if zero else 'positive'} and finite, got {text}")
    return v


def minutes(text: str) -> float:
    return positive_float(text, zero=True)
