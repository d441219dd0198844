"""Tables every study uses, derived from results and raw samples: statistics are
recomputed from the samples (pooled over rounds), never copied from a stored
statistic. Tables of one study live in its module (``fwcompare.studies.*``)."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import pandas as pd

from ..core.stats import derived_figures
from ..core.machine_load import host_load
from .store import FAILED_STATUSES, MEASURED
from ..core.spec import axes, tokens_per_call
from ..frameworks import BASELINE, BUILT_IN
from ..core.stats import CellSamples, geomean_ratio_ci

# What the variants of one cell share: these and the studies' shape axes
# (``cell_keys``: text generation's tokens generated).
CELL_KEYS = ["model", "device", "dtype", "batch_size", "seq_len"]


def hardware_line(m: dict) -> str:
    """One line naming the hardware and versions of a run's manifest
    (``env.json``), for figure footers and the report's first page."""
    v = m.get("versions", {})
    gpu = "; GPU " + m["gpus"][0]["name"] if m.get("gpus") else ""
    used = ", ".join(f"{fw} {v.get(fw)}" for fw in BUILT_IN)
    return (f"{m.get('cpu_model', '?')} ({m.get('cpu_cores_available', '?')} cores){gpu} | "
            f"{used}, transformers {v.get('transformers')} | commit "
            f"{str(m.get('git_commit', ''))[:8]}{'+dirty' if m.get('git_dirty') else ''}")


def cell_keys() -> list[str]:
    """The columns the variants of one cell share (a ratio's pairs): the shared
    keys and every registered shape axis (``fwcompare.core.spec.Axis``)."""
    return [*CELL_KEYS, *(a.name for a in axes(shape=True))]


def with_axes(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with a column per registered cell axis, at its default where
    the store is from before the axis was added."""
    missing = {a.name: a.default for a in axes() if a.name not in results}
    return results.assign(**missing) if missing else results


def variant(framework: str, mode: str) -> str:
    return f"{framework}/{mode}"


def samples_by_cell(samples: pd.DataFrame) -> dict[str, CellSamples]:
    """Raw seconds per call of each cell, per round (``np.asarray``: pooled),
    and whether they were timed interleaved (stores from before the column:
    sequential)."""
    out = {}
    for cid, g in samples.groupby("cell_id"):
        g = g.sort_values(["round", "sample"])
        inter = "schedule" in g and bool((g["schedule"] == "interleaved").all())
        rounds, turns = {}, {}
        for r, x in g.groupby("round"):
            rounds[r] = x["seconds"].to_numpy()
            if "turns" in x and x["turns"].nunique() == 1:  # results.with_turns: its set
                turns[r] = x["turns"].iloc[0]
        out[cid] = CellSamples(rounds, inter, turns)
    return out


_POOLED = ("n_samples", "median_s", "ci_low_s", "ci_high_s", "mean_s", "tokens_per_s",
           "achieved_flops_per_s", "pct_of_peak")


def summarize(results: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (rounds pooled), with median and CI from the raw samples
    (two-level when the cell ran in several rounds)."""
    rows = []
    by_cell = samples_by_cell(samples)
    results = with_axes(results)
    for cid, g in results.groupby("cell_id", sort=False):
        # Round 0's row first: its first call is the cold one (later rounds
        # reuse its compile cache, Runner.compile_cache).
        g = g.sort_values("round", kind="stable") if "round" in g else g
        # A round that failed (an error, a timeout, out of memory in that
        # process) while others measured loses itself, not their figures: an
        # extra round that crashes must not hide a claim's cells. Its status
        # and error stay in ``error``; ``lost_rounds`` counts such rounds.
        ok = g["status"].isin(MEASURED)
        lost = g[~ok] if ok.any() else g.iloc[:0]
        errors = [f"round {r['round']}: {r['status']}: {r['error']}" if "round" in g
                  else r["error"] for _, r in lost.iterrows()]
        g = g[ok] if ok.any() else g
        first = g.iloc[0].to_dict()
        bad = [s for s in g["status"] if s != "ok"]
        first["status"] = bad[0] if bad else "ok"
        first["error"] = "; ".join([*(e for e in g["error"] if e), *errors])
        first["rounds"] = len(g)
        first["lost_rounds"] = len(lost)
        if "host_other_cpu" in g:  # the busiest round: what a rerun may not see
            first["host_load"] = float(host_load(g["host_other_cpu"], g["host_steal"]).max())
        first["converged"] = bool(g["converged"].all())
        x = by_cell.get(cid)
        if x is not None and len(x) and first["status"] in MEASURED:
            toks = tokens_per_call(first)
            pooled = derived_figures(first["batch_size"], first["seq_len"], x,
                                     flops=first.get("flops_per_call", math.nan),
                                     peak=first.get("peak_flops_per_s", math.nan), tokens=toks)
            first.update({k: pooled[k] for k in _POOLED})
            first.update(tokens_per_s_low=toks / pooled["ci_high_s"],
                         tokens_per_s_high=toks / pooled["ci_low_s"])
            # how far its rounds (fresh processes) moved: the slowest round's
            # median over the fastest's (NaN with one round)
            medians = [float(np.median(v)) for v in x.rounds.values()]
            first["round_spread"] = (max(medians) / min(medians) if len(medians) > 1
                                     else math.nan)
        else:
            first["round_spread"] = math.nan
            for k in _POOLED[1:]:
                first[k] = math.nan
            first.update(tokens_per_s_low=math.nan, tokens_per_s_high=math.nan)
        # a cell's one memory pass (cell.serve: its first round that measured);
        # whole runs, tries and launches, and results stored before that rule,
        # have one per round: the largest
        first["peak_mem_bytes"] = g["peak_mem_bytes"].max()
        first["variant"] = variant(first["framework"], first["mode"])
        rows.append(first)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["model", "framework", "mode", "batch_size", "seq_len",
                            *(a.name for a in axes(shape=True))], ignore_index=True)


def baseline_pairs(summary: pd.DataFrame, keys: list[str],
                   is_baseline: pd.Series) -> Iterator[tuple[pd.Series, pd.Series | None, str]]:
    """Every row of ``summary`` with the baseline row that shares its ``keys``
    (a row marked in ``is_baseline``; None when there is none), and the status
    the pair gets. One rule for every ratio table: the row's own status when it
    is not ok; "no baseline" when nothing matches; "baseline <status>" when the
    baseline has no timing (oom, error, ...); else "ok". A not_equivalent
    baseline was timed and carries its own flag: its ratios are computed
    (:func:`both_measured`) and the row keeps its status."""
    if summary.empty:
        return
    base = summary[is_baseline].drop_duplicates(keys).set_index(keys)
    for _, r in summary.iterrows():
        key = tuple(r[k] for k in keys)
        b = base.loc[key] if key in base.index else None
        if r["status"] != "ok":
            status = r["status"]
        elif b is None:
            status = "no baseline"
        elif b["status"] not in MEASURED:
            status = f"baseline {b['status']}"
        else:
            status = "ok"
        yield r, b, status


def both_measured(r, b, by_cell: dict) -> bool:
    """Whether a row and its baseline both carry timings to divide."""
    return (b is not None and r["status"] in MEASURED and b["status"] in MEASURED
            and r["cell_id"] in by_cell and b["cell_id"] in by_cell)


def ratio_table(summary: pd.DataFrame, samples: pd.DataFrame,
                baseline: tuple[str, str] = BASELINE) -> pd.DataFrame:
    """Per cell and variant: time / baseline time (stats.ratio_value) with its CI
    (stats.geomean_ratio_ci: t over rounds, or the blocks' bootstrap from one round).

    Column ``time_ratio`` reads "this variant's time / baseline time": below 1
    the variant is faster. A failed cell on either side has NaN and a status.
    """
    by_cell = samples_by_cell(samples)
    if summary.empty:
        return pd.DataFrame()
    is_base = (summary["framework"] == baseline[0]) & (summary["mode"] == baseline[1])
    rows, keys = [], cell_keys()
    for r, b, status in baseline_pairs(summary, keys, is_base):
        if (r["framework"], r["mode"]) == baseline:
            continue
        row = {k: r[k] for k in keys}
        row.update(variant=r["variant"], framework=r["framework"], mode=r["mode"],
                   baseline=variant(*baseline), status=status,
                   time_ratio=math.nan, ci_low=math.nan, ci_high=math.nan)
        if both_measured(r, b, by_cell):
            row["time_ratio"], row["ci_low"], row["ci_high"] = geomean_ratio_ci(
                [(by_cell[r["cell_id"]], by_cell[b["cell_id"]])])
        rows.append(row)
    return pd.DataFrame(rows)


def peak_table(summary: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per measured cell: achieved GFLOP/s, the machine's ceiling for its
    precision, the share of it (``pct_of_peak``) and its arithmetic intensity
    (FLOPs per byte of weights moved), most of the peak first. ``by``: a
    study's columns to show beside the shape (its cell axes), each where it
    varies, as the task does."""
    cols = ["model", "variant", "dtype", "batch_size", "seq_len"]
    ok = summary[summary["status"].isin(MEASURED)] if "status" in summary else summary
    if ok.empty or "pct_of_peak" not in ok:
        return pd.DataFrame(columns=[*cols, "pct_of_peak"])
    extra = [c for c in (*by, "task") if c in ok and ok[c].nunique() > 1]
    out = ok[cols + extra].copy()
    out["achieved_gflop_s"] = ok["achieved_flops_per_s"] / 1e9
    out["ceiling_gflop_s"] = ok["peak_flops_per_s"] / 1e9
    out["pct_of_peak"] = ok["pct_of_peak"]
    out["flops_per_byte"] = ok["flops_per_call"] / ok["bytes_per_call"]
    return out.sort_values("pct_of_peak", ascending=False).reset_index(drop=True).round(3)


def gpu_table(summary: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per GPU cell that was measured: energy per call and per sample (NVML's
    energy counter over a window of the cell's own calls: ``fwcompare.core.energy``),
    the mean power over that window, the SM and memory clocks at its end and
    the power limit (``energy_note`` where a GPU gave no figure), and how far
    its rounds' medians moved (``round_spread``: launch-bound cells move most,
    docs/gpu.md). Empty without GPU cells (a CPU run). ``by``: as
    :func:`peak_table`."""
    cols = ["model", "variant", "dtype", "batch_size", "seq_len"]
    figures = ["energy_per_call_j", "energy_per_sample_j", "gpu_power_w", "gpu_sm_clock_mhz",
               "gpu_mem_clock_mhz", "gpu_power_limit_w", "round_spread", "energy_note"]
    ok = summary[summary["status"].isin(MEASURED)] if "status" in summary else summary
    if "device" in ok:
        ok = ok[ok["device"] == "gpu"]
    if ok.empty or "energy_per_call_j" not in ok:
        return pd.DataFrame(columns=[*cols, *figures])
    extra = [c for c in (*by, "task") if c in ok and ok[c].nunique() > 1]
    out = ok[cols + extra].copy()
    for c in ("energy_per_call_j", "gpu_power_w", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz",
              "gpu_power_limit_w"):
        out[c] = ok[c]
    out.insert(out.columns.get_loc("gpu_power_w"), "energy_per_sample_j",
               ok["energy_per_call_j"] / ok["batch_size"])
    out["round_spread"] = ok["round_spread"] if "round_spread" in ok else math.nan
    out["energy_note"] = ok["energy_note"] if "energy_note" in ok else ""
    return out.sort_values(cols).reset_index(drop=True).round(4)


def summary_table(summary: pd.DataFrame, samples: pd.DataFrame,
                  baseline: tuple[str, str] = BASELINE) -> pd.DataFrame:
    """Per device and variant, over the cells every variant ran: the arithmetic
    mean latency (the 2019 study's summary, labelled as such) beside the
    geometric mean of time ratios against the baseline, with its CI."""
    by_cell = samples_by_cell(samples)
    rows, keys = [], cell_keys()
    for device, dev in summary.groupby("device"):
        ok = dev[dev["status"].isin(MEASURED)]
        n_variants = dev["variant"].nunique()
        counts = ok.groupby(keys)["variant"].nunique()
        common = set(counts[counts == n_variants].index)
        in_common = ok[[tuple(k) in common for k in ok[keys].itertuples(index=False)]]
        base = in_common[in_common["variant"] == variant(*baseline)].set_index(keys)
        for var, g in in_common.groupby("variant"):
            if var == variant(*baseline):
                gm, lo, hi = 1.0, math.nan, math.nan  # by definition
            elif len(base):
                pairs = [(by_cell[r["cell_id"]],
                          by_cell[base.loc[tuple(r[k] for k in keys), "cell_id"]])
                         for _, r in g.iterrows()]
                gm, lo, hi = geomean_ratio_ci(pairs)
            else:
                gm, lo, hi = (math.nan,) * 3
            rows.append({"device": device, "variant": var, "cells": len(g),
                         "arith_mean_latency_s": g["median_s"].mean(),
                         f"geomean_time_ratio_vs_{variant(*baseline)}": gm,
                         "ci_low": lo, "ci_high": hi,
                         "failed_cells": int(dev[dev["variant"] == var]["status"]
                                             .isin(FAILED_STATUSES).sum())})
    return pd.DataFrame(rows)


def status_counts(summary: pd.DataFrame) -> pd.DataFrame:
    return (summary.groupby(["variant", "status"]).size().unstack(fill_value=0)
            if not summary.empty else pd.DataFrame())


def equivalence_table(summary: pd.DataFrame) -> pd.DataFrame:
    return (summary.groupby(["model", "variant"])[["equiv_max_abs_err", "equiv_rel_err"]]
            .max().reset_index())


def sort_by_precision(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Sorted by ``keys``, then precision in spec.DTYPES order (float32 first)."""
    from ..core.spec import DTYPES

    if df.empty:
        return df
    return (df.assign(_o=df["dtype"].map(DTYPES.index)).sort_values([*keys, "_o"])
            .drop(columns="_o").reset_index(drop=True))
