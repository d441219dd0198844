"""The worker side: a cell of an artifact path in a fresh process that never
held the framework's model (the artifact's cold load, the gate on its first
call, then its checks against float64 and the sentence pairs)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ...core import models
from ...measure.cell import CellFailure, CellPlan, WorkerContext
from ...measure.gate import REF_ROWS, fp64_key
from ...measure.workloads import FP64_COLUMNS
from .catalog import artifact_dir, pair_similarities, path_of, sentence_agreement, sentences_path
from .export import read_record
from .formats import RUNTIMES, Runtime


class ArrayBackend:
    """A framework backend that also takes plain numpy outputs (ONNX Runtime's
    and LiteRT's), which are computed by the time they are returned."""

    def __init__(self, base):
        self._base = base

    def __getattr__(self, name):
        return getattr(self._base, name)

    def sync(self, out) -> None:
        if not isinstance(out, np.ndarray):
            self._base.sync(out)

    def to_numpy(self, out) -> np.ndarray:
        if isinstance(out, np.ndarray):
            return out.astype(np.float64)
        return self._base.to_numpy(out)


@dataclass
class Loaded:
    runtime: Runtime
    load_s: float
    record: dict
    checked: tuple | None = None  # (gate figures, not-equivalent reason) once gated


def load_artifact(ctx: WorkerContext, framework: str, mode: str) -> Loaded:
    """The path's artifact, loaded in this process (which never held the
    model): its record says what the export found."""
    from ...measure.cell import release_freed_heap
    from ...core.memory import current_rss_bytes

    record = read_record(ctx.job, framework, mode)
    if record is None:
        raise CellFailure("error", f"{framework}/{mode}: the prepare job left no export record")
    if record["status"] != "ok":
        raise CellFailure(record["status"], f"not exported: {record['message']}")
    release_freed_heap()
    ctx.baseline_rss = current_rss_bytes()  # memory counts from the artifact's load
    t0 = time.perf_counter()
    runtime = RUNTIMES[path_of(framework, mode).artifact](
        artifact_dir(ctx.job, framework, mode), ctx.job.threads, ctx.device)
    return Loaded(runtime, time.perf_counter() - t0, record)


def after_checks(ctx: WorkerContext, spec, embed):
    """``after`` of a cell: its output against the float64 reference and, on
    real weights, the sentence pairs' similarities against float32's.
    ``embed(ids) -> numpy`` runs the path on other token ids."""
    from ...measure.error_metrics import error_metrics

    ref = ctx.gate.fp64(fp64_key(spec.batch_size, spec.seq_len))
    sentences = sentences_path(ctx.job)

    def after(fn):
        figures = {}
        if ref is not None:
            err = error_metrics(ctx.backend.to_numpy(fn())[:REF_ROWS], ref)
            figures.update({col: err[k] for col, k in FP64_COLUMNS.items()})
        if sentences.is_file():
            with np.load(sentences) as s:
                figures.update(sentence_agreement(pair_similarities(embed(s["ids"])),
                                                  s["reference"]))
        return figures
    return after


def plan_path(ctx: WorkerContext, spec) -> CellPlan:
    """One cell of an artifact path: load once per process, gate on the first
    call of the gate's shape (or a call of its own), time, then the checks."""
    from ...measure.gate import check_output

    fw, mode = spec.framework, spec.mode
    path = path_of(fw, mode)
    v = ctx.variant(("artifact", mode), lambda: load_artifact(ctx, fw, mode))
    rt = v.runtime
    skip = ctx.skip_reason(spec)
    known = {"load_s": v.load_s, "export_s": v.record["export_s"],
             "artifact_bytes": v.record["artifact_bytes"]}
    if skip:
        return CellPlan(lambda: None, known=known, skip=skip)
    tol = ctx.params["equiv_tol"], ctx.params["mp_equiv_rtol"]

    def check(out):
        v.checked = check_output(ctx.backend.to_numpy(out), ctx.gate, mode, path.precision, *tol)
        return v.checked
    first = None
    ids = ctx.token_ids(spec)
    if v.checked is None:
        if np.array_equal(ids, ctx.gate.ids):
            def first(out):
                return (*check(out), [])
        else:
            x = rt.inputs(ctx.gate.ids)
            check(rt.run(x))
    gate_figures, bad = v.checked if v.checked is not None else ({}, "")

    def call():
        x = rt.inputs(ids)
        return lambda: rt.run(x)

    def embed(sentence_ids):
        return ctx.backend.to_numpy(rt.run(rt.inputs(sentence_ids)))
    setup = f"{path.how}; export: {v.record.get('setup', '')}; runtime: {rt.setup}"
    return CellPlan(call, known=dict(known, **gate_figures),
                    flops=models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                    traffic=models.weight_traffic_bytes(ctx.info, "inference"),
                    problem=bad, first=first, after=after_checks(ctx, spec, embed),
                    provenance={"mode_setup": setup, "exporter_pid": v.record["exporter_pid"],
                                "runtime_pid": os.getpid()})
