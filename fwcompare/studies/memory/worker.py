"""A try of the largest-batch search (the worker side: a fresh process per
try): load, build and call the step, watched by a budget guard."""
from __future__ import annotations

import math
import os
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ...core import messages, models
from ...measure.cell import CellResult, describe, failure_status
from ...plan.job import CellRef
from ...core.spec import RunSpec
from .techniques import FORWARD, GIB, PLAIN, TECHNIQUES

if TYPE_CHECKING:
    from . import Memory


# -- one try (worker side) ------------------------------------------------------------
class BudgetGuard:
    """A thread that watches this process's resident memory over
    ``ctx.baseline_rss`` (the level before the model: ``WorkerContext.load``
    sets it) every millisecond and, past ``budget`` bytes, writes the cell's
    ``oom`` row and leaves the process at once (never waiting for the
    kernel's OOM killer, which could take the machine with it)."""

    def __init__(self, budget: float, ctx, ref: CellRef, lock: threading.Lock):
        from ...core.memory import current_rss_bytes

        self.budget, self.ctx, self.ref, self.lock = budget, ctx, ref, lock
        self._rss = current_rss_bytes
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(1e-3):
            over = self._rss() - self.ctx.baseline_rss
            if over > self.budget and self.lock.acquire(blocking=False):
                b = self.ref.spec.batch_size
                self.ctx.finish(self.ref, CellResult("oom", (
                    f"over the budget: resident memory {over / GIB:.3f} GiB above the "
                    f"process's before the model, budget {self.budget / GIB:g} GiB, at batch "
                    f"{b}; the try was stopped"), dict(budget_bytes=self.budget)))
                os._exit(0)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()


def fit_call(ctx, spec: RunSpec, model, settings):
    """The callable a try runs: the technique's training step or a forward, on
    this batch (inputs made here, outside the calls)."""
    from ...core.models import token_ids, train_labels

    backend, p = ctx.backend, ctx.params
    ids = token_ids(ctx.job.seed, spec.batch_size, spec.seq_len, ctx.info["vocab_size"])
    mode = p["train_modes"][ctx.framework][0]
    if spec.mode == FORWARD:
        fn = backend.make_forward(model, mode, ctx.device, ctx.head, spec.dtype)
        x = backend.make_inputs(ids, ctx.device)
        return lambda: fn(x)
    step = backend.make_train_step(model, mode, ctx.device, settings.optimizer, ctx.head,
                                   settings.accumulation_steps, spec.dtype,
                                   settings.checkpointing)
    batch = backend.make_batch(ids, train_labels(ctx.job.seed, ids, ctx.head), ctx.device)
    return lambda: step(batch)


def fit_try(study: Memory, ctx, spec: RunSpec) -> CellResult:
    """Load, build and call ``1 + fit_steps`` times; the whole try's peak (on a
    CPU: loading and compiling included, over the level before the model)."""
    from ...measure.cell import release_freed_heap
    from ...core.memory import PeakRSS

    backend, p = ctx.backend, ctx.params
    settings = study.settings(p, ctx.framework, spec.mode if spec.mode in TECHNIQUES else PLAIN)
    budget = p["fit_budget_gib"] * GIB
    times = []
    with PeakRSS() as peak:
        model, load_s = ctx.load(spec.dtype)
        call = fit_call(ctx, spec, model, settings)
        for _ in range(1 + p["fit_steps"]):
            t0 = time.perf_counter()
            backend.sync(call())
            times.append(time.perf_counter() - t0)
    median = float(np.median(times[1:]))
    # Its share of the machine (pct_of_peak, from the run's ceiling) like any
    # measured row's: one step timed after the first, not a sampled cell.
    task = "inference" if spec.mode == FORWARD else "train"
    flops = models.forward_flops(ctx.info, spec.batch_size, spec.seq_len) * (
        1 if task == "inference" else 3)
    figures = dict(load_s=load_s, first_call_s=times[0], median_s=median,
                   n_samples=len(times) - 1, budget_bytes=budget or math.nan,
                   flops_per_call=flops, achieved_flops_per_s=flops / median,
                   bytes_per_call=models.weight_traffic_bytes(ctx.info, task))
    if ctx.device == "gpu":  # the allocator's peak of one more call
        figures.update(backend.gpu_memory(lambda: backend.sync(call())))
    else:
        figures.update(peak_mem_bytes=peak.peak_bytes - ctx.baseline_rss,
                       mem_method=peak.method + "_whole_try_over_pre_model_baseline")
        if figures["peak_mem_bytes"] > budget:
            return CellResult("oom", f"over the budget: the try's peak "
                              f"{figures['peak_mem_bytes'] / GIB:.3f} GiB (loading and "
                              f"compiling included) is above {budget / GIB:g} GiB", figures)
    del call, model
    release_freed_heap()
    return CellResult("ok", "", figures)


def run_try(study: Memory, job) -> None:
    """A try's process: one cell, run on its own (the parent only listens)."""
    from ...measure.cell import WorkerContext
    from ...frameworks import backend_options

    backend = study.backend(job.framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    ctx = WorkerContext(job, backend)
    ref = job.cells[0]
    messages.emit(messages.START, label=ref.spec.label, cell=ref.spec.cell_id, round=ref.round)
    lock = threading.Lock()
    guard = (BudgetGuard(job.params["fit_budget_gib"] * GIB, ctx, ref, lock)
             if job.device == "cpu" else None)
    try:
        skip = ctx.skip_reason(ref.spec)  # a sequence longer than the model's positions
        result = CellResult("unsupported", skip) if skip else fit_try(study, ctx, ref.spec)
    except Exception as exc:
        result = CellResult(failure_status(backend, exc), describe(exc))
    result.figures.setdefault("budget_bytes", job.params["fit_budget_gib"] * GIB or math.nan)
    if lock.acquire(blocking=False):  # the guard has not written the row
        if guard is not None:
            guard.stop()
        ctx.finish(ref, result)
    else:  # the guard is writing the row: it ends the process
        guard.thread.join()
