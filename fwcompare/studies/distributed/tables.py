"""The distributed tables (the notebook's) and the claim metrics
(params/claims.yaml names them)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...results.judging import (Claim, Measurement, StudyData, common, from_rounds,
                                round_figures, timed_from)
from ...results.store import MEASURED
from ...core.stats import ratio_ci
from ...results.tables import baseline_pairs, both_measured, samples_by_cell, variant
from .engines import DIST_MODES, SCALINGS


# -- tables -------------------------------------------------------------------------
SCALING_KEYS = ["model", "framework", "mode", "device", "dtype", "seq_len", "scaling"]


def scaling_table(summary: pd.DataFrame, samples: pd.DataFrame,
                  confidence: float = 0.95) -> pd.DataFrame:
    """One row per (framework, scaling, workers): step time with its CI
    (rank 0, to the slowest rank), samples/s, and against the smallest worker
    count of the same framework and scaling (the baseline, usually 1):

    - ``speedup`` = throughput / baseline throughput (global samples per
      second), with a CI (stats.geomean_ratio_ci) from both cells' raw step times;
    - ``ideal_speedup`` = workers / baseline workers;
    - ``efficiency`` = speedup / ideal_speedup (1 is linear scaling). Weak
      scaling (per-worker batch fixed): baseline step time / step time. Strong
      scaling (global batch fixed): that ratio over the worker ratio.

    Gradient all-reduce timed alone (``allreduce_s``) and its share of the
    step, weights across ranks and losses against the single-process run
    come from the cell's row. ``cell_id`` and ``baseline_cell_id`` name
    the two cells; ``confidence``: the intervals' level."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    measured = summary["status"].isin(MEASURED) & summary["cell_id"].isin(list(by_cell))
    fewest = summary[measured].groupby(SCALING_KEYS)["workers"].transform("min")
    is_base = measured & (summary["workers"] == fewest.reindex(summary.index))
    paired = {r["cell_id"]: (b, status) for r, b, status in
              baseline_pairs(summary, SCALING_KEYS, is_base)}
    rows = []
    for _, g in summary.groupby(SCALING_KEYS, sort=False):
        g = g.sort_values("workers")
        for _, r in g.iterrows():
            base, status = paired[r["cell_id"]]
            row = {k: r[k] for k in SCALING_KEYS}
            row.update(variant=r["variant"], cell_id=r["cell_id"],
                       baseline_cell_id=base["cell_id"] if base is not None else "",
                       workers=int(r["workers"]),
                       batch_size=int(r["batch_size"]),
                       per_worker_batch=int(r["batch_size"]) // int(r["workers"]),
                       status=status, median_s=r["median_s"], ci_low_s=r["ci_low_s"],
                       ci_high_s=r["ci_high_s"],
                       samples_per_s=r["batch_size"] / r["median_s"],
                       samples_per_s_low=r["batch_size"] / r["ci_high_s"],
                       samples_per_s_high=r["batch_size"] / r["ci_low_s"],
                       first_call_s=r["first_call_s"])
            speed = (math.nan,) * 3
            if both_measured(r, base, by_cell):
                ratio = ratio_ci(by_cell[base["cell_id"]], by_cell[r["cell_id"]], confidence)
                scale = r["batch_size"] / base["batch_size"]
                speed = tuple(x * scale for x in ratio)
            ideal = r["workers"] / base["workers"] if base is not None else math.nan
            row.update(baseline_workers=int(base["workers"]) if base is not None else math.nan,
                       speedup=speed[0], speedup_low=speed[1], speedup_high=speed[2],
                       ideal_speedup=ideal, efficiency=speed[0] / ideal,
                       efficiency_low=speed[1] / ideal, efficiency_high=speed[2] / ideal,
                       allreduce_s=r["allreduce_s"], allreduce_share=r["allreduce_share"],
                       weight_max_abs_diff=r["weight_max_abs_diff"],
                       loss_abs_diff_step0=r["equiv_max_abs_err"],
                       loss_max_rel_diff=r["equiv_rel_err"], mode_setup=r["mode_setup"],
                       error=r["error"])
            rows.append(row)
    return pd.DataFrame(rows)


def dist_loss_table(losses: pd.DataFrame) -> pd.DataFrame:
    """Agreement-step losses of every framework at every worker count against
    the single-process PyTorch run over the same global batch (the reference),
    and against the same framework's run with the fewest workers."""
    if losses.empty:
        return pd.DataFrame()
    df = losses.assign(engine=losses["mode"].str.split(" x").str[0],
                       workers=losses["mode"].str.split(" x").str[-1].astype(int))
    rows = []
    for (model, fw, engine), g in df.groupby(["model", "framework", "engine"]):
        fewest = g[g["workers"] == g["workers"].min()].sort_values("step")["loss"].to_numpy()
        for w, h in g.groupby("workers"):
            h = h.sort_values("step")
            loss = h["loss"].to_numpy()
            ref = h["reference_loss"].to_numpy()
            rows.append({"model": model, "variant": variant(fw, engine), "workers": int(w),
                         "steps": len(h), "first_loss": loss[0], "last_loss": loss[-1],
                         "max_abs_diff_vs_single_process_torch": float(np.max(np.abs(loss - ref))),
                         f"max_abs_diff_vs_{int(g['workers'].min())}_worker":
                             float(np.max(np.abs(loss - fewest))) if len(fewest) == len(loss)
                             else math.nan,
                         "loss_decreased": bool(loss[-1] < loss[0])})
    return pd.DataFrame(rows)


ENGINE_KEYS = ["model", "framework", "device", "dtype", "seq_len", "scaling", "workers"]


def engine_table(summary: pd.DataFrame, samples: pd.DataFrame,
                 confidence: float = 0.95) -> pd.DataFrame:
    """Each engine of a framework against its plain engine (DIST_MODES' first:
    DDP, MultiWorkerMirroredStrategy) at the same worker count, scaling and
    batch, one row per engine (the plain one included):

    - ``speedup`` = plain step time / this engine's, with its CI
      (stats.ratio_ci over both cells' raw step times: Student's t over
      rounds where both have several, else a bootstrap of their steps);
    - ``mem_ratio`` = this engine's memory per rank / the plain engine's
      (the largest rank's each, in the cell's first round; the claim's
      interval is over its rounds, ``engine_memory_metric``; ``Rank.memory``
      says what is measured);
    - memory per rank, the largest and the least rank (MiB; a parameter
      server cluster's: its parameter servers and workers), and the
      communication timed alone and its share of this engine's step and of
      the plain engine's.

    ``cell_id`` and ``plain_cell_id`` name the two cells; ``confidence``:
    the intervals' level."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    plain = summary["mode"] == summary["framework"].map(lambda fw: DIST_MODES[fw][0])
    rows = []
    for r, base, status in baseline_pairs(summary, ENGINE_KEYS, plain):
        row = {k: r[k] for k in ENGINE_KEYS}
        row.update(variant=r["variant"], mode=r["mode"], cell_id=r["cell_id"],
                   plain_cell_id=base["cell_id"] if base is not None else "",
                   batch_size=int(r["batch_size"]),
                   per_worker_batch=int(r["batch_size"]) // int(r["workers"]), status=status,
                   median_s=r["median_s"], plain_median_s=math.nan,
                   speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan,
                   mem_rank_max_mib=r.get("rank_mem_bytes", math.nan) / 2**20,
                   mem_rank_min_mib=r.get("rank_mem_min_bytes", math.nan) / 2**20,
                   mem_ratio=math.nan, allreduce_s=r["allreduce_s"],
                   allreduce_share=r["allreduce_share"], plain_allreduce_share=math.nan,
                   mode_setup=r["mode_setup"])
        if base is not None:
            row["plain_median_s"] = base["median_s"]
            row["plain_allreduce_share"] = base["allreduce_share"]
            row["mem_ratio"] = r.get("rank_mem_bytes", math.nan) / base.get(
                "rank_mem_bytes", math.nan)
            if both_measured(r, base, by_cell):
                row.update(zip(("speedup", "speedup_low", "speedup_high"),
                               ratio_ci(by_cell[base["cell_id"]], by_cell[r["cell_id"]],
                                        confidence)))
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["model", "scaling", "framework", "workers", "mode"],
                                          ignore_index=True)


# -- claim metric (params/claims.yaml names it) ----------------------------------------
def scaling_efficiency_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """Scaling efficiency (speed-up over the fewest workers / ideal speed-up)
    at the most workers each framework's plain engine ran (DDP without a
    compression hook: DIST_MODES' first); the claim needs every framework
    named, so the figure is the lowest of them, with its CI."""
    fws, scaling = claim.cells["frameworks"], claim.cells["scaling"]
    m = Measurement(unit=f"{scaling}-scaling efficiency at the most workers")
    s = data.summary[data.summary["device"].isin(devices)]
    table = scaling_table(s, data.samples, data.confidence) if len(s) else pd.DataFrame()
    rows = []
    for fw in fws:
        g = table[(table["framework"] == fw) & (table["mode"] == DIST_MODES[fw][0])
                  & (table["scaling"] == scaling)
                  & table["efficiency"].notna() & (table["workers"] > table["baseline_workers"])] \
            if len(table) else table
        if len(g):
            rows.append(g.sort_values("workers").iloc[-1])
    if len(rows) < len(fws):
        m.note = (f"{scaling} scaling needs two worker counts for each of {', '.join(fws)} "
                  f"on {'/'.join(devices)}")
        return m
    low = min(rows, key=lambda r: r["efficiency"])
    m.value, m.low, m.high = low["efficiency"], low["efficiency_low"], low["efficiency_high"]
    m.cells = [f"{r['variant']} {r['model']} {r['baseline_workers']}->{r['workers']} workers"
               for r in rows]
    m.points = [(c, r["efficiency"]) for c, r in zip(m.cells, rows)]
    m.devices = {r["device"] for r in rows}
    timed_from(m, data, [c for r in rows for c in (r["cell_id"], r["baseline_cell_id"])])
    m.note = "lowest: " + ", ".join(f"{r['variant']} {r['efficiency']:.0%}" for r in rows)
    return m


def _engine_row(data: StudyData, claim: Claim, devices, figure: str, m: Measurement):
    """engine_table's row of the claim's b engine (against a, its framework's
    plain engine) at the most workers with ``figure`` measured, or None (the
    note then says what is missing)."""
    fw, _, mode_b = str(claim.cells["b"]).partition("/")
    s = data.summary[data.summary["device"].isin(devices)]
    table = engine_table(s, data.samples, data.confidence) if len(s) else pd.DataFrame()
    if len(table):
        table = table[(table["framework"] == fw) & (table["mode"] == mode_b)
                      & (table["scaling"] == claim.cells["scaling"]) & table[figure].notna()]
    if not len(table):
        m.note = (f"needs {claim.cells['a']} and {claim.cells['b']} measured side by side "
                  f"({claim.cells['scaling']} scaling) on {'/'.join(devices)}")
        return None
    r = table.sort_values("workers").iloc[-1]
    label = f"{r['variant']} {r['model']} x{r['workers']}"
    m.cells, m.devices = [label], {r["device"]}
    return r


def engine_speedup_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """An engine against its framework's plain one (``cells``: a, the plain
    engine, b the other, e.g. torch/eager and torch/ddp-fp16; ``scaling``) at
    the most workers both ran: a's step time over b's (above 1: b is
    faster), with its CI."""
    m = Measurement(unit="step time, a / b, at the most workers")
    r = _engine_row(data, claim, devices, "speedup", m)
    if r is not None:
        m.value, m.low, m.high = r["speedup"], r["speedup_low"], r["speedup_high"]
        m.points = [(m.cells[0], m.value)]
        timed_from(m, data, [r["cell_id"], r["plain_cell_id"]])
        m.note = (f"{r['workers']} workers; communication timed alone: "
                  f"{r['plain_allreduce_share']:.0%} of {claim.cells['a']}'s step, "
                  f"{r['allreduce_share']:.0%} of {claim.cells['b']}'s")
    return m


def engine_memory_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """An engine's memory per rank over its framework's plain engine's
    (``cells`` as engine_speedup's) at the most workers both ran, the
    largest rank of each (below 1: b holds less per rank), per launch
    (round), with Student's t over the launches (``judging.from_rounds``)."""
    m = Measurement(unit="memory per rank, b / a, at the most workers")
    r = _engine_row(data, claim, devices, "mem_ratio", m)
    if r is None:
        return m
    fb, fa = (round_figures(data, r[k], "rank_mem_bytes") for k in ("cell_id", "plain_cell_id"))
    rounds = common([fa, fb])
    m.value = r["mem_ratio"]
    m.points = [(m.cells[0], m.value)]
    m.note = (f"{r['workers']} workers: {r['mem_rank_max_mib']:.0f} MiB per rank against "
              f"{r['mem_rank_max_mib'] / r['mem_ratio']:.0f} MiB")
    from_rounds(m, [fb[n] / fa[n] for n in rounds], data.confidence, log=True)
    return m


def _engine_cells(cells: dict, known) -> list[str]:
    """Names in an engine claim's cells that no launch could measure."""
    problems = []
    for key in ("a", "b"):
        fw, _, mode = str(cells.get(key, "")).partition("/")
        if mode not in DIST_MODES.get(fw, ()):
            problems.append(f"cells {key}: {cells.get(key)!r} is not a data-parallel engine "
                            f"(framework/mode of {DIST_MODES})")
    fw_a, _, mode_a = str(cells.get("a", "")).partition("/")
    if fw_a != str(cells.get("b", "")).partition("/")[0] or (
            fw_a in DIST_MODES and mode_a != DIST_MODES[fw_a][0]):
        problems.append("cells a and b: two engines of one framework, a its plain one "
                        f"({', '.join(f'{fw}/{m[0]}' for fw, m in DIST_MODES.items())})")
    if cells.get("scaling") not in SCALINGS:
        problems.append(f"scaling {cells.get('scaling')!r} is not one of {', '.join(SCALINGS)}")
    return problems


def _scaling_cells(cells: dict, known) -> list[str]:
    """Names in a scaling_efficiency claim's cells that no launch could measure."""
    problems = [f"framework {fw!r} has no data-parallel engine; known: {', '.join(DIST_MODES)}"
                for fw in cells.get("frameworks", []) if fw not in DIST_MODES]
    if cells.get("scaling") not in SCALINGS:
        problems.append(f"scaling {cells.get('scaling')!r} is not one of {', '.join(SCALINGS)}")
    return problems
