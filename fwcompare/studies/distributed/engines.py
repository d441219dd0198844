"""The data-parallel engines each framework's modes stand for, and the two
ways a launch scales (shared by the study's params, tables and figures)."""
from __future__ import annotations

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
