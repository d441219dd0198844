"""The data-parallel engines each framework's modes stand for, and the two
ways a launch scales (shared by the study's params, tables and figures)."""
from __future__ import annotations

from ...frameworks import declared

# The engines each framework's modes stand for, as its package declares them
# (``Framework.dist_modes``; the first: the plain engine, what the scaling
# claim judges). torch: eager (DistributedDataParallel under torchrun),
# ddp-fp16 / ddp-bf16, fsdp; tensorflow: graph (MultiWorkerMirroredStrategy),
# ps (ParameterServerStrategy); jax: jit (jax.distributed over a global mesh).
DIST_MODES = declared(lambda fw: fw.dist_modes)
SCALINGS = ("weak", "strong")
