"""The method's own error rates (a benchmark, not a test): how often an
interval calls two identical variants different (A/A), and how small a
slowdown it detects (sensitivity).

Three studies' cells are measured as the quick report measures them (their
quick params' timing, rounds in passes over the studies, interleaved sets of
fresh worker processes), each cell in four twins that differ only in a cell
axis of this file's (``twin``), so each is a lane of its own, a worker of its
own in every round:

- ``plain``: the cell as it is;
- ``copy``: the same again (A/A: the true ratio copy / plain is 1);
- ``slow2``, ``slow5``: the same with a busy-wait after each call of 2% and 5%
  of the call's median time (calibrated in the worker on 10 warm calls; the
  row keeps the wait, ``twin_delay_s``, so the true slowdown is
  1 + wait / plain's median).

The cells (synchronous on a CPU, so the wait follows a finished call): the
inference sweep's PyTorch eager bert-base 1x128, the acceleration study's
TorchScript distilbert 1x64 and the deployment study's ONNX Runtime MiniLM
1x128. Each run measures every twin in ``--rounds`` rounds; the interval of
each twin against ``plain`` is the scorecard's (``stats.geomean_ratio_ci``:
Student's t over the rounds' ratios). Over ``--runs`` runs it prints:

- A/A: the share of intervals of copy / plain that exclude 1 (the false
  difference rate; goal at most 5%) and their median half-width;
- sensitivity: per slowdown, the share of intervals that exclude 1 and hold
  the true slowdown (detected; goal for 2%: at least 80%), the share that
  exclude 1 at all, and the share that hold the true value (coverage);
- the same from the same samples with each round's ratio of medians in
  place of the turn-by-turn ratio (``stats.round_log_ratio``), to see what
  comparing turn by turn gives on this machine.

Usage: .venv/bin/python benchmarks/error_rates.py [--runs 5] [--rounds 3]
       [--out outputs/error_rates] [--analyse]
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

import fwcompare
from fwcompare import studies
from fwcompare.measure.cell import CellPlan
from fwcompare.core.env import manifest
from fwcompare.results.tables import hardware_line
from fwcompare.core.paths import OUTPUTS, PARAMS
from fwcompare.results.store import load_results
from fwcompare.plan.schema import read_yaml
from fwcompare.core.spec import Axis
from fwcompare.core.stats import CellSamples, geomean_ratio_ci, look_confidence, variance_prior
from fwcompare.execution.study import with_axis
from fwcompare.results.tables import samples_by_cell

TWIN = Axis("twin", "plain", label=" {twin}")
SLOWDOWN = {"plain": 0.0, "copy": 0.0, "slow2": 0.02, "slow5": 0.05}
CALIBRATION_CALLS = 10

# study: (framework, mode, batch, sequence), each study's quick model
CELLS = {"inference_sweep": ("torch", "eager", 1, 128),
         "acceleration": ("torch", "torchscript", 1, 64),
         "deployment": ("torch", "onnxruntime", 1, 128)}


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def slowed(plan: CellPlan, share: float) -> CellPlan:
    """``plan`` with a busy-wait of ``share`` of its call's median time after
    every call, the median from CALIBRATION_CALLS calls when the timed callable
    is built (after the cell's own first call: warm)."""
    wait = {}

    def call():
        fn = plan.call()
        times = []
        for _ in range(CALIBRATION_CALLS):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        wait["s"] = share * statistics.median(times)

        def run():
            out = fn()
            _spin(wait["s"])
            return out
        return run

    def after(fn):
        return {**(plan.after(fn) if plan.after else {}), "twin_delay_s": wait.get("s", math.nan)}

    return dataclasses.replace(plan, call=call, after=after)


def twins_of(base):
    """The study ``base`` (a registered study) with the twin axis: its cells,
    restricted to CELLS' one, each in the four twins."""
    fw, mode, b, s = CELLS[base.name]

    def twins(c):
        picked = (c.framework, c.mode, c.batch_size, c.seq_len) == (fw, mode, b, s)
        return SLOWDOWN if picked else ()

    def plan(make, spec):
        p, share = make(), SLOWDOWN[spec.twin]
        return slowed(p, share) if share and not p.skip else p

    return with_axis(base, TWIN, twins, __name__, plan, figures=("twin_delay_s",),
                     name=f"{base.name}_twins")


# what a worker process imports this file for (studies.load finds them by name)
INFERENCE = twins_of(studies.STUDIES["inference_sweep"])
ACCELERATION = twins_of(studies.STUDIES["acceleration"])
DEPLOYMENT = twins_of(studies.STUDIES["deployment"])
TWINS = {t.name: t for t in (INFERENCE, ACCELERATION, DEPLOYMENT)}


def params_for(twins, rounds: int) -> dict:
    """The base study's quick params, only the framework and shape measured here,
    ``rounds`` rounds of every cell, no extra rounds."""
    base = twins.name.removesuffix("_twins")
    fw, mode, b, s = CELLS[base]
    p = read_yaml(PARAMS / base / "quick.yaml", "params")
    # eager too: a study may require its baseline mode (only CELLS' cell is measured)
    p.update(frameworks=[fw], modes={fw: list(dict.fromkeys(["eager", mode]))},
             batch_sizes=[b], seq_lens=[s],
             rounds=rounds, rounds_for="all", more_rounds=0, more_rounds_s=0.0)
    return p


def measure(runs: int, rounds: int, out: Path) -> None:
    from fwcompare import run_studies
    from fwcompare.execution.forkserver import ForkServers

    for name in TWINS:
        studies.register(TWINS[name])
    for k in range(runs):
        folder = out / f"run{k}"
        if all((folder / name / "results" / "cells").is_dir() and
               len(load_results(folder / name).results) >= 4 * rounds for name in TWINS):
            continue  # done (a rerun resumes)
        t0 = time.perf_counter()
        with ForkServers(folder / ".forkservers") as servers:
            _, failed = run_studies({name: (params_for(t, rounds), folder / name)
                                     for name, t in TWINS.items()},
                                    profile="error_rates", servers=servers, progress=False,
                                    log=lambda line: None)
        print(f"run {k + 1}/{runs}: {time.perf_counter() - t0:.0f} s"
              + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)


def upto(x: CellSamples, n: int) -> CellSamples:
    """A cell's samples of its first ``n`` rounds."""
    return CellSamples({r: v for r, v in x.rounds.items() if r < n}, x.interleaved, x.turns)


def run_figures(out: Path) -> dict[str, list]:
    """Per run: each twin's (pair of CellSamples twin / plain, row of what it is)."""
    runs = {}
    for folder in sorted(out.glob("run*")):
        figures = runs.setdefault(folder.name, [])
        for name in TWINS:
            if not (folder / name / "results").is_dir():
                continue
            res = load_results(folder / name)
            r = res.results[res.results["status"] == "ok"]
            by_cell = samples_by_cell(res.samples)
            ids = r.drop_duplicates("cell_id").set_index("twin")["cell_id"]
            if "plain" not in ids:
                continue
            plain = by_cell[ids["plain"]]
            median_plain = float(np.median(plain.pooled))
            for twin in ("copy", "slow2", "slow5"):
                if twin not in ids:
                    continue
                wait = r.loc[r["twin"] == twin, "twin_delay_s"].median()
                truth = 1.0 + (wait / median_plain if math.isfinite(wait) else 0.0)
                figures.append(((by_cell[ids[twin]], plain),
                                dict(run=folder.name, study=name.removesuffix("_twins"),
                                     twin=twin, nominal=SLOWDOWN[twin], truth=truth)))
    return runs


def apart(x: CellSamples) -> CellSamples:
    """``x`` as if sampled on its own: a round's ratio against it is the ratio
    of the round's medians (``stats.round_log_ratio``), as before ac730d6; the
    blocks' floor of a figure on its own t then resamples each side's blocks
    on their own (before, in pairs), so a replayed figure may differ."""
    return CellSamples(x.rounds)


def looked_at(figures: list, n: int, confidence: float, sides_apart: bool = False) -> list[tuple]:
    """Each figure's (value, low, high) from its first ``n`` rounds, moderated
    by the prior of all of them at ``n`` rounds, and from its own t
    (``sides_apart``: each round's ratio of medians, not turn by turn)."""
    pairs = [(upto(a, n), upto(b, n)) for (a, b), _ in figures]
    if sides_apart:
        pairs = [(apart(a), apart(b)) for a, b in pairs]
    spreads: list = []  # the own t's pass also collects what the prior needs
    own = [geomean_ratio_ci([pair], confidence, spreads=spreads) for pair in pairs]
    prior = variance_prior(spreads)
    return [(*geomean_ratio_ci([pair], confidence, prior=prior), *mine[1:], prior)
            for pair, mine in zip(pairs, own)]


def sequential(runs: dict[str, list], first: int, sides_apart: bool = False) -> pd.DataFrame:
    """The report's extra rounds, replayed on runs of more rounds than
    ``first``: each figure looked at after ``first`` rounds (95%), then after
    each further round (``stats.look_confidence``), stopping once its interval
    excludes 1, as a doubtful claim of "slower" would (moderated t). ``runs``:
    :func:`run_figures`."""
    rows = []
    for run, figures in runs.items():
        if not figures:
            continue
        rounds = min(len(a.rounds) for (a, _), _ in figures)
        looks = 1 + max(rounds - first, 0)
        done = [None] * len(figures)
        for k in range(1, looks + 1):
            seen = looked_at(figures, first + k - 1, look_confidence(k, looks), sides_apart)
            for i, (value, lo, hi, *_rest) in enumerate(seen):
                if done[i] is None and (lo > 1 or hi < 1 or k == looks):
                    done[i] = dict(figures[i][1], value=value, low=lo, high=hi,
                                   rounds=first + k - 1, look=k)
        rows += done
    return pd.DataFrame(rows)


def intervals(runs: dict[str, list], first: int | None = None,
              sides_apart: bool = False) -> pd.DataFrame:
    """One row per (run, study, twin other than plain): the ratio twin / plain
    with its interval and the true ratio, from each run's first ``first``
    rounds (None: all). Each run is a report: the variance prior of its
    intervals (``stats.variance_prior``, the moderated t the scorecard uses)
    is estimated from all of its figures, as the scorecard's is from all of a
    report's timed claims; ``own`` is the interval from each figure's own t,
    beside it. ``runs``: :func:`run_figures`."""
    rows = []
    for run, figures in runs.items():
        if not figures:
            continue
        n = first or min(len(a.rounds) for (a, _), _ in figures)
        for (_, row), (value, lo, hi, own_lo, own_hi, prior) in zip(
                figures, looked_at(figures, n, 0.95, sides_apart)):
            rows.append(dict(row, value=value, low=lo, high=hi, own_low=own_lo,
                             own_high=own_hi, rounds=n,
                             prior_dof=prior.dof if prior else math.nan))
    return pd.DataFrame(rows)


def report(df: pd.DataFrame, seq: pd.DataFrame | None = None,
           apart_df: pd.DataFrame | None = None, apart_seq: pd.DataFrame | None = None) -> None:
    if df.empty:
        print("no results yet")
        return
    pd.set_option("display.width", 200)
    print(df[["run", "study", "twin", "truth", "value", "low", "high", "own_low", "own_high",
              "rounds", "prior_dof"]].round(4).to_string(index=False))
    for label, low, high in ((f"moderated t (the scorecard's), {df['rounds'].min()} rounds",
                              "low", "high"),
                             ("each figure's own t", "own_low", "own_high")):
        print(f"\n{label}:")
        summary(df.assign(low=df[low], high=df[high]))
    if seq is not None and len(seq) and seq["look"].max() > 1:
        print(f"\nwith the report's extra rounds replayed (moderated t, up to "
              f"{seq['rounds'].max()} rounds, stopping once an interval excludes 1):")
        summary(seq)
        print("rounds taken: " + ", ".join(f"{t} median {g['rounds'].median():g}"
                                           for t, g in seq.groupby("twin")))
    if apart_df is not None and len(apart_df):  # the same samples, each round's ratio of medians
        print("\nfor comparison, each round's ratio of medians (the sides apart, not turn by "
              "turn), moderated t:")
        summary(apart_df)
        if apart_seq is not None and len(apart_seq) and apart_seq["look"].max() > 1:
            print("with the extra rounds replayed:")
            summary(apart_seq)


def summary(df: pd.DataFrame) -> None:
    """The error rates of the intervals ``low``-``high`` of ``df``."""
    df = df.assign(excludes_1=(df["low"] > 1) | (df["high"] < 1),
                   holds_truth=(df["low"] <= df["truth"]) & (df["truth"] <= df["high"]),
                   half_width=(np.log(df["high"]) - np.log(df["low"])) / 2)
    df["detected"] = (df["low"] > 1) & df["holds_truth"]
    n_runs = df["run"].nunique()
    aa = df[df["twin"] == "copy"]
    print(f"A/A (copy / plain, true ratio 1): {int(aa['excludes_1'].sum())} of {len(aa)} intervals "
          f"exclude 1 ({aa['excludes_1'].mean():.1%}; goal at most 5%); median half-width "
          f"{np.expm1(aa['half_width'].median()):.2%} ({n_runs} runs x "
          f"{aa['study'].nunique()} cells)")
    for twin in ("slow2", "slow5"):
        s = df[df["twin"] == twin]
        if s.empty:
            continue
        print(f"{twin} (true ratio {s['truth'].min():.4f}-{s['truth'].max():.4f}): detected in "
              f"{int(s['detected'].sum())} of {len(s)} ({s['detected'].mean():.1%}); interval "
              f"excludes 1 in {s['excludes_1'].mean():.1%}, holds the truth in "
              f"{s['holds_truth'].mean():.1%}; median half-width "
              f"{np.expm1(s['half_width'].median()):.2%}")
    for study, g in df.groupby("study"):
        print(f"  {study}: A/A excludes 1 in {g.loc[g['twin'] == 'copy', 'excludes_1'].mean():.0%}, "
              f"2% detected in {g.loc[g['twin'] == 'slow2', 'detected'].mean():.0%}, "
              f"5% in {g.loc[g['twin'] == 'slow5', 'detected'].mean():.0%}; median half-width "
              f"{np.expm1(g['half_width'].median()):.2%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUTPUTS / "error_rates")
    ap.add_argument("--analyse", action="store_true", help="only print what is stored")
    ap.add_argument("--first", type=int, default=3,
                    help="the report's own rounds: with --rounds above it, the rounds "
                         "after these replay the report's extra rounds (default 3)")
    args = ap.parse_args()
    print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}; fwcompare "
          f"{fwcompare.__version__}", flush=True)
    if not args.analyse:
        measure(args.runs, args.rounds, args.out)
    runs = run_figures(args.out)  # read once, for both
    report(intervals(runs, args.first), sequential(runs, args.first),
           intervals(runs, args.first, True), sequential(runs, args.first, True))


if __name__ == "__main__":
    main()
