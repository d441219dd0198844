"""The deployment study's runtimes and converters' words. Each framework's
exporter and the runtime of its own artifact kind live in its package
(``frameworks/<name>/export.py``, named by its declaration); what they share
is ``frameworks.export``. ONNX Runtime and LiteRT run artifacts that several
frameworks make, so they stand here; :data:`RUNTIMES` names the runtime of
each artifact kind (``DeployPath.artifact``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import frameworks
from ...measure.cell import CellFailure
from ...frameworks.export import (SHARED_STEPS_ENV, Exporter, ExportUnsupported,  # noqa: F401
                                  Runtime, converter_message, converter_status)


# === runtimes of artifacts several frameworks make: ONNX Runtime, LiteRT ===========
class OnnxRuntime(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        # ONNX Runtime's idle threads spin for tens of ms after a call by
        # default, slowing what runs next beside it in the interleaved schedule
        # (and ORT itself): docs/measurements.md, "the figures the library's
        # comments quoted".
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path / "model.onnx"), so,
                                            providers=["CPUExecutionProvider"])
        inp = self.session.get_inputs()[0]
        self.name = inp.name
        self.dtype = np.int64 if "int64" in inp.type else np.int32
        self.setup = (f"onnxruntime {ort.__version__} CPUExecutionProvider, "
                      f"intra_op_num_threads={threads}, inter_op_num_threads=1, "
                      "intra-op spinning off, "
                      f"graph_optimization_level {so.graph_optimization_level.name}")

    def inputs(self, ids):
        return np.ascontiguousarray(ids, dtype=self.dtype)

    def run(self, x):
        return self.session.run(None, {self.name: x})[0]


class LiteRT(Runtime):
    """The LiteRT interpreter (``ai_edge_litert``): TensorFlow 2.21's own
    ``tf.lite.Interpreter`` is deprecated and scheduled for deletion in
    favour of this package. A dynamic-shape model is resized per input shape;
    a per-shape artifact (``model-BxS.tflite``) is loaded when first needed."""

    def __init__(self, path: Path, threads: int, device: str):
        from ai_edge_litert import interpreter

        self.path, self.threads = path, threads
        self._interpreter = interpreter.Interpreter
        self.interpreters: dict = {}
        self.setup = f"ai_edge_litert Interpreter, num_threads={threads}"
        files = sorted(path.glob("*.tflite"))
        if not files:
            raise CellFailure("error", f"no .tflite file in {path}")
        self.dynamic = (path / "model.tflite").is_file()
        if self.dynamic:
            self._open("model.tflite")
        else:  # the first shape's file now: that is the cold load
            self._open(files[0].name)

    def _open(self, name: str):
        if name not in self.interpreters:
            it = self._interpreter(model_path=str(self.path / name), num_threads=self.threads)
            it.allocate_tensors()
            self.interpreters[name] = [it, None]
        return self.interpreters[name]

    def inputs(self, ids):
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        name = "model.tflite" if self.dynamic else f"model-{ids.shape[0]}x{ids.shape[1]}.tflite"
        if not (self.path / name).is_file():
            raise CellFailure("unsupported", f"no artifact for shape {ids.shape[0]}x"
                                             f"{ids.shape[1]} (exported at static shapes)")
        slot = self._open(name)
        it = slot[0]
        inp = it.get_input_details()[0]
        if slot[1] != ids.shape:
            if tuple(inp["shape"]) != ids.shape:
                it.resize_tensor_input(inp["index"], ids.shape)
                it.allocate_tensors()
            slot[1] = ids.shape
        return (it, inp["index"], it.get_output_details()[0]["index"], ids)

    def run(self, x):
        it, i, o, ids = x
        it.set_tensor(i, ids)
        it.invoke()
        return it.get_tensor(o)


# Runtimes of this suite's pins that have no GPU path: their cells on a GPU
# are unsupported rows with the reason, and nothing is exported for them.
CPU_ONLY = {
    "ONNX Runtime": "the pinned onnxruntime is the CPU build; a GPU run needs onnxruntime-gpu "
                    "(CUDAExecutionProvider)",
    "LiteRT": "LiteRT's GPU delegate targets mobile GPUs (OpenCL, OpenGL), not a CUDA device",
}



def _resolve(where: str):
    """``module:Name``, imported."""
    import importlib

    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


# The runtime of each artifact kind: the two shared ones, and each registered
# framework's own (``Framework.runtimes``).
RUNTIMES = {"onnx": OnnxRuntime, "tflite": LiteRT,
            **{kind: _resolve(where) for fw in frameworks.registered()
               for kind, where in fw.runtimes.items()}}


def exporter_class(framework: str):
    """``framework``'s exporter (``Framework.exporter``)."""
    return _resolve(frameworks.get(framework).exporter)
