"""TensorFlow's deployment paths (``Framework.deploy_paths``): its exporter
(SavedModel, TFLite float32, float16 and INT8, tf2onnx) and the runtime of
its own artifact kind (SavedModel). tensorflow is imported where used."""
from __future__ import annotations

from pathlib import Path

from .. import head_output
from ..export import Exporter, ExportUnsupported, Runtime

class TensorFlowExporter(Exporter):
    def signature(self):
        import tensorflow as tf

        return [tf.TensorSpec([None, None], tf.int32, name="input_ids")]

    def serve(self):
        """The model as a tf.function over token ids of any batch and length."""
        import tensorflow as tf

        model, head = self.model, self.job.head

        @tf.function(input_signature=self.signature())
        def serve(input_ids):
            return {"output": head_output(model(input_ids=input_ids, training=False), head)}
        return serve

    def saved(self) -> Path:
        """The model as a SavedModel: its variables and the serving signature
        in a ``tf.Module``, as Keras' ``model.export()`` (``ExportArchive``)
        writes one for serving. Saving the Keras model itself also traces each
        layer's call for Keras to restore: a slower save, TFLite conversions and
        load (their cost: docs/measurements.md)."""
        def make(d: Path) -> Path:
            import tensorflow as tf

            serve = self.serve()
            concrete = serve.get_concrete_function()  # traced first: every layer built
            module = tf.Module()
            module.model_variables = list(self.model.variables)
            module.serve = serve
            tf.saved_model.save(module, str(d / "savedmodel"),
                                signatures={"serving_default": concrete})
            return d / "savedmodel"
        return self.step("savedmodel", make)

    def export_savedmodel(self, out):
        import shutil

        shutil.copytree(self.saved(), out / "savedmodel")
        return ("tf.saved_model.save of a tf.Module: the variables and signatures="
                "serving_default (int32 ids [None, None])")

    def _tflite(self, out: Path, kind: str) -> str:
        import tensorflow as tf

        converter = tf.lite.TFLiteConverter.from_saved_model(str(self.saved()))
        setup = "TFLiteConverter.from_saved_model"
        if kind != "float32":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            setup += ", Optimize.DEFAULT"
        if kind == "float16":
            converter.target_spec.supported_types = [tf.float16]
            setup += ", supported_types float16"
        if kind == "int8":
            converter.representative_dataset = lambda: ([x] for x in self.representative())
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            setup += (f", representative dataset ({self.job.params['representative_batches']} "
                      "batches), TFLITE_BUILTINS_INT8")
        (out / "model.tflite").write_bytes(converter.convert())
        return setup

    def export_tflite_float32(self, out):
        return self._tflite(out, "float32")

    def export_tflite_float16(self, out):
        return self._tflite(out, "float16")

    def export_tflite_dynamic_int8(self, out):
        return self._tflite(out, "dynamic-int8")

    def export_tflite_int8(self, out):
        return self._tflite(out, "int8")

    def export_tf2onnx(self, out):
        import logging

        import onnx
        import tf2onnx

        opset = self.job.params["onnx_opset"]

        class Refuse(logging.Handler):
            """Ends the conversion where tf2onnx logs the ops it has no handler
            for: it would go on to optimize (seconds of its graph optimizer)
            and write a model that cannot run."""

            def emit(self, record):
                if "Unsupported ops" in record.getMessage():
                    raise ExportUnsupported(f"tf2onnx {tf2onnx.__version__} (opset {opset}): "
                                            f"{record.getMessage()}")
        handler = Refuse(level=logging.ERROR)
        logging.getLogger("tf2onnx").addHandler(handler)
        try:
            tf2onnx.convert.from_function(self.serve(), input_signature=self.signature(),
                                          opset=opset, output_path=str(out / "model.onnx"))
        finally:
            logging.getLogger("tf2onnx").removeHandler(handler)
        onnx.checker.check_model(str(out / "model.onnx"))
        return f"tf2onnx {tf2onnx.__version__}, opset {opset}"


class SavedModel(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import tensorflow as tf

        self.tf = tf
        self.fn = tf.saved_model.load(str(path / "savedmodel")).signatures["serving_default"]
        self.setup = (f"tf.saved_model.load, serving_default, TensorFlow {tf.__version__}, "
                      f"intra-op threads {tf.config.threading.get_intra_op_parallelism_threads()}")

    def inputs(self, ids):
        return self.tf.constant(ids, dtype=self.tf.int32)

    def run(self, x):
        return self.fn(input_ids=x)["output"]
