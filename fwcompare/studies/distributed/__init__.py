"""Distributed data-parallel training: DDP, tf.distribute and jax.distributed, one worker to many.

Each (framework, engine, worker count) is one launch of that many ranks with
the environment of the framework's own launcher (:mod:`fwcompare.execution.launch`:
``torchrun``'s variables for PyTorch DistributedDataParallel, ``TF_CONFIG``
for TensorFlow's MultiWorkerMirroredStrategy, the coordinator and process id
for ``jax.distributed``). On one host the ranks are
forked from the run's fork server; across hosts they start as fresh
processes (``torchrun`` for PyTorch). Every rank runs
:meth:`Distributed.work` with its framework's engine
(``DataParallel`` of each framework's backend). TensorFlow's ParameterServerStrategy
(mode ps) is the exception: its chief alone runs what follows, feeding the
whole global batch (``loop_ranks`` 1), and its workers and parameter servers
serve it (``frameworks.tensorflow.parallel.ParameterServer``):

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

The study's parts: ``engines`` (each framework's data-parallel engines),
``worker`` (a rank: what every process of a launch runs), ``tables`` (tables
and claim metrics) and ``figures``; this module holds the study (its params,
cells and launches) and registers it.
"""
from __future__ import annotations

import math
import os
import time

from ...core import env
from ... import frameworks
from ...results.judging import Metric
from ...plan.job import CELLS
from ...plan.schema import (TIMING, Param, all_of, grid_params, modes_in, non_empty, non_negative,
                            one_of, positive, replace_param)
from ...core.spec import Axis, RunSpec
from ...results.store import Columns
from ...measure.workloads import AGREEMENT, OPTIMIZER, TRAINING_COLUMNS, train_settings
from ...execution.study import Study

# The study's parts; every name of each is reachable from the package, as
# from the one module it was (``study.scaling_table``, ``study.DIST_MODES``).
from .engines import DIST_MODES, SCALINGS  # noqa: F401
from .figures import (allreduce_share, engine_speedup, rank_memory,  # noqa: F401
                      scaling_efficiency, scaling_throughput)
from .tables import (ENGINE_KEYS, SCALING_KEYS, _engine_cells, _scaling_cells,  # noqa: F401
                     dist_loss_table, engine_memory_metric, engine_speedup_metric, engine_table,
                     scaling_efficiency_metric, scaling_table)
from .worker import Rank, _closing_barrier, _exit, _fault, local_rank, run_rank, shard  # noqa: F401


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
    columns = TRAINING_COLUMNS + Columns(
        figures=("per_worker_batch", "weight_max_abs_diff", "allreduce_s", "allreduce_share",
                 # the largest and the least rank's memory (Rank.memory)
                 "rank_mem_bytes", "rank_mem_min_bytes"),
        analytic=("per_worker_batch",))
    # Worker processes, and weak (per-worker batch fixed) or strong (global
    # batch fixed) scaling; a cell's batch_size is the global batch.
    axes = (Axis("workers", 1), Axis("scaling", "", label=" {scaling} x{workers}"))
    tasks = ("train",)

    # -- params ---------------------------------------------------------------------
    def schema(self):
        grid = grid_params(["distilbert-base-uncased"],
                           frameworks.defaults(lambda f: f.dist_modes[:1]), DIST_MODES, [4], [64],
                           900.0)
        for key in ("batch_sizes", "seq_lens"):
            del grid[key]
        s = {
            **grid,
            "workers": Param("list[int]", [1, 2], "worker processes of each cell (1..N); the smallest is the baseline of speed-up and efficiency", all_of(non_empty, positive)),
            "scaling": Param("list[str]", list(SCALINGS), "weak: per_worker_batch on every worker (the global batch grows with workers); strong: global_batch split over the workers", all_of(non_empty, one_of(SCALINGS))),
            "per_worker_batch": Param("int", 4, "weak scaling: samples per worker per step", positive),
            "global_batch": Param("int", 8, "strong scaling: samples per step over all workers (a multiple of every workers value)", positive),
            "seq_len": Param("int", 64, "sequence length in tokens", positive),
            "scaling_engines": Param("dict[str, list[str]]", {}, "per framework, the engines launched at every worker count; its other engines run at the most workers only (a framework not named: every engine at every count). An engine whose point is communication (ddp-fp16's compressed gradients, fsdp's shards, ps' servers) has none to speak of at one worker", _dist_modes),
            "one_launch": Param("dict[str, list[str]]", {}, "per framework, the engines launched in the first round only, whatever its rounds and the claims say: a claim that times one of them says 'one process' and is not decided (for engines whose second launch costs more than it can decide: quick)", _dist_modes),
            **OPTIMIZER, **AGREEMENT,
            "ps_servers": Param("int", 1, "tensorflow ps: parameter servers holding the variables (spread over them round-robin); the cluster is these, the workers and a chief, on this host", positive),
            "weight_tol": Param("float", 1e-6, "max abs difference of any weight across ranks (after the agreement steps and after each cell) before the cells are flagged not_equivalent", non_negative),
            "allreduce_repeats": Param("int", 5, "all-reduces of one step's gradients timed alone per cell", positive),
            "hosts": Param("list[str]", ["127.0.0.1"], "hosts taking part, node 0 first (rank 0, torchrun's rendezvous); one entry: this machine, workers on loopback", non_empty),
            "node_rank": Param("int", 0, "this host's index in hosts: run the same study on every host, each with its own node_rank", non_negative),
            "master_port": Param("int", 0, "torchrun's rendezvous port and JAX's coordinator on hosts[0] (TensorFlow worker i listens on master_port+1+i); 0: free ports found at launch (one host only)", non_negative),
            **TIMING,
        }
        s = replace_param(s, "frameworks", default=list(frameworks.BUILT_IN),
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
        for key in ("scaling_engines", "one_launch"):
            for fw, modes in full[key].items():
                extra = [m for m in modes if m not in full["modes"].get(fw, ())]
                if extra:
                    problems.append(f"key '{key}': {fw} {', '.join(extra)} not in modes "
                                    f"({', '.join(full['modes'].get(fw, ())) or 'none'})")
        for fw, modes in full["modes"].items():  # engines its framework declares narrower
            declared = frameworks.find(fw)
            if declared is None:
                continue
            for mode in modes:
                if mode in declared.dist_one_host and len(hosts) > 1:
                    problems.append(f"key 'modes': {fw} {mode} {declared.dist_one_host[mode]}")
                device, why = declared.dist_device.get(mode, (full["device"], ""))
                if device != full["device"]:
                    problems.append(f"key 'modes': {fw} {mode} {why}")
        if len(hosts) > 1 and not full["master_port"]:
            problems.append("key 'master_port': several hosts need a fixed port (0 picks a free "
                            "port on one host only)")
        return problems

    # -- cells and launches (parent side) ---------------------------------------------
    def cells(self, params):
        """Per framework and worker count, a weak-scaling cell (per_worker_batch on
        each worker) and a strong-scaling one (global_batch over all workers);
        an engine ``scaling_engines`` leaves out at the most workers only."""
        threads = self.worker_threads(params)
        most, scaled = max(params["workers"]), params["scaling_engines"]

        def launched(fw, mode, w):
            return w == most or fw not in scaled or mode in scaled[fw]
        batch = {"weak": lambda w: params["per_worker_batch"] * w,
                 "strong": lambda w: params["global_batch"]}
        return [RunSpec(study=self.name, model=model, framework=fw, mode=mode,
                        device=params["device"], dtype=params["dtype"], batch_size=batch[sc](w),
                        seq_len=params["seq_len"], threads=threads, task="train",
                        axes={"workers": w, "scaling": sc})
                for model in params["models"]
                for fw in params["frameworks"]
                for mode in params["modes"][fw]
                for w in params["workers"] if launched(fw, mode, w)
                for sc in params["scaling"]]

    def repeats(self, spec, params, claimed):
        """A strong-scaling cell at fewer workers than the most is measured in
        round 0 only: the claims that compare engines read the most workers
        (``engine_speedup``, ``engine_memory_ratio``), and the one that reads
        every worker count, ``scaling_efficiency``, reads weak scaling. (Such
        launches took over a third of a later round: docs/measurements.md, "the
        figures the library's comments quoted".)"""
        return spec.scaling != "strong" or spec.workers == max(params["workers"])

    def rounds_of(self, spec, params):
        """An engine of ``one_launch`` takes the first round only (a launch is
        a round: ``launch_key``)."""
        if spec.mode in params["one_launch"].get(spec.framework, ()):
            return 1
        return super().rounds_of(spec, params)

    def launch_key(self, ref):
        """One launch per engine, worker count and round (``groups``)."""
        s = ref.spec
        return (s.model, s.framework, s.mode, s.workers, ref.round)

    def machine_problem(self, params):
        """On GPUs a rank takes a GPU of its own (NCCL refuses two ranks on one
        device): a host with fewer GPUs than its most ranks runs none of the
        cells, since every claim compares worker counts or engines at the most."""
        if params["device"] != "gpu":
            return ""
        need = -(-max(params["workers"]) // len(params["hosts"]))
        have = len(env.gpus())
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:  # the GPUs this run may use
            have = min(have, len([v for v in visible.split(",") if v.strip()]))
        if have >= need:
            return ""
        return (f"needs {need} GPUs (one per worker, up to {max(params['workers'])} workers"
                + (f" over {len(params['hosts'])} hosts" if len(params["hosts"]) > 1 else "")
                + f"); this machine has {have}")

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
        from ...execution.launch import Launch

        spec = job.cells[0].spec  # one engine and worker count per launch
        job = job.replace(threads=spec.threads)
        env = runner.worker_env(spec.threads, job.framework)
        hosts = runner.params["hosts"]
        # Ranks on one host are forked from the run's fork server (the variables
        # torchrun or TF_CONFIG would give them); across hosts the launchers start them.
        with runner.phase("process start and imports"):  # the server's imports, if not done
            server = runner.server_for(env) if len(hosts) == 1 else None
        ps = spec.mode in frameworks.get(job.framework).server_modes
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


STUDY = Distributed()


Distributed.metrics = {"scaling_efficiency": Metric(scaling_efficiency_metric,
                                                    ("frameworks", "scaling"), _scaling_cells,
                                                    timed=True),
                       "engine_speedup": Metric(engine_speedup_metric, ("a", "b", "scaling"),
                                                _engine_cells, timed=True),
                       "engine_memory_ratio": Metric(engine_memory_metric, ("a", "b", "scaling"),
                                                     _engine_cells, per_round=True,
                                                     memory=True)}
