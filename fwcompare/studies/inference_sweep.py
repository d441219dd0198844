"""Inference sweep: latency, throughput and memory of one forward call, per
framework and mode, over models x batch x sequence (the 2019 study's grid).

A worker holds one framework; per precision it loads one model with the
shared weights, gates every mode's forward against PyTorch's reference on the
gate batch, then measures the cells in ascending size.
"""
from __future__ import annotations

from .. import models
from ..cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ..params import TIMING, Param, grid_params, positive
from ..spec import MODES, RunSpec
from . import register
from .base import Study

EQUIV_TOL = Param("float", 1e-4, "max abs error against the PyTorch reference before a cell is flagged not_equivalent", positive)


def gated_forwards(ctx: WorkerContext, dtype: str, modes=None, mp_equiv_rtol=None,
                   load_failed: str = ""):
    """The variant of one precision: the model loaded for ``dtype`` and each
    mode's forward checked on the gate batch (gate.check_forwards). ``modes``:
    default, every mode of this worker's cells in that precision. Returns
    (model, load_s, forwards, known, problems)."""
    from ..gate import check_forwards

    try:
        model, load_s = ctx.load(dtype)
    except Exception as exc:  # the whole precision cannot run
        status = failure_status(ctx.backend, exc)
        raise CellFailure(status, describe(exc) if status == "unsupported" else
                          f"{load_failed or f'loading the model for {dtype} failed'}: "
                          f"{describe(exc)}") from exc
    modes = modes or sorted({c.spec.mode for c in ctx.job.cells if c.spec.dtype == dtype})
    forwards, known, problems = check_forwards(
        ctx.backend, model, modes, ctx.device, ctx.head, dtype, ctx.gate,
        ctx.params["equiv_tol"], mp_equiv_rtol, mode_options(ctx.params))
    return model, load_s, forwards, known, problems


def mode_options(params) -> dict:
    """Params that change how a mode is built (the backends' make_forward options)."""
    return {k: params[k] for k in ("torch_compile_mode", "torch_compile_dynamic") if k in params}


def forward_call(ctx: WorkerContext, fn, spec: RunSpec):
    """The timed callable of a forward cell: inputs made once, outside timing."""
    ids = ctx.token_ids(spec)

    def call():
        x = ctx.backend.make_inputs(ids, ctx.device)
        return lambda: fn(x)
    return call


def plan_inference(ctx: WorkerContext, spec: RunSpec, mp_equiv_rtol=None,
                   after=None) -> CellPlan:
    """One forward cell: its precision's gated variant, this mode's forward."""
    _, load_s, forwards, known, problems = ctx.variant(
        ("inference", spec.dtype), lambda: gated_forwards(ctx, spec.dtype,
                                                          mp_equiv_rtol=mp_equiv_rtol))
    if spec.mode in problems:
        raise CellFailure(*problems[spec.mode])
    fn, bad = forwards[spec.mode]
    return CellPlan(forward_call(ctx, fn, spec), known=dict(known[spec.mode], load_s=load_s),
                    flops=models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                    problem=bad, after=after, provenance={"mode_setup": fn.setup},
                    skip=ctx.skip_reason(spec))


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
