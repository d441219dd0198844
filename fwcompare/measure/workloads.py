"""The workloads several studies measure: one forward call of a model, and one
training step (forward, loss, backward, AdamW update) with its loss agreement.

A study plans its cells with these (``plan_inference``, ``plan_training``) and
takes their params (``EQUIV_TOL``, ``OPTIMIZER``, ``AGREEMENT``) into its
schema; studies import them from here, never from one another.

Inference: a worker holds one framework; per precision it loads one model with
the shared weights, and each mode's forward is gated against PyTorch's
reference in the smallest cell's first call.

Training: before timing, every framework runs ``agreement_steps`` steps on the
gate batch from the shared weights; its losses must follow PyTorch's
(``loss_tol``, ``loss_curve_rtol``). The gate batch is the smallest cell's, so
the first agreement step is that cell's timed first call (``plan_training``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core import models
from .cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ..frameworks import backend_options
from .gate import TrainSettings
from ..plan.schema import Param, non_negative, positive
from ..core.messages import GATE, emit
from ..results.store import Columns
from ..core.spec import RunSpec

# -- the forward call (inference) ---------------------------------------------------
EQUIV_TOL = Param("float", 1e-4, "max abs error against the PyTorch reference before a cell is flagged not_equivalent", positive)


@dataclass
class InferenceVariant:
    """One precision's model and each mode's forward, built but not called;
    ``checked``: mode -> (gate error figures, not-equivalent reason or "")
    once that mode has passed the gate; ``problems``: mode -> (status,
    message) for a mode that could not be built or gated."""

    model: Any
    load_s: float
    forwards: dict
    problems: dict
    checked: dict = field(default_factory=dict)


def load_forwards(ctx: WorkerContext, dtype: str, modes=None,
                  load_failed: str = "") -> InferenceVariant:
    """The model loaded for ``dtype`` and each mode's forward (default: every
    mode of this worker's cells in that precision), none called yet."""
    from .gate import make_forwards

    try:
        model, load_s = ctx.load(dtype)
    except Exception as exc:  # the whole precision cannot run
        status = failure_status(ctx.backend, exc)
        raise CellFailure(status, describe(exc) if status == "unsupported" else
                          f"{load_failed or f'loading the model for {dtype} failed'}: "
                          f"{describe(exc)}") from exc
    modes = modes or sorted({c.spec.mode for c in ctx.job.cells if c.spec.dtype == dtype})
    forwards, problems = make_forwards(ctx.backend, model, modes, ctx.device, ctx.head, dtype,
                                       backend_options(ctx.params))
    return InferenceVariant(model, load_s, forwards, problems)


def gate(ctx: WorkerContext, v: InferenceVariant, mode: str, dtype: str,
         mp_equiv_rtol=None) -> None:
    """``mode``'s forward called on the gate batch and checked (a call of its
    own: for a variant whose gate cell is not among its cells)."""
    from .gate import check_forward

    try:
        v.checked[mode] = check_forward(ctx.backend, v.forwards[mode], mode, ctx.device, dtype,
                                        ctx.gate, ctx.params["equiv_tol"], mp_equiv_rtol)
    except Exception as exc:
        v.problems[mode] = (failure_status(ctx.backend, exc), describe(exc))


def forward_call(ctx: WorkerContext, fn, spec: RunSpec):
    """The timed callable of a forward cell: inputs made once, outside timing."""
    ids = ctx.token_ids(spec)

    def call():
        x = ctx.backend.make_inputs(ids, ctx.device)
        return lambda: fn(x)
    return call


def plan_inference(ctx: WorkerContext, spec: RunSpec, mp_equiv_rtol=None,
                   after=None) -> CellPlan:
    """One forward cell: its precision's variant, this mode's forward.

    The gate batch is the smallest cell's (``Study.gate_shape``), so that
    cell's timed first call is the gate's call: its output is checked right
    after it (``first``), and a compiled mode traces once. A mode whose gate
    cell is not run here (a resumed run) is gated by a call of its own first."""
    from .gate import check_output

    dtype, mode = spec.dtype, spec.mode
    v = ctx.variant(("inference", dtype), lambda: load_forwards(ctx, dtype))
    skip = ctx.skip_reason(spec)
    first = None
    if mode not in v.checked and mode not in v.problems and not skip:
        if np.array_equal(ctx.token_ids(spec), ctx.gate.ids):

            def first(out):
                v.checked[mode] = check_output(ctx.backend.to_numpy(out), ctx.gate, mode,
                                               dtype, ctx.params["equiv_tol"], mp_equiv_rtol)
                return (*v.checked[mode], [])
        else:
            gate(ctx, v, mode, dtype, mp_equiv_rtol)
    if mode in v.problems:
        raise CellFailure(*v.problems[mode])
    fn = v.forwards[mode]
    known, bad = v.checked.get(mode, ({}, ""))
    return CellPlan(forward_call(ctx, fn, spec), known=dict(known, load_s=v.load_s),
                    flops=models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                    traffic=models.weight_traffic_bytes(ctx.info, "inference"),
                    problem=bad, first=first, after=after,
                    provenance={"mode_setup": fn.setup}, skip=skip)


# -- the training step -------------------------------------------------------------
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


def train_settings(params, agreement_steps: int | None = None,
                   accumulation_steps: int = 1) -> TrainSettings:
    """The training reference's optimizer and steps from a study's params;
    ``accumulation_steps``: micro-batches per step, where the study has that
    key (the training study), else one."""
    return TrainSettings(optimizer={k: params[k] for k in OPTIMIZER},
                         accumulation_steps=accumulation_steps,
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
    from .gate import agreement_steps, loss_problems
    from ..results.store import losses_frame

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
    from ..core.models import token_ids, train_labels

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


# -- errors against the float64 reference ------------------------------------------
# Precision errors of a cell's output against the float64 reference: results
# columns <- precision.error_metrics keys.
FP64_COLUMNS = {"fp64_max_abs_err": "max_abs_err", "fp64_rel_l2_err": "rel_l2_err",
                "fp64_cosine": "cosine_similarity", "fp64_argmax_agreement": "argmax_agreement",
                "out_nonfinite": "n_nonfinite"}


# The result columns of the shared workloads (a study that runs one declares
# them in its ``columns``): a training step's losses over the agreement steps
# and its analytic memory breakdown; a precision's errors against the float64
# reference and its loss scaling.
TRAINING_COLUMNS = Columns(
    figures=("loss_step0", "loss_final", "param_bytes", "grad_bytes", "optimizer_state_bytes"),
    analytic=("param_bytes", "grad_bytes", "optimizer_state_bytes"))
PRECISION_COLUMNS = Columns(figures=(*FP64_COLUMNS, "out_nonfinite", "skipped_steps",
                                     "nonfinite_losses", "final_loss_scale"))
