"""Acceleration: TorchScript, torch.compile, tf.function, XLA and jax.jit,
with compile cost counted.

The runner gives each mode a process of its own, so a compiled mode's first
call is its cold time to first result: nothing in the process has traced or
compiled it before (the gate batch runs through eager only, in every mode's
process alike). That is round 0's: the later rounds' processes reuse round 0's
torch.compile cache (``Runner.compile_cache``), so only round 0's first calls
are reported. Eager is gated against PyTorch's reference as in every study;
a compiled mode is checked at every cell against this framework's eager output
on the same input (max abs error within ``accel_tol``), right after its first
call and before its steady state is timed. Cells run in ascending size, one
compiled callable for all, so each new shape's first call shows what
recompiling costs.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core import models
from ..measure.cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ..frameworks import MODES, backend_options, defaults
from ..plan.schema import TIMING, Param, all_of, grid_params, modes_in, option_params, positive
from ..core.spec import RunSpec
from ..core.stats import geomean_ratio_ci, median_diff_ci
from ..results.tables import baseline_pairs, both_measured, samples_by_cell, variant
from ..results.store import Columns
from ..measure.workloads import EQUIV_TOL, gate, load_forwards
from ..execution.study import Study, per_mode


def _eager_in_each(v):
    missing = [fw for fw, modes in v.items() if "eager" not in modes]
    return (f"must include eager for {', '.join(missing)} (the baseline of every speed-up "
            "and the reference each compiled output is checked against)" if missing else None)


def compiled_variant(ctx: WorkerContext, mode: str):
    """This process's mode built from the model, and the eager forward (gated
    against PyTorch's reference) that its outputs are checked against:
    (fn, eager, not-equivalent reason, gate figures)."""
    v = load_forwards(ctx, "float32", ["eager"], load_failed="loading the model failed")
    gate(ctx, v, "eager", "float32")
    if "eager" in v.problems:
        status, message = v.problems["eager"]
        raise CellFailure(status, f"eager forward (the reference) failed: {message}")
    eager = v.forwards["eager"]
    known, bad = v.checked["eager"]
    try:
        fn = eager if mode == "eager" else ctx.backend.make_forward(
            v.model, mode, ctx.device, ctx.head, "float32", backend_options(ctx.params))
    except Exception as exc:
        raise CellFailure(failure_status(ctx.backend, exc), describe(exc)) from exc
    return fn, eager, bad, dict(known, load_s=v.load_s)


def accel_check(ctx: WorkerContext, fn, eager, x):
    """``first`` of a compiled cell: the compilations its first call on ``x``
    did (the framework's count before and after), and its output against
    eager's on the same input."""
    from ..measure.error_metrics import error_metrics

    before = fn.compile_count()
    tol = ctx.params["accel_tol"]

    def check(out):  # CellPlan.first: (figures, problem, warm-up calls made: none)
        after = fn.compile_count()
        err = error_metrics(ctx.backend.to_numpy(out), ctx.backend.to_numpy(eager(x)))
        problem = "" if err["max_abs_err"] <= tol else (
            f"output differs from eager by {err['max_abs_err']:.3g} max abs "
            f"(accel_tol {tol:g})")
        return ({"accel_max_abs_err": err["max_abs_err"], "accel_rel_err": err["rel_l2_err"],
                 "recompiles": math.nan if after is None else float(after - before)},
                problem, [])
    return check


class Acceleration(Study):
    name = "acceleration"
    title = "Acceleration: TorchScript, torch.compile, tf.function, XLA, jax.jit"
    columns = Columns(figures=("accel_max_abs_err", "accel_rel_err", "recompiles"))

    def schema(self):
        # The time to the first result is this study's subject: TensorFlow's
        # first call keeps AutoGraph's conversion, as tf.function's users get it.
        return {
            **grid_params(["distilbert-base-uncased"], defaults(lambda f: f.modes), MODES,
                          [1, 8], [16, 128], 1800.0, tf_autograph=True),
            "equiv_tol": EQUIV_TOL,
            "accel_tol": Param("float", 1e-4, "max abs error of a compiled mode's output against the same framework's eager output before the cell is flagged not_equivalent", positive),
            **option_params("torch_compile_mode", "torch_compile_dynamic"),
            **TIMING,
        } | {"modes": Param("dict[str, list[str]]", defaults(lambda f: f.modes),
                            "modes per framework; eager is required in each (the baseline)",
                            all_of(modes_in(MODES), _eager_in_each))}

    def gate_shape(self, params, task):
        """Eager only is gated, on an odd shape no grid uses, so every compiled
        mode's first call stays cold."""
        from ..measure.gate import GATE_SHAPE

        return GATE_SHAPE

    def groups(self, task, cells):
        """Every mode in a process of its own: its first call is a cold start."""
        return per_mode(cells)

    def plan(self, ctx, spec: RunSpec):
        fn, eager, bad, known = ctx.variant(("accel", spec.mode),
                                            lambda: compiled_variant(ctx, spec.mode))
        x = ctx.backend.make_inputs(ctx.token_ids(spec), ctx.device)
        return CellPlan(lambda: (lambda: fn(x)), known=known,
                        flops=models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                        traffic=models.weight_traffic_bytes(ctx.info, "inference"),
                        problem=bad, provenance={"mode_setup": fn.setup},
                        skip=ctx.skip_reason(spec),
                        first=None if spec.mode == "eager" else accel_check(ctx, fn, eager, x))


STUDY = Acceleration()


# -- tables -------------------------------------------------------------------------
ACCEL_KEYS = ["model", "framework", "device", "dtype", "batch_size", "seq_len"]


def breakeven_calls(first_s: float, per_call_s: float, eager_first_s: float,
                    eager_per_call_s: float) -> float:
    """The fewest calls n after which a mode, its first call included, has taken
    no longer than eager: first + (n - 1) per_call <= eager_first + (n - 1)
    eager_per_call. 1 when its first call is not slower than eager's; inf when
    it is slower and never saves time per call; NaN when a figure is missing."""
    extra = first_s - eager_first_s
    saving = eager_per_call_s - per_call_s
    if not (math.isfinite(extra) and math.isfinite(saving)):
        return math.nan
    if extra <= 0:
        return 1.0
    if saving <= 0:
        return math.inf
    return 1.0 + math.ceil(extra / saving)


def acceleration_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per compiled-mode cell, against the same framework's eager cell of the
    same size:

    - ``speedup``: eager time / this mode's time (above 1: faster), with its CI;
    - ``first_call_s``: time to first result at this shape (trace or compile
      plus the call); ``cold`` marks the sweep's first shape, the mode's first
      call in a fresh process; later shapes show what a new shape costs;
    - ``first_call_overhead_s``: first call minus the steady median;
    - ``recompiles``: traces/compilations the first call triggered (the
      framework's own count; NaN where none is exposed);
    - ``breakeven_calls``: calls at this shape after which the mode has paid
      for its first call (see breakeven_calls), with a range from the CI of
      the per-call saving (the first calls are single measurements);
    - ``accel_max_abs_err`` / ``accel_rel_err``: output against eager's.
    """
    by_cell = samples_by_cell(samples)
    if summary.empty:
        return pd.DataFrame()
    paired = {r["cell_id"]: (b, status) for r, b, status in
              baseline_pairs(summary, ACCEL_KEYS, summary["mode"] == "eager")}
    rows = []
    for (model, fw, mode), g in summary[summary["mode"] != "eager"].groupby(
            ["model", "framework", "mode"], sort=True):
        g = g.assign(_size=g["batch_size"] * g["seq_len"]).sort_values(["_size", "batch_size"])
        for order, (_, r) in enumerate(g.iterrows()):
            b, status = paired[r["cell_id"]]
            row = {k: r[k] for k in ACCEL_KEYS}
            row.update(mode=mode, variant=r["variant"], baseline=variant(fw, "eager"),
                       shape=f"{r['batch_size']}x{r['seq_len']}", sweep_order=order,
                       cold=order == 0, status=status, cell_id=r["cell_id"],
                       baseline_cell_id="", median_s=r["median_s"], ci_low_s=r["ci_low_s"],
                       ci_high_s=r["ci_high_s"], eager_median_s=math.nan,
                       speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan,
                       first_call_s=r["first_call_s"], eager_first_call_s=math.nan,
                       first_call_overhead_s=r["first_call_s"] - r["median_s"],
                       recompiles=r["recompiles"], breakeven_calls=math.nan,
                       breakeven_low=math.nan, breakeven_high=math.nan,
                       accel_max_abs_err=r["accel_max_abs_err"],
                       accel_rel_err=r["accel_rel_err"], mode_setup=r["mode_setup"],
                       error=r["error"])
            if b is not None:
                row.update(baseline_cell_id=b["cell_id"], eager_median_s=b["median_s"],
                           eager_first_call_s=b["first_call_s"])
            if both_measured(r, b, by_cell):
                mine, theirs = by_cell[r["cell_id"]], by_cell[b["cell_id"]]
                row["speedup"], row["speedup_low"], row["speedup_high"] = geomean_ratio_ci(
                    [(theirs, mine)])
                row["breakeven_calls"] = breakeven_calls(
                    r["first_call_s"], r["median_s"], b["first_call_s"], b["median_s"])
                _, lo, hi = median_diff_ci(theirs, mine)  # CI of the per-call saving
                # More saving per call: fewer calls to break even.
                for col, s in (("breakeven_low", hi), ("breakeven_high", lo)):
                    row[col] = breakeven_calls(r["first_call_s"], b["median_s"] - s,
                                               b["first_call_s"], b["median_s"])
            rows.append(row)
    return pd.DataFrame(rows)


def acceleration_summary(table: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per model and compiled mode, over the cells both it and eager ran:
    geometric-mean speed-up over eager with its CI (stats.geomean_ratio_ci), the arithmetic
    mean of latencies' ratio (the 2019 study's kind of average, labelled as
    such), where it helps most and least, the cold time to first result and
    its breakeven, recompilations over the rest of the sweep and their cost,
    and the largest output difference from eager."""
    by_cell = samples_by_cell(samples)
    rows = []
    for (device, model, var), g in table.groupby(["device", "model", "variant"], sort=True):
        ok = g[g["speedup"].notna()]
        pairs = [(by_cell[b], by_cell[c]) for c, b in zip(ok["cell_id"], ok["baseline_cell_id"])]
        gm, lo, hi = geomean_ratio_ci(pairs) if pairs else (math.nan,) * 3
        cold = g[g["cold"]].iloc[0] if g["cold"].any() else None
        later = g[~g["cold"]]
        best = ok.loc[ok["speedup"].idxmax()] if len(ok) else None
        worst = ok.loc[ok["speedup"].idxmin()] if len(ok) else None
        rows.append({
            "device": device, "model": model, "variant": var, "cells": len(g),
            "cells_ok": len(ok), "geomean_speedup": gm, "speedup_low": lo, "speedup_high": hi,
            "mean_latency_speedup": (ok["eager_median_s"].mean() / ok["median_s"].mean()
                                     if len(ok) else math.nan),
            "best_speedup": best["speedup"] if best is not None else math.nan,
            "best_shape": best["shape"] if best is not None else "",
            "worst_speedup": worst["speedup"] if worst is not None else math.nan,
            "worst_shape": worst["shape"] if worst is not None else "",
            "cold_shape": cold["shape"] if cold is not None else "",
            "time_to_first_result_s": cold["first_call_s"] if cold is not None else math.nan,
            "eager_first_call_s": cold["eager_first_call_s"] if cold is not None else math.nan,
            "breakeven_calls": cold["breakeven_calls"] if cold is not None else math.nan,
            "recompiles_after_first": later["recompiles"].sum(min_count=1),
            "recompile_overhead_s": later["first_call_overhead_s"].sum(min_count=1),
            "max_accel_abs_err": g["accel_max_abs_err"].max(),
            "statuses": ", ".join(sorted(set(g["status"]) - {"ok"})) or "ok"})
    return pd.DataFrame(rows)


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def speedup_heatmaps(table: pd.DataFrame, manifest: dict):
    """Per model and compiled mode: speed-up over the same framework's eager
    mode across batch x sequence, with its 95% CI (stats.geomean_ratio_ci); where a mode
    helps (blue) and where it hurts (red)."""
    from ..results.plots import ratio_grid

    return ratio_grid(table, manifest, "speedup", "speedup_low", "speedup_high",
                      "speed-up over eager (> 1: faster)",
                      "Speed-up over the same framework's eager mode, per cell "
                      "(95% CI; compile time not included)",
                      lower_is_better=False)


def _sweep_shapes(g: pd.DataFrame) -> list[str]:
    """The shapes ("BxS") of an acceleration table in sweep order."""
    return list(g.sort_values("sweep_order").drop_duplicates("shape")["shape"])


def _sweep_axis(ax, shapes: list[str]) -> None:
    ax.set_xticks(range(len(shapes)), [f"{sh}\n(cold)" if i == 0 else sh
                                       for i, sh in enumerate(shapes)])
    ax.set_xlabel("shape, batch x sequence, in sweep order")


def time_to_first_result(table: pd.DataFrame, manifest: dict):
    """Per model: each compiled mode's time to first result in a fresh process
    (trace or compile plus the first call, at the sweep's first shape) beside
    the same framework's eager first call and one steady-state call, log scale;
    the breakeven number of calls written at the bar's end."""
    import matplotlib.pyplot as plt

    from ..results.plots import PLAIN, STATUS_MARK, legend_right, no_data, palette

    cold = table[table["cold"]]
    if cold.empty:
        return no_data("no compiled mode ran")
    models = sorted(cold["model"].unique())
    height = max(len(cold[cold["model"] == m]) for m in models)
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(6.2 * len(models) + 1.0, 0.55 * height + 2.0))
    colors = palette(cold["variant"])
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = cold[cold["model"] == model].sort_values("variant", ascending=False)
        y = np.arange(len(g))
        ax.barh(y, g["first_call_s"], color=[colors[v] for v in g["variant"]], height=0.6)
        ax.scatter(g["eager_first_call_s"], y, marker="|", s=300, color="0.2", zorder=5,
                   label="eager first call")
        ax.scatter(g["median_s"], y, marker="o", s=25, color="white", edgecolor="0.2",
                   zorder=5, label="one steady-state call")
        for yy, (_, r) in zip(y, g.iterrows()):
            if not math.isfinite(r["first_call_s"]):
                ax.text(0.02, yy, STATUS_MARK.get(r["status"], r["status"]), va="center",
                        transform=ax.get_yaxis_transform(), fontsize=8)
                continue
            be = r["breakeven_calls"]
            be_txt = ("never pays off" if be == math.inf else
                      f"breakeven {be:,.0f} call{'s' if be > 1 else ''}" if math.isfinite(be)
                      else "")
            ax.annotate(f" {r['first_call_s']:.3g} s  {be_txt}", (r["first_call_s"], yy),
                        va="center", fontsize=8)
        ax.set_yticks(y, g["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(PLAIN)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 30)  # room for the labels
        shape = g["shape"].iloc[0]
        ax.set_title(f"{model}, first shape {shape}", fontsize=10)
        ax.set_xlabel("seconds (log)")
    return legend_right(
        fig, axes, "Time to first result: trace or compile plus the first call, in a fresh "
        "process", manifest, "breakeven: calls at this shape after which the mode, first call "
        "included, has taken no longer than eager", 0.84)


def breakeven(table: pd.DataFrame, manifest: dict):
    """Per model: calls to break even at each shape of the sweep (first shape:
    the cold compile; later shapes: the recompile or re-trace a new shape
    costs), with the range from the CI of the per-call saving; modes that never
    pay off drawn at the top."""
    import matplotlib.pyplot as plt

    from ..results.plots import PLAIN, legend_right, no_data, palette

    if table.empty:
        return no_data("no compiled mode ran")
    models = sorted(table["model"].unique())
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(5.6 * len(models) + 2.6, 4.2))
    colors = palette(table["variant"])
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = table[table["model"] == model]
        shapes = _sweep_shapes(g)
        finite = g["breakeven_calls"].replace(math.inf, np.nan)
        top = max(float(np.nanmax(finite)) if finite.notna().any() else 10.0, 10.0) * 4
        n_var = g["variant"].nunique()
        for k, (var, h) in enumerate(g.groupby("variant")):
            h = h.sort_values("sweep_order")  # dodged a little so bars do not overlap
            x = np.array([shapes.index(sh) for sh in h["shape"]]) + (k - 0.5 * n_var) * 0.06
            be = h["breakeven_calls"].to_numpy(float)
            shown = np.where(np.isinf(be), top, be)
            lo = np.where(np.isfinite(h["breakeven_low"]), h["breakeven_low"], shown)
            hi = np.where(np.isfinite(h["breakeven_high"]), h["breakeven_high"], top)
            ax.errorbar(x, shown, yerr=[np.maximum(shown - lo, 0), np.maximum(hi - shown, 0)],
                        marker="o", ms=5, capsize=2, color=colors[var], label=var)
            never = np.isinf(be)
            ax.scatter(x[never], shown[never], marker="^", s=80, color=colors[var], zorder=5)
        ax.axhline(top, color="0.6", lw=0.8, ls=":")
        ax.text(0.01, top, " never pays off", va="bottom", fontsize=7, color="0.4",
                transform=ax.get_yaxis_transform())
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PLAIN)
        _sweep_axis(ax, shapes)
        ax.set_title(model, fontsize=10)
        if j == 0:
            ax.set_ylabel("calls to break even (log)")
    return legend_right(
        fig, axes, "Breakeven: calls at a shape until the mode has paid for its first call",
        manifest, "bars: range from the 95% CI of the per-call saving (first calls are single "
        "measurements); ▲ at the top: never pays off", 0.82)


def recompilations(table: pd.DataFrame, manifest: dict):
    """Per model: the traces/compilations each mode's first call at each new
    shape triggered (top; the framework's own count, "n/a" where it exposes
    none), and that first call's time above a steady call (bottom, log)."""
    import matplotlib
    import matplotlib.pyplot as plt

    from ..results.plots import PLAIN, legend_right, no_data, palette

    if table.empty:
        return no_data("no compiled mode ran")
    models = sorted(table["model"].unique())
    fig, axes = plt.subplots(2, len(models), squeeze=False, sharex="col",
                             figsize=(5.6 * len(models) + 2.6, 6.0))
    colors = palette(table["variant"])
    variants = sorted(table["variant"].unique())
    width = 0.8 / len(variants)
    for j, model in enumerate(models):
        top, bottom = axes[0, j], axes[1, j]
        g = table[table["model"] == model]
        shapes = _sweep_shapes(g)
        for k, var in enumerate(variants):
            h = g[g["variant"] == var].sort_values("sweep_order")
            if h.empty:
                continue
            x = np.array([shapes.index(sh) for sh in h["shape"]])
            counts = h["recompiles"].to_numpy(float)
            xb = x - 0.4 + width * (k + 0.5)
            top.bar(xb, np.nan_to_num(counts), width=width, color=colors[var], label=var)
            for xx, c in zip(xb, counts):
                top.text(xx, (c if math.isfinite(c) else 0) + 0.05,
                         f"{c:g}" if math.isfinite(c) else "n/a", ha="center", va="bottom",
                         fontsize=7)
            over = h["first_call_overhead_s"].to_numpy(float)
            bottom.plot(x, np.where(over > 0, over, np.nan), marker="o", ms=5,
                        color=colors[var])
        top.set_title(model, fontsize=10)
        most = float(np.nanmax(g["recompiles"].to_numpy(float), initial=0))
        top.set_ylim(0, max(1.0, most) * 1.25)
        top.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if (g["first_call_overhead_s"].to_numpy(float) > 0).any():
            bottom.set_yscale("log")
            bottom.yaxis.set_major_formatter(PLAIN)
        else:  # every compiled cell failed: nothing to draw on a log axis
            bottom.text(0.5, 0.5, "no first call measured", transform=bottom.transAxes,
                        ha="center", va="center", color="0.4")
        _sweep_axis(bottom, shapes)
        if j == 0:
            top.set_ylabel("traces / compilations")
            bottom.set_ylabel("first call − steady call (s)")
    return legend_right(
        fig, axes, "Recompilation: what each new input shape triggers and costs", manifest,
        "counts: torch.compile Dynamo graphs, TorchScript traces, tf.function traces, jax.jit "
        "cache entries", 0.82)
