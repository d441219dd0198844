"""A rank (the worker side: every process of a launch runs this, under
``Distributed.work``): the agreement steps, then each cell's timed steps,
all-reduce and memory."""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from ...core import models
from ...measure.cell import CellResult, derived_figures, release_freed_heap, write_row
from ...measure.gate import TrainSettings
from ...plan.job import CellRef, Job
from ...core.messages import GATE, SPENT, START, emit
from ...results.store import MEASURED
from ...core.spec import RunSpec


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def shard(rows, rank: int, world: int):
    """This rank's equal share of a global batch (rows split in order)."""
    n = len(rows) // world
    return rows[rank * n:(rank + 1) * n]


def _fault(label: str, rank: int, dp=None) -> None:
    """Fault injection for the robustness tests: FWCOMPARE_FAULT holds
    comma-separated ``kind@rank:label-part`` (kind crash, hang or desync;
    without @rank, every rank). ``@ps-0``, ``@worker-1``: that task of a
    ParameterServerStrategy cluster, which its chief sends SIGSEGV (crash)
    or SIGSTOP (hang): the task runs none of this study's code."""
    import signal

    for fault in filter(None, os.environ.get("FWCOMPARE_FAULT", "").split(",")):
        spec, _, where = fault.partition(":")
        kind, _, who = spec.partition("@")
        if not where or where not in label:
            continue
        if who and not who.isdigit():
            if rank == 0 and dp is not None and dp.serves_tasks:
                dp.signal_task(who, {"crash": signal.SIGSEGV, "hang": signal.SIGSTOP}[kind])
            continue
        if who and int(who) != rank:
            continue
        if kind == "crash":
            os._exit(3)
        if kind == "hang":
            time.sleep(1e6)
        if kind == "desync" and dp is not None:
            dp.perturb(1e-3)


def weight_spread(dp) -> float | None:
    """The largest difference of a weight between ranks (``max_weight_diff``,
    which gathers every weight: about a second a call, measurements.md,
    "comments quoted"), or 0.0 at once where every rank's weights have the
    same CRC-32 (``weights_crc``): the same bytes, but for a 2^-32 chance.
    The digest goes in 16-bit halves, which any all-reduce's float sums
    exactly."""
    crc = dp.weights_crc()
    if crc is not None:
        halves = (crc >> 16, crc & 0xFFFF)
        sums = [dp.allreduce_sum(float(h)) for h in halves]
        mine = all(s == dp.world * h for s, h in zip(sums, halves))
        if dp.allreduce_sum(1.0 if mine else 0.0) == dp.world:
            return 0.0
    return dp.max_weight_diff()


class Rank:
    """One rank of a launch: the agreement steps, then each cell."""

    def __init__(self, job: Job, dp, load_s: float, backend=None, baseline_rss: int = 0):
        from ...measure.gate import Gate
        from ...results.store import ResultStore

        self.job, self.dp, self.load_s = job, dp, load_s
        self.backend, self.baseline_rss = backend, baseline_rss
        self.rank0 = dp.rank == 0
        # The processes that run this loop: every rank, or the chief alone
        # (a parameter-server cluster's, which feeds the whole global batch).
        self.loop_ranks = dp.loop_ranks or dp.world
        self.cfg = job.timing
        self.store = ResultStore(job.store_dir, run_id=job.run_id) if self.rank0 else None
        self.gate = Gate(job.gate_path)
        self.info = self.gate.info
        self.provenance = dict(job.provenance, mode_setup=dp.setup)
        # The cell whose batch is the gate's, the agreement's first step (that
        # cell's first call) and the seconds of its later steps (its warm-up
        # steps): see ``agreement``.
        self.first_call: tuple[str, float, list[float]] | None = None

    def data(self, ids, labels):
        return self.dp.batch(shard(ids, self.dp.rank, self.loop_ranks),
                             shard(labels, self.dp.rank, self.loop_ranks))

    # -- 1. agreement ---------------------------------------------------------
    def agreement(self) -> tuple[dict, str]:
        """Known figures of every cell of this run, and its problems (empty if
        none). The first step is timed as :meth:`time_steps` times a cell's
        first step: it is the first call of the launch's cell whose batch is
        the gate's, if one is (``first_call``), and the steps after it are
        that cell's warm-up steps (as training's agreement steps are)."""
        from ...measure.gate import loss_problems
        from ...results.store import losses_frame

        ref = self.gate.reference
        batch = self.data(self.gate.ids, self.gate.labels)
        loss, first = self.timed_step(batch)
        losses, made = [loss], []
        for _ in range(len(ref) - 1):
            loss, seconds = self.timed_step(batch)
            losses.append(loss)
            made.append(seconds)
        losses = np.array(losses)
        cell = next((r.key for r in self.job.cells
                     if np.array_equal(self.ids(r.spec), self.gate.ids)), None)
        if cell is not None:
            self.first_call = cell, first, made
            self.spent("first calls and compiles", first)
            self.spent("warm-up and block size", sum(made))
        spread = weight_spread(self.dp)
        p, world = self.job.params, self.dp.world
        step0 = abs(losses[0] - ref[0])
        curve = float(np.max(np.abs(losses - ref) / np.abs(ref)))
        problems = loss_problems("float32", losses, ref, p["loss_tol"], p["loss_curve_rtol"],
                                 who="the single-process run", run=f" with {world} worker(s)")
        if spread is not None and not spread <= p["weight_tol"]:
            problems.append(f"weights differ across ranks by {spread:.3g} after "
                            f"{len(ref)} steps (weight_tol {p['weight_tol']:g})")
        if self.rank0:
            fw, mode = self.job.framework, self.job.cells[0].spec.mode
            self.store.append_losses(
                losses_frame(self.job.model, fw, f"{mode} x{world}", losses, ref),
                f"{self.job.model_key}-{fw}-{mode}-x{world}")
            emit(GATE, dtype="float32", errors={f"{mode} x{world}": float(step0)})
        known = dict(loss_step0=float(losses[0]), loss_final=float(losses[-1]),
                     equiv_max_abs_err=float(step0), equiv_rel_err=curve)
        return known, "; ".join(problems)

    def ids(self, spec: RunSpec):
        from ...core.models import token_ids

        return token_ids(self.job.seed, spec.batch_size, spec.seq_len, self.info["vocab_size"])

    # -- 2. cells ---------------------------------------------------------------
    def timed_step(self, batch) -> tuple[float, float]:
        """One step timed as a cell's first call, on rank 0 from a barrier to
        the end of the all-reduce of its loss (the slowest rank done):
        (the loss, mean over ranks; seconds)."""
        dp = self.dp
        dp.allreduce_sum(0.0)
        t0 = time.perf_counter()
        loss = dp.allreduce_sum(dp.step(batch)) / self.loop_ranks
        return loss, time.perf_counter() - t0

    def time_steps(self, batch, first: float | None = None, made: list[float] = ()):
        """(first step seconds, samples, stopping rule, other work) by the
        protocol above; ``first``: the first step already taken on this batch
        (the agreement's), ``made``: the seconds of the steps taken after it
        (they count as warm-up steps: the warm-up makes only what they leave).
        Other work: what the machine did besides the launch while rank 0
        sampled (``host.HostMeter``; the launch's own processes are its
        parent's, the launcher's or the fork server's, children), as the
        interleaved and sequential schedules record it for their cells."""
        from ...core.machine_load import HostMeter, run_cores
        from ...core.timing import StoppingRule

        cfg, dp = self.cfg, self.dp
        if first is None:
            first = self.timed_step(batch)[1]
            self.spent("first calls and compiles", first)
        t0 = time.perf_counter()
        start, n = t0 - sum(made), len(made)
        while True:  # warm-up; rank 0's clock decides for every rank
            done = n >= cfg.warmup_iters and time.perf_counter() - start >= cfg.warmup_s
            if dp.allreduce_sum(1.0 if self.rank0 and done else 0.0) > 0:
                break
            dp.step(batch)
            n += 1
        self.spent("warm-up and block size", time.perf_counter() - t0)
        rule = StoppingRule(cfg)
        samples = []
        # the launch's processes are the run's own, and its cores the ones metered
        # (this rank is pinned to its share of them)
        meter, own = (HostMeter(run_cores(os.getppid())) if self.rank0 else None), [os.getppid()]
        if meter:
            meter.start(own)
        # A sample is one flag all-reduce and one step. The flag that ends the
        # loop is rank 0's verdict on the samples so far: sent after the step it
        # judged, not after one more (a whole step each launch, wasted).
        start = prev = time.perf_counter()
        dp.allreduce_sum(0.0)
        while True:
            dp.step(batch)
            now = time.perf_counter()
            samples.append(now - prev)
            prev = now
            stop = self.rank0 and rule.done(samples, now - start)
            if dp.allreduce_sum(1.0 if stop else 0.0) > 0:
                break
        self.spent("timing samples", time.perf_counter() - start)
        return first, samples, rule, (meter.stop(own) if meter else {})

    def spent(self, phase: str, seconds: float) -> None:
        """Tell the parent where rank 0's time went (its time breakdown)."""
        if self.rank0:
            emit(SPENT, phase=phase, seconds=seconds)

    def cell(self, ref: CellRef, known: dict, problems: str) -> None:
        from ...core.models import train_labels

        spec, dp, p = ref.spec, self.dp, self.job.params
        if self.rank0:
            emit(START, cell=spec.cell_id, round=ref.round, label=spec.label)
        dp.allreduce_sum(0.0)  # every rank is in this cell (a failure from here is its)
        _fault(spec.label, dp.rank, dp)
        per_worker = spec.batch_size // dp.world
        figures = dict(known, per_worker_batch=float(per_worker), load_s=self.load_s)
        maxpos = self.info["max_positions"]
        if maxpos and spec.seq_len > maxpos:
            self.finish(ref, CellResult("unsupported", f"seq_len {spec.seq_len} exceeds the "
                                        f"model's {maxpos} positions", figures))
            return
        ids = self.ids(spec)
        batch = self.data(ids, train_labels(self.job.seed, ids, self.job.head))
        taken = self.first_call if self.first_call and self.first_call[0] == ref.key else None
        first, made = taken[1:] if taken else (None, ())
        first, samples, rule, host = self.time_steps(batch, first, made)
        figures.update(host)
        # The all-reduce timed alone and each rank's memory: once per cell, in
        # its first round that measured (the report reads that round's row:
        # tables.summarize), but every round for a memory claim's cells (its
        # figure is per round); rank 0 knows, and every rank follows it (both
        # are collective).
        again = self.rank0 and (ref.spec.cell_id in self.job.memory_rounds
                                or not self.measured_before(ref))
        once = dp.allreduce_sum(1.0 if again else 0.0) > 0
        comm, per_rank, mem_method = [math.nan], [math.nan] * dp.world, ""
        if once:
            t0 = time.perf_counter()
            comm = dp.allreduce_grads_s(p["allreduce_repeats"])
            self.spent("timing samples", time.perf_counter() - t0)  # the all-reduce's
        spread = weight_spread(dp)
        if once:
            t0 = time.perf_counter()
            per_rank, mem_method = self.memory(batch)
            self.spent("memory passes", time.perf_counter() - t0)
        if not self.rank0:
            return
        flops = 3 * models.forward_flops(self.info, spec.batch_size, spec.seq_len)
        figures.update(derived_figures(spec.batch_size, spec.seq_len, samples,
                                       self.cfg.confidence, flops,
                                       traffic=models.weight_traffic_bytes(self.info, "train")))
        allreduce_s = float(np.median(comm))
        figures.update(calls_per_sample=1, rel_ci=rule.rel_ci, first_call_s=first,
                       converged=rule.converged,
                       weight_max_abs_diff=math.nan if spread is None else spread,
                       allreduce_s=allreduce_s, allreduce_share=allreduce_s / figures["median_s"],
                       rank_mem_bytes=max(per_rank), rank_mem_min_bytes=min(per_rank))
        self.provenance["mem_method"] = mem_method or "none: an earlier round's row has it"
        notes = [problems] if problems else []
        if spread is not None and not spread <= p["weight_tol"]:
            notes.append(f"weights differ across ranks by {spread:.3g} after the cell "
                         f"(weight_tol {p['weight_tol']:g})")
        status = "not_equivalent" if notes else "ok"
        if not rule.converged:
            notes.append(f"did not converge: CI half-width {rule.rel_ci:.1%} of the median "
                         f"after {self.cfg.max_time_s:g} s")
        self.finish(ref, CellResult(status, "; ".join(notes), figures, samples))

    def measured_before(self, ref: CellRef) -> bool:
        """Whether an earlier round of this cell stored a measured row (rank
        0's store): its all-reduce and memory figures are the cell's."""
        return self.store.stored_before(ref.spec.cell_id, ref.round,
                                        lambda row: row["status"] in MEASURED)

    def memory(self, batch) -> tuple[list[float], str]:
        """Each rank's memory over one more training step, in a pass after the
        timing (every rank steps, as in training): on a GPU the framework
        allocator's peak over the step (``backend.gpu_memory``); on the CPU
        the RSS the rank holds after the step (freed heap returned to the OS
        first, ``malloc_trim``) over its RSS before its model was loaded: its
        weights, optimizer state and what the engine keeps between steps
        (DDP's gradient buckets), all of them under DDP, a 1/N share under
        FSDP. Not the CPU peak: under glibc's default heap the peak RSS of a
        step follows what the heap held before, not the bytes in use (a BERT
        of 19M weights, 2 ranks: FSDP's peak 431-438 MiB against DDP's
        426-432 while holding 174-186 against 336), and making it exact
        (``memory.fix_mmap_threshold`` from the rank's start) slowed DDP's
        steps by 19-57% and FSDP's by 54-99% in two such models.
        Returns every rank's figure, in rank order (each sent in a scalar
        all-reduce of its own), and how it was measured. A parameter-server
        cluster's chief measures its parameter servers' and workers' RSS
        instead (``task_memory``): they run no code of the study."""
        from ...core.memory import current_rss_bytes

        dp = self.dp
        if dp.serves_tasks:
            per_task, method = dp.task_memory(lambda: dp.step(batch))
            return per_task, f"{method}, per process"
        if self.job.device == "gpu":
            got = self.backend.gpu_memory(lambda: dp.step(batch))
            mine, method = got["peak_mem_bytes"], got["mem_method"]
            mine = math.nan if mine is None else mine  # none the allocator could give
        else:
            dp.step(batch)
            release_freed_heap()
            mine = current_rss_bytes() - self.baseline_rss
            method = "cpu_rss_held_after_a_step_over_pre_model_baseline"
        per_rank = [dp.allreduce_sum(float(mine) if dp.rank == i else 0.0)
                    for i in range(dp.world)]
        return per_rank, f"{method}, per rank"

    def finish(self, ref: CellRef, result: CellResult) -> None:
        if self.rank0:
            write_row(self.store, self.job, self.provenance, ref, result)


def run_rank(job: Job, settings: TrainSettings):
    """One rank's whole launch; returns the engine (kept alive until the exit)."""
    import psutil

    from ...frameworks import backend_options, get_backend
    from ...measure.gate import Gate
    from ...core.memory import current_rss_bytes

    # When this process started: its start and imports count from there.
    born = time.perf_counter() - (time.time() - psutil.Process().create_time())
    backend = get_backend(job.framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    imports_s = time.perf_counter() - born
    release_freed_heap()
    baseline_rss = current_rss_bytes()
    t0 = time.perf_counter()
    dp = backend.DataParallel(Gate(job.gate_path).info["weights_dir"], job.device, job.head,
                              settings.optimizer, job.cells[0].spec.mode,
                              job.params["group_timeout_s"])  # the model and the process group
    load_s = time.perf_counter() - t0
    release_freed_heap()
    try:
        rank = Rank(job, dp, load_s, backend, baseline_rss)
        if rank.rank0:
            rank.provenance.update(backend.runtime_info(job.device))
        rank.spent("process start and imports", imports_s)
        t0 = time.perf_counter()
        known, problems = rank.agreement()
        # The first step and the later ones of the cell with the gate's batch
        # are charged as its first call and warm-up.
        first = sum([rank.first_call[1], *rank.first_call[2]]) if rank.first_call else 0.0
        rank.spent("model build and gate", load_s + time.perf_counter() - t0 - first)
        for ref in job.cells:
            rank.cell(ref, known, problems)
        _closing_barrier(dp)
    finally:
        dp.close()
    return dp


def _closing_barrier(dp) -> None:
    """Nobody leaves while another rank still needs it. A rank in this barrier
    has finished every cell, so its failure loses nothing: TensorFlow's ring
    pulls each buffer from the peer over gRPC, and a peer that has its sum
    may leave before this rank has pulled its last one ("Socket closed", seen
    in quick reports; rank 0's rows were all written by then)."""
    try:
        dp.allreduce_sum(0.0)
    except Exception as exc:
        print(f"closing barrier: a peer left first ({type(exc).__name__}); "
              "every cell of this rank was done", file=sys.stderr)


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
