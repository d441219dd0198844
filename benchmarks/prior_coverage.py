"""How often the scorecard's intervals hold the truth on a real report's
spreads (a simulation on recorded figures; nothing is measured).

A report's timed claims spread from round to round by very different amounts
(0.1% to 8% of the log ratio on a CPU). This takes the spreads of a stored
report (``claims.class_spreads``: per class of claims, study x device x
schedule, each timed figure's per-round variance and its degrees of freedom),
takes each as a figure's true spread, and constructs ``--reports`` reports:
each figure's per-round values normal around a truth of 0 with that spread,
as many rounds as it had (``--rounds K``: K rounds each, to ask what a
profile of K rounds would give on the same spreads). Each constructed
report's intervals are made three ways, as ``stats.rounds_t_interval`` makes
the scorecard's (95%, no block floor):

- ``class``: moderated by the prior of the figure's class (what the
  scorecard does: ``claims.variance_priors``);
- ``pooled``: moderated by one prior of every timed figure of the report
  (what it did before the classes);
- ``own``: each figure's own t.

It prints, per class and per noise group (a figure's spread against the
median of the report's: quiet below 2/3 of it, noisy above 3/2), the share of
intervals that held the truth and their median half-width, and the lowest
coverage of any class or group. Taking each recorded spread as a truth makes
the figures more unequal than they are (a spread from 3 rounds is itself
uncertain): a harder test than the report's own.

Usage: .venv/bin/python benchmarks/prior_coverage.py [RESULTS_ROOT]
       [--reports 2000] [--seed 0] [--rounds K]
(RESULTS_ROOT: a profile's output folder, default outputs/quick.)
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fwcompare.core.paths import OUTPUTS
from fwcompare.core.stats import rounds_t_interval, variance_prior
from fwcompare.suite import claims

WAYS = ("class", "pooled", "own")


def recorded_spreads(root: Path) -> pd.DataFrame:
    """One row per timed figure of the stored report: its class, variance and
    degrees of freedom."""
    mine = claims.load_claims()
    data = claims.studies_data(mine, lambda study: root / study)
    rows = [{"class": k, "var": v, "dof": d}
            for k, spreads in claims.class_spreads(mine, data).items() for v, d in spreads]
    return pd.DataFrame(rows)


def noise_group(sd: np.ndarray) -> np.ndarray:
    ratio = sd / np.median(sd)
    return np.where(ratio < 2 / 3, "quiet", np.where(ratio > 1.5, "noisy", "typical"))


def simulate(figures: pd.DataFrame, reports: int, seed: int,
             rounds: int | None = None) -> pd.DataFrame:
    """Per figure and way: the share of constructed reports whose interval
    held the truth, and the median half-width (log). ``rounds``: that many
    rounds per figure in place of its recorded ones."""
    rng = np.random.default_rng(seed)
    sd = np.sqrt(np.maximum(figures["var"].to_numpy(float), 1e-12))
    dof = (np.full(len(figures), rounds - 1) if rounds else figures["dof"].to_numpy(int))
    classes = figures["class"].to_numpy()
    held = {w: np.zeros(len(figures)) for w in WAYS}
    widths = {w: [[] for _ in range(len(figures))] for w in WAYS}
    for _ in range(reports):
        values = [sd[i] * rng.standard_normal(dof[i] + 1) for i in range(len(figures))]
        spreads = [(float(np.var(v, ddof=1)), float(dof[i])) for i, v in enumerate(values)]
        pooled = variance_prior(spreads)
        by_class = {k: variance_prior([s for s, c in zip(spreads, classes) if c == k])
                    for k in set(classes)}
        for i, v in enumerate(values):
            for way, prior in (("class", by_class[classes[i]]), ("pooled", pooled),
                               ("own", None)):
                centre, lo, hi = rounds_t_interval(v, 0.95, 0.0, prior)
                held[way][i] += lo <= 0 <= hi
                widths[way][i].append(hi - centre)
    out = figures.assign(sd=sd, group=noise_group(sd))
    for w in WAYS:
        out[f"{w}_coverage"] = held[w] / reports
        out[f"{w}_half_width"] = [float(np.median(x)) for x in widths[w]]
    return out


def table(res: pd.DataFrame, by: str) -> pd.DataFrame:
    cols = {f"{w}_coverage": "mean" for w in WAYS} | {f"{w}_half_width": "median" for w in WAYS}
    t = res.groupby(by).agg(figures=("sd", "size"), median_sd=("sd", "median"), **{
        k: (k, f) for k, f in cols.items()})
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", type=Path, default=OUTPUTS / "quick")
    ap.add_argument("--reports", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds per figure (at least 2; default: each figure's recorded)")
    args = ap.parse_args()
    if args.rounds is not None and args.rounds < 2:
        ap.error(f"--rounds {args.rounds}: an interval over rounds needs at least 2")
    figures = recorded_spreads(args.root)
    if figures.empty:
        raise SystemExit(f"{args.root}: no timed figure from two or more rounds to take "
                         f"spreads from (a report's output folder, e.g. outputs/quick)")
    print(f"{len(figures)} timed figures in {figures['class'].nunique()} classes, from "
          f"{args.root}; {args.reports} constructed reports, seed {args.seed}, "
          + (f"{args.rounds} rounds each" if args.rounds else "each figure's own rounds"))
    res = simulate(figures, args.reports, args.seed, args.rounds)
    pd.set_option("display.width", 200)
    fmt = {c: "{:.3f}".format for c in res.columns if c.endswith(("coverage", "half_width"))}
    for by in ("class", "group"):
        print(f"\nper {by} (coverage: share of intervals that held the truth; half-width: "
              f"median, log scale)")
        print(table(res, by).to_string(formatters=fmt | {"median_sd": "{:.4f}".format}))
    for w in WAYS:
        low = min(table(res, by)[f"{w}_coverage"].min() for by in ("class", "group"))
        print(f"{w}: lowest coverage of any class or noise group {low:.3f}"
              + ("  (goal for the scorecard's: at least 0.94)" if w == "class" else ""))
    if not math.isfinite(res["class_coverage"].min()):
        raise SystemExit("no coverage computed")


if __name__ == "__main__":
    main()
