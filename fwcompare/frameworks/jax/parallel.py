"""JAX's data-parallel engine (the distributed study): one process of its
multi-process data parallel, on the steps of ``backend.py`` (handed in as
``be``, as TensorFlow's engines take theirs). Where
fwcompare.execution.launch puts a rank's place in its launch (jax.distributed has no
launcher of its own outside a cluster scheduler) is declared with the
framework, in this package's ``__init__``."""
from __future__ import annotations

import os

import numpy as np

from .. import Engine, Unsupported, crc32_of
from . import COORDINATOR_ENV, PROCESS_ID_ENV, PROCESSES_ENV


def _jax():
    import jax
    return jax


class DataParallel(Engine):
    """One process of JAX's multi-process data parallel, started by
    fwcompare.execution.launch (coordinator address, process count and id in
    :data:`COORDINATOR_ENV` and beside it). ``jax.distributed.initialize``
    connects the processes (CPU collectives over gloo, NCCL on GPUs, one GPU
    per local rank); a 1-D global mesh holds one device per process. The
    parameters and AdamW state are replicated over it, the global batch is
    sharded along it (each process gives its own rows:
    ``jax.make_array_from_process_local_data``), and the training study's step
    runs under ``jax.shard_map`` in one ``jax.jit``: each process computes its
    shard's gradients, ``jax.lax.pmean`` averages them over the processes as
    one flat vector (one all-reduce, as DDP's buckets), and every process
    applies the same AdamW update: the update of the mean loss over the
    global batch, as DDP's. Why one vector: over gloo on a CPU an all-reduce
    costs about the same whatever its size, and the step was dozens of times
    slower with the collectives left to XLA's partitioner (a ``jax.jit`` with
    the batch sharded) or to autodiff (docs/measurements.md, "the figures the
    library's comments quoted")."""

    engine = "jax.distributed, jax.shard_map with jax.lax.pmean"

    def __init__(self, be, weights_dir, device: str, head: str, opt: dict, mode: str = "jit",
                 timeout_s: float = 1800.0):
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        jax = _jax()
        if mode != "jit":
            raise Unsupported(f"jax data-parallel mode {mode!r} is not implemented "
                              "(jit: the step jax.jit-compiled over a global mesh)")
        self.world = int(os.environ.get(PROCESSES_ENV, "1"))
        self.rank = int(os.environ.get(PROCESS_ID_ENV, "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            os.environ.get(COORDINATOR_ENV, "127.0.0.1:0"), self.world, self.rank,
            local_device_ids=[local_rank] if device == "gpu" else None,
            initialization_timeout=int(max(timeout_s, 1)), shutdown_timeout_seconds=30)
        self._initialized = True
        platform = be._PLATFORM[device]
        devices = jax.devices(platform)  # every process's, in process order
        if len(devices) != self.world:
            raise RuntimeError(f"{len(devices)} {platform} devices over {self.world} processes: "
                               "one per process expected")
        self.mesh = Mesh(np.array(devices), ("data",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.sharded = NamedSharding(self.mesh, PartitionSpec("data"))
        self.local = be._device(device)
        self.model = model = be.load(weights_dir, device, head)
        from jax.flatten_util import ravel_pytree

        def mean_over_processes(grads, loss):
            flat, unravel = ravel_pytree(grads)
            return unravel(jax.lax.pmean(flat, "data")), jax.lax.pmean(loss, "data")
        tx, train = be._train_function(model, opt, head, reduce=mean_over_processes)
        P = PartitionSpec
        # Replicated over every process's device: each process gives its own
        # copy (a committed single-device array cannot move across hosts).
        state = jax.tree_util.tree_map(
            lambda x: jax.make_array_from_callback(
                np.shape(x), self.replicated, lambda index, h=np.asarray(x): h[index]),
            (model.params, tx.init(model.params), be._loss_scale(False)))
        self.params, self.opt_state, self.scale = state
        # check_vma off: with it, autodiff itself sums the gradient of a
        # replicated input over the processes, a collective per parameter
        # (the slow step above), and the mean below would then average sums.
        # Without it each process's gradients are its own until the one
        # pmean, and the outputs are replicated because every input to the
        # update is.
        per_process = jax.shard_map(train, mesh=self.mesh,
                                    in_specs=(P(), P(), P(), P("data"), P("data")),
                                    out_specs=(P(), P(), P(), P()), check_vma=False)
        self._train = jax.jit(per_process, donate_argnums=(0, 1))
        # The sum over processes of their rows (an all-reduce), replicated.
        self._sum_rows = jax.jit(lambda x: x.sum(axis=0), out_shardings=self.replicated)
        self.n_trainable = int(sum(np.prod(x.shape) for x in
                                   jax.tree_util.tree_leaves(self.params)))
        self.setup = (f"jax.distributed ({'gloo' if device == 'cpu' else 'nccl'} collectives), "
                      f"step jax.jit(jax.shard_map) over a {self.world}-device mesh, "
                      f"gradients jax.lax.pmean, {self.world} process(es)")

    def _global(self, local: np.ndarray):
        """A global array sharded over the processes, from this process's rows."""
        return _jax().make_array_from_process_local_data(self.sharded, local)

    def batch(self, ids: np.ndarray, labels: np.ndarray):
        return (self._global(np.asarray(ids, np.int32)),
                self._global(np.asarray(labels, np.int32)))

    def step(self, batch) -> float:
        """One step on the global batch (this process's rows its shard); the
        loss over the global batch, the same on every process."""
        self.params, self.opt_state, self.scale, loss = self._train(
            self.params, self.opt_state, self.scale, *batch)
        return float(loss)

    def allreduce_sum(self, value: float) -> float:
        """Sum of ``value`` over processes: a barrier that also carries a number."""
        return float(self._sum_rows(self._global(np.array([[value]], np.float32)))[0])

    def _local_params(self) -> list[np.ndarray]:
        return [np.asarray(x.addressable_data(0)) for x in
                _jax().tree_util.tree_leaves(self.params)]

    def weights_crc(self) -> int:
        return crc32_of(self._local_params())

    def max_weight_diff(self) -> float:
        """Largest |w_i - w_j| over every weight and every pair of processes:
        each process's own copy of the replicated parameters, gathered."""
        from jax.experimental import multihost_utils

        worst = 0.0
        for local in self._local_params():
            every = np.asarray(multihost_utils.process_allgather(local, tiled=False))
            worst = max(worst, float((every.max(axis=0) - every.min(axis=0)).max()))
        return worst

    def allreduce_grads_s(self, repeats: int) -> list[float]:
        """Seconds per all-reduce of one step's gradients (a float32 buffer of
        every trainable parameter, as the step's one pmean), measured alone."""
        import time

        jax = _jax()
        rows = self._global(np.zeros((1, self.n_trainable), np.float32))
        jax.block_until_ready(self._sum_rows(rows))  # its compile, untimed
        times = []
        for _ in range(repeats):
            self.allreduce_sum(0.0)
            t0 = time.perf_counter()
            jax.block_until_ready(self._sum_rows(rows))
            times.append(time.perf_counter() - t0)
        return times

    def perturb(self, amount: float) -> None:
        """Fault injection: shift this process's copy of the first weight (tests the check)."""
        jax = _jax()
        leaves, tree = jax.tree_util.tree_flatten(self.params)
        first = np.asarray(leaves[0].addressable_data(0)).copy()
        first.reshape(-1)[0] += amount
        leaves[0] = jax.make_array_from_single_device_arrays(
            leaves[0].shape, leaves[0].sharding, [jax.device_put(first, self.local)])
        self.params = jax.tree_util.tree_unflatten(tree, leaves)

    def close(self) -> None:
        if getattr(self, "_initialized", False):
            self._initialized = False
            _jax().distributed.shutdown()
