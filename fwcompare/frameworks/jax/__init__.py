"""JAX with Flax, declared (light: nothing here imports jax). The backend is
``backend.py``, its data-parallel engine ``parallel.py``, its deployment
exporter and jax.export runtime ``export.py``, its launch (a coordinator,
jax.distributed) ``launch.py``."""
from __future__ import annotations

from ..base import DeployPath, Framework

# What ``parallel.DataParallel`` reads on each rank (``launch.rank_envs`` sets them).
COORDINATOR_ENV = "FWCOMPARE_JAX_COORDINATOR"
PROCESS_ID_ENV = "FWCOMPARE_JAX_PROCESS_ID"
PROCESSES_ENV = "FWCOMPARE_JAX_PROCESSES"

FRAMEWORK = Framework(
    name="jax",
    # jit: jax.jit.
    modes=("eager", "jit"),
    train_modes=("jit",),
    common_modes=("jit",),
    generation_modes=("jit",),
    backend="fwcompare.frameworks.jax.backend",
    worker_env={"USE_TF": "0", "USE_TORCH": "0"},
    preload=("optax", "jmp", "flax.serialization"),
    model_module_prefix="flax_",
    # jit: jax.distributed processes, the step jax.jit over a global mesh.
    dist_modes=("jit",),
    launcher="fwcompare.frameworks.jax.launch",
    # JAX's platforms in the doctor's probe: host placement on a GPU machine
    # needs the CPU too.
    probe_env={"cpu": {"JAX_PLATFORMS": "cpu"}, "gpu": {"JAX_PLATFORMS": "cuda,cpu"}},
    packages=("jax", "jaxlib", "flax"),
    requires=("jax", "flax", "transformers"),
    # every jax.jit is an XLA compile; eager dispatches op by op, each
    # operation compiled by XLA at its first shape
    traced_modes=("*", "eager"),
    compiled_modes=("*", "eager"),
    # memory: arrays on the device; numpy: a NumPy iterator; grain (pipeline.py)
    pipelines=("memory", "numpy", "grain"),
    # a Flax/optax loop under jax.jit (trainer.py)
    fit_stack="flax-loop",
    fit_pipelines=("grain", "numpy", "memory"),
    deploy_paths={
        "jit": DeployPath("jax.jit (the baseline)", "JAX"),
        "jax-export": DeployPath("jax.export with symbolic batch and sequence, serialised StableHLO, deserialised and jitted", "JAX", artifact="jax-export"),
        "jax2tf-tflite": DeployPath("jax2tf.convert, then TFLiteConverter (one artifact per shape)", "LiteRT", artifact="tflite"),
    },
    exporter="fwcompare.frameworks.jax.export:JaxExporter",
    runtimes={"jax-export": "fwcompare.frameworks.jax.export:JaxExport"},
)
