"""One cell's measurement, and what a worker process holds while it measures.

A study says what a cell is (a :class:`CellPlan`: the callable to time, the
figures known before timing, its FLOPs, a not-equivalent reason, optional
checks of the first output and extra figures after timing); this module
measures it the same way for every study:

1. prepare: the timing protocol's first call, warm-up and block size
   (:func:`fwcompare.core.timing.prepare`);
2. sample: blocks of samples, on request or until the stopping rule stops;
3. memory: a pass of its own after timing, so sampling never perturbs timing;
4. finish: the derived figures (:func:`derived_figures`, the one place they
   are computed), then the row.

:class:`CellRun` holds those steps apart so a schedule can interleave the
sample blocks of several prepared cells; :func:`measure_cell` runs them in
order (a plain function: what tests call).
"""
from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core import messages
from ..plan.job import CellRef, Job
from ..core.messages import DONE, emit
from ..results.store import MEASURED
from ..core.spec import RunSpec
from .failure import CellFailure, describe, failure_status  # noqa: F401 (the studies' names)
from ..core.stats import derived_figures  # noqa: F401
from ..core.timing import Sampler, TimingConfig, prepare


def inject_fault(label: str) -> None:
    """Fault injection for the robustness tests: FWCOMPARE_FAULT=kind:label-part."""
    kind, _, where = os.environ.get("FWCOMPARE_FAULT", "").partition(":")
    if not where or where not in label:
        return
    if kind == "crash":
        os._exit(3)
    if kind == "hang":
        print(f"fwcompare: injected hang in {label}", file=sys.stderr, flush=True)
        time.sleep(1e6)
    if kind == "oom":
        raise MemoryError("injected out-of-memory (FWCOMPARE_FAULT)")


def release_freed_heap() -> None:
    """Return freed heap to the OS (glibc malloc_trim), so RSS after loading a
    model does not keep what loading alone needed (e.g. Flax's from_pt copy)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class CellPlan:
    """What a study measures in one cell.

    ``call()`` builds the timed callable (inputs made outside the timed
    region); ``known``: figures known before timing (gate errors, load time);
    ``flops``: FLOPs of one call; ``traffic``: bytes it moves for its weights
    (``models.weight_traffic_bytes``); ``problem``: why the cell is not equivalent
    ("" if it is); ``first(out)`` -> (figures, problem, warm-up calls
    it made: ns each, see ``timing.prepare``) checks the first call's output
    before warm-up; ``after(fn)`` -> figures from the warm
    callable after timing (e.g. precision errors); ``skip``: why the cell
    cannot run at all (status unsupported); ``provenance``: columns of the
    row that say how this cell was set up (``mode_setup``)."""

    call: Callable[[], Callable[[], Any]]
    known: dict = field(default_factory=dict)
    flops: float = float("nan")
    traffic: float = float("nan")
    problem: str = ""
    first: Callable[[Any], tuple[dict, str]] | None = None
    after: Callable[[Callable[[], Any]], dict] | None = None
    skip: str = ""
    provenance: dict = field(default_factory=dict)




@dataclass
class CellResult:
    status: str
    error: str = ""
    figures: dict = field(default_factory=dict)
    samples: list[float] | None = None
    provenance: dict = field(default_factory=dict)


class CellRun:
    """One cell of one framework, measured step by step (see the module doc).
    ``baseline_rss``: the process's RSS before its model was loaded (the CPU
    memory figure is the peak over it)."""

    def __init__(self, backend, framework: str, device: str, spec: RunSpec, plan: CellPlan,
                 config: TimingConfig, baseline_rss: int = 0):
        self.backend, self.framework, self.device = backend, framework, device
        self.spec, self.plan, self.config = spec, plan, config
        self.baseline_rss = baseline_rss
        self.figures = dict(plan.known)
        self.sampler: Sampler | None = None
        self.problem = plan.problem
        self.by_rule = True  # sampled until the stopping rule stopped (else: on request)
        self.notes: dict[str, str] = {}  # provenance the steps add (energy_note)

    def prepare(self):
        """First call, warm-up, block size (returns the Timing so far)."""
        fn = self.plan.call()
        checked: dict = {}

        def on_first(out):
            if self.plan.first is not None:
                figures, problem, warm_ns = self.plan.first(out)
                checked.update(figures, problem=problem)
                return warm_ns
        self.sampler = prepare(fn, self.backend.sync, self.config, on_first)
        problem = checked.pop("problem", "")
        self.figures.update(checked)
        self.problem = "; ".join(p for p in (self.problem, problem) if p)
        return self.sampler.timing

    def sample(self, blocks: int | None = None, restart: bool = False) -> list[float]:
        """``blocks`` more sample blocks, or (None) until the stopping rule
        stops; ``restart``: the samples taken so far are dropped first."""
        if restart:
            self.sampler.timing.samples_s.clear()
        if blocks is None:
            before = len(self.sampler.timing.samples_s)
            self.sampler.sample_until_stop()
            return self.sampler.timing.samples_s[before:]
        self.by_rule = False
        return self.sampler.take(blocks)

    def memory(self) -> None:
        """Memory of one call, in a pass of its own after timing (``serve``
        asks for it once per cell): on a GPU bytes in use at the call's
        highest point by the framework's allocator (``backend.gpu_memory``),
        then the energy per call over a window of calls of its own
        (:mod:`fwcompare.core.energy`); on the CPU peak RSS over the baseline; XLA's
        plan of the call beside it where there is one (``xla_plan_bytes``)."""
        from ..core.memory import PeakRSS

        fn = self.sampler.fn
        release_freed_heap()
        if self.device == "gpu":
            from ..core import energy as nvml_energy

            self.figures.update(self.backend.gpu_memory(lambda: self.backend.sync(fn())))
            got = nvml_energy.per_call(fn, self.backend.sync)
            self.notes["energy_note"] = got.pop("energy_note", "")
            self.figures.update(got)
        else:
            with PeakRSS() as peak:
                self.backend.sync(fn())
            self.figures["peak_mem_bytes"] = peak.peak_bytes - self.baseline_rss
            self.figures["mem_method"] = peak.method + "_over_pre_model_baseline"
            self.figures["xla_plan_bytes"] = self.backend.memory_plan_bytes()

    def finish(self) -> CellResult:
        """The derived figures, the ``after`` figures and the row's status."""
        timing = self.sampler.timing
        if not self.by_rule:  # blocks taken on request: judged on all of them
            from ..core.stats import rel_ci_halfwidth

            timing.rel_ci = rel_ci_halfwidth(timing.samples_s, self.config.confidence)
            timing.converged = bool(timing.rel_ci <= self.config.target_rel_ci)
        samples = list(timing.samples_s)
        figures = dict(self.figures, **derived_figures(
            self.spec.batch_size, self.spec.seq_len, samples, self.config.confidence,
            self.plan.flops, traffic=self.plan.traffic,
            tokens=self.spec.tokens_per_call))
        figures.update(calls_per_sample=timing.calls_per_sample, rel_ci=timing.rel_ci,
                       first_call_s=timing.first_call_s, converged=timing.converged)
        if self.plan.after is not None:
            figures.update(self.plan.after(self.sampler.fn))
        notes = [self.problem] if self.problem else []
        if not timing.converged:
            notes.append(f"did not converge: CI half-width {timing.rel_ci:.1%} of the "
                         f"median after {self.config.max_time_s:g} s")
        return CellResult("not_equivalent" if self.problem else "ok", "; ".join(notes),
                          figures, samples, {**self.plan.provenance, **self.notes})


def measure_cell(backend, framework: str, device: str, spec: RunSpec, plan: CellPlan,
                 config: TimingConfig, baseline_rss: int = 0) -> CellResult:
    """Every step of one cell in order; a failure becomes the cell's status."""
    if plan.skip:
        return CellResult("unsupported", plan.skip, dict(plan.known), None, plan.provenance)
    run = CellRun(backend, framework, device, spec, plan, config, baseline_rss)
    try:
        inject_fault(spec.label)
        run.prepare()
        run.sample()
        run.memory()
        return run.finish()
    except Exception as exc:
        gc.collect()
        return failed(backend, exc, plan)


def failed(backend, exc: BaseException, plan: CellPlan | None = None) -> CellResult:
    """The result of a cell that raised: its status, message and the figures known."""
    figures = dict(plan.known if plan else {},
                   **(exc.figures if isinstance(exc, CellFailure) else {}))
    return CellResult(failure_status(backend, exc), describe(exc), figures, None,
                      plan.provenance if plan else {})


def memory_pass_due(job: Job, store, cell_id: str, round: int) -> bool:
    """Whether the cell takes its memory pass in this round: in every round
    for a memory claim's cells (``Job.memory_rounds``: their figure is per
    round, judging.from_rounds), else in its first round that measured (a
    later round's pass changes no figure the report reads but the largest
    of the rounds' peaks; its cost: measurements.md, "comments quoted")."""
    return cell_id in job.memory_rounds or not _memory_stored(store, cell_id, round)


def _memory_stored(store, cell_id: str, before: int) -> bool:
    """Whether a round of the cell before round ``before`` stored its peak
    memory (a round 0 that failed did not: the next round measures it)."""
    return store.stored_before(cell_id, before,
                               lambda row: (row.get("peak_mem_bytes") or 0) > 0)


def serve(study, job: Job) -> None:
    """A worker's main loop: answer the parent's requests (see messages) for
    the cells of ``job``, one prepared cell or several, in any order."""
    from ..frameworks import backend_options

    backend = study.backend(job.framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    ctx = WorkerContext(job, backend)
    refs = {c.key: c for c in job.cells}
    runs: dict[str, CellRun] = {}
    plans: dict[str, CellPlan] = {}  # built, not yet prepared
    emit(messages.READY)
    for req in messages.requests():
        ref = refs[req["cell"]]
        spec, op = ref.spec, req["op"]
        ids = dict(cell=spec.cell_id, round=ref.round)
        plan = plans.pop(ref.key, None) if op == messages.PREPARE else None
        try:
            if op in (messages.BUILD, messages.PREPARE) and plan is None:
                try:
                    plan = study.plan(ctx, spec)  # builds its variant (model, gate) once
                finally:  # the cell starts once its variant is ready (or failed)
                    emit(messages.START, label=spec.label, **ids)
                if plan.skip:
                    ctx.finish(ref, CellResult("unsupported", plan.skip, dict(plan.known), None,
                                               plan.provenance))
                    continue
                if op == messages.BUILD:
                    plans[ref.key] = plan
                    emit(messages.BUILT, **ids)
                    continue
            if op == messages.PREPARE:
                inject_fault(spec.label)
                runs[ref.key] = CellRun(backend, job.framework, job.device, spec, plan,
                                        ctx.config, ctx.baseline_rss)
                timing = runs[ref.key].prepare()
                emit(messages.PREPARED, first_call_s=timing.first_call_s,
                     checked_s=timing.checked_s, made_s=timing.made_s,
                     calls_per_sample=timing.calls_per_sample, **ids)
            elif op == messages.SAMPLE:
                new = runs[ref.key].sample(None if req.get("until_stop") else req["blocks"],
                                           restart=bool(req.get("restart")))
                emit(messages.SAMPLED, seconds=new, **ids)
            elif op == messages.MEMORY:
                if memory_pass_due(job, ctx.store, spec.cell_id, ref.round):
                    runs[ref.key].memory()
                emit(messages.MEASURED, **ids)
            elif op == messages.FINISH:
                result = runs[ref.key].finish()  # a failure here keeps the plan's figures
                result.figures.update(req.get("host") or {})  # what the parent saw: machine_load.py
                del runs[ref.key]
                ctx.finish(ref, result)
        except Exception as exc:
            lost = runs.pop(ref.key, None)
            ctx.finish(ref, failed(backend, exc, lost.plan if lost is not None else plan))
            del lost
            gc.collect()


class WorkerContext:
    """What a worker process holds for a job: the backend, the gate, the
    store, the provenance of its rows, and the one model variant it has loaded
    (a study builds variants through :meth:`variant`)."""

    def __init__(self, job: Job, backend):
        from ..core.memory import current_rss_bytes
        from ..results.store import ResultStore

        self.job, self.backend = job, backend
        self.framework, self.device, self.head = job.framework, job.device, job.head
        self.params = job.params
        self.config = job.timing
        self.store = ResultStore(job.store_dir, run_id=job.run_id)
        self.provenance = dict(job.provenance)
        self.baseline_rss = current_rss_bytes()  # imports done, no model yet
        self._variant: tuple[Any, Any] | None = None
        self._gate = None

    @property
    def gate(self):
        """The prepare job's gate file (loaded when a study first asks for it)."""
        if self._gate is None:
            from .gate import Gate

            self._gate = Gate(self.job.gate_path)
        return self._gate

    @property
    def info(self) -> dict:
        """Facts about the model the prepare job wrote into the gate file."""
        return self.gate.info

    def load(self, dtype: str = "float32"):
        """The model with the shared weights, set up for ``dtype``; its load time.
        Peak memory counts from here: the baseline is the process's RSS before
        this model, so a previous variant's leftovers are not charged to it."""
        from ..core.memory import current_rss_bytes

        release_freed_heap()
        self.baseline_rss = current_rss_bytes()
        t0 = time.perf_counter()
        model = self.backend.load(self.info["weights_dir"], self.device, self.head, dtype)
        load_s = time.perf_counter() - t0
        release_freed_heap()
        self.provenance.update(self.backend.runtime_info(self.device),
                               precision_setup=self.backend.precision_setup(dtype, self.device))
        return model, load_s

    def variant(self, key, build: Callable[[], Any]):
        """The variant (a loaded model, its gated callables...) named ``key``:
        built once, or its failure raised again for every cell that needs it.
        One variant at a time: building another frees the previous one."""
        if self._variant is not None and self._variant[0] == key:
            value = self._variant[1]
        else:
            self._variant = None
            release_freed_heap()
            try:
                value = build()
            except Exception as exc:
                value = exc
            self._variant = (key, value)
        if isinstance(value, Exception):
            raise value
        return value

    def skip_reason(self, spec: RunSpec) -> str:
        maxpos = self.info["max_positions"]
        if maxpos and spec.seq_len > maxpos:
            return f"seq_len {spec.seq_len} exceeds the model's {maxpos} positions"
        return ""

    def token_ids(self, spec: RunSpec):
        from ..core.models import token_ids

        return token_ids(self.job.seed, spec.batch_size, spec.seq_len, self.info["vocab_size"])

    def finish(self, ref: CellRef, result: CellResult) -> None:
        """Append a cell's row (and raw samples) to the store, then tell the parent."""
        write_row(self.store, self.job, {**self.provenance, **result.provenance}, ref, result)


def write_row(store, job: Job, provenance: dict, ref: CellRef, result: CellResult) -> None:
    """A cell's row (and raw samples) appended to the store; ``done`` sent."""
    from ..results.store import make_row

    figures = result.figures
    row = make_row(ref.spec, status=result.status, error=result.error, figures=figures,
                   provenance=provenance, run_id=job.run_id, profile=job.profile,
                   round=ref.round)
    store.append(row, result.samples)
    measured = result.status in MEASURED and figures.get("median_s") is not None
    emit(DONE, cell=ref.spec.cell_id, round=ref.round, status=result.status,
         median_s=figures.get("median_s") if measured else None,
         ci=[figures.get("ci_low_s"), figures.get("ci_high_s")] if measured else None,
         error=result.error[:200])
