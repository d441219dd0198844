"""The end-to-end study's tables and claim metrics, from its stored rows."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ...frameworks import REFERENCE
from ...results.judging import Measurement, StudyData, _why_none, time_ratio, timed_from
from ...results.store import MEASURED
from ...core.stats import rounds_t_interval

PHASES = ("data_s", "setup_s", "first_step_s", "steps_s", "eval_s", "end_s")
# A whole run's figures (its row; ``training_run.FitLog.figures``).
FIT_FIGURES = (*PHASES, "total_s", "train_steps", "steady_step_s", "time_to_target_s",
               "steps_to_target", "best_accuracy", "final_accuracy", "target_accuracy",
               "loss_step0")
# The figures a fit claim may compare between two stacks (lower is better).
RATIO_FIGURES = ("time_to_target_s", "total_s", "steady_step_s", "steps_to_target")


def check_fit_figure(cells: dict) -> list[str]:
    f = cells.get("figure")
    return [] if f in RATIO_FIGURES else [
        f"figure {f!r} is not one of {', '.join(RATIO_FIGURES)}"]


def _fit_rows(data: StudyData, devices) -> pd.DataFrame:
    r = data.results
    if r.empty:
        return r
    return r[(r["task"] == "fit") & r["device"].isin(devices) & r["status"].isin(MEASURED)]


def fit_ratio(data: StudyData, claim, devices) -> Measurement:
    """figure(a) / figure(b) of two stacks' whole runs (``cells``: a, b and
    ``figure``, one of ``RATIO_FIGURES``): each round's runs paired (same
    model and shape), the rounds' median of log ratios with Student's t over
    rounds (``stats.rounds_t_interval``, as a timing's rounds); one round:
    its ratio, no interval. A round where either run has no value (it never
    reached the target) is left out, and the note says so; where none has
    one, the figure is NaN and the note says which run fell short."""
    a, b, figure = claim.cells["a"], claim.cells["b"], claim.cells["figure"]
    m = Measurement(unit=f"{a} {figure} / {b} {figure}")
    rows = _fit_rows(data, devices)
    if claim.models and not rows.empty:
        rows = rows[rows["model"].isin(claim.models)]
    if rows.empty:
        m.note = _why_none(data, claim, devices, [a, b]) if not data.summary.empty else \
            "no whole run measured"
        return m
    rows = rows.assign(variant=rows["framework"] + "/" + rows["mode"])
    keys = ["model", "batch_size", "seq_len", "round"]
    side = {v: rows[rows["variant"] == v].set_index(keys)[figure] for v in (a, b)}
    both = side[a].to_frame("a").join(side[b].to_frame("b"), how="inner")
    if both.empty:
        m.note = _why_none(data, claim, devices, [a, b])
        return m
    ok = both[(both["a"] > 0) & (both["b"] > 0)]
    short = {v: int((~(both[k] > 0)).sum()) for k, v in (("a", a), ("b", b))}
    if ok.empty:
        m.note = "; ".join(f"{v} reached no value in {n} of {len(both)} run(s)"
                           for v, n in short.items() if n)
        return m
    logs = np.log(ok["a"].to_numpy() / ok["b"].to_numpy())
    centre, lo, hi = rounds_t_interval(logs, data.confidence)
    m.value, m.low, m.high = math.exp(centre), math.exp(lo), math.exp(hi)
    m.cells = sorted({f"{i[0]} {i[1]}x{i[2]}" for i in ok.index})
    m.points = [(f"{i[0]} round {i[3]}", float(x)) for i, x in zip(ok.index, np.exp(logs))]
    m.devices = set(rows["device"])
    ids = rows[rows["variant"].isin([a, b])]["cell_id"]
    timed_from(m, data, ids)
    m.rounds = len(ok)
    left = [f"{v} reached none in {n} round(s), left out" for v, n in short.items() if n]
    m.note = "; ".join([f"whole runs, one per round: {len(ok)} round(s)", *left])
    return m


def task_time_ratio(data: StudyData, claim, devices) -> Measurement:
    """``judging.time_ratio`` over the cells of one task (``cells``: a, b and
    ``task``: loader or fed), as the time per call of each pipeline's cell."""
    view = copy.copy(data)
    s = data.summary
    view.summary = s[s["task"] == claim.cells["task"]] if not s.empty else s
    return time_ratio(view, claim, devices)


# -- tables -------------------------------------------------------------------------
def _interval(values) -> tuple[float, float, float]:
    """The rounds' median and Student's t interval of positive values (in logs)."""
    v = np.asarray([x for x in values if x > 0], dtype=float)
    if not v.size:
        return math.nan, math.nan, math.nan
    c, lo, hi = rounds_t_interval(np.log(v))
    return math.exp(c), math.exp(lo), math.exp(hi)


def fit_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per stack, the whole run over its rounds: each phase's median seconds,
    examples per second, time to the target and the best accuracy (median
    [low, high] over rounds, Student's t in logs where there are two or
    more), runs that reached the target, peak memory, the first loss."""
    rows = results[(results["task"] == "fit") & results["status"].isin(MEASURED)]
    out = []
    for (model, fw, mode, b, s), g in rows.groupby(
            ["model", "framework", "mode", "batch_size", "seq_len"], sort=False):
        rec = dict(model=model, stack=f"{fw}/{mode}", shape=f"{b}x{s}", rounds=len(g))
        for k in PHASES + ("total_s",):  # a row from before a phase existed: NaN
            rec[k] = float(g[k].median()) if k in g else math.nan
        for k, name in (("throughput_samples_per_s", "examples_per_s"),
                        ("time_to_target_s", "time_to_target_s")):
            c, lo, hi = _interval(g[k])
            rec[name], rec[f"{name}_low"], rec[f"{name}_high"] = c, lo, hi
        rec["reached"] = f"{int((g['time_to_target_s'] > 0).sum())}/{len(g)}"
        rec["best_accuracy"] = float(g["best_accuracy"].median())
        rec["peak_mem_mb"] = float(g["peak_mem_bytes"].median()) / 1e6
        rec["loss_step0"] = float(g.sort_values("round")["loss_step0"].iloc[0])
        out.append(rec)
    return pd.DataFrame(out)


def pipeline_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per framework and pipeline: examples per second alone (``loader``) and
    feeding the step (``fed``), with the intervals of their medians, and the
    fed step's time over the same step fed from memory (1.0: the input costs
    the step nothing; above: it starves it)."""
    s = summary[summary["task"].isin(["loader", "fed"]) & summary["status"].isin(MEASURED)]
    out = []
    for (fw, mode, b, sl), g in s.groupby(["framework", "mode", "batch_size", "seq_len"],
                                          sort=False):
        rec = dict(framework=fw, pipeline=mode, shape=f"{b}x{sl}")
        for task, r in g.set_index("task").iterrows():
            rec[f"{task}_examples_per_s"] = b / r["median_s"]
            rec[f"{task}_low"] = b / r["ci_high_s"]
            rec[f"{task}_high"] = b / r["ci_low_s"]
            rec[f"{task}_setup"] = r.get("mode_setup", "")
        out.append(rec)
    df = pd.DataFrame(out)
    if df.empty or "fed_examples_per_s" not in df:
        return df
    mem = df[df["pipeline"] == "memory"].set_index(["framework", "shape"])["fed_examples_per_s"]
    df["fed_time_vs_memory"] = [mem.get((f, sh), math.nan) / x for f, sh, x in
                                zip(df["framework"], df["shape"], df["fed_examples_per_s"])]
    return df


def curves(output_dir: Path | str) -> pd.DataFrame:
    """Every run's evaluations and first losses (``worker.write_curve``)."""
    files = sorted((Path(output_dir) / "results" / "curves").glob("*.parquet"))
    if not files:
        return pd.DataFrame(columns=["kind", "step", "accuracy", "loss", "at_s", "cell_id",
                                     "framework", "mode", "model", "round"])
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def first_losses(curve: pd.DataFrame) -> pd.DataFrame:
    """The first training steps' losses of each stack's first round, side by
    side, and each one's largest difference from PyTorch's (same weights,
    same first batches: they should agree)."""
    t = curve[(curve["kind"] == "train")]
    if t.empty:
        return pd.DataFrame()
    t = t[t["round"] == t.groupby("cell_id")["round"].transform("min")]
    wide = t.assign(stack=t["framework"] + "/" + t["mode"]).pivot_table(
        index="step", columns="stack", values="loss")
    ref = [c for c in wide.columns if c.startswith(f"{REFERENCE}/")]
    if ref:
        for c in wide.columns:
            if c not in ref:
                wide[f"{c} - {ref[0]}"] = wide[c] - wide[ref[0]]
    return wide
