"""Memory: what gradient checkpointing and gradient accumulation buy in peak
memory and cost in step time, against the same framework's plain training
step, and the largest batch each framework fits in a memory budget.

Two tasks:

- ``train``: each technique (a ``mode`` of this study: ``plain``,
  ``checkpointing``, ``accumulate-2``, ``accumulate-4``) is the training
  study's step (same weights, batch, AdamW; ``train_modes`` says how each
  framework runs it) made another way. Its losses must follow PyTorch's
  plain step (checkpointing and accumulation compute the same function); its
  peak memory is split into fp32 parameters, gradients and AdamW state
  (analytic) and the rest (activations, workspace, runtime); its step time is
  interleaved with the plain step's, so the trade (memory saved per unit of
  time lost) has an interval.
- ``largest_batch``: per framework and technique (or ``forward``: a forward
  pass without gradients), a search for the largest batch whose try fits the
  budget (``fit_budget_gib``; on a GPU, the device). Every try is a fresh
  process (:func:`run_try`) that loads the model, makes the step and runs it
  ``1 + fit_steps`` times; on a CPU a thread stops it as soon as its resident
  memory over its level before the model passes the budget (an ``oom`` row,
  never the kernel's OOM killer), and a try whose whole peak (loading and
  compiling included) is over the budget is ``oom`` too. The search
  (:func:`next_batch`) brackets the limit from a line through its first two
  tries, then bisects; the search's own row carries the largest batch that
  fit, its peak, and the smallest batch that did not.
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
import time

import numpy as np
import pandas as pd

from .. import env, models, protocol
from ..cell import CellResult, describe, failure_status
from ..claims import Measurement, Metric, cell_label, check_cells, memory_ratio, timed_from
from ..job import CellRef
from ..params import TIMING, Param, check_models, grid_params, modes_in, positive
from ..spec import FRAMEWORKS, TRAIN_MODES, RunSpec
from ..stats import geomean, geomean_ratio_ci, ratio_ci
from ..tables import samples_by_cell
from ..workloads import AGREEMENT, OPTIMIZER, plan_training, train_settings
from . import register
from .base import Study, grid_cells, per_mode

# Technique -> (micro-batches per optimizer step, gradient checkpointing).
TECHNIQUES = {"plain": (1, False), "checkpointing": (1, True),
              "accumulate-2": (2, False), "accumulate-4": (4, False)}
FORWARD = "forward"  # a search's forward pass (inference, no gradients)
PLAIN = "plain"
SEARCH, TRY = "largest_batch", "fit"
GIB = 2 ** 30
MIB = 2 ** 20
# The analytic parts of a training step's memory (fp32 weights, gradients and
# AdamW's two moments: workloads.trained_variant); the rest is activations,
# workspace and runtime.
PARTS = ("param_bytes", "grad_bytes", "optimizer_state_bytes")

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


def micro_batches(mode: str) -> int:
    """Micro-batches of a technique (a batch must split into them); 1 for forward."""
    return TECHNIQUES.get(mode, (1, False))[0]


def _techniques_in(allowed):
    table = {fw: tuple(allowed) for fw in FRAMEWORKS}
    return modes_in(table)


def _one_each(v):
    many = [fw for fw, modes in v.items() if len(modes) != 1]
    return (f"give one training mode per framework (the step each technique changes); "
            f"{', '.join(many)} has {len(v[many[0]])}") if many else None


class Memory(Study):
    name = "memory"
    title = "Memory: checkpointing, accumulation and the largest batch that fits"
    tasks = ("train", SEARCH)
    one_round_tasks = (SEARCH,)  # a batch size: a fresh process would search again
    modes = {fw: (*TECHNIQUES, FORWARD) for fw in FRAMEWORKS}
    first_steps_phase = "agreement steps (losses against PyTorch's plain step)"
    # A try is one measurement from its start (its peak spans loading and
    # compiling too): its whole process is the figure.
    autonomous_phase = "largest-batch tries (a fresh process each: its peak)"
    figure_phases = (autonomous_phase,)

    def schema(self):
        techniques = {fw: list(TECHNIQUES) for fw in FRAMEWORKS}
        return {
            **grid_params(["all-minilm-l6-v2"], techniques, {fw: tuple(TECHNIQUES)
                                                             for fw in FRAMEWORKS},
                          [8], [128], 1800.0),
            "train_modes": Param("dict[str, list[str]]",
                                 {"torch": ["eager"], "tensorflow": ["graph"], "jax": ["jit"]},
                                 "how each framework runs the step every technique changes (one mode each)",
                                 lambda v: modes_in(TRAIN_MODES)(v) or _one_each(v)),
            **OPTIMIZER,
            **AGREEMENT,
            "fit_models": Param("list[str]", ["all-minilm-l6-v2"],
                                "models whose largest batch is searched; [] for none",
                                lambda v: check_models(v) if v else None),
            "fit_modes": Param("dict[str, list[str]]",
                               {fw: [FORWARD, PLAIN] for fw in FRAMEWORKS},
                               "per framework, what the search fits: forward (inference) or a training technique",
                               _techniques_in((*TECHNIQUES, FORWARD))),
            "fit_seq_len": Param("int", 128, "sequence length of the largest-batch search", positive),
            "fit_budget_gib": Param("float", 2.0, "memory a try may use, in GiB: on a CPU its resident memory over the process's before the model was loaded (below the machine's memory); on a GPU 0, the device's memory", lambda v: None if v >= 0 else f"must be >= 0, got {v!r}"),
            "fit_max_batch": Param("int", 256, "the largest batch a search tries (a search whose every try fits says so)", positive),
            "fit_steps": Param("int", 2, "calls of a try after its first (the first compiles)", positive),
            "fit_precision": Param("float", 0.0, "how close a search brackets the limit: it stops once the smallest failing batch is at most this fraction above the largest fitting one (0: exact, to the step)", lambda v: None if 0 <= v < 1 else f"must be in [0, 1), got {v!r}"),
            **TIMING,
        }

    def check(self, params):
        problems = []
        for key, sizes in (("modes", params["batch_sizes"]),
                           ("fit_modes", [params["fit_max_batch"]])):
            for fw, modes in params[key].items():
                for m in modes:
                    k = micro_batches(m)
                    bad = [b for b in sizes if b < k or (key == "modes" and b % k)]
                    if bad:
                        what = "batch size(s)" if key == "modes" else "fit_max_batch"
                        problems.append(f"key {key!r}: {fw} {m} splits a batch into {k} "
                                        f"micro-batches; {what} {', '.join(map(str, bad))} "
                                        f"do not split")
        budget = params["fit_budget_gib"]
        if params["device"] == "gpu" and budget:
            problems.append("key 'fit_budget_gib': on a GPU the budget is the device's "
                            "memory: give 0")
        elif params["device"] == "cpu" and params["fit_models"]:
            import psutil

            total = psutil.virtual_memory().total / GIB
            if not 0 < budget < total:
                problems.append(f"key 'fit_budget_gib': on a CPU give a budget above 0 and "
                                f"below this machine's {total:.1f} GiB (a try over it is "
                                f"stopped; the kernel's OOM killer would take the machine)")
        return problems

    # -- cells and processes (parent side) ---------------------------------------------
    def cells(self, params):
        train = grid_cells(params, self.name, "train")
        threads = params["threads"] or env.default_threads()
        search = [RunSpec(study=self.name, model=model, framework=fw, mode=mode,
                          device=params["device"], dtype=params["dtype"],
                          batch_size=params["fit_max_batch"], seq_len=params["fit_seq_len"],
                          threads=threads, task=SEARCH)
                  for model in params["fit_models"]
                  for fw in params["frameworks"]
                  for mode in params["fit_modes"][fw]]
        return train + search

    def head(self, task, model):
        return models.train_head(model)  # a search's forward runs the training model

    def gate_shape(self, params, task):
        if task == SEARCH:
            return (1, params["fit_seq_len"])
        return super().gate_shape(params, task)

    def groups(self, task, cells):
        if task == SEARCH:  # one search at a time, each try a process of its own
            return [[c] for c in sorted(cells, key=lambda c: c.spec.mode)]
        return per_mode(cells)  # one technique per process

    def schedule(self, params, task):
        return "sequential" if task == SEARCH else super().schedule(params, task)

    def spawn(self, runner, job, name):
        w = runner.spawn_worker(job, name)
        if job.task == SEARCH:  # a try runs on its own and says when it is done
            w.autonomous = True
            if job.device == "cpu" and job.params["fit_budget_gib"]:
                OutsideGuard(w, job.params["fit_budget_gib"] * GIB)
        return w

    def run_group(self, runner, model, group):
        if runner.task == SEARCH:
            search(runner, model, group[0])
        else:
            runner.run_group(model, group)

    def train_settings(self, params):
        return train_settings(params)  # PyTorch's plain step is the reference

    def failure_figures(self, params, ref):
        """A try's budget, on the row of a try stopped from outside
        (``OutsideGuard``) as on the rows the try writes itself."""
        if ref.spec.task != TRY:
            return {}
        return {"budget_bytes": params["fit_budget_gib"] * GIB or math.nan}

    # -- worker side -------------------------------------------------------------------
    def settings(self, params, framework: str, mode: str):
        acc, ckpt = TECHNIQUES[mode]
        return dataclasses.replace(self.train_settings(params), accumulation_steps=acc,
                                   checkpointing=ckpt,
                                   exec_mode=params["train_modes"][framework][0])

    def plan(self, ctx, spec):
        return plan_training(ctx, spec, self.settings(ctx.params, ctx.framework, spec.mode))

    def work(self, job):
        """Every process of this study returns large blocks to the OS when it
        frees them (``memory.fix_mmap_threshold``), from its start: its peak
        RSS then follows the bytes in use, which is what a technique changes.
        Set only after timing, the heap kept what the timed steps had freed
        (tiny-bert-deep 16 x 256, PyTorch: checkpointing 204-210 MB against
        124 MB set from the start). Its step times include the page faults of
        those fresh mappings: compare them within this study."""
        from ..memory import fix_mmap_threshold

        fix_mmap_threshold()
        if job.task == SEARCH:
            run_try(self, job)
        else:
            super().work(job)


STUDY = register(Memory())


# -- one try (worker side) ------------------------------------------------------------
class BudgetGuard:
    """A thread that watches this process's resident memory over
    ``ctx.baseline_rss`` (the level before the model: ``WorkerContext.load``
    sets it) every millisecond and, past ``budget`` bytes, writes the cell's
    ``oom`` row and leaves the process at once (never waiting for the
    kernel's OOM killer, which could take the machine with it)."""

    def __init__(self, budget: float, ctx, ref: CellRef, lock: threading.Lock):
        from ..memory import current_rss_bytes

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


class OutsideGuard:
    """The parent's backstop for a try's own :class:`BudgetGuard`. That guard
    is a thread of the try, so it runs only when the try lets go of Python's
    lock, and a library call can allocate for seconds without doing so:
    GPT-2 XL's JAX tries (the PyTorch weights read and converted) went from
    their level to 23 GB unseen, and the kernel's OOM killer ended them. From
    outside the process, every 2 ms: the try's resident memory over its level
    when it started, past the budget and a margin (so the try's own guard, if
    it can run, speaks first with the exact figure), kills the try
    (SIGKILL); the runner writes its ``oom`` row with the worker's
    ``stop_note``."""

    POLL_S = 0.002

    def __init__(self, worker, budget: float):
        self.worker, self.budget = worker, budget
        self.margin = max(128 * MIB, 0.1 * budget)
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.worker.proc.pid)
            level = proc.memory_info().rss
            while self.worker.proc.poll() is None:
                over = proc.memory_info().rss - level
                if over > self.budget + self.margin:
                    self.worker.stop_note = (
                        f"over the budget: resident memory {over / GIB:.3f} GiB above the "
                        f"try's at its start, budget {self.budget / GIB:g} GiB; the try was "
                        f"stopped from outside (SIGKILL: its own guard could not run)")
                    proc.kill()
                    return
                time.sleep(self.POLL_S)
        except psutil.NoSuchProcess:
            return


def fit_call(ctx, spec: RunSpec, model, settings):
    """The callable a try runs: the technique's training step or a forward, on
    this batch (inputs made here, outside the calls)."""
    from ..gate import token_ids, train_labels

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
    from ..cell import release_freed_heap
    from ..memory import PeakRSS

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
    from ..cell import WorkerContext
    from ..frameworks import backend_options

    backend = study.backend(job.framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    ctx = WorkerContext(job, backend)
    ref = job.cells[0]
    protocol.emit(protocol.START, label=ref.spec.label, cell=ref.spec.cell_id, round=ref.round)
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


# -- the search (parent side) ---------------------------------------------------------
GROWTH = 8  # how far a search reaches past its largest fitting try before one fails


def next_batch(tried: dict[int, tuple[bool, float]], step: int, cap: int,
               budget: float | None = None, precision: float = 0.0) -> int | None:
    """The next batch to try, or None when the limit is found: the smallest
    failing batch is the next step after the largest fitting one, or at most
    ``precision`` (a fraction) above it. ``tried``: batch -> (fits, peak
    bytes); batches are multiples of ``step`` up to ``cap``. The first
    tries are ``step`` and ``4 * step``; until a try fails, each next one is
    at most ``GROWTH`` times the largest that fit; then a line through two
    fitting tries (``_predict``) predicts the limit from ``budget`` (bytes;
    None: bisection only), and the next try is that batch but at least the
    bracket's goal (``up``: a step, or ``precision`` of the largest fitting
    batch) past the largest fitting one; a prediction at or below it asks
    for the batch ``up`` past it (once in a row), one past a known failure
    bisects the bracket instead."""
    ok = sorted(b for b, (fits, _) in tried.items() if fits)
    bad = sorted(b for b, (fits, _) in tried.items() if not fits)
    lo = ok[-1] if ok else 0
    hi = bad[0] if bad else cap + step
    up = max(step, int(precision * lo) // step * step)  # the bracket's goal
    if hi - lo <= up or lo >= cap:
        return None
    if not tried:
        return step
    if len(ok) == 1 and len(tried) == 1:  # a base for the line, wider than 1 to 2
        return min(4 * step, cap)
    guess = _predict(tried, ok, budget)
    if guess is not None:
        guess = guess // step * step
        if not bad and guess > GROWTH * lo:
            # No failure yet and a line far out: at small batches fixed costs
            # (weights, optimizer state, compiled programs) flatten the line,
            # so grow by at most GROWTH until a try fails.
            return min(GROWTH * lo // step * step, cap)
        if lo < guess < hi:  # at least ``up`` past the largest fitting try
            return max(guess, lo + up) if lo + up < hi else guess
        # The line puts the limit here: the next batch decides, unless the
        # last two tries already walked up a step at a time (peaks too noisy
        # for a line near the budget: bisect instead).
        order = list(tried)
        walked = (len(order) >= 4 and order[-2:] == [lo - step, lo]
                  and tried[lo - step][0])
        if guess <= lo and not walked:
            return min(lo + up, cap)
    if not bad:  # no line (no budget, or a flat one): grow
        return min(GROWTH * lo // step * step, cap)
    mid = (lo + hi) // 2 // step * step  # the line overshoots a failure, or a walk
    return mid if mid > lo else lo + step


def _predict(tried, ok, budget) -> int | None:
    """The largest batch a line through the largest fitting try and the
    largest one at most 3/4 of it keeps under ``budget`` (``tried[b][1]`` are
    their peaks): near the limit the line follows the local slope (a base
    through batch 1 carries its fixed costs and creeps up), yet its two points
    are far enough apart for the allocator's noise not to tilt it. Where that
    slope is not positive (small batches whose peaks the allocator's noise
    hides: TensorFlow's MiniLM tries at 4 and 8 peaked at 692 and 689 MB on
    2026-11-25, and the search then grew 8-fold and came back down in four
    out-of-memory tries), the line through the smallest fitting try instead:
    its slope spans the whole range tried."""
    if len(ok) < 2 or not budget:
        return None
    base = [b for b in ok[:-1] if b <= 0.75 * ok[-1]] or ok[:1]
    b2, p2 = ok[-1], tried[ok[-1]][1]
    for b1 in dict.fromkeys((base[-1], ok[0])):  # the local line, then the whole range
        slope = (p2 - tried[b1][1]) / (b2 - b1)
        if math.isfinite(slope) and slope > 0:
            return int(b2 + (budget - p2) // slope)
    return None


def search(runner, model: str, ref: CellRef) -> None:
    """One largest-batch search: tries (fresh processes, rows of their own,
    task ``fit``) until the limit is bracketed, then the search's row. A try
    a resumed run already made is read back, not made again."""
    spec = ref.spec
    step, cap = micro_batches(spec.mode), spec.batch_size
    budget = runner.params["fit_budget_gib"] * GIB or None
    precision = runner.params["fit_precision"]
    tried: dict[int, tuple[bool, float]] = {}
    rows: dict[int, dict] = {}
    while (b := next_batch(tried, step, cap, budget, precision)) is not None:
        t = CellRef(dataclasses.replace(spec, task=TRY, batch_size=b), ref.round)
        row = runner.store.row(t.spec.cell_id, t.round)
        if row is None or row["status"] not in ("ok", "oom"):
            runner.total += 1  # each try is a cell of its own in the progress
            runner.run_group(model, [t])
            row = runner.store.row(t.spec.cell_id, t.round) or {"status": "error",
                                                               "error": "no row"}
        if row["status"] not in ("ok", "oom"):  # a try that failed otherwise ends the search
            status = "unsupported" if row["status"] == "unsupported" else "error"
            _finish(runner, ref, status, f"the try at batch {b}: {row['status']}: "
                                         f"{row['error']}", {})
            return
        rows[b] = row
        tried[b] = (row["status"] == "ok", float(row.get("peak_mem_bytes", math.nan)))
    ok = sorted(b for b, (fits, _) in tried.items() if fits)
    bad = sorted(b for b, (fits, _) in tried.items() if not fits)
    largest = ok[-1] if ok else 0
    figures = dict(largest_batch=largest, oom_batch=bad[0] if bad else math.nan,
                   fit_tries=len(tried), budget_bytes=budget or math.nan)
    if ok:
        best = rows[largest]
        figures.update({k: best.get(k) for k in ("peak_mem_bytes", "median_s", "first_call_s",
                                                 "load_s", "flops_per_call",
                                                 "achieved_flops_per_s", "bytes_per_call")})
    note = (f"largest batch {largest}" + (f", batch {bad[0]} out of memory" if bad else
                                          f": every try fit, up to fit_max_batch {cap}")
            if ok else f"even batch {step} does not fit")
    _finish(runner, ref, "ok", note, figures)  # the note stays on the row


def _finish(runner, ref: CellRef, status: str, note: str, figures: dict) -> None:
    """The search's row; its line in the progress."""
    runner.record(ref, status, note, figures, dict(runner.provenance, schedule="sequential"))


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
    """Per search: the largest batch that fit the budget, its peak (MiB), the
    smallest batch that did not, and the tries it took."""
    s = results[results["task"] == SEARCH] if len(results) else results
    if s.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "model": s["model"], "framework": s["framework"], "what": s["mode"],
        "seq_len": s["seq_len"], "budget_gib": s["budget_bytes"] / GIB,
        "largest_batch": s["largest_batch"], "peak_mib": s["peak_mem_bytes"] / MIB,
        "oom_batch": s["oom_batch"], "tries": s["fit_tries"], "status": s["status"],
        "note": s["error"]})
    return out.sort_values(["model", "what", "framework"], ignore_index=True)


def tries_table(results: pd.DataFrame) -> pd.DataFrame:
    """Every try of every search: batch, outcome, peak (MiB) and its message."""
    s = results[results["task"] == TRY] if len(results) else results
    if s.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "model": s["model"], "framework": s["framework"], "what": s["mode"],
        "batch_size": s["batch_size"], "status": s["status"],
        "peak_mib": s["peak_mem_bytes"] / MIB, "first_call_s": s["first_call_s"],
        "error": s["error"]}).sort_values(["model", "what", "framework", "batch_size"],
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
    hide another's rise). One measurement per cell: no CI."""

    tech = claim.cells["technique"]
    pairs = [(r, b) for r, b in _technique_pairs(data, claim, devices)
             if r["peak_mem_bytes"] > 0 and b["peak_mem_bytes"] > 0]
    m = Measurement(unit=f"{tech} peak memory / plain peak memory (same framework), "
                         f"the highest over frameworks")
    if not pairs:
        m.note = _none(claim, data, devices)
        return m
    ratios = [r["peak_mem_bytes"] / b["peak_mem_bytes"] for r, b in pairs]
    m.value = max(ratios)
    m.cells = [f"{r['framework']} {cell_label(r)}" for r, _ in pairs]
    m.points = list(zip(m.cells, ratios))
    m.devices = {r["device"] for r, _ in pairs}
    m.note = "one peak-memory measurement per cell: no CI; " + ", ".join(
        f"{c} {v:.2f}" for c, v in m.points)
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
                                                data.by_cell[b["cell_id"]]) for r, b in pairs])
    timed_from(m, data, [x["cell_id"] for pair in pairs for x in pair])
    m.cells = [f"{r['framework']} {cell_label(r)}" for r, _ in pairs]
    m.points = [(c, r["median_s"] / b["median_s"]) for c, (r, b) in zip(m.cells, pairs)]
    m.devices = {r["device"] for r, _ in pairs}
    return m


def largest_batch_ratio(data, claim, devices):
    """Largest batch that fit for a over that for b (framework/what, e.g.
    torch/plain), geometric mean over the searches both made (same model,
    sequence and budget); the interval spans where each limit lies between
    its largest fitting batch and its smallest failing one."""

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
    s = s.assign(variant=s["framework"] + "/" + s["mode"])
    keys = ["model", "seq_len", "budget_bytes", "device"]
    sa, sb = s[s["variant"] == a].set_index(keys), s[s["variant"] == b].set_index(keys)
    both = [k for k in sa.index if k in sb.index]
    if not both:
        m.note = f"no search where both {a} and {b} ran"
        return m
    vals, lows, highs, notes = [], [], [], []
    for k in both:
        ra, rb = sa.loc[k], sb.loc[k]
        la, lb = ra["largest_batch"], rb["largest_batch"]
        if not (la > 0 and lb > 0) or not (ra["oom_batch"] > 0 and rb["oom_batch"] > 0):
            m.forced = "not measured here"
            notes.append(f"{k[0]}: a search found no limit (largest {la:g} / {lb:g}; raise "
                         f"fit_max_batch or lower fit_budget_gib)")
            continue
        step_a, step_b = micro_batches(a.split("/")[1]), micro_batches(b.split("/")[1])
        top_a, top_b = ra["oom_batch"] - step_a, rb["oom_batch"] - step_b
        vals.append(la / lb)
        lows.append(la / max(top_b, lb))
        highs.append(max(top_a, la) / lb)
        notes.append(f"{k[0]} s={k[1]}: {a} {la:g}, {b} {lb:g}")
        m.cells.append(f"{k[0]} s={k[1]} budget {k[2] / GIB:g} GiB")
        m.points.append((m.cells[-1], la / lb))
        m.devices.add(k[3])
    if vals and not m.forced:
        m.value, m.low, m.high = geomean(vals), geomean(lows), geomean(highs)
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


def _technique_cells(cells: dict) -> list[str]:
    t = cells.get("technique")
    return [] if t in TECHNIQUES and t != PLAIN else [
        f"technique {t!r} is not one of {', '.join(x for x in TECHNIQUES if x != PLAIN)}"]


Memory.metrics = {
    "technique_memory_ratio": Metric(technique_memory_ratio, ("technique",), _technique_cells),
    "technique_time_ratio": Metric(technique_time_ratio, ("technique",), _technique_cells,
                                   timed=True),
    "largest_batch_ratio": Metric(largest_batch_ratio, ("a", "b"), check_cells),
    "memory_ratio_largest_model": Metric(memory_ratio_largest_model, ("a", "b"), check_cells),
}


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def breakdown_figure(table: pd.DataFrame, manifest: dict):
    """Per model and size: a stacked bar per framework and technique, fp32
    parameters, gradients, AdamW state and the rest (activations, workspace,
    runtime) of the measured peak; failed cells are named, not dropped."""
    import matplotlib.pyplot as plt

    from ..plots import footer, no_data

    if table.empty:
        return no_data("no training cells")
    groups = list(table.groupby(["model", "batch_size", "seq_len"], sort=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False,
                             figsize=(max(7.0, 1.0 * table.groupby(["model", "batch_size", "seq_len"]).size().max() + 3), 4.6))
    colors = {"param_mib": "#4c72b0", "grad_mib": "#55a868", "optimizer_state_mib": "#c44e52",
              "rest_mib": "#8c8c8c"}
    names = {"param_mib": "parameters (fp32)", "grad_mib": "gradients (fp32)",
             "optimizer_state_mib": "AdamW moments (fp32)",
             "rest_mib": "the rest: activations, workspace, runtime"}
    for ax, ((model, b, s), g) in zip(axes[0], groups):
        labels = [f"{fw}\n{t}" for fw, t in zip(g["framework"], g["technique"])]
        x = np.arange(len(g))
        bottom = np.zeros(len(g))
        for part, color in colors.items():
            vals = np.where(g["status"] == "ok", g[part].fillna(0).clip(lower=0), 0)
            ax.bar(x, vals, bottom=bottom, color=color, label=names[part], width=0.7)
            bottom += vals
        for xi, (_, r) in zip(x, g.iterrows()):
            if r["status"] != "ok":
                ax.text(xi, 0, r["status"], rotation=90, ha="center", va="bottom", fontsize=8,
                        color="#c44e52")
        ax.set_xticks(x, labels, fontsize=7, rotation=45, ha="right")
        ax.set_ylabel("peak memory (MiB)")
        ax.set_title(f"{model}, batch {b} x {s}", fontsize=10)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.suptitle("Peak memory of one training step, split by what holds it", x=0.02, ha="left")
    footer(fig, manifest, "bars: measured peak; the three lower parts are computed from the "
                          "parameter count; a cell that did not run says why")
    fig.tight_layout(rect=(0, 0.07, 0.78, 0.94))
    return fig


def trade_figure(table: pd.DataFrame, manifest: dict):
    """Each technique's peak memory against its step time (95% CI), per
    framework; arrows from the plain step show what a technique trades."""
    import matplotlib.pyplot as plt

    from ..plots import legend_right, no_data, palette

    t = table[table["status"] == "ok"] if len(table) else table
    if t.empty:
        return no_data("no measured training cells")
    groups = list(t.groupby(["model", "batch_size", "seq_len"], sort=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False, figsize=(6.0 * len(groups) + 2, 4.4))
    colors = palette(t["framework"])
    markers = dict(zip(TECHNIQUES, "osD^"))
    for ax, ((model, b, s), g) in zip(axes[0], groups):
        for fw, h in g.groupby("framework"):
            for _, r in h.iterrows():
                ax.errorbar(r["median_ms"], r["peak_mib"],
                            xerr=[[r["median_ms"] - r["ci_low_ms"]],
                                  [r["ci_high_ms"] - r["median_ms"]]],
                            marker=markers.get(r["technique"], "o"), color=colors[fw], ms=7,
                            ls="none", capsize=3, label=f"{fw} {r['technique']}")
            base = h[h["technique"] == PLAIN]
            if len(base):
                b0 = base.iloc[0]
                for _, r in h[h["technique"] != PLAIN].iterrows():
                    ax.annotate("", (r["median_ms"], r["peak_mib"]),
                                (b0["median_ms"], b0["peak_mib"]),
                                arrowprops=dict(arrowstyle="->", color=colors[fw], alpha=0.5))
        ax.set_xlabel("median step time (ms, 95% CI)")
        ax.set_ylabel("peak memory (MiB)")
        ax.set_title(f"{model}, batch {b} x {s}", fontsize=10)
    return legend_right(fig, axes, "What each technique trades: memory against step time",
                        manifest, "markers: o plain, s checkpointing, D accumulate-2, "
                                  "^ accumulate-4; arrows start at the same framework's plain "
                                  "step", 0.78)


def largest_batch_figure(table: pd.DataFrame, manifest: dict):
    """The largest batch each framework fit per search, with the smallest that
    did not as a hollow bar end; a search that found nothing says so."""
    import matplotlib.pyplot as plt

    from ..plots import legend_right, no_data, palette

    if table.empty:
        return no_data("no largest-batch search ran")
    groups = list(table.groupby(["model", "seq_len", "budget_gib"], sort=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False, figsize=(5.5 * len(groups) + 2, 4.2))
    colors = palette(table["framework"])
    for ax, ((model, s, budget), g) in zip(axes[0], groups):
        whats = list(dict.fromkeys(g["what"]))
        fws = sorted(g["framework"].unique())
        width = 0.8 / max(1, len(fws))
        for i, fw in enumerate(fws):
            h = g[g["framework"] == fw].set_index("what")
            for j, w in enumerate(whats):
                if w not in h.index:
                    continue
                r = h.loc[w]
                x = j + (i - (len(fws) - 1) / 2) * width
                if r["status"] != "ok":
                    ax.text(x, 0, r["status"], rotation=90, ha="center", va="bottom",
                            fontsize=8, color="#c44e52")
                    continue
                ax.bar(x, r["largest_batch"], width=width, color=colors[fw],
                       label=fw if j == 0 else None)
                if r["oom_batch"] == r["oom_batch"]:
                    ax.bar(x, r["oom_batch"] - r["largest_batch"], bottom=r["largest_batch"],
                           width=width, fill=False, edgecolor=colors[fw], hatch="//")
                ax.text(x, r["largest_batch"], f"{r['largest_batch']:g}", ha="center",
                        va="bottom", fontsize=8)
        ax.set_xticks(range(len(whats)), whats)
        ax.set_ylabel("largest batch that fits")
        ax.set_title(f"{model}, sequence {s}, budget {budget:g} GiB", fontsize=10)
    return legend_right(fig, axes, "The largest batch each framework fits in the budget",
                        manifest, "filled: the largest batch that fit; hatched up to the "
                                  "smallest batch that ran out of memory (each try a fresh "
                                  "process)", 0.82)
