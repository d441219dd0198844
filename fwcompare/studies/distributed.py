"""Distributed data-parallel training: DDP, tf.distribute and jax.distributed, one worker to many.

Each (framework, engine, worker count) is one launch of that many ranks with
the environment of the framework's own launcher (:mod:`fwcompare.launch`:
``torchrun``'s variables for PyTorch DistributedDataParallel, ``TF_CONFIG``
for TensorFlow's MultiWorkerMirroredStrategy, the coordinator and process id
for ``jax.distributed``). On one host the ranks are
forked from the run's fork server; across hosts they start as fresh
processes (``torchrun`` for PyTorch). Every rank runs
:meth:`Distributed.work` with its framework's engine
(``frameworks.<fw>.DataParallel``). TensorFlow's ParameterServerStrategy
(mode ps) is the exception: its chief alone runs what follows, feeding the
whole global batch (``loop_ranks`` 1), and its workers and parameter servers
serve it (``frameworks.tensorflow.ParameterServer``):

1. **Agreement**: ``agreement_steps`` training steps on the gate batch, split
   evenly over the ranks. The loss of each step (mean over ranks: the mean
   over the global batch) is compared with the single-process PyTorch run over
   the same global batch (the prepare job's reference), as in the training
   study; then the weights are compared across ranks. The gate batch is one
   global batch for every worker count (``Distributed.gate_shape``), at the
   cells' sequence length; where a cell of the launch has that very batch
   (strong scaling; weak scaling at the largest worker count), the first
   agreement step is that cell's first call, timed as its first step would
   be, so a traced step (tf.function) is traced once, not at the gate's
   shape and again at the cell's.
2. **Each cell** (weak or strong scaling at this worker count): every rank
   trains on its shard of the cell's global batch. A sample is one step
   followed by a scalar all-reduce that acts as a barrier, timed on rank 0
   from the end of the previous barrier to the end of this one: the time
   until the slowest rank has finished the step. Rank 0 applies the shared
   stopping rule (timing.StoppingRule) and sends its decision in the
   barrier's value, so every rank runs the same number of steps. Then the
   gradient all-reduce (FSDP: its all-gathers and reduce-scatter) is timed
   alone, the weights are compared across ranks again, and every rank's
   memory over one more step is measured (``Rank.memory``).

Rank 0 writes the rows and sends the events; a rank that fails exits with an
error, and the launcher ends the others (a collective cannot go on without it).
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import pandas as pd

from .. import env, models
from ..cell import CellResult, derived_figures, release_freed_heap, write_row
from ..claims import Claim, Measurement, Metric, StudyData
from ..gate import TrainSettings
from ..job import CELLS, CellRef, Job
from ..params import (TIMING, Param, all_of, grid_params, modes_in, non_empty, non_negative,
                      one_of, positive, replace_param)
from ..protocol import GATE, SPENT, START, emit
from ..results import MEASURED
from ..spec import RunSpec
from ..stats import ratio_ci
from ..tables import baseline_pairs, both_measured, samples_by_cell, variant
from ..workloads import AGREEMENT, OPTIMIZER, train_settings
from . import register
from .base import Study

# The engine each framework's mode stands for (the first: the plain engine,
# what the scaling claim judges). torch eager: DistributedDataParallel under
# torchrun; ddp-fp16 / ddp-bf16: the same with PyTorch's fp16 / bf16 gradient
# compression hook; fsdp: fully sharded data parallel (FSDP2 fully_shard);
# tensorflow graph: MultiWorkerMirroredStrategy with the step in tf.function;
# ps: ParameterServerStrategy, a chief, the workers and ``ps_servers``
# parameter servers, synchronous steps (frameworks.tensorflow.ParameterServer);
# jax jit: jax.distributed processes, the step jax.jit over a global mesh.
DIST_MODES = {"torch": ("eager", "ddp-fp16", "ddp-bf16", "fsdp"),
              "tensorflow": ("graph", "ps"), "jax": ("jit",)}
SCALINGS = ("weak", "strong")


def _dist_frameworks(v):
    bad = [fw for fw in v if fw not in DIST_MODES]
    if not bad:
        return None
    return f"unknown value {bad[0]!r}; allowed: {', '.join(DIST_MODES)}"


def _dist_modes(v):
    return _dist_frameworks(list(v)) or modes_in(DIST_MODES)(v)


def _one_launch_at_a_time(v):
    return None if v == "sequential" else (
        f"unknown value {v!r}; allowed: sequential (a launch's ranks use every core: two "
        "launches cannot share the machine, so they are never interleaved)")


class Distributed(Study):
    name = "distributed"
    title = "Distributed data-parallel: DDP, tf.distribute and jax.distributed, 1 to N workers"
    tasks = ("train",)

    # -- params ---------------------------------------------------------------------
    def schema(self):
        grid = grid_params(["distilbert-base-uncased"],
                           {"torch": ["eager"], "tensorflow": ["graph"], "jax": ["jit"]},
                           DIST_MODES, [4], [64], 900.0)
        for key in ("batch_sizes", "seq_lens"):
            del grid[key]
        s = {
            **grid,
            "workers": Param("list[int]", [1, 2], "worker processes of each cell (1..N); the smallest is the baseline of speed-up and efficiency", all_of(non_empty, positive)),
            "scaling": Param("list[str]", list(SCALINGS), "weak: per_worker_batch on every worker (the global batch grows with workers); strong: global_batch split over the workers", all_of(non_empty, one_of(SCALINGS))),
            "per_worker_batch": Param("int", 4, "weak scaling: samples per worker per step", positive),
            "global_batch": Param("int", 8, "strong scaling: samples per step over all workers (a multiple of every workers value)", positive),
            "seq_len": Param("int", 64, "sequence length in tokens", positive),
            **OPTIMIZER, **AGREEMENT,
            "ps_servers": Param("int", 1, "tensorflow ps: parameter servers holding the variables (spread over them round-robin); the cluster is these, the workers and a chief, on this host", positive),
            "weight_tol": Param("float", 1e-6, "max abs difference of any weight across ranks (after the agreement steps and after each cell) before the cells are flagged not_equivalent", non_negative),
            "allreduce_repeats": Param("int", 5, "all-reduces of one step's gradients timed alone per cell", positive),
            "hosts": Param("list[str]", ["127.0.0.1"], "hosts taking part, node 0 first (rank 0, torchrun's rendezvous); one entry: this machine, workers on loopback", non_empty),
            "node_rank": Param("int", 0, "this host's index in hosts: run the same study on every host, each with its own node_rank", non_negative),
            "master_port": Param("int", 0, "torchrun's rendezvous port and JAX's coordinator on hosts[0] (TensorFlow worker i listens on master_port+1+i); 0: free ports found at launch (one host only)", non_negative),
            **TIMING,
        }
        s = replace_param(s, "frameworks", default=["torch", "tensorflow", "jax"],
                          check=all_of(non_empty, _dist_frameworks))
        s = replace_param(s, "modes", help="engine per framework: torch eager (DistributedDataParallel), "
                          "ddp-fp16 / ddp-bf16 (the same with PyTorch's fp16 / bf16 gradient "
                          "compression hook), fsdp (FSDP2 fully_shard: weights, gradients and "
                          "optimizer state sharded over the ranks), tensorflow graph (MultiWorkerMirroredStrategy), "
                          "ps (ParameterServerStrategy: a chief, the workers and ps_servers parameter "
                          "servers, synchronous steps; CPU, one host), jax jit "
                          "(jax.distributed, the step jax.jit over a global mesh)",
                          check=_dist_modes)
        s = replace_param(s, "threads", help="intra-op threads per worker, each worker on cores of its own (0: this host's cores / its most workers)")
        for key in ("settle_s", "block_s", "busy_retakes"):  # interleaving keys
            del s[key]
        s = replace_param(s, "schedule", default="sequential", check=_one_launch_at_a_time,
                          help="sequential: one launch after another (a launch times its "
                               "steps across its ranks; launches are never interleaved)")
        return replace_param(s, "group_timeout_s", help="seconds one launch (a framework at one worker count) may run before every rank is stopped")

    def check(self, full):
        problems = []
        hosts = full["hosts"]
        if "strong" in full["scaling"]:
            uneven = [w for w in full["workers"] if full["global_batch"] % w]
            if uneven:
                problems.append(f"key 'global_batch': {full['global_batch']} does not split evenly "
                                f"over {', '.join(map(str, uneven))} workers")
        uneven = [w for w in full["workers"] if w % len(hosts)]
        if uneven:
            problems.append(f"key 'workers': {', '.join(map(str, uneven))} cannot be spread evenly "
                            f"over {len(hosts)} hosts")
        if full["node_rank"] >= len(hosts):
            problems.append(f"key 'node_rank': {full['node_rank']} is not an index of hosts "
                            f"({len(hosts)} given)")
        if "ddp-bf16" in full["modes"].get("torch", ()) and full["device"] != "gpu":
            problems.append("key 'modes': torch ddp-bf16 needs a GPU (PyTorch's "
                            "bf16_compress_hook requires CUDA 11+ and NCCL 2.10+; gloo has no "
                            "bfloat16 path for it): use ddp-fp16 on the CPU")
        if "ps" in full["modes"].get("tensorflow", ()):
            if len(hosts) > 1:
                problems.append("key 'modes': tensorflow ps runs its cluster (chief, workers, "
                                "parameter servers) on this host only: one entry in hosts")
            if full["device"] != "cpu":
                problems.append("key 'modes': tensorflow ps runs on the CPU only "
                                "(ParameterServerStrategy makes every GPU a worker sees a "
                                "replica of its own; the launch gives each worker one device)")
        if len(hosts) > 1 and not full["master_port"]:
            problems.append("key 'master_port': several hosts need a fixed port (0 picks a free "
                            "port on one host only)")
        return problems

    # -- cells and launches (parent side) ---------------------------------------------
    def cells(self, params):
        """Per framework and worker count, a weak-scaling cell (per_worker_batch on
        each worker) and a strong-scaling one (global_batch over all workers)."""
        threads = self.worker_threads(params)
        batch = {"weak": lambda w: params["per_worker_batch"] * w,
                 "strong": lambda w: params["global_batch"]}
        return [RunSpec(study=self.name, model=model, framework=fw, mode=mode,
                        device=params["device"], dtype=params["dtype"], batch_size=batch[sc](w),
                        seq_len=params["seq_len"], threads=threads, task="train", workers=w,
                        scaling=sc)
                for model in params["models"]
                for fw in params["frameworks"]
                for mode in params["modes"][fw]
                for w in params["workers"]
                for sc in params["scaling"]]

    def worker_threads(self, params):
        """Per rank: this host's cores over its most ranks, unless set."""
        local = max(params["workers"]) // len(params["hosts"])
        return params["threads"] or max(1, env.default_threads() // local)

    def gate_shape(self, params, task):
        """One global batch that splits over every worker count: strong
        scaling's, or weak scaling's at the least common multiple of the
        worker counts (the largest count, usually), at the cells' length."""
        if "strong" in params["scaling"]:
            return (params["global_batch"], params["seq_len"])
        return (params["per_worker_batch"] * math.lcm(*params["workers"]), params["seq_len"])

    def groups(self, task, cells):
        """One launch per (engine, worker count)."""
        keys = sorted({(c.spec.mode, c.spec.workers) for c in cells})
        return [sorted((c for c in cells if (c.spec.mode, c.spec.workers) == k),
                       key=lambda c: (c.spec.batch_size * c.spec.seq_len, c.spec.batch_size))
                for k in keys]

    def spawn(self, runner, job, name):
        from ..launch import Launch

        spec = job.cells[0].spec  # one engine and worker count per launch
        job = job.replace(threads=spec.threads)
        env = runner.worker_env(spec.threads, job.framework)
        hosts = runner.params["hosts"]
        # Ranks on one host are forked from the run's fork server (the variables
        # torchrun or TF_CONFIG would give them); across hosts the launchers start them.
        with runner.phase("process start and imports"):  # the server's imports, if not done
            server = runner.server_for(env) if len(hosts) == 1 else None
        ps = job.framework == "tensorflow" and spec.mode == "ps"
        return Launch(job, runner.work_dir / "jobs", f"{name}-x{spec.workers}", env,
                      framework=job.framework, workers=spec.workers, hosts=hosts,
                      node_rank=runner.params["node_rank"],
                      master_port=runner.params["master_port"], server=server,
                      servers=runner.params["ps_servers"] if ps else 0)

    def run_group(self, runner, model, group):
        """Node 0 runs the launch and writes the rows; another host only runs
        its ranks until the launch ends (or the group timeout), writing none."""
        if not runner.params["node_rank"]:
            runner.run_group(model, group)
            return
        framework = group[0].spec.framework
        w = self.spawn(runner, runner.job(CELLS, model, framework, group),
                       f"{framework}-{runner.model_key(model)}")
        deadline = time.monotonic() + runner.params["group_timeout_s"]
        try:
            while w.running() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            w.kill()
        runner.say(f"{framework} x{group[0].spec.workers}: this host's ranks ended "
                   f"({w.exit_description()})")

    def train_settings(self, params):
        return train_settings(params)

    # -- a rank (worker side: every rank runs this; worker.py pinned it to its cores) --
    def work(self, job):
        """Run the rank and leave with os._exit while the engine's objects are
        still referenced: freeing them can block for minutes (a gloo process
        group waiting on a rank that has already left; TensorFlow's collective
        service threads), and the results are written by then."""
        import faulthandler
        import signal
        import traceback

        faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: every thread's stack to the log
        try:
            engine = run_rank(job, self.train_settings(job.params))  # noqa: F841  (kept alive)
        except Exception:
            traceback.print_exc()
            _exit(1)
        _exit(0)


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
            if rank == 0 and hasattr(dp, "signal_task"):
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


class Rank:
    """One rank of a launch: the agreement steps, then each cell."""

    def __init__(self, job: Job, dp, load_s: float, backend=None, baseline_rss: int = 0):
        from ..gate import Gate
        from ..results import ResultStore

        self.job, self.dp, self.load_s = job, dp, load_s
        self.backend, self.baseline_rss = backend, baseline_rss
        self.rank0 = dp.rank == 0
        # The processes that run this loop: every rank, or the chief alone
        # (a parameter-server cluster's, which feeds the whole global batch).
        self.loop_ranks = getattr(dp, "loop_ranks", dp.world)
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
        from ..gate import loss_problems
        from ..results import losses_frame

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
        spread = self.dp.max_weight_diff()
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
        from ..gate import token_ids

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
        """(first step seconds, samples, stopping rule) by the protocol above;
        ``first``: the first step already taken on this batch (the agreement's),
        ``made``: the seconds of the steps taken after it (they count as
        warm-up steps: the warm-up makes only what they leave)."""
        from ..timing import StoppingRule

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
        start = prev = time.perf_counter()
        stop = False
        while True:
            dp.step(batch)
            if dp.allreduce_sum(1.0 if stop else 0.0) > 0:
                break
            now = time.perf_counter()
            samples.append(now - prev)
            prev = now
            if self.rank0:
                stop = rule.done(samples, now - start)
        self.spent("timing samples", time.perf_counter() - start)
        return first, samples, rule

    def spent(self, phase: str, seconds: float) -> None:
        """Tell the parent where rank 0's time went (its time breakdown)."""
        if self.rank0:
            emit(SPENT, phase=phase, seconds=seconds)

    def cell(self, ref: CellRef, known: dict, problems: str) -> None:
        from ..gate import train_labels

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
        first, samples, rule = self.time_steps(batch, first, made)
        t0 = time.perf_counter()
        comm = dp.allreduce_grads_s(p["allreduce_repeats"])
        self.spent("timing samples", time.perf_counter() - t0)  # the all-reduce's
        spread = dp.max_weight_diff()
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
        self.provenance["mem_method"] = mem_method
        notes = [problems] if problems else []
        if spread is not None and not spread <= p["weight_tol"]:
            notes.append(f"weights differ across ranks by {spread:.3g} after the cell "
                         f"(weight_tol {p['weight_tol']:g})")
        status = "not_equivalent" if notes else "ok"
        if not rule.converged:
            notes.append(f"did not converge: CI half-width {rule.rel_ci:.1%} of the median "
                         f"after {self.cfg.max_time_s:g} s")
        self.finish(ref, CellResult(status, "; ".join(notes), figures, samples))

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
        from ..memory import current_rss_bytes

        dp = self.dp
        if hasattr(dp, "task_memory"):
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

    from ..frameworks import backend_options, get_backend
    from ..gate import Gate
    from ..memory import current_rss_bytes

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


STUDY = register(Distributed())


# -- tables -------------------------------------------------------------------------
SCALING_KEYS = ["model", "framework", "mode", "device", "dtype", "seq_len", "scaling"]


def scaling_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per (framework, scaling, workers): step time with its CI
    (rank 0, to the slowest rank), samples/s, and against the smallest worker
    count of the same framework and scaling (the baseline, usually 1):

    - ``speedup`` = throughput / baseline throughput (global samples per
      second), with a CI (stats.geomean_ratio_ci) from both cells' raw step times;
    - ``ideal_speedup`` = workers / baseline workers;
    - ``efficiency`` = speedup / ideal_speedup (1 is linear scaling). Weak
      scaling (per-worker batch fixed): baseline step time / step time. Strong
      scaling (global batch fixed): that ratio over the worker ratio.

    Gradient all-reduce timed alone (``allreduce_s``) and its share of the
    step, weights across ranks and losses against the single-process run
    come from the cell's row."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    measured = summary["status"].isin(MEASURED) & summary["cell_id"].isin(list(by_cell))
    fewest = summary[measured].groupby(SCALING_KEYS)["workers"].transform("min")
    is_base = measured & (summary["workers"] == fewest.reindex(summary.index))
    paired = {r["cell_id"]: (b, status) for r, b, status in
              baseline_pairs(summary, SCALING_KEYS, is_base)}
    rows = []
    for _, g in summary.groupby(SCALING_KEYS, sort=False):
        g = g.sort_values("workers")
        for _, r in g.iterrows():
            base, status = paired[r["cell_id"]]
            row = {k: r[k] for k in SCALING_KEYS}
            row.update(variant=r["variant"], workers=int(r["workers"]),
                       batch_size=int(r["batch_size"]),
                       per_worker_batch=int(r["batch_size"]) // int(r["workers"]),
                       status=status, median_s=r["median_s"], ci_low_s=r["ci_low_s"],
                       ci_high_s=r["ci_high_s"],
                       samples_per_s=r["batch_size"] / r["median_s"],
                       samples_per_s_low=r["batch_size"] / r["ci_high_s"],
                       samples_per_s_high=r["batch_size"] / r["ci_low_s"],
                       first_call_s=r["first_call_s"])
            speed = (math.nan,) * 3
            if both_measured(r, base, by_cell):
                ratio = ratio_ci(by_cell[base["cell_id"]], by_cell[r["cell_id"]])
                scale = r["batch_size"] / base["batch_size"]
                speed = tuple(x * scale for x in ratio)
            ideal = r["workers"] / base["workers"] if base is not None else math.nan
            row.update(baseline_workers=int(base["workers"]) if base is not None else math.nan,
                       speedup=speed[0], speedup_low=speed[1], speedup_high=speed[2],
                       ideal_speedup=ideal, efficiency=speed[0] / ideal,
                       efficiency_low=speed[1] / ideal, efficiency_high=speed[2] / ideal,
                       allreduce_s=r["allreduce_s"], allreduce_share=r["allreduce_share"],
                       weight_max_abs_diff=r["weight_max_abs_diff"],
                       loss_abs_diff_step0=r["equiv_max_abs_err"],
                       loss_max_rel_diff=r["equiv_rel_err"], mode_setup=r["mode_setup"],
                       error=r["error"])
            rows.append(row)
    return pd.DataFrame(rows)


def dist_loss_table(losses: pd.DataFrame) -> pd.DataFrame:
    """Agreement-step losses of every framework at every worker count against
    the single-process PyTorch run over the same global batch (the reference),
    and against the same framework's run with the fewest workers."""
    if losses.empty:
        return pd.DataFrame()
    df = losses.assign(engine=losses["mode"].str.split(" x").str[0],
                       workers=losses["mode"].str.split(" x").str[-1].astype(int))
    rows = []
    for (model, fw, engine), g in df.groupby(["model", "framework", "engine"]):
        fewest = g[g["workers"] == g["workers"].min()].sort_values("step")["loss"].to_numpy()
        for w, h in g.groupby("workers"):
            h = h.sort_values("step")
            loss = h["loss"].to_numpy()
            ref = h["reference_loss"].to_numpy()
            rows.append({"model": model, "variant": variant(fw, engine), "workers": int(w),
                         "steps": len(h), "first_loss": loss[0], "last_loss": loss[-1],
                         "max_abs_diff_vs_single_process_torch": float(np.max(np.abs(loss - ref))),
                         f"max_abs_diff_vs_{int(g['workers'].min())}_worker":
                             float(np.max(np.abs(loss - fewest))) if len(fewest) == len(loss)
                             else math.nan,
                         "loss_decreased": bool(loss[-1] < loss[0])})
    return pd.DataFrame(rows)


ENGINE_KEYS = ["model", "framework", "device", "dtype", "seq_len", "scaling", "workers"]


def engine_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Each engine of a framework against its plain engine (DIST_MODES' first:
    DDP, MultiWorkerMirroredStrategy) at the same worker count, scaling and
    batch, one row per engine (the plain one included):

    - ``speedup`` = plain step time / this engine's, with its CI
      (stats.ratio_ci over both cells' raw step times: Student's t over
      rounds where both have several, else a bootstrap of their steps);
    - ``mem_ratio`` = this engine's memory per rank / the plain engine's
      (the largest rank's each: one measurement per cell, no CI;
      ``Rank.memory`` says what is measured);
    - memory per rank, the largest and the least rank (MiB; a parameter
      server cluster's: its parameter servers and workers), and the
      communication timed alone and its share of this engine's step and of
      the plain engine's."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    plain = summary["mode"] == summary["framework"].map(lambda fw: DIST_MODES[fw][0])
    rows = []
    for r, base, status in baseline_pairs(summary, ENGINE_KEYS, plain):
        row = {k: r[k] for k in ENGINE_KEYS}
        row.update(variant=r["variant"], mode=r["mode"], batch_size=int(r["batch_size"]),
                   per_worker_batch=int(r["batch_size"]) // int(r["workers"]), status=status,
                   median_s=r["median_s"], plain_median_s=math.nan,
                   speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan,
                   mem_rank_max_mib=r.get("rank_mem_bytes", math.nan) / 2**20,
                   mem_rank_min_mib=r.get("rank_mem_min_bytes", math.nan) / 2**20,
                   mem_ratio=math.nan, allreduce_s=r["allreduce_s"],
                   allreduce_share=r["allreduce_share"], plain_allreduce_share=math.nan,
                   mode_setup=r["mode_setup"])
        if base is not None:
            row["plain_median_s"] = base["median_s"]
            row["plain_allreduce_share"] = base["allreduce_share"]
            row["mem_ratio"] = r.get("rank_mem_bytes", math.nan) / base.get(
                "rank_mem_bytes", math.nan)
            if both_measured(r, base, by_cell):
                row.update(zip(("speedup", "speedup_low", "speedup_high"),
                               ratio_ci(by_cell[base["cell_id"]], by_cell[r["cell_id"]])))
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["model", "scaling", "framework", "workers", "mode"],
                                          ignore_index=True)


# -- claim metric (params/claims.yaml names it) ----------------------------------------
def scaling_efficiency_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """Scaling efficiency (speed-up over the fewest workers / ideal speed-up)
    at the most workers each framework's plain engine ran (DDP without a
    compression hook: DIST_MODES' first); the claim needs every framework
    named, so the figure is the lowest of them, with its CI."""
    fws, scaling = claim.cells["frameworks"], claim.cells["scaling"]
    m = Measurement(unit=f"{scaling}-scaling efficiency at the most workers")
    s = data.summary[data.summary["device"].isin(devices)]
    table = scaling_table(s, data.samples) if len(s) else pd.DataFrame()
    rows = []
    for fw in fws:
        g = table[(table["framework"] == fw) & (table["mode"] == DIST_MODES[fw][0])
                  & (table["scaling"] == scaling)
                  & table["efficiency"].notna() & (table["workers"] > table["baseline_workers"])] \
            if len(table) else table
        if len(g):
            rows.append(g.sort_values("workers").iloc[-1])
    if len(rows) < len(fws):
        m.note = (f"{scaling} scaling needs two worker counts for each of {', '.join(fws)} "
                  f"on {'/'.join(devices)}")
        return m
    low = min(rows, key=lambda r: r["efficiency"])
    m.value, m.low, m.high = low["efficiency"], low["efficiency_low"], low["efficiency_high"]
    m.cells = [f"{r['variant']} {r['model']} {r['baseline_workers']}->{r['workers']} workers"
               for r in rows]
    m.points = [(c, r["efficiency"]) for c, r in zip(m.cells, rows)]
    m.devices = {r["device"] for r in rows}
    m.note = "lowest: " + ", ".join(f"{r['variant']} {r['efficiency']:.0%}" for r in rows)
    return m


def _engine_row(data: StudyData, claim: Claim, devices, figure: str, m: Measurement):
    """engine_table's row of the claim's b engine (against a, its framework's
    plain engine) at the most workers with ``figure`` measured, or None (the
    note then says what is missing)."""
    fw, _, mode_b = str(claim.cells["b"]).partition("/")
    s = data.summary[data.summary["device"].isin(devices)]
    table = engine_table(s, data.samples) if len(s) else pd.DataFrame()
    if len(table):
        table = table[(table["framework"] == fw) & (table["mode"] == mode_b)
                      & (table["scaling"] == claim.cells["scaling"]) & table[figure].notna()]
    if not len(table):
        m.note = (f"needs {claim.cells['a']} and {claim.cells['b']} measured side by side "
                  f"({claim.cells['scaling']} scaling) on {'/'.join(devices)}")
        return None
    r = table.sort_values("workers").iloc[-1]
    label = f"{r['variant']} {r['model']} x{r['workers']}"
    m.cells, m.devices = [label], {r["device"]}
    return r


def engine_speedup_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """An engine against its framework's plain one (``cells``: a, the plain
    engine, b the other, e.g. torch/eager and torch/ddp-fp16; ``scaling``) at
    the most workers both ran: a's step time over b's (above 1: b is
    faster), with its CI."""
    m = Measurement(unit="step time, a / b, at the most workers")
    r = _engine_row(data, claim, devices, "speedup", m)
    if r is not None:
        m.value, m.low, m.high = r["speedup"], r["speedup_low"], r["speedup_high"]
        m.points = [(m.cells[0], m.value)]
        m.note = (f"{r['workers']} workers; communication timed alone: "
                  f"{r['plain_allreduce_share']:.0%} of {claim.cells['a']}'s step, "
                  f"{r['allreduce_share']:.0%} of {claim.cells['b']}'s")
    return m


def engine_memory_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """An engine's memory per rank over its framework's plain engine's
    (``cells`` as engine_speedup's) at the most workers both ran, the
    largest rank of each (below 1: b holds less per rank); one measurement
    per cell, so no CI."""
    m = Measurement(unit="memory per rank, b / a, at the most workers")
    r = _engine_row(data, claim, devices, "mem_ratio", m)
    if r is not None:
        m.value = r["mem_ratio"]
        m.points = [(m.cells[0], m.value)]
        m.note = (f"{r['workers']} workers: {r['mem_rank_max_mib']:.0f} MiB per rank against "
                  f"{r['mem_rank_max_mib'] / r['mem_ratio']:.0f} MiB; one measurement per cell")
    return m


def _engine_cells(cells: dict) -> list[str]:
    """Names in an engine claim's cells that no launch could measure."""
    problems = []
    for key in ("a", "b"):
        fw, _, mode = str(cells.get(key, "")).partition("/")
        if mode not in DIST_MODES.get(fw, ()):
            problems.append(f"cells {key}: {cells.get(key)!r} is not a data-parallel engine "
                            f"(framework/mode of {DIST_MODES})")
    fw_a, _, mode_a = str(cells.get("a", "")).partition("/")
    if fw_a != str(cells.get("b", "")).partition("/")[0] or (
            fw_a in DIST_MODES and mode_a != DIST_MODES[fw_a][0]):
        problems.append("cells a and b: two engines of one framework, a its plain one "
                        f"({', '.join(f'{fw}/{m[0]}' for fw, m in DIST_MODES.items())})")
    if cells.get("scaling") not in SCALINGS:
        problems.append(f"scaling {cells.get('scaling')!r} is not one of {', '.join(SCALINGS)}")
    return problems


def _scaling_cells(cells: dict) -> list[str]:
    """Names in a scaling_efficiency claim's cells that no launch could measure."""
    problems = [f"framework {fw!r} has no data-parallel engine; known: {', '.join(DIST_MODES)}"
                for fw in cells.get("frameworks", []) if fw not in DIST_MODES]
    if cells.get("scaling") not in SCALINGS:
        problems.append(f"scaling {cells.get('scaling')!r} is not one of {', '.join(SCALINGS)}")
    return problems


Distributed.metrics = {"scaling_efficiency": Metric(scaling_efficiency_metric,
                                                    ("frameworks", "scaling"), _scaling_cells,
                                                    timed=True),
                       "engine_speedup": Metric(engine_speedup_metric, ("a", "b", "scaling"),
                                                _engine_cells, timed=True),
                       "engine_memory_ratio": Metric(engine_memory_metric, ("a", "b", "scaling"),
                                                     _engine_cells)}


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def _scaling_panels(table: pd.DataFrame):
    """(axes grid, panels): one panel per (model, scaling), weak first."""
    import matplotlib.pyplot as plt

    keys = sorted({(m, sc) for m, sc in zip(table["model"], table["scaling"])},
                  key=lambda k: (k[0], k[1] != "weak"))
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(4.6 * len(keys) + 2.2, 4.0))
    return fig, axes, keys


def _scaling_title(model: str, scaling: str, g: pd.DataFrame) -> str:
    if scaling == "weak":
        return f"{model}\nweak: {g['per_worker_batch'].iloc[0]} samples per worker"
    return f"{model}\nstrong: global batch {g['batch_size'].iloc[0]}"


def _mark_failed(ax, g: pd.DataFrame, x: str) -> None:
    from ..plots import STATUS_MARK

    for _, r in g[~g["status"].isin(MEASURED)].iterrows():
        ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (r[x], 0), xycoords=(
            "data", "axes fraction"), xytext=(0, 4), textcoords="offset points", ha="center",
            fontsize=8, color="crimson")


def scaling_throughput(table: pd.DataFrame, manifest: dict):
    """Global samples per second against workers, per framework, with the
    95% CI as error bars; the dashed line is linear scaling from each
    framework's baseline (its fewest workers). Failed cells marked on the axis."""
    from ..plots import legend_right, no_data, palette

    if table.empty:
        return no_data("no distributed cell ran")
    fig, axes, keys = _scaling_panels(table)
    colors = palette(table["variant"])
    for ax, (model, scaling) in zip(axes[0], keys):
        g = table[(table["model"] == model) & (table["scaling"] == scaling)]
        for v, h in g.groupby("variant"):
            h = h.sort_values("workers")
            ok = h[h["status"].isin(MEASURED)]
            ax.errorbar(ok["workers"], ok["samples_per_s"],
                        yerr=[ok["samples_per_s"] - ok["samples_per_s_low"],
                              ok["samples_per_s_high"] - ok["samples_per_s"]],
                        marker="o", capsize=3, color=colors[v], label=v)
            base = ok[ok["workers"] == ok["baseline_workers"]]
            if len(base):
                b = base.iloc[0]
                ideal = b["samples_per_s"] * h["workers"] / b["workers"]
                ax.plot(h["workers"], ideal, ls="--", color=colors[v], alpha=0.6,
                        label=f"{v} linear")
            _mark_failed(ax, h, "workers")
        ax.set_xticks(sorted(g["workers"].unique()))
        ax.set_xlabel("workers")
        ax.set_ylabel("samples / s (all workers)")
        ax.set_ylim(bottom=0)
        ax.set_title(_scaling_title(model, scaling, g), fontsize=10)
    return legend_right(fig, axes, "Training throughput against workers (dashed: linear "
                        "scaling)", manifest, "error bars: 95% CI of the median step time, "
                        "timed on rank 0 to the slowest rank", 0.8)


def _bars_by_workers(table: pd.DataFrame, ylabel: str):
    """Panels per (model, scaling), axes labelled, with room for one bar per
    framework at each worker count: (fig, axes, draws), a draw being (axis,
    panel rows, bar x positions, the variant's rows by worker count, bar
    style) for the caller to draw."""
    from ..plots import palette

    fig, axes, keys = _scaling_panels(table)
    colors = palette(table["variant"])
    variants = sorted(table["variant"].unique())
    width = 0.8 / len(variants)
    draws = []
    for ax, (model, scaling) in zip(axes[0], keys):
        g = table[(table["model"] == model) & (table["scaling"] == scaling)]
        counts = sorted(g["workers"].unique())
        for k, v in enumerate(variants):
            h = g[g["variant"] == v].set_index("workers").reindex(counts)
            x = np.arange(len(counts)) + (k - (len(variants) - 1) / 2) * width
            draws.append((ax, g, x, h, dict(width=width, color=colors[v], label=v)))
        ax.set_xticks(range(len(counts)), [str(c) for c in counts])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.set_title(_scaling_title(model, scaling, g), fontsize=10)
    return fig, axes, draws


def _ratio_bars(ax, g, x, h, style, col: str, fmt: str, top: float, pad: float) -> None:
    """One panel's bars of a ratio (``col``, its CI in ``col``_low/_high)
    against 1 (dashed): each bar labelled with ``fmt`` of its value, a failed
    cell marked on the axis; the y axis up to ``top`` at least, or ``pad``
    times the highest CI end."""
    from ..plots import STATUS_MARK

    ax.bar(x, h[col], yerr=[h[col] - h[f"{col}_low"], h[f"{col}_high"] - h[col]],
           capsize=3, **style)
    for xx, (_, r) in zip(x, h.iterrows()):
        if r[col] == r[col]:
            ax.annotate(fmt.format(r[col]), (xx, r[f"{col}_high"]), ha="center",
                        va="bottom", fontsize=8)
        elif isinstance(r["status"], str):
            ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (xx, 0.02),
                        ha="center", fontsize=8, color="crimson")
    ax.axhline(1.0, color="0.3", lw=1, ls="--")
    ax.set_ylim(0, max(top, float(np.nanmax(g[f"{col}_high"].to_numpy(float), initial=0))
                       * pad))


def scaling_efficiency(table: pd.DataFrame, manifest: dict):
    """Scaling efficiency (speed-up over the baseline / worker ratio) per
    worker count and framework, with its 95% CI; 1 is linear."""
    from ..plots import legend_right, no_data

    rest = table[table["workers"] > table["baseline_workers"]] if len(table) else table
    if rest.empty:
        return no_data("scaling efficiency needs two worker counts")
    fig, axes, draws = _bars_by_workers(rest, "scaling efficiency")
    for draw in draws:
        _ratio_bars(*draw, "efficiency", "{:.0%}", 1.15, 1.1)
    return legend_right(fig, axes, "Scaling efficiency against the fewest workers (1 = linear)",
                        manifest, "error bars: 95% CI from the raw step times of "
                        "both cells", 0.82)


def allreduce_share(table: pd.DataFrame, manifest: dict):
    """The gradient all-reduce (every gradient, timed alone after the cell)
    as a share of the step, per framework and worker count."""
    import matplotlib

    from ..plots import legend_right, no_data

    if table.empty or table["allreduce_share"].isna().all():
        return no_data("no all-reduce was timed")
    fig, axes, draws = _bars_by_workers(table, "all-reduce time / step time")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["allreduce_share"], **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["allreduce_share"] == r["allreduce_share"]:
                ax.annotate(f"{r['allreduce_s'] * 1e3:.3g} ms", (xx, r["allreduce_share"]),
                            ha="center", va="bottom", fontsize=7)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    return legend_right(fig, axes, "Gradient communication as a share of the training step",
                        manifest, "all-reduce of every gradient timed alone (FSDP: its "
                        "all-gathers and reduce-scatter; parameter server: every worker's "
                        "pull of the weights and push of a gradient; labels: the median); "
                        "DDP and FSDP overlap it with the backward pass, so this bounds the "
                        "cost it adds", 0.82)


def engine_speedup(table: pd.DataFrame, manifest: dict):
    """Each engine's step time against its framework's plain engine at the
    same worker count (plain / engine: above 1 is faster), with its 95% CI."""
    from ..plots import legend_right, no_data

    rest = table[table["mode"] != table["framework"].map(lambda fw: DIST_MODES[fw][0])] \
        if len(table) else table
    if rest.empty or rest["speedup"].isna().all():
        return no_data("no engine ran beside its framework's plain one")
    fig, axes, draws = _bars_by_workers(rest, "speed-up over the plain engine")
    for draw in draws:
        _ratio_bars(*draw, "speedup", "{:.2f}x", 1.3, 1.12)
    return legend_right(fig, axes, "Engines against their framework's plain engine "
                        "(DDP; MultiWorkerMirroredStrategy's ring all-reduce), same workers "
                        "and batch", manifest,
                        "error bars: 95% CI from both cells' raw step times", 0.82)


def rank_memory(table: pd.DataFrame, manifest: dict):
    """Memory per rank (``Rank.memory``), per engine and worker count: the
    bar is the largest rank, the line down to the least rank."""
    from ..plots import legend_right, no_data

    if table.empty or table["mem_rank_max_mib"].isna().all():
        return no_data("no per-rank memory was measured")
    fig, axes, draws = _bars_by_workers(table, "memory per rank (MiB)")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["mem_rank_max_mib"],
               yerr=[h["mem_rank_max_mib"] - h["mem_rank_min_mib"], np.zeros(len(h))],
               capsize=2, **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["mem_rank_max_mib"] == r["mem_rank_max_mib"]:
                ax.annotate(f"{r['mem_rank_max_mib']:.0f}", (xx, r["mem_rank_max_mib"]),
                            ha="center", va="bottom", fontsize=7)
    return legend_right(fig, axes, "Memory per rank in training", manifest,
                        f"{_memory_scope(table)}; bar: the largest rank, line down to the least",
                        0.82)


def _memory_scope(table: pd.DataFrame) -> str:
    gpu = (table["device"] == "gpu").any()
    return ("each framework allocator's peak over a step on its GPU" if gpu else
            "RSS held after a step over the rank's RSS before its model was loaded (weights, "
            "optimizer state, what the engine keeps between steps); parameter server: each "
            "parameter server's and worker's RSS after a step over its start, the chief "
            "left out")

