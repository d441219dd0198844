"""``fwcompare report``: run every study and its notebook, judge the claims, write
index.html."""
from __future__ import annotations

import argparse
import sys

from ..core.paths import OUTPUTS, require_checkout
from ..suite.params import REPORT_BUDGET_S
from .base import DONE, FAILED, add_overrides, cells_failed, minutes, overrides_of

HELP = "run every study and its notebook, judge the claims, write index.html"
EXAMPLES = (
    "fwcompare report --profile quick   (what `make report` runs)",
    ("fwcompare report --study inference_sweep --study training --models "
     "distilbert-base-uncased --batch-sizes 1,4"),
    "fwcompare report --profile gpu --dry-run   (each study's cells and the report's estimate)",
)


def add_arguments(p: argparse.ArgumentParser, studies: list[str]) -> None:
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", help=f"output root (default {OUTPUTS})")
    p.add_argument("--study", action="append", choices=studies,
                   help="only this study (repeatable)")
    p.add_argument("--fresh", action="store_true",
                   help="archive earlier results and measure every cell again")
    p.add_argument("--dry-run", action="store_true",
                   help="print each study's cells and estimate and the report's, measure "
                   "nothing")
    p.add_argument("--budget", type=minutes, metavar="MINUTES",
                   help="the report's time budget: extra rounds for doubtful claims start "
                   "only where they fit in it, the notebooks' time after them (default: the "
                   "profile's, " + ", ".join(f"{k} {v / 60:g}" for k, v in
                                             REPORT_BUDGET_S.items())
                   + ", where no params are overridden; 0: none, only the studies' "
                   "more_rounds_s)")
    add_overrides(p, "Each applies to every chosen study whose params have that key.")


def main(args) -> int:
    import pandas as pd

    from ..results.store import load_results
    from ..suite.report import ReportError, build
    from ..studies import STUDIES

    require_checkout()
    try:
        index = build(args.profile, out_root=args.out, fresh=args.fresh,
                      studies=args.study or None, overrides=overrides_of(args),
                      progress=not args.quiet,
                      budget_s=None if args.budget is None else args.budget * 60,
                      dry_run=args.dry_run)
    except ReportError as exc:
        print(f"fwcompare: {exc}", file=sys.stderr)
        return FAILED
    if index is None:  # --dry-run: nothing measured
        return DONE
    results = [load_results(index.parent / s).results for s in args.study or STUDIES
               if (index.parent / s / "results").is_dir()]
    return cells_failed(pd.concat(results, ignore_index=True) if results else pd.DataFrame())
