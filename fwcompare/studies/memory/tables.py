"""The memory tables (the notebook's) and the claim metrics
(params/claims.yaml names them)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ...results.judging import (Measurement, cell_label, common, from_rounds, memory_ratio,
                                round_figures, timed_from)
from ...core.stats import geomean, geomean_ratio_ci, ratio_ci, ratio_value, rounds_t_interval
from ...results.tables import samples_by_cell
from .techniques import GIB, MIB, PARTS, PLAIN, SEARCH, TECHNIQUES, TRY


# What the articles say, with their hardware (shown beside the measured figures).
ARTICLE_FIGURES = pd.DataFrame([
    {"claim": "GPT-2 XL training memory, TensorFlow", "figure": "135 GB",
     "source": "framework-comparison articles", "hardware": "not stated (GPUs)"},
    {"claim": "GPT-2 XL training memory, PyTorch", "figure": "142 GB",
     "source": "framework-comparison articles", "hardware": "not stated (GPUs)"},
    {"claim": "gradient checkpointing: time cost", "figure": "about 20% slower",
     "source": "Hugging Face docs, efficient training on one GPU", "hardware": "GPU"},
    {"claim": "PyTorch runs out of memory first", "figure": "at large batch x sequence",
     "source": "Hugging Face blog 2019", "hardware": "V100, n1-standard-32"},
])


# -- tables -------------------------------------------------------------------------
def technique_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per model, framework, precision and size: each technique's peak memory
    (MiB) split into fp32 parameters, gradients, AdamW state and the rest
    (activations, workspace, runtime), its median step time with its CI, and
    against the same framework's plain step: memory saved (MiB and share),
    time ratio with its CI, and MiB saved per 1% of time lost. ``plan_ratio``
    (JAX): XLA's compiled plan of the step against the plain step's, which
    says whether the compiler itself kept what a technique should free."""
    t = summary[summary["task"] == "train"] if len(summary) else summary
    if t.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    keys = ["model", "framework", "device", "dtype", "batch_size", "seq_len"]
    plain = t[t["mode"] == PLAIN].set_index(keys)
    rows = []
    for _, r in t.iterrows():
        row = {k: r[k] for k in keys}
        row.update(technique=r["mode"], status=r["status"], error=r["error"],
                   median_ms=r["median_s"] * 1e3, ci_low_ms=r["ci_low_s"] * 1e3,
                   ci_high_ms=r["ci_high_s"] * 1e3, peak_mib=r["peak_mem_bytes"] / MIB)
        for part in PARTS:
            row[part.replace("_bytes", "_mib")] = r[part] / MIB
        row["rest_mib"] = row["peak_mib"] - sum(row[p.replace("_bytes", "_mib")] for p in PARTS)
        key = tuple(r[k] for k in keys)
        row.update(memory_ratio=math.nan, saved_mib=math.nan, time_ratio=math.nan,
                   time_ci_low=math.nan, time_ci_high=math.nan, mib_per_pct_time=math.nan,
                   plan_ratio=math.nan)
        if key in plain.index and r["status"] == "ok":
            b = plain.loc[key]
            if b["status"] == "ok":
                row["memory_ratio"] = r["peak_mem_bytes"] / b["peak_mem_bytes"]
                row["saved_mib"] = (b["peak_mem_bytes"] - r["peak_mem_bytes"]) / MIB
                row["plan_ratio"] = r["xla_plan_bytes"] / b["xla_plan_bytes"]
                if r["cell_id"] in by_cell and b["cell_id"] in by_cell:
                    row["time_ratio"], row["time_ci_low"], row["time_ci_high"] = ratio_ci(
                        by_cell[r["cell_id"]], by_cell[b["cell_id"]])
                    lost = (row["time_ratio"] - 1) * 100
                    if r["mode"] != PLAIN and lost > 0 and row["saved_mib"] > 0:
                        row["mib_per_pct_time"] = row["saved_mib"] / lost
        rows.append(row)
    order = {m: i for i, m in enumerate(TECHNIQUES)}
    out = pd.DataFrame(rows)
    return out.sort_values(["model", "framework", "batch_size", "seq_len"], kind="stable").sort_values(
        "technique", key=lambda s: s.map(order), kind="stable").sort_values(
        ["model", "framework"], kind="stable", ignore_index=True)


def largest_batch_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per search and round: the largest batch that fit the budget, its peak
    (MiB), the smallest batch that did not, and the tries it took."""
    s = results[results["task"] == SEARCH] if len(results) else results
    if s.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "model": s["model"], "framework": s["framework"], "what": s["mode"],
        "seq_len": s["seq_len"], "budget_gib": s["budget_bytes"] / GIB, "round": s["round"],
        "largest_batch": s["largest_batch"], "peak_mib": s["peak_mem_bytes"] / MIB,
        "oom_batch": s["oom_batch"], "tries": s["fit_tries"], "status": s["status"],
        "note": s["error"]})
    return out.sort_values(["model", "what", "framework", "round"], ignore_index=True)


def tries_table(results: pd.DataFrame) -> pd.DataFrame:
    """Every try of every search (and round): batch, outcome, peak (MiB) and
    its message."""
    s = results[results["task"] == TRY] if len(results) else results
    if s.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "model": s["model"], "framework": s["framework"], "what": s["mode"],
        "round": s["round"], "batch_size": s["batch_size"], "status": s["status"],
        "peak_mib": s["peak_mem_bytes"] / MIB, "first_call_s": s["first_call_s"],
        "error": s["error"]}).sort_values(["model", "what", "framework", "round", "batch_size"],
                                          ignore_index=True)


# -- claim metrics ----------------------------------------------------------------------
def _technique_pairs(data, claim, devices):
    s = data.summary
    s = s[(s["task"] == "train") & s["device"].isin(devices) & (s["status"] == "ok")]
    if claim.models:
        s = s[s["model"].isin(claim.models)]
    keys = ["model", "framework", "device", "dtype", "batch_size", "seq_len"]
    base = s[s["mode"] == PLAIN].set_index(keys)
    tech = claim.cells["technique"]
    return [(r, base.loc[tuple(r[k] for k in keys)]) for _, r in s[s["mode"] == tech].iterrows()
            if tuple(r[k] for k in keys) in base.index]


def _none(claim, data, devices) -> str:
    s = data.summary
    s = s[(s["task"] == "train") & s["device"].isin(devices)] if len(s) else s
    tech = claim.cells["technique"]
    got = s[s["mode"] == tech] if len(s) else s
    if got.empty:
        return f"no {tech} cells on {'/'.join(devices)}"
    return f"no framework ran both {tech} and plain ok (" + "; ".join(
        f"{r['framework']}: {r['status']}" for _, r in got.iterrows()) + ")"


def technique_memory_ratio(data, claim, devices):
    """Peak memory(technique) / peak memory(plain) of the same framework, the
    highest over the frameworks (and cells) that ran both: a technique "lowers
    memory" when it does in every one (a mean would let one framework's saving
    hide another's rise). Per round (a fresh process each: the cells of a
    memory claim take a memory pass every round), then Student's t over the
    rounds every pair measured (``judging.from_rounds``)."""

    tech = claim.cells["technique"]
    pairs = _technique_pairs(data, claim, devices)
    per = [(round_figures(data, r["cell_id"], "peak_mem_bytes"),
            round_figures(data, b["cell_id"], "peak_mem_bytes")) for r, b in pairs]
    keep = [i for i, (fr, fb) in enumerate(per) if common([fr, fb])]
    pairs, per = [pairs[i] for i in keep], [per[i] for i in keep]
    m = Measurement(unit=f"{tech} peak memory / plain peak memory (same framework), "
                         f"the highest over frameworks")
    if not pairs:
        m.note = _none(claim, data, devices)
        return m
    m.cells = [f"{r['framework']} {cell_label(r)}" for r, _ in pairs]
    ratios = [[fr[n] / fb[n] for n in common([fr, fb])] for fr, fb in per]
    m.points = [(c, geomean(x)) for c, x in zip(m.cells, ratios)]
    m.devices = {r["device"] for r, _ in pairs}
    m.note = ", ".join(f"{c} {v:.2f}" for c, v in m.points)
    rounds = common([f for pair in per for f in pair])
    from_rounds(m, [max(fr[n] / fb[n] for fr, fb in per) for n in rounds], data.confidence,
                log=True)
    return m


def technique_time_ratio(data, claim, devices):
    """Geometric mean over frameworks (and cells) of step time(technique) /
    step time(plain) of the same framework, with its CI from the samples."""

    tech = claim.cells["technique"]
    pairs = [(r, b) for r, b in _technique_pairs(data, claim, devices)
             if r["cell_id"] in data.by_cell and b["cell_id"] in data.by_cell]
    m = Measurement(unit=f"{tech} step time / plain step time (same framework)")
    if not pairs:
        m.note = _none(claim, data, devices)
        return m
    m.value, m.low, m.high = geomean_ratio_ci([(data.by_cell[r["cell_id"]],
                                                data.by_cell[b["cell_id"]]) for r, b in pairs],
                                              data.confidence, prior=data.prior,
                                              spreads=data.spreads)
    timed_from(m, data, [x["cell_id"] for pair in pairs for x in pair])
    m.cells = [f"{r['framework']} {cell_label(r)}" for r, _ in pairs]
    m.points = [(c, ratio_value(data.by_cell[r["cell_id"]], data.by_cell[b["cell_id"]]))
                for c, (r, b) in zip(m.cells, pairs)]
    m.devices = {r["device"] for r, _ in pairs}
    return m


def search_bound(budget_gib: float) -> str:
    """What bounds a largest-batch search: its budget, or (0 or NaN, a GPU's
    search) the device's memory."""
    return f"budget {budget_gib:g} GiB" if budget_gib == budget_gib and budget_gib else \
        "the device's memory"


def largest_batch_ratio(data, claim, devices):
    """Largest batch that fit for a over that for b (framework/what, e.g.
    torch/plain) in each round of the searches both made (same model,
    sequence, budget and device), the geometric mean over searches and
    rounds. Each limit lies between its largest fitting batch and its
    smallest failing one, so a round's ratio lies in [largest_a / oom_b,
    oom_a / largest_b], never of zero width. The limits move between fresh
    processes, so the interval is Student's t over the rounds' log ratios
    (``stats.rounds_t_interval``), around the figure, widened by the rounds'
    mean bracket; from one round, the bracket alone. No timing: its rounds
    are the searches' (``Memory.claimed_variants``)."""

    a, b = claim.cells["a"], claim.cells["b"]
    r = data.results
    s = r[(r["task"] == SEARCH) & r["device"].isin(devices) & (r["status"] == "ok")] \
        if len(r) else r
    if claim.models and len(s):
        s = s[s["model"].isin(claim.models)]
    m = Measurement(unit=f"largest batch {a} / largest batch {b}")
    if s.empty:
        m.note = "no largest-batch search ran here"
        return m
    # a GPU search's budget is the device's (NaN): 0, as fit_budget_gib says it
    s = s.assign(variant=s["framework"] + "/" + s["mode"], budget_bytes=s["budget_bytes"].fillna(0))
    keys = ["model", "seq_len", "budget_bytes", "device"]
    sa, sb = (s[s["variant"] == v].set_index([*keys, "round"]).sort_index() for v in (a, b))
    both = sorted(k for k in sa.index if k in sb.index)
    if not both:
        m.note = f"no search where both {a} and {b} ran"
        return m
    found = {}  # (search, round) -> (log ratio, log bracket low, log bracket high)
    notes = []
    for k in both:
        ra, rb = sa.loc[k], sb.loc[k]
        la, lb, oa, ob = ra["largest_batch"], rb["largest_batch"], ra["oom_batch"], rb["oom_batch"]
        if not (la > 0 and lb > 0 and oa > 0 and ob > 0):
            m.forced = "not measured here"
            notes.append(f"{k[0]} round {k[-1]}: a search found no limit (largest {la:g} / "
                         f"{lb:g}; raise fit_max_batch or lower fit_budget_gib)")
            continue
        found[k] = (math.log(la / lb), math.log(la / ob), math.log(oa / lb))
    searches = list(dict.fromkeys(k[:-1] for k in found))
    # the rounds in which every search of both found its limit
    rounds = sorted(set.intersection(*({k[-1] for k in found if k[:-1] == x}
                                       for x in searches))) if searches else []
    for x in searches:
        label = f"{x[0]} s={x[1]} {search_bound(x[2] / GIB)}"
        m.cells.append(label)
        m.points += [(f"{label}, round {n}", math.exp(found[(*x, n)][0])) for n in rounds]
        m.devices.add(x[3])
        notes.append(f"{x[0]} s={x[1]}, largest batch by round: " + "; ".join(
            f"{v} " + ", ".join(f"{t.loc[(*x, n), 'largest_batch']:g}" for n in rounds)
            for v, t in ((a, sa), (b, sb))))
    if rounds and not m.forced:
        # per round, the mean over searches of each log (ratio, bracket low, high)
        logs, lows, highs = np.array([[found[(*x, n)] for x in searches]
                                      for n in rounds]).mean(axis=1).T
        _, t_low, t_high = rounds_t_interval(logs, data.confidence)
        half = (t_high - t_low) / 2 if len(rounds) > 1 else 0.0
        centre = float(logs.mean())
        m.value = math.exp(centre)
        m.low = math.exp(centre - half + float((lows - logs).mean()))
        m.high = math.exp(centre + half + float((highs - logs).mean()))
        m.rounds = len(rounds)
    m.note = "; ".join(notes)
    return m


def memory_ratio_largest_model(data, claim, devices):
    """Peak memory of a over b (framework/technique) for the claim's model;
    where that model was not measured, the ratio at the largest model both
    ran is shown for context, not judged."""

    data = _train_only(data)  # a search's rows share the variants' names
    m = memory_ratio(data, claim, devices)
    if math.isfinite(m.value) or not claim.models:
        return m
    s = data.summary
    s = s[s["device"].isin(devices) & (s["status"] == "ok")] if len(s) else s
    if s.empty:
        return m
    a, b = claim.cells["a"], claim.cells["b"]
    ran = s[s["variant"].isin([a, b])].groupby("model").filter(
        lambda g: g["variant"].nunique() == 2)
    if ran.empty:
        return m
    largest = ran.sort_values("param_bytes")["model"].iloc[-1]
    ctx = memory_ratio(data, dataclasses.replace(claim, models=(largest,)), devices)
    out = Measurement(unit=ctx.unit, cells=ctx.cells, points=ctx.points, devices=ctx.devices,
                      value=ctx.value, forced="not measured here")
    out.note = (f"{', '.join(claim.models)} was not measured here; at {largest}, the largest "
                f"model both ran, {a} / {b} = {ctx.value:.3f} (context, not judged)")
    return out


def _train_only(data):
    """``data`` with only the training cells in its summary."""
    import copy

    out = copy.copy(data)
    if len(data.summary):
        out.summary = data.summary[data.summary["task"] == "train"]
    return out


def _technique_cells(cells: dict, known) -> list[str]:
    t = cells.get("technique")
    return [] if t in TECHNIQUES and t != PLAIN else [
        f"technique {t!r} is not one of {', '.join(x for x in TECHNIQUES if x != PLAIN)}"]
