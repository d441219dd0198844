"""TensorFlow's data-parallel engines (the distributed study):
MultiWorkerMirroredStrategy (``Mirrored``) and ParameterServerStrategy
(``ParameterServer``, and ``serve_cluster_task`` for its other tasks).
Imported by the backend's ``DataParallel`` when a rank starts, which hands
its module in (``be``: its model loading, optimizer and step helpers)."""
from __future__ import annotations

import os

import numpy as np

import tensorflow as tf  # imported by the backend first (after triton, see there)

from .. import Engine, Unsupported, auto_class, crc32_of


# -- data-parallel training (the distributed study) -----------------------------
def DataParallel(be, weights_dir, device: str, head: str, opt: dict, mode: str = "graph",
                 timeout_s: float = 1800.0):
    """The data-parallel engine of ``mode`` for this process of a launch:
    graph, MultiWorkerMirroredStrategy (every process a replica: ``Mirrored``);
    ps, ParameterServerStrategy (the chief runs the steps: ``ParameterServer``;
    a worker or parameter server serves the cluster until the launch ends it,
    and this call never returns there: ``serve_cluster_task``)."""
    if mode == "ps":
        if _task()[0] != "chief":
            serve_cluster_task()
        return ParameterServer(be, weights_dir, device, head, opt)
    if mode != "graph":
        raise Unsupported(f"tensorflow data-parallel mode {mode!r} is not implemented "
                          "(graph: MultiWorkerMirroredStrategy, the step in tf.function; "
                          "ps: ParameterServerStrategy)")
    return Mirrored(be, weights_dir, device, head, opt, timeout_s)


# Weights per all-gather of the spread check (float32 elements: 64 MiB): a
# few collectives, not one per weight, which made every launch's first call
# seconds slower (docs/measurements.md, "the figures the library's comments quoted").
SPREAD_BUCKET = 2**24


def _buckets(variables, size: int) -> list[list]:
    """``variables`` in order, in runs of at most ``size`` elements (a larger
    one alone)."""
    out, held = [], size
    for v in variables:
        n = int(np.prod(v.shape))
        if held + n > size:
            out.append([])
            held = 0
        out[-1].append(v)
        held += n
    return out


class Mirrored(Engine):
    """One worker of ``tf.distribute.MultiWorkerMirroredStrategy`` training,
    its cluster given by TF_CONFIG. Collectives: ring on the CPU, NCCL on
    GPUs. The model and optimizer are built in the strategy's scope (mirrored
    variables, identical at start); the step runs in ``strategy.run`` inside
    tf.function, and ``apply_gradients`` all-reduces (sums) the gradients, so
    each worker's loss is divided by the number of replicas: the update is
    that of the mean loss over the global batch, as with DDP."""

    engine = "tf.distribute MultiWorkerMirroredStrategy"

    def __init__(self, be, weights_dir, device: str, head: str, opt: dict, timeout_s: float):
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
            if device == "gpu" else tf.distribute.experimental.CommunicationImplementation.RING,
            timeout_seconds=timeout_s)
        self.strategy = strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options)
        self.rank = int(strategy.cluster_resolver.task_id or 0)
        self.world = strategy.num_replicas_in_sync
        be.set_precision("float32", device)
        auto = auto_class("TF", weights_dir, head)
        with strategy.scope():
            self.model = model = be._from_pretrained(auto, weights_dir)
            variables = model.trainable_variables
            optimizer = be._adamw(opt, variables)
        world = self.world

        def replica_step(ids, labels):
            loss, grads = be._shard_grads(model, variables, ids, labels, head, world)
            optimizer.apply_gradients(zip(grads, variables))  # sums over replicas
            return loss

        def ctx():
            return tf.distribute.get_replica_context()

        def spread():
            worst = tf.zeros((), tf.float32)
            for bucket in _buckets(model.weights, SPREAD_BUCKET):
                flat = tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in bucket], 0)
                every = ctx().all_gather(tf.expand_dims(flat, 0), axis=0)
                gap = tf.reduce_max(every, axis=0) - tf.reduce_min(every, axis=0)
                worst = tf.maximum(worst, tf.reduce_max(gap))
            return worst

        self._step = tf.function(lambda ids, labels: strategy.run(replica_step, (ids, labels)),
                                 autograph=be._AUTOGRAPH)
        # A collective's input must be made in the replica function (placed on
        # the worker's device): a tensor passed in from outside has no
        # destination ("destinations can not be empty").
        self._sum = tf.function(lambda x: strategy.run(
            lambda v: ctx().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(v)), (x,)))
        self._spread = tf.function(lambda: strategy.run(spread))
        self._grads_like = [tf.zeros(v.shape, v.dtype) for v in variables]
        self._allreduce = tf.function(lambda gs: strategy.run(
            lambda g: ctx().all_reduce(tf.distribute.ReduceOp.SUM, [tf.identity(x) for x in g]),
            (gs,)))
        self.setup = (f"MultiWorkerMirroredStrategy ({options.implementation.name.lower()} "
                      f"collectives), step in {be._function_text(False, be._AUTOGRAPH)}, "
                      f"{self.world} worker(s)")

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def batch(self, ids: np.ndarray, labels: np.ndarray):
        return tf.constant(ids, dtype=tf.int32), tf.constant(labels, dtype=tf.int32)

    def step(self, batch) -> float:
        return float(self._local(self._step(*batch)).numpy())

    def allreduce_sum(self, value: float) -> float:
        return float(self._local(self._sum(tf.constant(value, tf.float64))).numpy())

    def weights_crc(self) -> int:
        return crc32_of(self._local(v).numpy() for v in self.model.weights)

    def max_weight_diff(self) -> float:
        return float(self._local(self._spread()).numpy())

    def allreduce_grads_s(self, repeats: int) -> list[float]:
        """Seconds per all-reduce of one step's gradients (every trainable
        variable's shape), measured alone, as for DDP. The first call traces
        and is not counted."""
        import time

        out = self._allreduce(self._grads_like)
        float(tf.reduce_sum(self._local(out)[0]).numpy())
        times = []
        for _ in range(repeats):
            self.allreduce_sum(0.0)
            t0 = time.perf_counter()
            out = self._allreduce(self._grads_like)
            float(tf.reduce_sum(self._local(out)[-1]).numpy())
            times.append(time.perf_counter() - t0)
        return times

    def perturb(self, amount: float) -> None:
        """Fault injection: shift this worker's copy of the first weight."""
        v = self.model.weights[0]
        for local in self.strategy.experimental_local_results(v):
            flat = tf.reshape(local, [-1])
            local.assign(tf.reshape(tf.tensor_scatter_nd_add(flat, [[0]], [amount]),
                                    local.shape))

    def close(self) -> None:
        pass


def _task() -> tuple[str, int]:
    """This process's task in TF_CONFIG: (type, index)."""
    import json

    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return task.get("type", "worker"), int(task.get("index", 0))


def serve_cluster_task() -> None:
    """A worker or parameter server of a ParameterServerStrategy cluster:
    TensorFlow's gRPC server on its TF_CONFIG port, running the chief's
    closures (a worker) or holding variables (a ps) until the launch kills
    it; it never returns. Its pid and RSS go to the launch directory first."""
    import json
    from pathlib import Path

    import psutil

    from ...core.messages import LAUNCH_DIR_ENV

    kind, index = _task()
    out = Path(os.environ[LAUNCH_DIR_ENV]) / f"{kind}-{index}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "rss": psutil.Process().memory_info().rss}))
    tmp.replace(out)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # Two inter-op threads: one runs a closure's function while it waits for
    # what another fetches from a parameter server. TensorFlow's default is
    # the cores the process may use: a worker pinned to one core never
    # finished its first closure.
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op_parallelism_threads=2)
    tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=index,
                         protocol="grpc", config=config, start=True).join()
    raise RuntimeError(f"TensorFlow's {kind} {index} server stopped serving")


class ParameterServer(Engine):
    """The chief of ``tf.distribute.ParameterServerStrategy`` training, its
    cluster (a chief, N workers, one or more parameter servers) given by
    TF_CONFIG. Every variable (the weights, AdamW's moments, and one gradient
    accumulator per weight) lives on the parameter servers, spread over them
    round-robin; only the chief runs the study's steps (``loop_ranks`` 1):
    the workers run what it schedules (``ClusterCoordinator.schedule``).

    A step is synchronous, so that its update is DDP's: the chief schedules
    one closure per shard of the global batch, each on a free worker; it pulls
    the weights from the parameter servers, computes its shard's gradients of
    the loss / N and pushes them into the accumulators (``assign_add`` on the
    parameter server). Once every closure has finished (``join``), one more
    closure applies the accumulated gradients, the mean over the global
    batch, with AdamW, the update colocated with each variable on its
    parameter server, and zeroes the accumulators. This is the synchronous
    parameter server (TF1's SyncReplicasOptimizer); TensorFlow 2's own use of
    the strategy (Keras ``Model.fit``) is asynchronous: each worker applies
    its own gradients when it has them, on weights other workers may have
    moved meanwhile, which no single-process run reproduces. Nothing is
    replicated, so there is no weight spread to compare."""

    engine = "tf.distribute ParameterServerStrategy"
    loop_ranks = 1
    serves_tasks = True

    def __init__(self, be, weights_dir, device: str, head: str, opt: dict):
        if device != "cpu":
            raise Unsupported("tensorflow ps runs on the CPU only here: ParameterServerStrategy "
                              "makes every GPU a worker sees one of its replicas, and the "
                              "launch gives each worker one device")
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        spec = resolver.cluster_spec()
        self.rank, self.world = 0, spec.num_tasks("worker")
        be.set_precision("float32", device)
        auto = auto_class("TF", weights_dir, head)
        with strategy.scope():
            self.model = model = be._from_pretrained(auto, weights_dir)
            variables = model.trainable_variables
            optimizer = be._adamw(opt, variables)
            accum = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                 name=f"accum_{i}") for i, v in enumerate(variables)]
        world = self.world

        def push(ids, labels):
            loss, grads = be._shard_grads(model, variables, ids, labels, head, world)
            for a, g in zip(accum, grads):
                a.assign_add(g)
            return loss

        def apply():
            # read before zeroed: ops on one variable run in program order
            optimizer.apply_gradients(zip([a.read_value() for a in accum], variables))
            for a in accum:
                with tf.device(a.device):  # made on the parameter server, not sent to it
                    a.assign(tf.zeros(a.shape, a.dtype))
            return tf.zeros(())

        def pull_push():  # the step's traffic alone: every weight in, a gradient's bytes out
            total = tf.zeros((), tf.float32)
            for v, a in zip(variables, accum):
                total += tf.cast(tf.reduce_sum(tf.identity(v)), tf.float32)
                a.assign_add(tf.zeros(v.shape, v.dtype))
            return total

        self._push = tf.function(lambda ids, labels: strategy.run(push, (ids, labels)),
                                 autograph=be._AUTOGRAPH)
        self._apply = tf.function(lambda: strategy.run(apply), autograph=be._AUTOGRAPH)
        self._pull_push = tf.function(lambda: strategy.run(pull_push))
        self.setup = (f"ParameterServerStrategy, synchronous: {self.world} worker(s) push "
                      "gradients into accumulators on "
                      f"{spec.num_tasks('ps')} parameter server(s), then one AdamW update "
                      f"there; steps in {be._function_text(False, be._AUTOGRAPH)}")

    def batch(self, ids: np.ndarray, labels: np.ndarray):
        """The global batch as one (ids, labels) shard per worker."""
        n = len(ids) // self.world
        return [(tf.constant(ids[i * n:(i + 1) * n], dtype=tf.int32),
                 tf.constant(labels[i * n:(i + 1) * n], dtype=tf.int32))
                for i in range(self.world)]

    def step(self, batch) -> float:
        """One synchronous step; the mean of the shards' losses (the global batch's)."""
        losses = [self.coordinator.schedule(self._push, args=shard) for shard in batch]
        self.coordinator.join()
        self.coordinator.schedule(self._apply)
        self.coordinator.join()
        return float(np.mean([loss.fetch() for loss in losses]))

    def allreduce_sum(self, value: float) -> float:
        return value  # the chief alone runs the steps: nothing to wait for

    def max_weight_diff(self) -> None:
        return None

    def allreduce_grads_s(self, repeats: int) -> list[float]:
        """Seconds of one step's traffic alone, every worker at once: each
        pulls every weight and pushes a gradient's worth of zeros into the
        accumulators. The first round traces and is not counted."""
        import time

        times = []
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            for _ in range(self.world):
                self.coordinator.schedule(self._pull_push)
            self.coordinator.join()
            if i:
                times.append(time.perf_counter() - t0)
        return times

    def tasks(self) -> list[dict]:
        """Each parameter server's and worker's pid and RSS at its start, ps first."""
        import json
        from pathlib import Path

        from ...core.messages import LAUNCH_DIR_ENV

        found = sorted(Path(os.environ[LAUNCH_DIR_ENV]).glob("*.json"),
                       key=lambda p: (not p.stem.startswith("ps"), p.stem))
        return [dict(json.loads(p.read_text()), name=p.stem) for p in found]

    def task_memory(self, run) -> tuple[list[float], str]:
        """RSS of each parameter server and worker after ``run`` (a step) over
        its RSS at start, ps first; the chief, which holds no variable, is left
        out. Another process's freed heap cannot be trimmed from here: what
        its allocator keeps counts."""
        import psutil

        run()
        return ([float(psutil.Process(t["pid"]).memory_info().rss - t["rss"])
                 for t in self.tasks()],
                "cpu_rss_after_a_step_over_task_start (parameter servers, then workers)")

    def signal_task(self, name: str, sig: int) -> None:
        """Fault injection: send ``sig`` to task ``name`` (``ps-0``, ``worker-1``)."""
        (pid,) = [t["pid"] for t in self.tasks() if t["name"] == name]
        os.kill(pid, sig)

    def close(self) -> None:
        pass
