"""Inference sweep: latency, throughput and memory of one forward call, per
framework and mode, over models x batch x sequence (the 2019 study's grid).

A worker holds one framework; per precision it loads one model with the
shared weights and measures the cells in ascending size; each mode's forward
is gated against PyTorch's reference in the smallest cell's first call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import models
from ..cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ..frameworks import backend_options
from ..params import TIMING, Param, grid_params, positive
from ..spec import MODES, RunSpec
from . import register
from .base import Study

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
    from ..gate import make_forwards

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
    from ..gate import check_forward

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
    from ..gate import check_output

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


class InferenceSweep(Study):
    name = "inference_sweep"
    title = "Inference sweep: latency, throughput and memory"

    def schema(self):
        return {**grid_params(["bert-base-cased", "gpt2", "distilbert-base-uncased"],
                              {"torch": ["eager"], "tensorflow": ["eager", "graph"],
                               "jax": ["jit"]}, MODES, [1, 2], [32, 128], 1800.0),
                "equiv_tol": EQUIV_TOL, **TIMING}

    def plan(self, ctx, spec):
        return plan_inference(ctx, spec)


STUDY = register(InferenceSweep())
