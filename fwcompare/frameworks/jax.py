"""JAX backend (transformers' Flax classes)."""
from __future__ import annotations

import os

import numpy as np

from . import Unsupported, looks_like_oom

_PLATFORM = {"cpu": "cpu", "gpu": "cuda"}


def configure(threads: int, device: str) -> None:
    # XLA's CPU client has no intra-op thread setting; the worker pins the
    # process to ``threads`` cores (sched_setaffinity) for every framework.
    os.environ.setdefault("JAX_PLATFORMS", _PLATFORM[device])
    import torch  # noqa: F401  (from_pt conversion needs it: import before the memory baseline)
    import transformers

    transformers.FlaxAutoModel


def _jax():
    import jax
    return jax


def _device(device: str):
    jax = _jax()
    try:
        return jax.devices(_PLATFORM[device])[0]
    except RuntimeError as exc:
        raise Unsupported(f"device {device} not available to JAX: {exc}") from exc


def load(weights_dir, device: str):
    import transformers

    config = transformers.AutoConfig.from_pretrained(weights_dir, local_files_only=True)
    if type(config) not in transformers.FLAX_MODEL_MAPPING:
        raise Unsupported(f"transformers has no Flax class for {config.model_type}")
    model = transformers.FlaxAutoModel.from_pretrained(weights_dir, from_pt=True,
                                                       local_files_only=True)
    model.params = _jax().device_put(model.params, _device(device))
    return model


def n_params(model) -> int:
    jax = _jax()
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(model.params)))


def make_forward(model, mode: str, device: str):
    jax = _jax()

    def apply(params, ids):
        return model(ids, params=params, train=False).last_hidden_state
    if mode == "eager":
        return lambda ids: apply(model.params, ids)
    if mode == "jit":
        jitted = jax.jit(apply)
        return lambda ids: jitted(model.params, ids)
    raise Unsupported(f"jax mode {mode!r} is not implemented")


def make_inputs(ids: np.ndarray, device: str):
    return _jax().device_put(ids.astype(np.int32), _device(device))


def sync(out) -> None:
    if out is not None:
        _jax().block_until_ready(out)


def to_numpy(out) -> np.ndarray:
    return np.asarray(out, dtype=np.float64)


def reset_peak_memory(device: str) -> None:
    # JAX exposes no reset: its peak counter runs from process start.
    return None


def peak_memory_bytes(device: str) -> int | None:
    if device == "gpu":
        stats = _device(device).memory_stats() or {}
        return int(stats.get("peak_bytes_in_use", 0)) or None
    return None


def is_oom(exc: BaseException) -> bool:
    return looks_like_oom(exc)


def runtime_info(device: str) -> dict:
    jax = _jax()
    dev = _device(device)
    return {"framework_version": jax.__version__,
            "framework_threads": len(os.sched_getaffinity(0)),
            "device_name": getattr(dev, "device_kind", str(dev))}
