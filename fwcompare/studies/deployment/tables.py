"""The deployment tables (the notebook's) and the claim metrics
(params/claims.yaml names them)."""
from __future__ import annotations

import math

import pandas as pd

from ...core.env import lacks_package
from ...results.judging import (Claim, Measurement, StudyData, cell_label, common, from_rounds,
                                round_figures)
from ...results.store import MEASURED
from ...core.stats import geomean_ratio_ci
from ...results.tables import baseline_pairs, both_measured, samples_by_cell
from ...measure.workloads import FP64_COLUMNS
from .catalog import BASELINE, PATHS, STS_COLUMNS, path_of


# -- tables (the notebook's) ------------------------------------------------------------
PATH_KEYS = ["device", "model", "framework", "batch_size", "seq_len"]


def deployment_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: how the path was made and run, its median with CI,
    its speed-up over its framework's baseline at the same model and shape
    (baseline time / path time, CI from the paired samples), its errors
    against float64, the sentence-pair agreement, and the artifact's size,
    export and cold-load times."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    base = summary["mode"] == summary["framework"].map(dict(BASELINE))
    rows = []
    for r, b, status in baseline_pairs(summary, PATH_KEYS, base):
        p = path_of(r["framework"], r["mode"])
        row = {"model": r["model"], "framework": r["framework"], "path": r["variant"],
               "runtime": p.runtime, "weights": p.precision, "batch_size": r["batch_size"],
               "seq_len": r["seq_len"], "device": r["device"], "status": status,
               "median_s": r["median_s"], "ci_low_s": r["ci_low_s"], "ci_high_s": r["ci_high_s"],
               "speedup": math.nan, "speedup_low": math.nan, "speedup_high": math.nan,
               **{c: r.get(c, math.nan) for c in (*FP64_COLUMNS, *STS_COLUMNS)},
               "artifact_mb": r["artifact_bytes"] / 1e6, "export_s": r["export_s"],
               "load_s": r["load_s"], "first_call_s": r["first_call_s"],
               "peak_mem_mb": r["peak_mem_bytes"] / 1e6, "cell_id": r["cell_id"],
               "baseline_cell_id": b["cell_id"] if b is not None else "",
               "error": r["error"]}
        if b is not None and b["cell_id"] == r["cell_id"]:
            row["speedup"] = 1.0 if r["status"] in MEASURED else math.nan
        elif both_measured(r, b, by_cell):
            row["speedup"], row["speedup_low"], row["speedup_high"] = geomean_ratio_ci(
                [(by_cell[b["cell_id"]], by_cell[r["cell_id"]])])
        rows.append(row)
    order = {m: i for fw in PATHS for i, m in enumerate(PATHS[fw])}
    out = pd.DataFrame(rows)
    out["_o"] = [(list(PATHS).index(fw), order[v.split("/", 1)[1]])
                 for fw, v in zip(out["framework"], out["path"])]
    return out.sort_values(["model", "_o", "batch_size", "seq_len"]).drop(columns="_o") \
        .reset_index(drop=True)


def paths_table(table: pd.DataFrame) -> pd.DataFrame:
    """Which paths worked on which models: per path and model, the status
    of its cells (ok, not_equivalent, or the failure) and the first message."""
    if table.empty:
        return pd.DataFrame()
    rows = []
    for (path, model), g in table.groupby(["path", "model"], sort=False):
        statuses = g["status"].value_counts()
        msg = next((e for e, st in zip(g["error"], g["status"]) if e and st != "ok"), "")
        rows.append({"path": path, "runtime": g["runtime"].iloc[0], "model": model,
                     "result": ", ".join(f"{k} {n}" if len(g) > 1 else k
                                         for k, n in statuses.items()),
                     "message": msg.splitlines()[0][:300] if msg else ""})
    return pd.DataFrame(rows)


def path_summary(table: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per path: geometric-mean speed-up over its framework's baseline with a
    CI over the cells both ran, the worst error against float64, the lowest
    sentence-pair agreement, the artifact's size and its times."""
    by_cell = samples_by_cell(samples)
    rows = []
    for path, g in table.groupby("path", sort=False):
        ok = g[g["status"].isin(MEASURED)]
        pairs = [(by_cell[b], by_cell[c]) for c, b in zip(ok["cell_id"], ok["baseline_cell_id"])
                 if b and b != c and b in by_cell and c in by_cell]
        if len(ok) and (ok["cell_id"] == ok["baseline_cell_id"]).all():
            gm, lo, hi = 1.0, math.nan, math.nan  # the baseline itself
        else:
            gm, lo, hi = geomean_ratio_ci(pairs) if pairs else (math.nan,) * 3
        rows.append({"path": path, "runtime": g["runtime"].iloc[0],
                     "weights": g["weights"].iloc[0], "cells": len(g), "cells_ok": len(ok),
                     "geomean_speedup": gm, "speedup_low": lo, "speedup_high": hi,
                     "max_fp64_rel_l2_err": ok["fp64_rel_l2_err"].max(),
                     "min_sts_spearman": ok["sts_spearman"].min(),
                     "artifact_mb": ok["artifact_mb"].max(), "export_s": ok["export_s"].max(),
                     "load_s": ok["load_s"].max(),
                     "statuses": ", ".join(sorted(set(g["status"]) - {"ok"})) or "ok"})
    return pd.DataFrame(rows)


# -- claim metrics (params/claims.yaml names them) ------------------------------------
def _rows(data: StudyData, devices, variant: str, claim: Claim) -> pd.DataFrame:
    s = data.summary
    s = s[s["device"].isin(devices) & (s["variant"] == variant)]
    if claim.models:
        s = s[s["model"].isin(claim.models)]
    return s


def size_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """Artifact size of path a / of path b, geometric mean over the models
    both exported. A size is exact: its interval has no width."""
    from ...core.stats import geomean

    a, b = claim.cells["a"], claim.cells["b"]
    m = Measurement(unit=f"{a} artifact bytes / {b} artifact bytes")
    ra = _rows(data, devices, a, claim).drop_duplicates("model").set_index("model")
    rb = _rows(data, devices, b, claim).drop_duplicates("model").set_index("model")
    both = [k for k in ra.index.intersection(rb.index)
            if ra.loc[k, "artifact_bytes"] > 0 and rb.loc[k, "artifact_bytes"] > 0]
    if not both:
        m.note = (f"no model where both {a} and {b} exported an artifact "
                  f"({a}: {', '.join(sorted(set(ra['status']))) or 'no cells'}; "
                  f"{b}: {', '.join(sorted(set(rb['status']))) or 'no cells'})")
        return m
    ratios = [ra.loc[k, "artifact_bytes"] / rb.loc[k, "artifact_bytes"] for k in both]
    m.value = geomean(ratios)
    m.cells = [f"{k}: {ra.loc[k, 'artifact_bytes'] / 1e6:.1f} MB / "
               f"{rb.loc[k, 'artifact_bytes'] / 1e6:.1f} MB" for k in both]
    m.points = list(zip(both, ratios))
    m.devices = set(ra.loc[both, "device"])
    m.low = m.high = m.value
    m.note = ("exact: files' sizes in bytes, one export per report (no sampling noise, "
              "so no interval is needed)")
    return m


def sentence_agreement_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """Spearman correlation of path a's sentence-pair similarities with
    PyTorch float32's, the lowest over the models with a tokenizer (real
    weights), per round (each a fresh process that loads the artifact and
    checks it again), then over the rounds every cell has
    (``judging.from_rounds``: exact where every round gave the same)."""
    a = claim.cells["a"]
    m = Measurement(unit=f"Spearman correlation of {a}'s pair similarities with float32's")
    rows = _rows(data, devices, a, claim)
    rows = rows[rows["status"].isin(MEASURED) & rows["sts_spearman"].notna()]
    if rows.empty:
        m.note = (f"no {a} cell with a sentence-pair check (real weights with a tokenizer)"
                  if len(_rows(data, devices, a, claim)) else f"{a} did not run")
        return m
    worst = rows.loc[rows["sts_spearman"].idxmin()]
    m.cells = [cell_label(r) for _, r in rows.iterrows()]
    m.points = list(zip(m.cells, rows["sts_spearman"]))
    m.devices = set(rows["device"])
    m.note = (f"lowest of {len(rows)} cell(s): {cell_label(worst)}; largest change of a pair's "
              f"similarity {worst['sts_max_abs_diff']:.3f}")
    per = [round_figures(data, r["cell_id"], "sts_spearman", positive=False)
           for _, r in rows.iterrows()]
    from_rounds(m, [min(f[n] for f in per) for n in common(per)], data.confidence, log=False)
    return m


def path_works(data: StudyData, claim: Claim, devices) -> Measurement:
    """Share of path a's cells that ran and matched the reference (status
    ok): 1 when the path exports, loads and computes the same function on
    every model tried, per round (fresh process), then over the rounds
    (``judging.from_rounds``: exact where every round gave the same share;
    the cells' statuses shown are their rounds' pooled). A cell this machine
    could not try (its framework or model package not installed here) counts
    neither way: the path was not tried, so it neither works nor fails."""
    a = claim.cells["a"]
    m = Measurement(unit=f"share of {a} cells ok")
    rows = _rows(data, devices, a, claim)
    lacking = (rows["status"] == "unsupported") & rows["error"].map(lacks_package)
    untried = "; ".join(dict.fromkeys(rows.loc[lacking, "error"]))
    rows = rows[~lacking]
    if rows.empty:
        m.note = untried or f"{a} did not run"
        return m
    m.cells = [f"{cell_label(r)}: {r['status']}" for _, r in rows.iterrows()]
    m.points = [(cell_label(r), float(r["status"] == "ok")) for _, r in rows.iterrows()]
    m.devices = set(rows["device"])
    # per round (a fresh process each), the share of the cells ok in it
    res = data.results
    res = res[res["cell_id"].isin(set(rows["cell_id"]))]
    by_round = res["round"] if "round" in res else pd.Series(0, index=res.index)
    shares = (res["status"] == "ok").groupby(by_round).mean()
    bad = rows[rows["status"] != "ok"]
    m.note = "; ".join(f"{r['model']}: {r['status']}: {r['error'].splitlines()[0][:160]}"
                       for _, r in bad.drop_duplicates("model").iterrows()
                       if r["error"]) or "every cell ok"
    if untried:
        m.add_note(f"not tried here: {untried}")
    # the rounds in which every cell of the path has a row
    full = res["cell_id"].groupby(by_round).nunique() == len(rows)
    from_rounds(m, [float(v) for k, v in shares.items() if full.get(k, False)],
                data.confidence, log=False)
    return m
