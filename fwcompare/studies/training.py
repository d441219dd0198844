"""Training: step time, memory and loss agreement of one AdamW training step
(forward, loss, backward, update) per framework and mode.

Each mode trains its own model in a process of its own (its memory is not
inflated by another mode's leftovers). Before timing, every framework runs
``agreement_steps`` steps on the gate batch from the shared weights; its
losses must follow PyTorch's (``loss_tol``, ``loss_curve_rtol``). The gate
batch is the smallest cell's, so the first agreement step is that cell's
timed first call (``plan_training``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .. import models
from ..cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ..gate import TrainSettings
from ..params import TIMING, Param, grid_params, non_negative, positive
from ..protocol import GATE, emit
from ..spec import TRAIN_MODES, RunSpec
from ..tables import variant
from . import register
from .base import Study, per_mode

OPTIMIZER = {
    "learning_rate": Param("float", 1e-4, "AdamW learning rate (every framework)", positive),
    "weight_decay": Param("float", 0.01, "AdamW decoupled weight decay", non_negative),
    "beta1": Param("float", 0.9, "AdamW beta1", positive),
    "beta2": Param("float", 0.999, "AdamW beta2", positive),
    "eps": Param("float", 1e-8, "AdamW epsilon", positive),
}
AGREEMENT = {
    "agreement_steps": Param("int", 5, "training steps on a fixed batch whose losses are compared before timing", positive),
    "loss_tol": Param("float", 1e-4, "max abs difference of the first loss from PyTorch's before a framework is flagged", positive),
    "loss_curve_rtol": Param("float", 1e-2, "max relative difference of any agreement-step loss from PyTorch's", positive),
}


def train_settings(params, agreement_steps: int | None = None) -> TrainSettings:
    return TrainSettings(optimizer={k: params[k] for k in OPTIMIZER},
                         accumulation_steps=params.get("accumulation_steps", 1),
                         agreement_steps=agreement_steps or params["agreement_steps"])


@dataclass
class TrainVariant:
    """One (mode, precision) in a worker: its training step (built, not yet
    called), the figures known from the build, and its agreement once run
    (``agreed``: (figures, not-equivalent reason), or the exception it raised)."""

    step: Callable
    known: dict
    agreed: tuple[dict, str] | Exception | None = None


def trained_variant(ctx: WorkerContext, mode: str, dtype: str,
                    settings: TrainSettings) -> TrainVariant:
    """The model loaded for ``dtype`` and its training step; nothing called yet."""
    n = ctx.info["n_params"]
    breakdown = {"param_bytes": 4.0 * n, "grad_bytes": 4.0 * n,
                 "optimizer_state_bytes": 8.0 * n}  # fp32; AdamW keeps m and v
    try:
        model, load_s = ctx.load(dtype)
        step = ctx.backend.make_train_step(model, settings.exec_mode or mode, ctx.device,
                                           settings.optimizer, ctx.head,
                                           settings.accumulation_steps, dtype,
                                           settings.checkpointing)
    except Exception as exc:
        raise CellFailure(failure_status(ctx.backend, exc), describe(exc), breakdown) from exc
    return TrainVariant(step, dict(breakdown, load_s=load_s))


def agreement(ctx: WorkerContext, v: TrainVariant, mode: str, dtype: str,
              mp_loss_rtol: float | None = None, first=None) -> tuple[dict, str, list]:
    """The agreement steps on the gate batch against PyTorch's losses (stored;
    the gate event sent): their figures, the not-equivalent reason ("" if
    none) and each step's ns. ``first``: (loss, loss scale before it) of a
    first step already taken on the gate batch (a cell whose batch is the
    gate's: its first call; the steps that follow are then its warm-up calls)."""
    from ..gate import agreement_steps, loss_problems
    from ..results import losses_frame

    ref = ctx.gate.reference
    try:
        losses, scales, skipped, step_ns = agreement_steps(
            ctx.backend, v.step, ctx.gate, ctx.device, len(ref), first)
    except Exception as exc:
        v.agreed = CellFailure(failure_status(ctx.backend, exc),
                               f"agreement steps failed: {describe(exc)}", v.known)
        raise v.agreed from exc
    job = ctx.job
    ctx.store.append_losses(
        losses_frame(job.model, ctx.framework, mode, losses, ref, dtype=dtype,
                     loss_scale=scales, skipped=skipped),
        f"{job.model_key}-{ctx.framework}-{mode}-{dtype}")
    step0 = abs(losses[0] - ref[0])
    emit(GATE, dtype=dtype, errors={mode: step0})
    figures = dict(loss_step0=float(losses[0]), loss_final=float(losses[-1]),
                   equiv_max_abs_err=float(step0),
                   equiv_rel_err=float(np.max(np.abs(losses - ref) / np.abs(ref))),
                   skipped_steps=float(skipped.sum()),
                   nonfinite_losses=float((~np.isfinite(losses)).sum()),
                   final_loss_scale=float(scales[-1]))
    p = ctx.params
    v.agreed = figures, "; ".join(loss_problems(dtype, losses, ref, p["loss_tol"],
                                                p["loss_curve_rtol"], mp_loss_rtol))
    return (*v.agreed, step_ns)


def plan_training(ctx: WorkerContext, spec: RunSpec, settings: TrainSettings,
                  mp_loss_rtol: float | None = None) -> CellPlan:
    """One training-step cell: its (mode, precision) variant, this batch.

    The agreement steps run once per variant, on the gate batch. The gate
    batch is the smallest cell's (``Study.gate_shape``), so for that cell they
    are its first calls: its timed first call (trace and compile included) is
    the first agreement step, the others follow it untimed (and count as its
    warm-up calls), and the step is compiled once. A variant whose first cell
    here is another (a resumed run) runs them on the gate batch before that
    cell's first call."""
    from ..gate import token_ids, train_labels

    v = ctx.variant(("train", spec.mode, spec.dtype),
                    lambda: trained_variant(ctx, spec.mode, spec.dtype, settings))
    ids = token_ids(ctx.job.seed, spec.batch_size, spec.seq_len, ctx.info["vocab_size"])
    labels = train_labels(ctx.job.seed, ids, ctx.head)
    gate_batch = (np.array_equal(ids, ctx.gate.ids)
                  and np.array_equal(labels, ctx.gate.labels))
    if isinstance(v.agreed, Exception):
        raise v.agreed
    if v.agreed is None and not gate_batch:
        agreement(ctx, v, spec.mode, spec.dtype, mp_loss_rtol)
    first = None
    if v.agreed is None:  # this cell's first call is the first agreement step
        before = v.step.loss_scale()

        def first(out):
            return agreement(ctx, v, spec.mode, spec.dtype, mp_loss_rtol, (out, before))
    figures, problem = v.agreed or ({}, "")

    def call():
        b = ctx.backend.make_batch(ids, labels, ctx.device)
        return lambda: v.step(b)
    return CellPlan(call, known=dict(v.known, **figures), problem=problem, first=first,
                    skip=ctx.skip_reason(spec),
                    flops=3 * models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                    traffic=models.weight_traffic_bytes(ctx.info, "train"))


class Training(Study):
    name = "training"
    title = "Training: step time, memory and loss agreement"
    tasks = ("train",)

    def schema(self):
        return {**grid_params(["bert-base-cased", "gpt2"],
                              {"torch": ["eager"], "tensorflow": ["graph", "xla"],
                               "jax": ["jit"]}, TRAIN_MODES, [2], [64], 1800.0),
                **OPTIMIZER,
                "accumulation_steps": Param("int", 1, "micro-batches per optimizer step (divides every batch size)", positive),
                **AGREEMENT, **TIMING}

    def check(self, params):
        acc = params["accumulation_steps"]
        uneven = [b for b in params["batch_sizes"] if b % acc]
        return ([f"key 'accumulation_steps': {acc} does not divide batch size(s) "
                 f"{', '.join(map(str, uneven))}"] if uneven else [])

    def groups(self, task, cells):
        return per_mode(cells)

    def train_settings(self, params):
        return train_settings(params)

    def plan(self, ctx, spec):
        return plan_training(ctx, spec, self.train_settings(ctx.params))


STUDY = register(Training())


# -- tables -------------------------------------------------------------------------
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


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def step_time_vs_seq(summary, manifest):
    from ..plots import metric_vs_seq

    return metric_vs_seq(summary, manifest, "median_s", "median time per step (ms)", "ci_low_s",
                         "ci_high_s", scale=1e3,
                         title="Time per training step (forward, loss, backward, AdamW)")


def loss_curves(losses: pd.DataFrame, manifest: dict):
    """Per model: each framework/mode's loss over the agreement steps on the same
    batch from the same weights (top), and its distance from PyTorch's loss on a
    log scale (bottom), since agreeing curves hide each other."""
    import matplotlib
    import matplotlib.pyplot as plt

    from ..plots import footer, palette

    models_ = sorted(losses["model"].unique())
    fig, axes = plt.subplots(2, len(models_), squeeze=False, sharex="col",
                             figsize=(4.6 * len(models_) + 2.4, 6.0))
    losses = losses.assign(variant=losses["framework"] + "/" + losses["mode"])
    colors = palette(losses["variant"])
    floor = 1e-9  # identical losses are drawn at this floor
    for j, model in enumerate(models_):
        top, bottom = axes[0, j], axes[1, j]
        g = losses[losses["model"] == model]
        ref = g.drop_duplicates("step").sort_values("step")
        top.plot(ref["step"], ref["reference_loss"], color="0.2", ls="--", lw=2.5, alpha=0.5,
                 label="PyTorch reference")
        for var, h in g.groupby("variant"):
            h = h.sort_values("step")
            top.plot(h["step"], h["loss"], marker="o", ms=4, color=colors[var], label=var)
            diff = np.maximum((h["loss"] - h["reference_loss"]).abs(), floor)
            bottom.plot(h["step"], diff, marker="o", ms=4, color=colors[var])
        top.set_title(model, fontsize=10)
        top.set_ylabel("loss")
        bottom.set_yscale("log")
        bottom.set_ylabel("|loss - PyTorch loss|")
        bottom.set_xlabel("training step (same batch)")
        bottom.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Loss agreement: same weights, same batch, each framework's AdamW",
                 x=0.02, ha="left")
    footer(fig, manifest, f"bottom: differences below {floor:g} drawn at {floor:g}")
    fig.tight_layout(rect=(0, 0.06, 0.8, 0.95))
    return fig
