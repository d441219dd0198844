"""The data-parallel engines each framework's modes stand for, and the two
ways a launch scales (shared by the study's params, tables and figures)."""
from __future__ import annotations

from ...frameworks import registered

# The engines each framework's modes stand for, as its package declares them
# (``Framework.dist_modes``; the first: the plain engine, what the scaling
# claim judges). torch: eager (DistributedDataParallel under torchrun),
# ddp-fp16 / ddp-bf16, fsdp; tensorflow: graph (MultiWorkerMirroredStrategy),
# ps (ParameterServerStrategy); jax: jit (jax.distributed over a global mesh).
DIST_MODES = {fw.name: fw.dist_modes for fw in registered() if fw.dist_modes}
SCALINGS = ("weak", "strong")
