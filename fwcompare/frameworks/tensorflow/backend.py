"""TensorFlow backend (transformers' TF classes through tf-keras)."""
from __future__ import annotations

import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402

# PyPI's torch on Linux brings triton, and triton imported after TensorFlow 2.21
# kills the process (SIGSEGV: `import tensorflow; import triton` alone does it; the
# other order loads both). transformers' TF classes import its generation code,
# which imports torch._dynamo, which imports triton. So: triton first where it is
# installed (a fraction of a second; a CPU build of torch has none); where TensorFlow is already
# loaded (a notebook imported it), triton is marked absent, as torch and
# transformers then find it (a TensorFlow process compiles nothing with it).
if "tensorflow" not in sys.modules:
    with contextlib.suppress(ImportError):
        import triton  # noqa: E402,F401
elif "triton" not in sys.modules:
    sys.modules["triton"] = None
import tensorflow as tf  # noqa: E402
import transformers  # noqa: E402

from .. import (Unsupported, auto_class, check_precision, forward_fn, head_output,  # noqa: E402
                looks_like_oom, native_copy, one_converter, tf32_note, module_backend)
from .generate import make_generator  # noqa: E402,F401  (the contract's call)

# tf-keras mixed-precision policies: variables float32, compute in the policy's dtype.
_POLICY = {"float32": "float32", "tf32": "float32", "bfloat16": "mixed_bfloat16",
           "float16": "mixed_float16"}


def _device_name(device: str) -> str:
    if device == "gpu":
        if not tf.config.list_physical_devices("GPU"):
            raise Unsupported("device gpu requested but TensorFlow sees no GPU")
        return "/GPU:0"
    return "/CPU:0"


# Whether the tf.function steps below convert Python control flow with
# AutoGraph: tf.function's own default until ``configure`` is told otherwise
# (the ``tf_autograph`` param). The models' and steps' Python has no
# tensor-dependent control flow, so the graph is the same either way
# (tests/test_equivalence.py compares the ops); AutoGraph's conversion of
# transformers' layer code is most of a first call's trace (docs/measurements.md,
# "the figures the library's comments quoted").
_AUTOGRAPH = True


def configure(threads: int, device: str, options: dict | None = None) -> None:
    global _AUTOGRAPH
    _AUTOGRAPH = bool((options or {}).get("tf_autograph", True))
    cache = os.environ.get("FWCOMPARE_XLA_CACHE")  # launch.use_compile_cache
    if cache:  # read when XLA first compiles, after the fork
        flag = f"--tf_xla_persistent_cache_directory={os.path.join(cache, 'tensorflow')}"
        os.environ["TF_XLA_FLAGS"] = f"{os.environ.get('TF_XLA_FLAGS', '')} {flag}".strip()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    else:
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
    transformers.TFAutoModel  # resolve the lazy import now, before the memory baseline


def set_precision(dtype: str, device: str) -> None:
    """The tf-keras global policy for ``dtype`` (it applies to layers built
    afterwards), and TF32 on only for "tf32": TensorFlow enables TF32 by
    default on GPUs, so float32 switches it off."""
    import tf_keras

    check_precision(dtype, device)
    tf_keras.mixed_precision.set_global_policy(_POLICY[dtype])
    tf.config.experimental.enable_tensor_float_32_execution(dtype == "tf32")


def precision_setup(dtype: str, device: str) -> str:
    return (f"tf-keras policy {_POLICY[dtype]}"
            + (", LossScaleOptimizer in training" if dtype == "float16" else "")
            + tf32_note(dtype, device))


def tf_copy(weights_dir):
    """Where the TensorFlow-native copy of ``weights_dir`` is kept (a directory
    of config.json and tf_model.h5), or None without one (``native_copy``)."""
    return native_copy(weights_dir, "tf")


@contextlib.contextmanager
def _no_random_init():
    """Variables start at zero instead of random draws while a model is built
    to be loaded: the checkpoint overwrites every value. Drawing them took
    most of a load from the native copy (measurements.md, "comments quoted"), and a quick
    report loads about twenty TensorFlow models. A
    variable the checkpoint lacked would stay zero where it was random: the
    equivalence gate fails it either way."""
    import tf_keras

    inits = tf_keras.initializers
    classes = (inits.TruncatedNormal, inits.RandomNormal, inits.RandomUniform,
               inits.VarianceScaling)  # the last: Glorot and He, Keras' defaults
    own = {c: c.__dict__.get("__call__") for c in classes}

    def zeros(self, shape, dtype=None, **kwargs):
        return tf.zeros(shape, dtype=tf.as_dtype(dtype or tf_keras.backend.floatx()))
    for c in classes:
        c.__call__ = zeros
    try:
        yield
    finally:
        for c, call in own.items():
            if call is None:
                del c.__call__
            else:
                c.__call__ = call


def _from_pretrained(auto, weights_dir):
    """The model from the TensorFlow-native copy of the weights; the first
    load converts the PyTorch safetensors (``from_pt``) and writes the copy
    (faster than ``from_pt`` each time: measurements.md, "comments quoted"). The
    equivalence gate checks the result either way."""
    with _no_random_init():
        return _load_native(auto, weights_dir)


def _load_native(auto, weights_dir):
    from ...core.models import ONE_FILE

    copy = tf_copy(weights_dir)
    # Not one converter at a time inside a strategy's scope: building the model
    # there is a collective of every rank, so a rank waiting for the lock
    # would hang the rank that holds it (each rank converts on its own).
    with contextlib.nullcontext() if tf.distribute.has_strategy() else one_converter(copy):
        if copy is None or not (copy / "tf_model.h5").is_file():
            model = auto.from_pretrained(weights_dir, from_pt=True, local_files_only=True)
            if copy is not None:
                import shutil
                import tempfile

                # A rank in a strategy's scope skipped one_converter, which
                # makes the directory: a fresh cache has none yet.
                copy.parent.mkdir(parents=True, exist_ok=True)
                tmp = tempfile.mkdtemp(dir=copy.parent, prefix=f".{copy.name}-")
                try:
                    model.save_pretrained(tmp, max_shard_size=ONE_FILE)  # tf_model.h5
                    os.rename(tmp, copy)  # whole or not at all
                except OSError:
                    shutil.rmtree(tmp, ignore_errors=True)
            return model
    return auto.from_pretrained(copy, local_files_only=True)


def load(weights_dir, device: str, head: str = "base", dtype: str = "float32"):
    """The model built under ``dtype``'s mixed-precision policy (fp32 variables)."""
    auto = auto_class("TF", weights_dir, head)
    set_precision(dtype, device)
    with tf.device(_device_name(device)):
        return _from_pretrained(auto, weights_dir)


def n_params(model) -> int:
    return int(sum(np.prod(w.shape) for w in model.weights))


def make_forward(model, mode: str, device: str, head: str = "base", dtype: str = "float32",
                 options: dict | None = None):
    """eager; graph: ``tf.function``, traced on the first call and again for
    each new input shape; xla: ``tf.function(jit_compile=True)``, each trace
    compiled by XLA. The count is tf.function's tracing count. The precision
    is the model's (its policy, set at load)."""
    dev = _device_name(device)

    def eager(ids):
        with tf.device(dev):
            out = model(input_ids=ids, training=False)
            return head_output(out, head)
    if mode == "eager":
        return forward_fn(eager, "eager")
    if mode in ("graph", "xla"):
        graph = tf.function(eager, jit_compile=mode == "xla", autograph=_AUTOGRAPH)
        return forward_fn(lambda ids: graph(ids),
                          _function_text(jit_compile=mode == "xla", autograph=_AUTOGRAPH),
                          graph.experimental_get_tracing_count)
    raise Unsupported(f"tensorflow mode {mode!r} is not implemented")


def _function_text(jit_compile: bool, autograph: bool) -> str:
    """How a step's tf.function was made, for its ``setup`` text."""
    args = [a for a, on in (("jit_compile=True", jit_compile),
                            ("autograph=False", not autograph)) if on]
    return f"tf.function({', '.join(args)})" if args else "tf.function"


def _loss(logits, labels, head: str):
    logits = tf.cast(logits, tf.float32)  # the loss in float32 under mixed precision too
    if head == "causal_lm":  # predict token t+1 from tokens <= t
        logits, labels = logits[:, :-1], labels[:, 1:]
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def _adamw(opt: dict, variables):
    """tf-keras AdamW with its slots for ``variables`` made now, eagerly (in
    the caller's device and strategy scope). Made at the first
    ``apply_gradients`` instead, inside the step's tf.function, they make
    tf.function trace the step twice (a function that creates variables is
    traced again without), which made a training step's first call nearly
    twice as long, with the same losses and step time after
    (docs/measurements.md, "the figures the library's comments quoted")."""
    import tf_keras

    optimizer = tf_keras.optimizers.AdamW(
        learning_rate=opt["learning_rate"], weight_decay=opt["weight_decay"],
        beta_1=opt["beta1"], beta_2=opt["beta2"], epsilon=opt["eps"])
    optimizer.build(variables)
    return optimizer


def _shard_grads(model, variables, ids, labels, head: str, world: int):
    """A data-parallel shard's loss and the gradients of loss / ``world``, as
    dense tensors: summed over the ``world`` shards (an all-reduce, or a
    parameter server's accumulators) they are the gradients of the mean loss
    over the global batch. The division is taped: outside the tape no
    gradient reaches the variables."""
    with tf.GradientTape() as tape:
        loss = _loss(model(input_ids=ids, training=True).logits, labels, head)
        scaled = loss / world
    return loss, [tf.convert_to_tensor(g) for g in tape.gradient(scaled, variables)]


def make_train_step(model, mode: str, device: str, opt: dict, head: str,
                    accumulation_steps: int = 1, dtype: str = "float32",
                    checkpointing: bool = False):
    """Forward, loss, backward and tf-keras AdamW inside tf.function (XLA with
    mode "xla"); ``step((ids, labels)) -> loss``. Keras' Adam adds epsilon to
    sqrt(v) rather than to sqrt(v_hat) (PyTorch, optax): the same update up to
    epsilon's scale, negligible at epsilon 1e-8. Mixed precision comes from the
    policy the model was built under; float16 wraps the optimizer in tf-keras'
    dynamic LossScaleOptimizer (an overflowing step is skipped and the scale
    halved). ``step.loss_scale()`` is the current scale (NaN without scaling).
    Accumulation: the micro-batches in a ``tf.range`` loop (a while loop in the
    graph), so one micro-batch runs at a time, each adding its gradients in
    place to non-trainable variables (``assign_add``, the recipe of
    transformers' former TF ``GradientAccumulator``), zeroed after the update.
    ``checkpointing``: transformers' TensorFlow models offer none, so it is
    Unsupported."""
    import tf_keras

    if mode not in ("graph", "xla"):
        raise Unsupported(f"tensorflow training mode {mode!r} is not implemented "
                          "(graph: tf.function, xla: tf.function(jit_compile=True))")
    if checkpointing:
        raise Unsupported(
            f"transformers {transformers.__version__} offers no gradient checkpointing for "
            f"TensorFlow {model.config.model_type} (TFPreTrainedModel has no "
            "gradient_checkpointing_enable; of its TF models only Swin, SwiftFormer and "
            "IDEFICS recompute activations)")
    dev = _device_name(device)
    variables = model.trainable_variables
    with tf.device(dev):
        optimizer = _adamw(opt, variables)
        scaled = dtype == "float16"
        if scaled:
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    accum = []
    if accumulation_steps > 1:
        with tf.device(dev):
            accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

    def grads_of(ids, labels):
        with tf.GradientTape() as tape:
            logits = model(input_ids=ids, training=True).logits
            loss = _loss(logits, labels, head) / accumulation_steps
            target = optimizer.get_scaled_loss(loss) if scaled else loss
        g = tape.gradient(target, variables)
        g = [tf.convert_to_tensor(x) for x in g]  # dense: same update as the others
        return (optimizer.get_unscaled_gradients(g) if scaled else g), loss

    def train(ids, labels):
        if accumulation_steps == 1:
            grads, total = grads_of(ids, labels)
        else:
            n = ids.shape[0] // accumulation_steps
            total = tf.zeros(())
            for i in tf.range(accumulation_steps):
                g, loss = grads_of(ids[i * n:(i + 1) * n], labels[i * n:(i + 1) * n])
                for a, x in zip(accum, g):
                    a.assign_add(x)
                total += loss
            grads = [a.read_value() for a in accum]
        optimizer.apply_gradients(zip(grads, variables))
        for a in accum:
            a.assign(tf.zeros_like(a))
        return total
    # The accumulation loop is a tf.range loop: AutoGraph makes it a while loop.
    compiled = tf.function(train, jit_compile=mode == "xla",
                           autograph=_AUTOGRAPH or accumulation_steps > 1)

    def step(batch):
        with tf.device(dev):
            return compiled(*batch)
    step.loss_scale = lambda: float(optimizer.loss_scale) if scaled else float("nan")
    return step


def make_batch(ids: np.ndarray, labels: np.ndarray, device: str):
    with tf.device(_device_name(device)):
        return tf.constant(ids, dtype=tf.int32), tf.constant(labels, dtype=tf.int32)


def make_inputs(ids: np.ndarray, device: str):
    with tf.device(_device_name(device)):
        return tf.constant(ids, dtype=tf.int32)


def fit(train, held_out, weights_dir, device: str, settings, log) -> list[dict]:
    from .trainer import fit as run

    return run(load, train, held_out, weights_dir, device, settings, log, _device_name(device))


def make_pipeline(kind: str, examples, batch_size: int, device: str):
    from .pipeline import Pipeline

    return Pipeline(kind, examples, batch_size, _device_name(device))


def sync(out) -> None:
    # CPU eager and tf.function calls return when their outputs are computed;
    # GPU kernels are asynchronous, so wait for the devices there.
    if out is not None and "GPU" in out.device:
        tf.test.experimental.sync_devices()


def to_numpy(out) -> np.ndarray:
    return out.numpy().astype(np.float64)


def make_peak_kernels(n: int, elements: int, dtype: str, device: str):
    """The hardware-peak probes (fwcompare.measure.peak): an n x n matmul in ``dtype``
    and an elementwise add in place over ``elements`` float32 (one read, one
    write), each a ``tf.function``."""
    dt = tf.as_dtype(_POLICY[dtype].removeprefix("mixed_"))  # the policy's compute dtype
    with tf.device(_device_name(device)):
        a = tf.cast(tf.random.normal((n, n), seed=0), dt)
        b = tf.cast(tf.random.normal((n, n), seed=1), dt)
        x = tf.Variable(tf.zeros((elements,), tf.float32))

    @tf.function(autograph=False)
    def matmul():
        return tf.matmul(a, b)

    @tf.function(autograph=False)
    def add():
        return x.assign_add(tf.ones_like(x))
    return matmul, add


def gpu_memory(run) -> dict:
    """The peak of ``run()`` by TensorFlow's GPU allocator, its counter reset
    right before (``get_memory_info``'s peak: bytes in use at the highest
    point, the resident weights included)."""
    tf.config.experimental.reset_memory_stats("GPU:0")
    run()
    return {"peak_mem_bytes": int(tf.config.experimental.get_memory_info("GPU:0")["peak"]),
            "mem_method": "tensorflow_allocator_peak"}


def memory_plan_bytes() -> None:
    """None: TensorFlow exposes no memory analysis of an XLA-compiled function
    (``experimental_get_compiler_ir`` gives its HLO, not XLA's buffer plan)."""
    return None


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, tf.errors.ResourceExhaustedError) or looks_like_oom(exc)


def runtime_info(device: str) -> dict:
    info = {"framework_version": tf.__version__,
            "framework_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "device_name": "cpu"}
    if device == "gpu":
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            info["device_name"] = tf.config.experimental.get_device_details(gpus[0]).get(
                "device_name", "gpu")
        info["tf32_matmul"] = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    return info


def data_parallel(weights_dir, device: str, head: str, opt: dict, mode: str = "graph",
                  timeout_s: float = 1800.0):
    """The contract's ``DataParallel``: an engine of this module's steps
    (``parallel.py`` holds it, with the strategies it imports)."""
    from . import parallel

    return parallel.DataParallel(sys.modules[__name__], weights_dir, device, head, opt,
                                 mode, timeout_s)


BACKEND = module_backend(__name__, "TensorFlowBackend", DataParallel=data_parallel)
