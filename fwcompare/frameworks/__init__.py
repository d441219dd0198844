"""One backend per framework, answering the same calls.

Each module (torch.py, tensorflow.py, jax.py) provides:

- ``configure(threads, device, options)``: thread counts and device, before
  any work; ``options`` (:func:`backend_options`): ``tf_autograph``, whether
  TensorFlow's ``tf.function`` steps use AutoGraph (its default when not told);
- ``load(weights_dir, device, head, dtype)``: the model with the shared
  weights (fp32 in every precision), set up for precision ``dtype``;
- ``n_params(model)``: parameter count;
- ``make_forward(model, mode, device, head, dtype, options)``: a callable
  ``fn(inputs) -> output`` (hidden states of the base model, logits with a
  head) for an inference mode (raises Unsupported for a mode it cannot run).
  A mode that traces or compiles does so in its first call, never before, so
  the first call's time is the time to first result. ``fn.setup`` says how the
  mode was built; ``fn.compile_count()`` is the number of traces or
  compilations the framework has counted so far (None where it exposes none).
  ``options``: mode settings from the params (``torch_compile_mode``,
  ``torch_compile_dynamic``);
- ``make_train_step(model, mode, device, opt, head, accumulation_steps, dtype,
  checkpointing)``: ``step((ids, labels)) -> loss``, with ``step.loss_scale()``;
  accumulation runs one micro-batch at a time; ``checkpointing``: the model's
  own gradient checkpointing (Unsupported where transformers offers none);
- ``precision_setup(dtype, device)``: how that framework runs ``dtype``, in words;
- ``make_inputs(ids, device)``: framework tensor of int token ids;
- ``sync(out)``: wait until ``out`` is computed;
- ``to_numpy(out)``: the last hidden state as float64 NumPy;
- ``gpu_memory(run)``: the GPU memory of ``run()`` (one call or training
  step and its sync, after warm-up), the same scope in every framework: bytes
  in use at its highest point by the framework's own allocator, the resident
  weights included; returns ``peak_mem_bytes`` and ``mem_method`` (see
  fwcompare.memory; on the CPU the caller measures peak RSS instead);
- ``memory_plan_bytes()``: what XLA's compiled plan of the last call
  allocates beyond its arguments (JAX's jit; None elsewhere), the cross-check
  recorded as ``xla_plan_bytes``;
- ``is_oom(exc)``: whether an exception means out of memory;
- ``runtime_info(device)``: versions, threads, device name, TF32 flags.

:class:`Backend` states the same contract as code; a test checks every backend
against it.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Any, Callable, Protocol

import numpy as np

from ..spec import FRAMEWORKS


class Backend(Protocol):
    """The contract every backend module (torch.py, tensorflow.py, jax.py)
    fulfils, as code: a study's plan and the cell measurement call only these."""

    def configure(self, threads: int, device: str, options: dict | None = None) -> None: ...
    def load(self, weights_dir, device: str, head: str = "base", dtype: str = "float32"): ...
    def n_params(self, model) -> int: ...
    def make_forward(self, model, mode: str, device: str, head: str = "base",
                     dtype: str = "float32", options: dict | None = None): ...
    def make_train_step(self, model, mode: str, device: str, opt: dict, head: str,
                        accumulation_steps: int = 1, dtype: str = "float32",
                        checkpointing: bool = False): ...
    def precision_setup(self, dtype: str, device: str) -> str: ...
    def make_inputs(self, ids: np.ndarray, device: str): ...
    def make_batch(self, ids: np.ndarray, labels: np.ndarray, device: str): ...
    def sync(self, out) -> None: ...
    def to_numpy(self, out) -> np.ndarray: ...
    def gpu_memory(self, run: Callable[[], Any]) -> dict: ...
    def memory_plan_bytes(self) -> int | None: ...
    def is_oom(self, exc: BaseException) -> bool: ...
    def runtime_info(self, device: str) -> dict: ...


# Keep transformers from importing the other frameworks into a worker (it
# imported TensorFlow into the PyTorch worker: +700 MB of RSS, unrelated work).
WORKER_ONLY = {"torch": {"USE_TF": "0", "USE_FLAX": "0"}, "tensorflow": {"USE_FLAX": "0"},
         "jax": {"USE_TF": "0", "USE_TORCH": "0"}}


def worker_env(threads: int, device: str, framework: str) -> dict:
    """The environment of a worker process of ``framework``: its thread counts,
    offline transformers, the project on PYTHONPATH, no GPU on a CPU run."""
    from ..paths import ROOT

    e = dict(os.environ)
    e.update(WORKER_ONLY.get(framework, {"USE_TF": "0", "USE_FLAX": "0"}))
    e.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
             TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", HF_HUB_OFFLINE="1",
             TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
             PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
                 [str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if device == "cpu":
        e.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return e


# The params that change how a backend builds its modes and steps (the
# keys each study declares; a study without one leaves the backend's default).
BACKEND_OPTIONS = ("torch_compile_mode", "torch_compile_dynamic", "tf_autograph")


def backend_options(params) -> dict:
    """The params of :data:`BACKEND_OPTIONS` that ``params`` has: what
    ``configure`` and ``make_forward`` take as ``options``."""
    return {k: params[k] for k in BACKEND_OPTIONS if k in params}


def contract_gaps(backend) -> list[str]:
    """Names of the contract a backend lacks (none for the three built in)."""
    names = [n for n in Backend.__dict__.get("__annotations__", {})]
    names += [n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")]
    return [n for n in names if not hasattr(backend, n)]


class Unsupported(RuntimeError):
    """This framework/mode/model/device combination cannot run; not a failure."""


_OOM_MARKERS = ("out of memory", "resource_exhausted", "resourceexhausted",
                "can't allocate memory", "oom when allocating")


def check_precision(dtype: str, device: str) -> None:
    """Raise Unsupported for a precision the device cannot run."""
    from ..spec import DTYPES

    if dtype not in DTYPES:
        raise ValueError(f"unknown precision {dtype!r}; known: {', '.join(DTYPES)}")
    if dtype == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a tensor-core matmul mode of NVIDIA GPUs (Ampere and "
                          "later); a CPU has no TF32 mode")


def tf32_note(dtype: str, device: str) -> str:
    """The TF32 part of a row's ``precision_setup`` (GPUs only)."""
    return f"; TF32 {'on' if dtype == 'tf32' else 'off'}" if device == "gpu" else ""


def forward_fn(fn, setup: str, compile_count=None):
    """``fn`` with ``fn.setup`` and ``fn.compile_count`` (see make_forward)."""
    fn.setup = setup
    fn.compile_count = compile_count or (lambda: None)
    return fn


def looks_like_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(m in text for m in _OOM_MARKERS)


_MAPPING_SUFFIX = {"base": "", "seq_cls": "_FOR_SEQUENCE_CLASSIFICATION",
                   "causal_lm": "_FOR_CAUSAL_LM", "seq2seq_lm": "_FOR_SEQ_TO_SEQ_CAUSAL_LM"}


def auto_class(prefix: str, weights_dir, head: str):
    """transformers' Auto class for a head ("", "TF" or "Flax" prefix), or
    Unsupported when transformers has no such class for the architecture."""
    import transformers

    from ..models import AUTO_CLASS

    if prefix:
        config = transformers.AutoConfig.from_pretrained(weights_dir, local_files_only=True)
        mapping = getattr(transformers, f"{prefix.upper()}_MODEL{_MAPPING_SUFFIX[head]}_MAPPING")
        if type(config) not in mapping:
            raise Unsupported(f"transformers has no {prefix} {head} class for "
                              f"{config.model_type}")
    return getattr(transformers, prefix + AUTO_CLASS[head])


def native_copy(weights_dir, kind: str, suffix: str = ""):
    """Where a framework keeps its native copy of ``weights_dir``'s safetensors
    (``CACHE/kind/KEY{suffix}``, KEY from the source file's path, size and
    mtime: a new weights file gets a copy of its own), or None without one.
    Converting from PyTorch's layout on every load cost JAX 7.6 s and
    TensorFlow 4.2-5.8 s for bert-base here; the copies load in 1.2 s and 3.1 s."""
    import hashlib
    from pathlib import Path

    from ..models import WEIGHTS_FILE
    from ..paths import CACHE

    src = Path(weights_dir) / WEIGHTS_FILE
    if not src.is_file():
        return None
    st = src.stat()
    key = hashlib.sha1(f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    return CACHE / kind / f"{key[:16]}{suffix}"


@contextlib.contextmanager
def one_converter(copy):
    """Held while a native copy is looked for and, if missing, written: the
    lanes of one model build at once, so without it each converted the same
    weights beside the others (three JAX precisions of mixed_precision took
    37-39 s each). The first converts; the others wait, then read the copy.
    The lock (flock) goes with the process that holds it, a killed one too."""
    if copy is None:
        yield
        return
    import fcntl

    copy.parent.mkdir(parents=True, exist_ok=True)
    with open(copy.parent / f".{copy.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def get_backend(framework: str) -> ModuleType:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    return importlib.import_module(f"{__name__}.{framework}")
