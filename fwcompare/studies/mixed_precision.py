"""Mixed precision: speed against numerical error, in inference and training.

Every framework runs the same float32 weights in each precision, as it
idiomatically does mixed precision (PyTorch autocast + GradScaler, Keras
mixed policies + LossScaleOptimizer, Flax compute dtypes + jmp loss scaling).
Inference cells compare their output with a float64 PyTorch reference for the
same weights and token ids; training cells first run ``stability_steps`` from
identical weights on their own batch (the loss curves compared; the first step
is the cell's timed first call), then are timed.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core import models
from ..measure.cell import WorkerContext
from ..results.judging import (ONE_PROCESS, Claim, Measurement, Metric, StudyData, cell_label,
                               check_cells, timed_from)
from ..measure.gate import REF_ROWS, fp64_key
from ..plan.schema import (TIMING, Param, all_of, check_models, grid_params, modes_in, non_empty,
                           one_of, positive)
from ..results.store import MEASURED
from ..frameworks import MODES, TRAIN_MODES, defaults
from ..core.spec import DTYPES, RunSpec
from ..core.stats import geomean_ratio_ci
from ..results.tables import (baseline_pairs, both_measured, samples_by_cell, sort_by_precision,
                              variant)
from ..measure.workloads import (AGREEMENT, EQUIV_TOL, FP64_COLUMNS, OPTIMIZER, PRECISION_COLUMNS,
                                 TRAINING_COLUMNS, plan_inference, plan_training, train_settings)
from ..execution.study import Study, grid_cells, per_mode

# One mode each: the training mode its users train with first.
_FRAMEWORK_MODES = defaults(lambda f: f.train_modes[:1])


def _has_float32(v):
    return None if "float32" in v else "must include float32 (the baseline of every speed-up and loss curve)"


def precision_errors(ctx: WorkerContext, spec: RunSpec):
    """``after`` of an inference cell: its output against its float64 reference."""
    from ..measure.error_metrics import error_metrics

    ref = ctx.gate.fp64(fp64_key(spec.batch_size, spec.seq_len))
    if ref is None:
        return None

    def after(fn):
        out = ctx.backend.to_numpy(fn())[:REF_ROWS]
        err = error_metrics(out, ref)
        return {col: err[k] for col, k in FP64_COLUMNS.items()}
    return after


class MixedPrecision(Study):
    name = "mixed_precision"
    title = "Mixed precision: speed against numerical error"
    columns = TRAINING_COLUMNS + PRECISION_COLUMNS
    tasks = ("inference", "train")

    def claimed_variants(self, claim, metric) -> set[str]:
        """A precision's speed-up compares its cells of one task with
        float32's, of every framework and mode: those repeat in every round
        (``rounds_for: claims``); the other precisions and task do not."""
        if claim.metric != "precision_speedup":
            return set()
        task = claim.cells["task"]
        return {f"*/*@{task}/{claim.cells['dtype']}", f"*/*@{task}/float32"}

    def schema(self):
        grid = grid_params(["all-minilm-l6-v2", "bert-base-cased"], _FRAMEWORK_MODES, MODES,
                           [1, 8], [128], 1800.0)
        del grid["dtype"]
        return {
            **grid,
            "precisions": Param("list[str]", ["float32", "tf32", "bfloat16", "float16"],
                                "float32, tf32 (NVIDIA GPUs only), and bfloat16 / float16 as each framework's mixed precision",
                                all_of(non_empty, one_of(DTYPES), _has_float32)),
            "equiv_tol": EQUIV_TOL,
            "mp_equiv_rtol": Param("float", 0.1, "relative L2 error against float64 on the gate batch above which a reduced-precision forward is flagged not_equivalent (a sanity bound against wrong weights or casts, not rounding)", positive),
            "train_models": Param("list[str]", ["all-minilm-l6-v2"], "models trained in every precision (stability, then step time); [] for none", lambda v: check_models(v) if v else None),
            "train_modes": Param("dict[str, list[str]]", _FRAMEWORK_MODES, "training modes per framework", modes_in(TRAIN_MODES)),
            "train_batch_size": Param("int", 8, "batch size of the timed training cells", positive),
            "train_seq_len": Param("int", 64, "sequence length of the timed training cells", positive),
            "stability_steps": Param("int", 30, "training steps per precision from identical weights on one fixed batch: the loss curves compared", positive),
            **OPTIMIZER,
            **{k: AGREEMENT[k] for k in ("loss_tol", "loss_curve_rtol")},
            "mp_loss_rtol": Param("float", 0.05, "relative difference of a reduced precision's first loss from PyTorch float32's above which it is flagged not_equivalent", positive),
            **TIMING,
        }

    def cells(self, params):
        """Inference over the grid in every precision; training (stability, then
        step time) of ``train_models`` in every precision at one size."""
        precisions = params["precisions"]
        return (grid_cells(params, self.name, "inference", dtypes=precisions)
                + grid_cells(params, self.name, "train", models=params["train_models"],
                             modes=params["train_modes"], dtypes=precisions,
                             batch_sizes=[params["train_batch_size"]],
                             seq_lens=[params["train_seq_len"]]))

    def head(self, task, model):
        if task == "inference" and models.model_type(model) in models.DECODERS:
            return "causal_lm"  # logits: argmax agreement is next-token agreement
        return super().head(task, model)

    # The stability steps are this study's measurement of training in each
    # precision (loss curves, the stability table and its claim), not a gate.
    first_steps_phase = "stability steps (loss curves)"

    def gate_shape(self, params, task):
        if task == "train":  # the stability steps are the training cell's first calls
            return (params["train_batch_size"], params["train_seq_len"])
        return super().gate_shape(params, task)

    def fp64_shapes(self, task, cells):
        return sorted({(s.batch_size, s.seq_len) for s in cells}) if task == "inference" else []

    def groups(self, task, cells):
        return per_mode(cells) if task == "train" else super().groups(task, cells)

    def train_settings(self, params):
        return train_settings(params, agreement_steps=params["stability_steps"])

    def plan(self, ctx, spec):
        p = ctx.params
        if spec.task == "train":
            return plan_training(ctx, spec, self.train_settings(p), p["mp_loss_rtol"])
        return plan_inference(ctx, spec, p["mp_equiv_rtol"], precision_errors(ctx, spec))


# -- tables -------------------------------------------------------------------------
PRECISION_KEYS = ["model", "framework", "mode", "device", "batch_size", "seq_len", "task"]
ERROR_COLUMNS = list(FP64_COLUMNS)


def precision_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per cell: median time with its CI, ``speedup`` = float32 time / this
    precision's time of the same framework, mode and size (above 1: faster)
    with its CI (stats.geomean_ratio_ci), and the output's errors against float64. A cell whose
    float32 twin failed has NaN speed-up and says so in ``status``."""
    by_cell = samples_by_cell(samples)
    if summary.empty:
        return pd.DataFrame()
    rows = []
    for r, b, status in baseline_pairs(summary, PRECISION_KEYS, summary["dtype"] == "float32"):
        row = {k: r[k] for k in PRECISION_KEYS}
        row.update(dtype=r["dtype"], variant=r["variant"], status=status,
                   cell_id=r["cell_id"], baseline_cell_id="",
                   median_s=r["median_s"], ci_low_s=r["ci_low_s"], ci_high_s=r["ci_high_s"],
                   speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan,
                   **{c: r.get(c, math.nan) for c in ERROR_COLUMNS}, error=r["error"])
        if r["dtype"] == "float32":
            row.update(status=r["status"], speedup=1.0 if r["status"] in MEASURED else math.nan)
        elif b is not None:
            row["baseline_cell_id"] = b["cell_id"]
            if both_measured(r, b, by_cell):
                # float32 / this: the speed-up, so the CI of base/mine.
                row["speedup"], row["speedup_low"], row["speedup_high"] = geomean_ratio_ci(
                    [(by_cell[b["cell_id"]], by_cell[r["cell_id"]])])
        rows.append(row)
    return sort_by_precision(pd.DataFrame(rows), ["task", "model", "framework", "mode",
                                                  "batch_size", "seq_len"])


def precision_summary(table: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per task, framework/mode and precision, over the cells both it and float32
    ran (the pairs ``precision_table`` made): geometric-mean speed-up with a
    CI, and the worst output error against float64 (largest relative
    L2 error, lowest argmax agreement)."""
    by_cell = samples_by_cell(samples)
    rows = []
    for (task, var, dtype), g in table.groupby(["task", "variant", "dtype"], sort=False):
        ok = g[g["status"].isin(MEASURED)]
        if dtype == "float32":  # the baseline itself
            gm, lo, hi = (1.0 if len(ok) else math.nan), math.nan, math.nan
        else:
            pairs = [(by_cell[b], by_cell[c]) for c, b in zip(ok["cell_id"], ok["baseline_cell_id"])
                     if b in by_cell and c in by_cell]
            gm, lo, hi = geomean_ratio_ci(pairs) if pairs else (math.nan,) * 3
        rows.append({"task": task, "variant": var, "dtype": dtype, "cells": len(g),
                     "cells_ok": len(ok), "geomean_speedup": gm, "speedup_low": lo,
                     "speedup_high": hi,
                     "max_fp64_rel_l2_err": ok["fp64_rel_l2_err"].max(),
                     "min_argmax_agreement": ok["fp64_argmax_agreement"].min(),
                     "statuses": ", ".join(sorted(set(g["status"]) - {"ok"})) or "ok"})
    return pd.DataFrame(rows)


def stability_table(losses: pd.DataFrame) -> pd.DataFrame:
    """Training stability per model, framework/mode and precision over the same
    steps from the same weights and batch:

    - ``max_rel_dev`` / ``final_rel_dev``: largest and last |loss - float32 loss|
      / |float32 loss|, against the same framework/mode's float32 run;
    - ``max_rel_dev_vs_torch_fp32``: the same against PyTorch's float32 losses;
    - ``skipped_steps``: steps dynamic loss scaling skipped (gradients overflowed,
      the update was dropped and the scale lowered);
    - ``nonfinite_losses``: steps whose loss was NaN or infinite;
    - ``applied_steps_pct``: 100 x steps with a finite loss and an applied
      update / steps; the only honest reading of a "stability %" (see the
      notebook for why it is not a stability score).
    """
    rows = []
    for (model, fw, mode), g in losses.groupby(["model", "framework", "mode"]):
        base = g[g["dtype"] == "float32"].set_index("step")["loss"]
        for dtype, h in g.groupby("dtype"):
            h = h.sort_values("step")
            loss = h.set_index("step")["loss"]
            dev = ((loss - base).abs() / base.abs()).dropna() if len(base) else pd.Series(
                dtype=float)
            finite = np.isfinite(h["loss"].to_numpy())
            applied = finite & ~h["skipped"].to_numpy()
            scale = h["loss_scale"].to_numpy()
            rows.append({
                "model": model, "variant": variant(fw, mode), "dtype": dtype, "steps": len(h),
                "first_loss": h["loss"].iloc[0], "final_loss": h["loss"].iloc[-1],
                "max_rel_dev": dev.max() if len(dev) else math.nan,
                "final_rel_dev": dev.iloc[-1] if len(dev) else math.nan,
                "max_rel_dev_vs_torch_fp32": float(np.max(
                    np.abs(h["loss"] - h["reference_loss"]) / np.abs(h["reference_loss"]))),
                "skipped_steps": int(h["skipped"].sum()),
                "nonfinite_losses": int((~finite).sum()),
                "first_loss_scale": scale[0], "final_loss_scale": scale[-1],
                "applied_steps_pct": 100.0 * applied.mean()})
    return sort_by_precision(pd.DataFrame(rows), ["model", "variant"])


# -- claim metrics (params/claims.yaml names them) ------------------------------------
def precision_speedup(data: StudyData, claim: Claim, devices) -> Measurement:
    """Geometric mean of float32 time / ``dtype`` time over every framework's
    cells of ``task``, with its CI."""
    dtype, task = claim.cells["dtype"], claim.cells["task"]
    m = Measurement(unit=f"float32 time / {dtype} time ({task})")
    s = data.summary[data.summary["device"].isin(devices)]
    table = precision_table(s, data.samples) if len(s) else pd.DataFrame()
    if len(table):
        table = table[(table["dtype"] == dtype) & (table["task"] == task)
                      & table["speedup"].notna()]
        if claim.models:
            table = table[table["model"].isin(claim.models)]
    if table.empty:
        m.note = f"no {task} cell where both float32 and {dtype} ran ok on {'/'.join(devices)}"
        return m
    m.value, m.low, m.high = geomean_ratio_ci(
        [(data.by_cell[r["baseline_cell_id"]], data.by_cell[r["cell_id"]])
         for _, r in table.iterrows()], data.confidence, prior=data.prior, spreads=data.spreads)
    m.cells = [f"{r['variant']} {cell_label(r)}" for _, r in table.iterrows()]
    timed_from(m, data, [*table["cell_id"], *table["baseline_cell_id"]])
    m.points = list(zip(m.cells, table["speedup"]))
    m.devices = set(table["device"])
    return m


def precision_stability(data: StudyData, claim: Claim, devices) -> Measurement:
    """Training steps that went wrong (skipped by loss scaling after an overflow,
    or a non-finite loss) with precision a minus those with b, summed over the
    frameworks that trained both from the same weights on the same batch. No
    CI (counts); if neither precision had one, nothing separates them."""
    a, b = claim.cells["a"], claim.cells["b"]
    m = Measurement(unit=f"unstable steps {a} - unstable steps {b}")
    losses = data.losses
    if losses is None or losses.empty:
        m.note = "no training losses stored"
        return m
    table = stability_table(losses)
    table = table.assign(unstable=table["skipped_steps"] + table["nonfinite_losses"])
    pa = table[table["dtype"] == a].set_index(["model", "variant"])
    pb = table[table["dtype"] == b].set_index(["model", "variant"])
    both = pa.index.intersection(pb.index)
    if claim.models:
        both = [k for k in both if k[0] in claim.models]
    if len(both) == 0:
        m.note = f"no framework trained both {a} and {b}"
        return m
    ua = int(sum(pa.loc[k, "unstable"] for k in both))
    ub = int(sum(pb.loc[k, "unstable"] for k in both))
    m.value = float(ua - ub)
    m.cells = [f"{k[1]} {k[0]}: {a} {int(pa.loc[k, 'unstable'])}/{int(pa.loc[k, 'steps'])}, "
               f"{b} {int(pb.loc[k, 'unstable'])}/{int(pb.loc[k, 'steps'])} steps unstable"
               for k in both]
    m.points = [(f"{k[1]} {k[0]}", float(pa.loc[k, "unstable"] - pb.loc[k, "unstable"]))
                for k in both]
    dev = data.results["device"] if "device" in data.results else pd.Series(dtype=str)
    m.devices = set(dev[data.results["task"] == "train"]) if len(dev) else set()
    m.note = "; ".join(m.cells)
    if ua == 0 and ub == 0:
        m.forced = "inconclusive"
        m.note = (f"neither {a} nor {b} skipped a step or lost a finite loss in "
                  f"{int(pa.loc[list(both), 'steps'].sum())} steps: nothing separates them here")
    else:  # one stability run per precision: no interval (judging.ONE_PROCESS)
        m.forced = "inconclusive"
        m.add_note("one stability run per framework and precision: " + ONE_PROCESS)
    return m


MixedPrecision.metrics = {
    "precision_speedup": Metric(precision_speedup, ("dtype", "task"), check_cells, timed=True),
    "precision_stability": Metric(precision_stability, ("a", "b"), check_cells, count=True),
}
STUDY = MixedPrecision()


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
PRECISION_MARKER = {"float32": "o", "tf32": "D", "bfloat16": "s", "float16": "^"}


def speed_vs_error(table: pd.DataFrame, manifest: dict):
    """Per model: each inference cell as a point, x its speed-up over float32
    of the same framework (95% CI as a horizontal bar), y its
    relative L2 error against float64 (log). Colour: framework/mode; marker:
    precision. Cells that did not run are listed under the panels."""
    import matplotlib.pyplot as plt

    from ..results.plots import (footer, palette, speed_error_axes, speed_error_legend,
                                 speed_error_point)

    t = table[table["task"] == "inference"]
    models = sorted(t["model"].unique())
    colors = palette(t["variant"])
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(4.8 * len(models) + 2.8, 4.6))
    failed = []
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = t[t["model"] == model]
        for _, r in g.iterrows():
            if not speed_error_point(ax, r, colors[r["variant"]],
                                     PRECISION_MARKER.get(r["dtype"], "o")):
                failed.append(f"{r['dtype']} {r['status']}")
        speed_error_axes(ax, model, "speed-up over float32, same framework (> 1: faster)",
                         j == 0)
    speed_error_legend(fig, colors, {d: m for d, m in PRECISION_MARKER.items()
                                     if d in set(t["dtype"])})
    fig.suptitle("Speed against error: what each precision buys and costs (inference)",
                 x=0.02, ha="left")
    note = "bars: 95% CI of the speed-up"
    if failed:
        counts = pd.Series(failed).value_counts()
        note += "; cells not drawn: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.08, 0.8, 0.95))
    return fig


def precision_loss_curves(losses: pd.DataFrame, manifest: dict):
    """Per framework/mode (columns) and model: the loss of each precision over
    the same steps from the same weights and batch (top), and its relative
    deviation from that framework's float32 loss (bottom, log)."""
    import matplotlib
    import matplotlib.pyplot as plt
    import seaborn as sns

    from ..results.plots import footer

    if losses.empty:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no training run recorded losses", ha="center")
        return fig
    losses = losses.assign(variant=losses["framework"] + "/" + losses["mode"])
    cols = [(m, v) for m in sorted(losses["model"].unique())
            for v in sorted(losses.loc[losses["model"] == m, "variant"].unique())]
    fig, axes = plt.subplots(2, len(cols), squeeze=False, sharex="col",
                             figsize=(3.8 * len(cols) + 2.0, 5.8))
    dtypes = [d for d in PRECISION_MARKER if d in set(losses["dtype"])]
    colors = dict(zip(dtypes, sns.color_palette("colorblind", len(dtypes))))
    floor = 1e-7
    for j, (model, var) in enumerate(cols):
        top, bottom = axes[0, j], axes[1, j]
        g = losses[(losses["model"] == model) & (losses["variant"] == var)]
        base = g[g["dtype"] == "float32"].set_index("step")["loss"]
        for dtype in dtypes:
            h = g[g["dtype"] == dtype].sort_values("step")
            if h.empty:
                continue
            kw = dict(color=colors[dtype], marker=PRECISION_MARKER[dtype], ms=3, label=dtype)
            top.plot(h["step"], h["loss"], **kw)
            skipped = h[h["skipped"]]
            top.scatter(skipped["step"], skipped["loss"], marker="x", s=60, color="red", zorder=5)
            if dtype != "float32" and len(base):
                dev = ((h.set_index("step")["loss"] - base).abs() / base.abs()).dropna()
                bottom.plot(dev.index, np.maximum(dev.to_numpy(), floor), **kw)
        top.set_title(f"{model}\n{var}", fontsize=9)
        bottom.set_yscale("log")
        bottom.set_xlabel("training step (same batch)")
        bottom.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if j == 0:
            top.set_ylabel("loss")
            bottom.set_ylabel("|loss - fp32 loss| / fp32 loss")
    handles = [plt.Line2D([], [], color=colors[d], marker=PRECISION_MARKER[d], label=d)
               for d in dtypes]
    handles.append(plt.Line2D([], [], color="red", marker="x", ls="", label="step skipped"))
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("Training in each precision: same weights, same batch, same steps",
                 x=0.02, ha="left")
    footer(fig, manifest, f"bottom: deviations below {floor:g} drawn at {floor:g}")
    fig.tight_layout(rect=(0, 0.06, 0.85, 0.95))
    return fig


def loss_scale_trajectories(losses: pd.DataFrame, manifest: dict):
    """The dynamic loss scale after each step of every scaled run (float16),
    skipped steps marked; a flat line means no overflow."""
    import matplotlib
    import matplotlib.pyplot as plt

    from ..results.plots import footer, palette

    scaled = losses[np.isfinite(losses["loss_scale"])]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    if scaled.empty:
        ax.text(0.5, 0.5, "no run used loss scaling", ha="center", transform=ax.transAxes)
        return fig
    scaled = scaled.assign(label=scaled["model"] + " " + scaled["framework"] + "/"
                           + scaled["mode"] + " " + scaled["dtype"])
    colors = palette(scaled["label"])
    for label, h in scaled.groupby("label"):
        h = h.sort_values("step")
        ax.step(h["step"], h["loss_scale"], where="post", color=colors[label], label=label)
        sk = h[h["skipped"]]
        ax.scatter(sk["step"], sk["loss_scale"], marker="x", s=60, color="red", zorder=5)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Dynamic loss scale (float16); x: step skipped on overflow", fontsize=10)
    footer(fig, manifest)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
