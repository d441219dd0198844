"""Where a report's timing noise is, and where to repeat (a benchmark of
stored results, not a test; it measures nothing itself).

Kalibera and Jones ("Rigorous Benchmarking in Reasonable Time", ISMM 2013):
repeat at the level where the variance is, in the proportion the levels' costs
and variances give. Here the levels are the turns of a round (a block of each
variant in turn) and the rounds (fresh processes). For every time-ratio claim
of one or more reports (each folder a report's profile folder, holding a
folder per study), it prints:

- its per-round log figure's spread over the rounds (the variance the
  scorecard's t interval is built from), and the part of it the rounds' own
  turns explain (``stats.within_round_var``: split halves, turn by turn where
  the two were sampled together); the rest is the processes' own;
- the costs of the two levels in its study, from the report's time breakdown
  (``time_breakdown_<task>.json``): a turn (``timing samples`` and ``settle
  between blocks`` over the turns every set took) and a round besides its
  turns (process start, builds, gates, first calls, warm-up and block size,
  exits, over the sets: round 0's cold first calls included);
- Kalibera and Jones' turns per round for those costs and variances
  (``stats.Levels.optimal_turns``; infinite where no between-process variance
  is seen), against the turns the rounds took;
- what an extra round of a claim's cells buys against the same seconds spent
  as more turns in its rounds: the expected half-width of the figure's own-t
  interval each way (an extra round also takes t to one degree of freedom
  more).

Then the same pooled per study and over all claims. With ``--error-rates
DIR`` (``benchmarks/error_rates.py``'s folder) the twins' figures as well.

Usage: .venv/bin/python benchmarks/variance_levels.py REPORT [REPORT ...]
       [--error-rates outputs/error_rates]
       (REPORT: a report's profile folder, e.g. outputs/report/quick)
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import fwcompare
from fwcompare.suite import claims as claims_mod
from fwcompare.core.env import manifest
from fwcompare.results.tables import hardware_line
from fwcompare.results.judging import claim_samples
from fwcompare.results.store import time_breakdowns
from fwcompare.core.stats import Levels, median_se_factor, t_quantile, variance_levels

TURN_PHASES = ("timing samples", "settle between blocks")
ROUND_PHASES = ("process start and imports", "model build and gate", "first calls and compiles",
                "warm-up and block size", "weights and gate references", "process exits",
                "model build, gate, first call and warm-up")


def level_costs(study_dir: Path, samples: pd.DataFrame) -> tuple[float, float]:
    """(seconds of a round besides its turns, seconds of a turn) of one set,
    averaged over a study's sets from its time breakdown; NaN without one."""
    spent = {}
    for run in time_breakdowns(study_dir / "results").values():
        for phase, s in run.items():
            spent[phase] = spent.get(phase, 0.0) + s
    if samples.empty or not spent:
        return math.nan, math.nan
    key = samples["turns"].fillna("").astype(str) if "turns" in samples else ""
    sets = samples.assign(set=np.where(key != "", key, samples["cell_id"] + "|"
                                       + samples["round"].astype(str)))
    turns = sets.groupby(["set", "cell_id"]).size().groupby("set").max()
    return (sum(spent.get(p, 0.0) for p in ROUND_PHASES) / len(turns),
            sum(spent.get(p, 0.0) for p in TURN_PHASES) / turns.sum())


def half_width(var: float, rounds: int) -> float:
    """The expected log half-width of a figure's own-t interval from
    ``rounds`` rounds whose figures have variance ``var``
    (``stats.rounds_t_interval``: Student's t, the median's scale)."""
    return t_quantile(0.95, rounds - 1) * median_se_factor(rounds) * math.sqrt(var / rounds)


def trade(lv: Levels, round_s: float, turn_s: float) -> tuple[float, float]:
    """The interval's half-width with one more round of ``lv.turns`` turns,
    and with that round's seconds spent as more turns in its ``lv.rounds``
    rounds instead (one turn's variance ``within * turns``): t on one degree
    of freedom more, against a smaller variance."""
    n, r, b = lv.turns, lv.rounds, lv.between
    one = lv.within * n
    more = (round_s + n * turn_s) / (r * turn_s)
    return half_width(b + one / n, r + 1), half_width(b + one / (n + more), r)


def rows_of(label: str, figures, costs) -> list[dict]:
    """One row per figure: ``figures`` (study, name, pairs), ``costs`` per study."""
    rows = []
    for study, name, pairs in figures:
        lv = variance_levels(pairs)
        if lv is None:
            continue
        round_s, turn_s = costs.get(study, (math.nan, math.nan))
        rows.append(dict(source=label, study=study, figure=name, rounds=lv.rounds,
                         turns=lv.turns, total=lv.total, within=lv.within,
                         round_s=round_s, turn_s=turn_s))
    return rows


def report_figures(folder: Path) -> tuple[list, dict]:
    """A report's time-ratio claims (study, claim, pairs: every model's cells
    together, where an ``aggregate: min`` claim judges the lowest model's) and
    its studies' costs."""
    claims = [c for c in claims_mod.load_claims() if c.metric == "time_ratio"]
    data = claims_mod.studies_data(claims, lambda s: folder / s)
    figures = [(c.study, c.id, claim_samples(data[c.study], c)) for c in claims
               if data[c.study].present]
    costs = {s: level_costs(folder / s, d.samples) for s, d in data.items() if d.present}
    return figures, costs


def twin_figures(folder: Path) -> tuple[list, dict]:
    """``benchmarks/error_rates.py``'s twins, each run's twin / plain, and
    each twin study's costs (averaged over the runs)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import error_rates
    from fwcompare.results.store import load_results

    figures = [(f"{row['study']} (twins)", f"{row['twin']} / plain ({run})", [pair])
               for run, found in error_rates.run_figures(folder).items()
               for pair, row in found]
    costs = {}
    for name in error_rates.TWINS:
        each = [level_costs(d, load_results(d).samples)
                for d in sorted(folder.glob(f"run*/{name}")) if (d / "results").is_dir()]
        if each:
            costs[f"{name.removesuffix('_twins')} (twins)"] = tuple(
                float(np.nanmedian(x)) for x in zip(*each))
    return figures, costs


def pooled(df: pd.DataFrame) -> Levels:
    """The figures' variances averaged (their rounds' degrees of freedom
    alike), turns the median."""
    return Levels(int(df["rounds"].median()), float(df["turns"].median()),
                  float(df["total"].mean()), float(df["within"].mean()))


def show(df: pd.DataFrame) -> None:
    def line(lv: Levels, round_s: float, turn_s: float) -> dict:
        best = lv.optimal_turns(round_s, turn_s) if turn_s > 0 else math.nan
        extra, longer = trade(lv, round_s, turn_s) if turn_s > 0 else (math.nan, math.nan)
        return {"rounds": lv.rounds, "turns": lv.turns,
                "sd_round_%": 100 * math.sqrt(lv.total),
                "within_share": lv.within / lv.total if lv.total > 0 else math.nan,
                "sd_between_%": 100 * math.sqrt(lv.between),
                "round/turn_s": round_s / turn_s if turn_s > 0 else math.nan,
                "kj_turns": best,
                "longer/extra_hw": longer / extra if extra > 0 else math.nan}

    out = pd.DataFrame([{"source": r.source, "figure": r.figure,
                         **line(Levels(r.rounds, r.turns, r.total, r.within), r.round_s,
                                r.turn_s)} for r in df.itertuples()])
    pd.set_option("display.width", 220)
    pd.set_option("display.max_rows", 500)
    print(out.round(3).to_string(index=False))
    print("\npooled per study (variances averaged over its figures and sources):")
    per = pd.DataFrame([{"study": study, "figures": len(g),
                         **line(pooled(g), g["round_s"].median(), g["turn_s"].median())}
                        for study, g in df.groupby("study")])
    print(per.round(3).to_string(index=False))
    share = df["within"].sum() / df["total"].sum()
    costed = out[out["round/turn_s"].notna()]
    print(f"\nall {len(df)} figures: the rounds' turns explain {share:.0%} of the variance of "
          f"the per-round figures (sum of within / sum of total); of the {len(costed)} with "
          f"costs, Kalibera and Jones' turns per round exceed the turns taken for "
          f"{int((costed['kj_turns'] > costed['turns']).sum())}, and an extra round's seconds "
          f"spent as longer rounds give the narrower interval (own t) for "
          f"{int((costed['longer/extra_hw'] < 1).sum())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", type=Path, nargs="*", metavar="REPORT")
    ap.add_argument("--error-rates", type=Path, default=None, metavar="DIR")
    args = ap.parse_args()
    if not args.reports and args.error_rates is None:
        ap.error("name a report's profile folder (or --error-rates DIR)")
    print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}; fwcompare "
          f"{fwcompare.__version__}", flush=True)
    rows = []
    for folder in args.reports:
        if not folder.is_dir():
            ap.error(f"no such folder: {folder}")
        figures, costs = report_figures(folder)
        rows += rows_of(str(folder), figures, costs)
    if args.error_rates is not None:
        rows += rows_of(str(args.error_rates), *twin_figures(args.error_rates))
    if not rows:
        raise SystemExit("no figure with 2 or more rounds of 4 or more blocks a side")
    show(pd.DataFrame(rows))


if __name__ == "__main__":
    main()
