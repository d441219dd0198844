"""Tables derived from results and raw samples: statistics are recomputed from
the samples (pooled over rounds), never copied from a stored statistic."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .results import FAILED_STATUSES
from .stats import geomean_ratio_ci, median_ci

CELL_KEYS = ["model", "device", "dtype", "batch_size", "seq_len"]
BASELINE = ("torch", "eager")


def variant(framework: str, mode: str) -> str:
    return f"{framework}/{mode}"


def samples_by_cell(samples: pd.DataFrame) -> dict[str, np.ndarray]:
    """Raw seconds per call of each cell, all rounds pooled."""
    return {cid: g["seconds"].to_numpy() for cid, g in samples.groupby("cell_id")}


def summarize(results: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (rounds pooled), with median and CI from the raw samples."""
    rows = []
    by_cell = samples_by_cell(samples)
    for cid, g in results.groupby("cell_id", sort=False):
        first = g.iloc[0].to_dict()
        bad = [s for s in g["status"] if s != "ok"]
        first["status"] = bad[0] if bad else "ok"
        first["error"] = "; ".join(e for e in g["error"] if e)
        first["rounds"] = len(g)
        first["converged"] = bool(g["converged"].all())
        x = by_cell.get(cid)
        if x is not None and len(x) and first["status"] in ("ok", "not_equivalent"):
            med, lo, hi = median_ci(x)
            toks = first["batch_size"] * first["seq_len"]
            first.update(median_s=med, ci_low_s=lo, ci_high_s=hi, n_samples=len(x),
                         mean_s=float(np.mean(x)),
                         tokens_per_s=toks / med, tokens_per_s_low=toks / hi,
                         tokens_per_s_high=toks / lo)
        else:
            for k in ("median_s", "ci_low_s", "ci_high_s", "tokens_per_s", "mean_s"):
                first[k] = math.nan
            first.update(tokens_per_s_low=math.nan, tokens_per_s_high=math.nan)
        first["peak_mem_bytes"] = g["peak_mem_bytes"].max()
        first["variant"] = variant(first["framework"], first["mode"])
        rows.append(first)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["model", "framework", "mode", "batch_size", "seq_len"],
                           ignore_index=True)


def ratio_table(summary: pd.DataFrame, samples: pd.DataFrame,
                baseline: tuple[str, str] = BASELINE) -> pd.DataFrame:
    """Per cell and variant: time / baseline time (median ratio) with a bootstrap CI.

    Column ``time_ratio`` reads "this variant's time / baseline time": below 1
    the variant is faster. A failed cell on either side has NaN and a status.
    """
    by_cell = samples_by_cell(samples)
    base_fw, base_mode = baseline
    base = summary[(summary["framework"] == base_fw) & (summary["mode"] == base_mode)]
    base = base.set_index(CELL_KEYS)
    rows = []
    for _, r in summary.iterrows():
        if (r["framework"], r["mode"]) == baseline:
            continue
        key = tuple(r[k] for k in CELL_KEYS)
        row = {k: r[k] for k in CELL_KEYS}
        row.update(variant=r["variant"], framework=r["framework"], mode=r["mode"],
                   baseline=variant(*baseline), status=r["status"],
                   time_ratio=math.nan, ci_low=math.nan, ci_high=math.nan)
        if key not in base.index:
            row["status"] = "no baseline"
        else:
            b = base.loc[key]
            if b["status"] != "ok" and r["status"] == "ok":
                row["status"] = f"baseline {b['status']}"
            elif r["status"] in ("ok", "not_equivalent"):
                a_s, b_s = by_cell.get(r["cell_id"]), by_cell.get(b["cell_id"])
                if a_s is not None and b_s is not None:
                    row["time_ratio"], row["ci_low"], row["ci_high"] = geomean_ratio_ci(
                        [(a_s, b_s)])
        rows.append(row)
    return pd.DataFrame(rows)


def summary_table(summary: pd.DataFrame, samples: pd.DataFrame,
                  baseline: tuple[str, str] = BASELINE) -> pd.DataFrame:
    """Per device and variant, over the cells every variant ran: the arithmetic
    mean latency (the 2019 study's summary, labelled as such) beside the
    geometric mean of time ratios against the baseline, with a bootstrap CI."""
    by_cell = samples_by_cell(samples)
    rows = []
    for device, dev in summary.groupby("device"):
        ok = dev[dev["status"].isin(["ok", "not_equivalent"])]
        n_variants = dev["variant"].nunique()
        counts = ok.groupby(CELL_KEYS)["variant"].nunique()
        common = set(counts[counts == n_variants].index)
        in_common = ok[[tuple(k) in common for k in ok[CELL_KEYS].itertuples(index=False)]]
        base = in_common[in_common["variant"] == variant(*baseline)].set_index(CELL_KEYS)
        for var, g in in_common.groupby("variant"):
            if var == variant(*baseline):
                gm, lo, hi = 1.0, math.nan, math.nan  # by definition
            elif len(base):
                pairs = [(by_cell[r["cell_id"]],
                          by_cell[base.loc[tuple(r[k] for k in CELL_KEYS), "cell_id"]])
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


def loss_agreement_table(losses: pd.DataFrame) -> pd.DataFrame:
    """Per model and framework/mode: first and last agreement-step loss, their
    differences from PyTorch's, and whether the loss fell over the steps."""
    rows = []
    for (model, fw, mode), g in losses.groupby(["model", "framework", "mode"]):
        g = g.sort_values("step")
        diff = (g["loss"] - g["reference_loss"]).abs()
        rows.append({"model": model, "variant": variant(fw, mode), "steps": len(g),
                     "first_loss": g["loss"].iloc[0], "last_loss": g["loss"].iloc[-1],
                     "first_loss_abs_diff": diff.iloc[0],
                     "max_rel_diff": (diff / g["reference_loss"].abs()).max(),
                     "loss_decreased": bool(g["loss"].iloc[-1] < g["loss"].iloc[0]),
                     "all_finite": bool(np.isfinite(g["loss"]).all())})
    return pd.DataFrame(rows)


def memory_breakdown_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Measured peak memory beside what parameters, gradients and AdamW state
    need in fp32 (analytic); the rest is activations, workspace and runtime."""
    cols = ["param_bytes", "grad_bytes", "optimizer_state_bytes"]
    out = summary[["model", "variant", "batch_size", "seq_len", "status", "peak_mem_bytes",
                   *cols]].copy()
    mib = 2 ** 20
    for c in ["peak_mem_bytes", *cols]:
        out[c.replace("_bytes", "_mib")] = out.pop(c) / mib
    out["rest_mib"] = out["peak_mem_mib"] - out[[c.replace("_bytes", "_mib") for c in cols]].sum(axis=1)
    return out


# The 2019 Hugging Face study ("Benchmarking Transformers: PyTorch and
# TensorFlow"): arithmetic mean inference latency over its whole grid.
HF_2019_MEAN_LATENCY_S = {"cpu": {"torch": 0.748, "tensorflow": 0.823},
                          "gpu": {"torch": 0.046, "tensorflow": 0.043}}


def reference_2019() -> pd.DataFrame:
    rows = [{"device": dev, "framework": fw, "arith_mean_latency_s_2019": v,
             "source": "Hugging Face 2019, own grid and hardware"}
            for dev, d in HF_2019_MEAN_LATENCY_S.items() for fw, v in d.items()]
    return pd.DataFrame(rows)
