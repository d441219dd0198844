"""JAX backend (transformers' Flax classes)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ...core.atomic import write_atomic
from .. import (Unsupported, auto_class, check_precision, forward_fn, head_output, looks_like_oom,
                native_copy, one_converter, tf32_note, module_backend)
from .generate import make_generator  # noqa: F401  (the contract's call)

_PLATFORM = {"cpu": "cpu", "gpu": "cuda"}
# Initial dynamic loss scale for float16 training: jmp's documented default
# (TensorFlow's too; PyTorch's GradScaler starts at 2**16).
INITIAL_LOSS_SCALE = 2.0 ** 15


def configure(threads: int, device: str, options: dict | None = None) -> None:
    # XLA's CPU client has no intra-op thread setting; the worker pins the
    # process to ``threads`` cores (sched_setaffinity) for every framework.
    # Without PyTorch (the runner sets USE_TORCH=0: the weights are converted
    # from safetensors with numpy; importing torch cost a JAX worker seconds).
    os.environ.setdefault("JAX_PLATFORMS", _PLATFORM[device])
    # On a GPU, XLA takes 75% of the memory at its first use unless told not
    # to: the workers of the other frameworks (alive beside it in the
    # interleaved schedule) would find it gone. Allocating as needed changes
    # none of the allocator's counters. TensorFlow's workers grow likewise
    # (tensorflow.configure); PyTorch's caching allocator does by default.
    if device == "gpu":
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    cache = os.environ.get("FWCOMPARE_XLA_CACHE")  # launch.use_compile_cache
    if cache:  # every program, however quick its compile
        jax = _jax()
        jax.config.update("jax_compilation_cache_dir", os.path.join(cache, "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import transformers

    transformers.FlaxAutoModel


def _jax():
    import jax
    return jax


def _device(device: str):
    """This process's first device of the platform (in a multi-process run,
    ``jax.devices()`` lists every process's: the first is process 0's)."""
    jax = _jax()
    try:
        return jax.local_devices(backend=_PLATFORM[device])[0]
    except RuntimeError as exc:
        raise Unsupported(f"device {device} not available to JAX: {exc}") from exc


def _compute_dtype(dtype: str):
    """The jnp dtype a precision computes in (tf32 and float32: float32)."""
    import jax.numpy as jnp

    return {"bfloat16": jnp.bfloat16, "float16": jnp.float16}.get(dtype, jnp.float32)


def set_precision(dtype: str, device: str) -> None:
    """float32 matmuls at full precision ("highest": on a GPU, XLA's default
    would use TF32), "tensorfloat32" for tf32; bfloat16/float16 are Flax's
    compute dtype (set at load) with fp32 parameters."""
    check_precision(dtype, device)
    if device == "gpu":
        _jax().config.update("jax_default_matmul_precision",
                             "tensorfloat32" if dtype == "tf32" else "highest")


def precision_setup(dtype: str, device: str) -> str:
    return ((f"Flax compute dtype {dtype}, fp32 params" if dtype in ("bfloat16", "float16")
             else "float32")
            + (", jmp dynamic loss scale in training" if dtype == "float16" else "")
            + tf32_note(dtype, device))


def flax_copy(weights_dir) -> Path | None:
    """Where the Flax-native copy of ``weights_dir``'s safetensors is kept, or
    None without one (``native_copy``)."""
    return native_copy(weights_dir, "flax", ".msgpack")


def load(weights_dir, device: str, head: str = "base", dtype: str = "float32"):
    """Parameters stay float32 (the master weights); ``dtype`` is the compute
    dtype of the Flax module for bfloat16/float16.

    The model is built without initialisation (``_do_init=False``: no random
    parameters, no jitted init) and given the shared weights: the first load
    converts the PyTorch safetensors (:func:`_from_safetensors`) and keeps a
    Flax-native copy (``flax_copy``), later loads read that copy: both far
    faster than ``from_pt``, which initialises random parameters with a jitted
    init first (measurements.md, "comments quoted"). The parameters are identical to
    ``from_pt``'s; the equivalence gate checks them anyway."""
    import jax.numpy as jnp
    import transformers
    from flax import serialization

    _last_lower[0] = None  # a previous model's program: let it go before this one loads
    set_precision(dtype, device)
    compute = _compute_dtype(dtype)
    auto = auto_class("Flax", weights_dir, head)
    config = transformers.AutoConfig.from_pretrained(weights_dir, local_files_only=True)
    _numpy_clip_keywords(config.model_type)
    model = auto.from_config(config, dtype=compute, _do_init=False)
    copy = flax_copy(weights_dir)
    with one_converter(copy):
        if copy is not None and copy.is_file():
            params = serialization.msgpack_restore(copy.read_bytes())
        else:
            params = _from_safetensors(model, weights_dir)
            if copy is not None:
                data = serialization.msgpack_serialize(params)
                write_atomic(copy, lambda tmp: tmp.write_bytes(data))
    # transformers sets params only on an initialised model; its setter then
    # checks that no parameter of the architecture is missing.
    model._is_initialized = True
    model.params = _jax().device_put(params, _device(device))
    return model


class _ClipKeywords:
    """``jax.numpy`` whose ``clip`` also takes NumPy's old ``a_min``/``a_max``."""

    def __init__(self, jnp):
        self._jnp = jnp

    def __getattr__(self, name):
        return getattr(self._jnp, name)

    def clip(self, x, a_min=None, a_max=None, *, min=None, max=None):  # noqa: A002
        return self._jnp.clip(x, min=a_min if min is None else min,
                              max=a_max if max is None else max)


# transformers 4.57's Flax model modules that call ``jnp.clip(x, a_max=...)``,
# keywords JAX 0.10 removed (a TypeError when the model is built or traced).
_OLD_CLIP = {"t5": "transformers.models.t5.modeling_flax_t5",
             "longt5": "transformers.models.longt5.modeling_flax_longt5"}


def _numpy_clip_keywords(model_type: str) -> None:
    """Give the Flax module of ``model_type``, where it calls ``jnp.clip``
    with NumPy's old keywords, a ``jnp`` that still takes them (that module
    alone; once per process)."""
    import importlib
    import inspect

    if model_type not in _OLD_CLIP:
        return
    module = importlib.import_module(_OLD_CLIP[model_type])
    if "a_max" not in inspect.signature(module.jnp.clip).parameters:
        module.jnp = _ClipKeywords(module.jnp)


def _from_safetensors(model, weights_dir) -> dict:
    """The Flax parameters of ``weights_dir``'s PyTorch safetensors, converted
    by transformers' own function (names and layouts), which needs only the
    architecture's parameter shapes: those of the uninitialised ``model``.
    Keys the architecture does not have are dropped, as ``from_pretrained``
    drops them."""
    from flax.traverse_util import flatten_dict, unflatten_dict
    from safetensors.numpy import load_file
    from transformers.modeling_flax_pytorch_utils import convert_pytorch_state_dict_to_flax

    from ...core.models import WEIGHTS_FILE

    class Shapes:  # what the converter reads of a model
        params = model.params_shape_tree
        base_model_prefix = model.base_model_prefix
    state = convert_pytorch_state_dict_to_flax(load_file(Path(weights_dir) / WEIGHTS_FILE),
                                               Shapes)
    flat = flatten_dict(state)
    return unflatten_dict({k: v for k, v in flat.items() if k in model.required_params})


def n_params(model) -> int:
    jax = _jax()
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(model.params)))


def make_forward(model, mode: str, device: str, head: str = "base", dtype: str = "float32",
                 options: dict | None = None):
    """eager: op by op; jit: ``jax.jit``, compiled on the first call and for
    each new input shape; the count is the jitted function's cache size
    (compiled executables). The precision is the model's compute dtype (set
    at load)."""
    jax = _jax()

    def apply(params, ids):
        return head_output(model(ids, params=params, train=False), head)
    if mode == "eager":
        def eager(ids):
            _last_lower[0] = None
            return apply(model.params, ids)
        return forward_fn(eager, "eager (op by op)")
    if mode == "jit":
        jitted = jax.jit(apply)

        def fn(ids):
            _last_lower[0] = lambda: jitted.lower(model.params, ids)
            return jitted(model.params, ids)
        return forward_fn(fn, "jax.jit", getattr(jitted, "_cache_size", None))
    raise Unsupported(f"jax mode {mode!r} is not implemented")


def make_train_step(model, mode: str, device: str, opt: dict, head: str,
                    accumulation_steps: int = 1, dtype: str = "float32",
                    checkpointing: bool = False):
    """Forward, loss, gradient and optax AdamW in one jax.jit-compiled function;
    ``step((ids, labels)) -> loss``. Dropout is off in the config, so the
    deterministic call computes the same function as the other frameworks'
    training mode. Mixed precision: the model's compute dtype with fp32
    parameters and optimizer state; float16 adds jmp's dynamic loss scale (a
    step with non-finite gradients keeps the old parameters and halves the
    scale). ``step.loss_scale()`` is the current scale (NaN without scaling).
    Accumulation: the micro-batches' gradients summed in a ``jax.lax.scan``, so
    XLA runs one micro-batch at a time (an unrolled loop leaves it free to keep
    every micro-batch's activations at once). ``checkpointing``: the Flax
    model's own gradient checkpointing (``flax.linen.remat`` of each layer),
    where transformers offers it."""
    jax = _jax()
    if mode != "jit":
        raise Unsupported(f"jax training mode {mode!r} is not implemented")
    if checkpointing:
        try:
            model.enable_gradient_checkpointing()
        except NotImplementedError:
            raise Unsupported(
                f"transformers' Flax {model.config.model_type} has no gradient checkpointing "
                "(enable_gradient_checkpointing is not implemented for it; its Flax BERT and "
                "RoBERTa have it)") from None
    scaled = dtype == "float16"
    tx, train = _train_function(model, opt, head, accumulation_steps, scaled)
    compiled = jax.jit(train, donate_argnums=(0, 1))
    # Committed to the device like every later step's outputs: an uncommitted
    # leaf (optax's step count) made the second call compile the step again.
    state = jax.device_put({"params": model.params, "opt": tx.init(model.params),
                            "scale": _loss_scale(scaled)}, _device(device))

    def step(batch):
        state["params"], state["opt"], state["scale"], loss = compiled(
            state["params"], state["opt"], state["scale"], *batch)
        _last_lower[0] = lambda: compiled.lower(state["params"], state["opt"], state["scale"],
                                                *batch)
        return loss
    step.loss_scale = lambda: (float(state["scale"].loss_scale) if scaled else float("nan"))
    return step


def _loss_scale(scaled: bool):
    import jax.numpy as jnp
    import jmp

    return (jmp.DynamicLossScale(jnp.asarray(INITIAL_LOSS_SCALE, jnp.float32)) if scaled
            else jmp.NoOpLossScale())


def _train_function(model, opt: dict, head: str, accumulation_steps: int = 1,
                    scaled: bool = False, reduce=None):
    """(optax AdamW, ``train(params, opt_state, scale, ids, labels) ->
    (params, opt_state, scale, loss)``): one training step as a pure function,
    the loss the mean over ``ids``' batch (see :func:`make_train_step`).
    ``reduce(grads, loss) -> (grads, loss)``, if given, runs between the
    gradients and the update (data parallel: their mean over the processes)."""
    import jax.numpy as jnp
    import jmp
    import optax

    jax = _jax()
    tx = optax.adamw(opt["learning_rate"], b1=opt["beta1"], b2=opt["beta2"], eps=opt["eps"],
                     weight_decay=opt["weight_decay"])
    tree_map = jax.tree_util.tree_map

    def loss_fn(params, scale, ids, labels):
        logits = model(ids, params=params, train=False).logits.astype(jnp.float32)
        if head == "causal_lm":  # predict token t+1 from tokens <= t
            logits, labels = logits[:, :-1], labels[:, 1:]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return scale.scale(loss), loss

    def grads_of(params, scale, ids, labels):
        g, loss = jax.grad(loss_fn, has_aux=True)(params, scale, ids, labels)
        return scale.unscale(g), loss

    def train(params, opt_state, scale, ids, labels):
        if accumulation_steps == 1:
            grads, total = grads_of(params, scale, ids, labels)
        else:
            def micro(carry, batch):
                g, loss = grads_of(params, scale, *batch)
                return (tree_map(jnp.add, carry[0], g), carry[1] + loss), None

            split = [x.reshape(accumulation_steps, -1, *x.shape[1:]) for x in (ids, labels)]
            zero = (tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
            (grads, total), _ = jax.lax.scan(micro, zero, tuple(split))
            grads = tree_map(lambda x: x / accumulation_steps, grads)
            total = total / accumulation_steps
        if reduce is not None:
            grads, total = reduce(grads, total)

        def update(_):
            updates, new_opt = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_opt

        if not scaled:
            return *update(None), scale, total
        # A step whose gradients overflowed keeps the old parameters and state:
        # a branch, as optax.apply_if_finite does, not jmp.select_tree of new and
        # old, which keeps both alive and compiled and stepped far slower
        # (benchmarks/cpu/loss_scale.py; measurements.md, "comments quoted").
        finite = jmp.all_finite(grads)
        new_params, new_opt = jax.lax.cond(finite, update, lambda _: (params, opt_state), None)
        return new_params, new_opt, scale.adjust(finite), total
    return tx, train


def make_batch(ids: np.ndarray, labels: np.ndarray, device: str):
    return make_inputs(ids, device), make_inputs(labels, device)


def make_inputs(ids: np.ndarray, device: str):
    return _jax().device_put(ids.astype(np.int32), _device(device))


def fit(train, held_out, weights_dir, device: str, settings, log) -> list[dict]:
    from .trainer import fit as run

    return run(load, train, held_out, weights_dir, device, settings, log, _device(device))


def make_pipeline(kind: str, examples, batch_size: int, device: str):
    from .pipeline import Pipeline

    return Pipeline(kind, examples, batch_size, _device(device))


def sync(out) -> None:
    if out is not None:
        _jax().block_until_ready(out)


def to_numpy(out) -> np.ndarray:
    return np.asarray(out, dtype=np.float64)


def make_peak_kernels(n: int, elements: int, dtype: str, device: str):
    """The hardware-peak probes (fwcompare.measure.peak): an n x n matmul in ``dtype``
    and an elementwise add over ``elements`` float32 whose input buffer is
    donated to its output (one read, one write, no fresh allocation), each
    jitted."""
    jax = _jax()
    import jax.numpy as jnp

    dev = _device(device)
    dt = _compute_dtype(dtype)
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    a = jax.device_put(jax.random.normal(k1, (n, n)).astype(dt), dev)
    b = jax.device_put(jax.random.normal(k2, (n, n)).astype(dt), dev)
    state = [jax.device_put(jnp.zeros((elements,), jnp.float32), dev)]
    mm = jax.jit(jnp.matmul)
    add = jax.jit(lambda v: v + 1.0, donate_argnums=0)

    def step():
        state[0] = add(state[0])
        return state[0]
    return (lambda: mm(a, b)), step


# JAX has no reset for its allocator's peak (jax-ml/jax#8096): the counter runs
# from process start, and loading the model or compiling a cell (XLA's
# autotuning) leaves a peak above a small cell's (seen on an H100: 6 of 8
# bert-base cells had no figure of their own). ``gpu_memory`` lifts the
# counter to the bytes in use before the call instead (memory.lifted_peak).
# The last jitted call's program, for XLA's memory analysis of it:
_last_lower: list = [None]


def memory_plan_bytes() -> int | None:
    """What XLA's compiled plan of the last jitted call allocates beyond its
    arguments: temporaries plus outputs, less outputs written into donated
    arguments (``compiled.memory_analysis()``); None after an eager call, and
    where the program cannot be lowered again (jmp's loss-scale state does not
    take lowering's placeholders): a cross-check never fails a cell. The
    compile is the one the call made (jax caches it): nothing is compiled again."""
    lower = _last_lower[0]
    if lower is None:
        return None
    try:
        m = lower().compile().memory_analysis()
    except Exception:
        return None
    if m is None:
        return None
    return int(m.temp_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)


def gpu_memory(run) -> dict:
    """The peak of ``run()`` by JAX's allocator, the counter lifted to the
    bytes in use first (memory.lifted_peak); ``xla_plan_bytes`` beside it."""
    from ...core.memory import lifted_peak

    dev = _device("gpu")

    def stats():
        s = dev.memory_stats() or {}
        return int(s.get("bytes_in_use", 0)), int(s.get("peak_bytes_in_use", 0))
    plan = memory_plan_bytes()
    return dict(lifted_peak(stats, lambda nbytes: _hold(dev, nbytes), run, plan,
                            "jax_allocator"), xla_plan_bytes=plan)


def _hold(dev, nbytes: int):
    """A buffer of ``nbytes`` on ``dev``, allocated before this returns: a
    host array copied over, which allocates the buffer and nothing else.
    (``jnp.zeros(..., device=dev)`` runs a program whose 256-byte scalar
    argument lifted the peak past the bytes in use at every try: on a GPU no
    JAX cell could be lifted and the doctor failed.)"""
    import jax
    import numpy as np

    return jax.device_put(np.zeros(int(nbytes), np.uint8), dev).block_until_ready()


def is_oom(exc: BaseException) -> bool:
    return looks_like_oom(exc)


def runtime_info(device: str) -> dict:
    jax = _jax()
    dev = _device(device)
    return {"framework_version": jax.__version__,
            "framework_threads": len(os.sched_getaffinity(0)),
            "device_name": getattr(dev, "device_kind", str(dev))}


def data_parallel(weights_dir, device: str, head: str, opt: dict, mode: str = "jit",
                  timeout_s: float = 1800.0):
    """The contract's ``DataParallel``: one process of JAX's multi-process data
    parallel (``parallel.py`` holds it)."""
    from . import parallel

    return parallel.DataParallel(sys.modules[__name__], weights_dir, device, head, opt, mode,
                                 timeout_s)


def tf32_enabled(device: str) -> bool:
    return _jax().config.jax_default_matmul_precision == "tensorfloat32"


BACKEND = module_backend(__name__, "JaxBackend", memory_plan=True,
                         DataParallel=data_parallel)
