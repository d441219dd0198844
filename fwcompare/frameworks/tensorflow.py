"""TensorFlow backend (transformers' TF classes through tf-keras)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import transformers  # noqa: E402

from . import (Unsupported, auto_class, check_precision, forward_fn,  # noqa: E402
               looks_like_oom, tf32_note)

# tf-keras mixed-precision policies: variables float32, compute in the policy's dtype.
_POLICY = {"float32": "float32", "tf32": "float32", "bfloat16": "mixed_bfloat16",
           "float16": "mixed_float16"}


def _device_name(device: str) -> str:
    if device == "gpu":
        if not tf.config.list_physical_devices("GPU"):
            raise Unsupported("device gpu requested but TensorFlow sees no GPU")
        return "/GPU:0"
    return "/CPU:0"


def configure(threads: int, device: str) -> None:
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


def load(weights_dir, device: str, head: str = "base", dtype: str = "float32"):
    """The model built under ``dtype``'s mixed-precision policy (fp32 variables)."""
    auto = auto_class("TF", weights_dir, head)
    set_precision(dtype, device)
    with tf.device(_device_name(device)):
        return auto.from_pretrained(weights_dir, from_pt=True, local_files_only=True)


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
            return out.last_hidden_state if head == "base" else out.logits
    if mode == "eager":
        return forward_fn(eager, "eager")
    if mode in ("graph", "xla"):
        graph = tf.function(eager, jit_compile=mode == "xla")
        return forward_fn(lambda ids: graph(ids),
                          "tf.function(jit_compile=True)" if mode == "xla" else "tf.function",
                          graph.experimental_get_tracing_count)
    raise Unsupported(f"tensorflow mode {mode!r} is not implemented")


def _loss(logits, labels, head: str):
    logits = tf.cast(logits, tf.float32)  # the loss in float32 under mixed precision too
    if head == "causal_lm":  # predict token t+1 from tokens <= t
        logits, labels = logits[:, :-1], labels[:, 1:]
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def make_train_step(model, mode: str, device: str, opt: dict, head: str,
                    accumulation_steps: int = 1, dtype: str = "float32"):
    """Forward, loss, backward and tf-keras AdamW inside tf.function (XLA with
    mode "xla"); ``step((ids, labels)) -> loss``. Keras' Adam adds epsilon to
    sqrt(v) rather than to sqrt(v_hat) (PyTorch, optax): the same update up to
    epsilon's scale, negligible at epsilon 1e-8. Mixed precision comes from the
    policy the model was built under; float16 wraps the optimizer in tf-keras'
    dynamic LossScaleOptimizer (an overflowing step is skipped and the scale
    halved). ``step.loss_scale()`` is the current scale (NaN without scaling)."""
    import tf_keras

    if mode not in ("graph", "xla"):
        raise Unsupported(f"tensorflow training mode {mode!r} is not implemented "
                          "(graph: tf.function, xla: tf.function(jit_compile=True))")
    dev = _device_name(device)
    with tf.device(dev):
        optimizer = tf_keras.optimizers.AdamW(
            learning_rate=opt["learning_rate"], weight_decay=opt["weight_decay"],
            beta_1=opt["beta1"], beta_2=opt["beta2"], epsilon=opt["eps"])
        scaled = dtype == "float16"
        if scaled:
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    variables = model.trainable_variables

    def train(ids, labels):
        grads, total = None, tf.zeros(())
        for mids, mlabels in zip(tf.split(ids, accumulation_steps),
                                 tf.split(labels, accumulation_steps)):
            with tf.GradientTape() as tape:
                logits = model(input_ids=mids, training=True).logits
                loss = _loss(logits, mlabels, head) / accumulation_steps
                target = optimizer.get_scaled_loss(loss) if scaled else loss
            g = tape.gradient(target, variables)
            g = [tf.convert_to_tensor(x) for x in g]  # dense: same update as the others
            if scaled:
                g = optimizer.get_unscaled_gradients(g)
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            total += loss
        optimizer.apply_gradients(zip(grads, variables))
        return total
    compiled = tf.function(train, jit_compile=mode == "xla")

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


def sync(out) -> None:
    # CPU eager and tf.function calls return when their outputs are computed;
    # GPU kernels are asynchronous, so wait for the devices there.
    if out is not None and "GPU" in out.device:
        tf.test.experimental.sync_devices()


def to_numpy(out) -> np.ndarray:
    return out.numpy().astype(np.float64)


def reset_peak_memory(device: str) -> None:
    if device == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")


def peak_memory_bytes(device: str) -> int | None:
    # On the CPU get_memory_info reports zeros: the caller uses peak RSS.
    if device == "gpu":
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
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
