"""TensorFlow, declared (light: nothing here imports tensorflow). The backend
is ``backend.py`` (transformers' TF classes through tf-keras), its
data-parallel engines ``parallel.py``, its deployment exporter and SavedModel
runtime ``export.py``, its launch (TF_CONFIG per process) ``launch.py``."""
from __future__ import annotations

from ..base import DeployPath, Framework, Option

FRAMEWORK = Framework(
    name="tensorflow",
    # graph: tf.function; xla: tf.function(jit_compile=True).
    modes=("eager", "graph", "xla"),
    train_modes=("graph", "xla"),
    common_modes=("eager", "graph"),  # Keras' eager call, and tf.function
    generation_modes=("eager", "xla"),
    uncompiled={"xla": "eager"},
    backend="fwcompare.frameworks.tensorflow.backend",
    options={"tf_autograph": Option("bool", False, "TensorFlow's tf.function converts Python control flow with AutoGraph (tf.function's default); off, the first call traces the same graph several seconds sooner (these models and steps have no tensor-dependent Python control flow; an accumulation loop keeps it on)")},
    worker_env={"USE_FLAX": "0"},
    preload=("tf_keras",),
    model_module_prefix="tf_",
    # graph: MultiWorkerMirroredStrategy with the step in tf.function; ps:
    # ParameterServerStrategy, a chief, the workers and ``ps_servers``
    # parameter servers, synchronous steps (parallel.ParameterServer).
    dist_modes=("graph", "ps"),
    server_modes=("ps",),
    launcher="fwcompare.frameworks.tensorflow.launch",
    dist_device={"ps": ("cpu", "runs on the CPU only (ParameterServerStrategy makes every GPU "
                        "a worker sees a replica of its own; the launch gives each worker "
                        "one device)")},
    dist_one_host={"ps": "runs its cluster (chief, workers, parameter servers) on this host "
                         "only: one entry in hosts"},
    packages=("tensorflow", "tf-keras", "tf2onnx"),
    requires=("tensorflow", "tf_keras", "transformers"),
    traced_modes=("*",),
    compiled_modes=("xla",),  # graph and Keras fit: tf.function traces on the host
    # memory: tensors on the device; tfdata*: tf.data with its options (pipeline.py)
    pipelines=("memory", "tfdata", "tfdata-prefetch", "tfdata-cache", "tfdata-pyfunc"),
    # Keras fit on a tf.data pipeline in the shared order (trainer.py; tfdata-cache
    # shuffles its cached examples in an order of its own, so it is not one)
    fit_stack="keras-fit",
    fit_pipelines=("tfdata-prefetch", "tfdata", "tfdata-pyfunc"),
    deploy_paths={
        "graph": DeployPath("tf.function (the baseline)", "TensorFlow"),
        "savedmodel": DeployPath("tf.saved_model.save of a tf.Module (variables, serving signature), tf.saved_model.load", "TensorFlow", artifact="savedmodel"),
        "tflite-float32": DeployPath("TFLiteConverter, no optimisation", "LiteRT", artifact="tflite"),
        "tflite-float16": DeployPath("TFLiteConverter, Optimize.DEFAULT, float16 weights", "LiteRT", "float16", "tflite"),
        "tflite-dynamic-int8": DeployPath("TFLiteConverter, Optimize.DEFAULT (dynamic-range INT8 weights)", "LiteRT", "int8", "tflite"),
        # full-integer TFLite and tf2onnx in a second export process: the
        # SavedModel is shared (Exporter.step), the four conversions are not
        "tflite-int8": DeployPath("TFLiteConverter, Optimize.DEFAULT, representative dataset, TFLITE_BUILTINS_INT8 only (full integer)", "LiteRT", "int8", "tflite", process="second"),
        "tf2onnx": DeployPath("tf2onnx.convert.from_function", "ONNX Runtime", artifact="onnx",
                              process="second"),
    },
    exporter="fwcompare.frameworks.tensorflow.export:TensorFlowExporter",
    runtimes={"savedmodel": "fwcompare.frameworks.tensorflow.export:SavedModel"},
)
