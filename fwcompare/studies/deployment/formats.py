"""Each framework's export formats and runtimes, the framework's code kept
together: its exporter (the artifacts it makes from the shared weights, in
the export process of :mod:`.export`) and the runtime of its own artifact
kind (loaded in a cell's worker, :mod:`.worker`). ONNX Runtime and LiteRT run
artifacts that several frameworks make, so they stand apart; :data:`RUNTIMES`
names the runtime of each artifact kind (``DeployPath.artifact``).

The parts share only the small helpers at the top (the exporter and runtime
bases, the converter's words); nothing of one framework reads another's."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...cell import CellFailure
from ...gate import token_ids
from .catalog import sentences_path


# -- shared helpers -----------------------------------------------------------------
class ExportUnsupported(Exception):
    """A converter refused the model (an operation or a shape it cannot express)."""


def converter_status(exc: BaseException) -> str:
    name = type(exc).__name__
    return "unsupported" if isinstance(exc, ExportUnsupported) or name == "ConverterError" \
        else "error"


def converter_message(exc: BaseException, chars: int = 1500) -> str:
    """The converter's own words: its exception, the lines that say what failed first."""
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    key = [ln for ln in lines if "error" in ln.lower() or "not supported" in ln.lower()
           or "unsupported" in ln.lower()]
    text = "\n".join(dict.fromkeys(lines[:2] + key[:4]))
    return text[:chars]


class _Exporter:
    def __init__(self, job, backend, gate):
        self.job, self.backend, self.gate = job, backend, gate
        self.model = backend.load(gate.info["weights_dir"], job.device, job.head)
        self.example = gate.ids
        self.steps: dict[str, tuple[Path, float]] = {}
        self.reused_s = 0.0
        import tempfile

        root = Path(job.gate_dir).parent / "deploy" / job.model_key
        root.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="steps-", dir=root))  # removed at the end

    def sentence_shape(self) -> tuple[int, int] | None:
        """The sentence-pair batch's shape, where the model has one (its
        static-shape artifacts need it too)."""
        path = sentences_path(self.job)
        if not path.is_file():
            return None
        with np.load(path) as s:
            return tuple(s["ids"].shape)

    def shapes(self) -> list[tuple[int, int]]:
        maxpos = self.gate.info["max_positions"]
        return [(b, s) for b in self.job.params["batch_sizes"] for s in self.job.params["seq_lens"]
                if not maxpos or s <= maxpos]

    def representative(self):
        """Calibration batches for full-integer quantization: seeded token ids
        at the grid's smallest shape (a different seed from any cell's)."""
        b, s = min(self.shapes(), key=lambda t: t[0] * t[1])
        vocab = self.gate.info["vocab_size"]
        for i in range(self.job.params["representative_batches"]):
            yield token_ids(self.job.seed + 1000 + i, b, s, vocab).astype(np.int32)

    def export(self, mode: str, out: Path) -> str:
        """``mode``'s artifact in ``out``; its setup in words. A step another
        path of this process already made (the ONNX export under its fused
        and quantized models, the SavedModel under TFLite) is reused, and
        its time is added to this path's (``reused_s``): a path's export time
        is what it takes from the model."""
        out.mkdir(parents=True, exist_ok=True)
        self.reused_s = 0.0
        return getattr(self, "export_" + mode.replace("-", "_"))(out)

    def step(self, name: str, make) -> Path:
        """A shared step's output (``make(dir) -> path``), made once per process."""
        import tempfile

        if name in self.steps:
            path, seconds = self.steps[name]
            self.reused_s += seconds
            return path
        t0 = time.perf_counter()
        path = make(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.tmp)))
        self.steps[name] = (path, time.perf_counter() - t0)
        return path


class Runtime:
    """A loaded artifact: ``inputs(ids)`` makes its inputs (outside timing),
    ``run(x)`` one call, returning the runtime's own output."""

    setup = ""

    def inputs(self, ids: np.ndarray):
        return ids

    def run(self, x):
        raise NotImplementedError


# === torch: TorchScript, ONNX (dynamo exporter, fusions, INT8), dynamic INT8 =======
class TorchExporter(_Exporter):
    def module(self, model=None):
        import torch

        head = self.job.head

        class Output(torch.nn.Module):  # a tensor out, for tracers and exporters
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                out = self.m(input_ids=input_ids)
                return out.last_hidden_state if head == "base" else out.logits
        return Output(model if model is not None else self.model).eval()

    def ids(self):
        import torch

        return torch.as_tensor(self.example, dtype=torch.long)

    def _trace(self, module, out: Path) -> None:
        import torch

        with torch.no_grad():
            traced = torch.jit.trace(module, (self.ids(),), check_trace=False)
        traced.save(str(out / "model.pt"))

    def export_torchscript(self, out):
        self._trace(self.module(), out)
        return "torch.jit.trace on the gate batch, torch.jit.save"

    def export_dynamic_int8(self, out):
        import copy
        import warnings

        import torch

        with warnings.catch_warnings():  # torch.ao.quantization is deprecated in 2.13
            warnings.simplefilter("ignore")
            q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(self.model),
                                                       {torch.nn.Linear}, dtype=torch.qint8)
            self._trace(self.module(q), out)
        return (f"quantize_dynamic(Linear, qint8, engine {torch.backends.quantized.engine}), "
                "torch.jit.trace, torch.jit.save")

    def onnx(self) -> Path:
        """The dynamo exporter's ONNX model (batch and sequence dynamic)."""
        def make(d: Path) -> Path:
            import torch

            batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
            torch.onnx.export(self.module(), (self.ids(),), str(d / "model.onnx"), dynamo=True,
                              input_names=["input_ids"], output_names=["output"],
                              dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                              opset_version=self.job.params["onnx_opset"],
                              external_data=False, verbose=False)
            return d / "model.onnx"
        return self.step("onnx", make)

    def fused(self) -> Path:
        """The ONNX model after ONNX Runtime's transformer optimizer."""
        def make(d: Path) -> Path:
            from onnxruntime.transformers.optimizer import optimize_model

            kind = ORT_MODEL_TYPES.get(self.model.config.model_type, "bert")
            opt = optimize_model(str(self.onnx()), model_type=kind, num_heads=0, hidden_size=0,
                                 opt_level=0)
            opt.save_model_to_file(str(d / "model.onnx"))
            fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            self.fusions = (f"optimizer model_type {kind}: " + (", ".join(
                f"{k} {v}" for k, v in fused.items()) or "no fusion applied"))
            return d / "model.onnx"
        return self.step("fused", make)

    def export_onnxruntime(self, out):
        import shutil

        shutil.copy(self.onnx(), out / "model.onnx")
        return f"torch.onnx.export(dynamo=True, opset {self.job.params['onnx_opset']})"

    def export_onnxruntime_fused(self, out):
        import shutil

        shutil.copy(self.fused(), out / "model.onnx")
        return self.fusions

    def export_onnxruntime_int8(self, out):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(self.fused()), str(out / "model.onnx"), weight_type=QuantType.QInt8)
        return f"{self.fusions}; quantize_dynamic(weight_type QInt8)"


# onnxruntime.transformers.optimizer's model types, by transformers' model_type.
ORT_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "distilbert": "bert", "gpt2": "gpt2",
                   "bart": "bart", "t5": "t5", "vit": "vit"}


class TorchScript(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import torch

        self.torch, self.device = torch, "cuda" if device == "gpu" else "cpu"
        self.module = torch.jit.load(str(path / "model.pt"), map_location=self.device).eval()
        self.setup = f"torch.jit.load, torch {torch.__version__}, {torch.get_num_threads()} threads"

    def inputs(self, ids):
        return self.torch.as_tensor(ids, dtype=self.torch.long, device=self.device)

    def run(self, x):
        with self.torch.inference_mode():
            return self.module(x)


# === tensorflow: SavedModel, TFLite (float32, float16, INT8), tf2onnx ==============
class TensorFlowExporter(_Exporter):
    def signature(self):
        import tensorflow as tf

        return [tf.TensorSpec([None, None], tf.int32, name="input_ids")]

    def serve(self):
        """The model as a tf.function over token ids of any batch and length."""
        import tensorflow as tf

        model, head = self.model, self.job.head

        @tf.function(input_signature=self.signature())
        def serve(input_ids):
            out = model(input_ids=input_ids, training=False)
            return {"output": out.last_hidden_state if head == "base" else out.logits}
        return serve

    def saved(self) -> Path:
        """The model as a SavedModel with a serving signature."""
        def make(d: Path) -> Path:
            import tensorflow as tf

            tf.saved_model.save(self.model, str(d / "savedmodel"), signatures={
                "serving_default": self.serve().get_concrete_function()})
            return d / "savedmodel"
        return self.step("savedmodel", make)

    def export_savedmodel(self, out):
        import shutil

        shutil.copytree(self.saved(), out / "savedmodel")
        return "tf.saved_model.save(signatures=serving_default: int32 ids [None, None])"

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

        said: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record):
                said.append(record.getMessage())
        handler = Keep(level=logging.ERROR)
        logging.getLogger("tf2onnx").addHandler(handler)
        opset = self.job.params["onnx_opset"]
        try:
            tf2onnx.convert.from_function(self.serve(), input_signature=self.signature(),
                                          opset=opset, output_path=str(out / "model.onnx"))
        finally:
            logging.getLogger("tf2onnx").removeHandler(handler)
        unsupported = [s for s in said if "Unsupported ops" in s]
        if unsupported:
            raise ExportUnsupported(f"tf2onnx {tf2onnx.__version__} (opset {opset}): "
                                    f"{unsupported[-1]}")
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


# === jax: jax.export, jax2tf to TFLite =============================================
class JaxExporter(_Exporter):
    def apply(self):
        model, head, params = self.model, self.job.head, self.model.params

        def forward(ids):
            out = model(ids, params=params, train=False)
            return out.last_hidden_state if head == "base" else out.logits
        return forward

    def export_jax_export(self, out):
        import flax.serialization
        import jax
        import jax.numpy as jnp
        from jax import export

        model, head = self.model, self.job.head

        def forward(params, ids):
            out = model(ids, params=params, train=False)
            return out.last_hidden_state if head == "base" else out.logits
        b, s = export.symbolic_shape("b, s")
        shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                        model.params)
        exp = export.export(jax.jit(forward))(shapes, jax.ShapeDtypeStruct((b, s), jnp.int32))
        (out / "model.jaxexport").write_bytes(exp.serialize())
        (out / "params.msgpack").write_bytes(flax.serialization.msgpack_serialize(
            jax.tree_util.tree_map(np.asarray, model.params)))
        return (f"jax.export (symbolic b, s; platforms {', '.join(exp.platforms)}), "
                "parameters as an argument, saved with flax.serialization (msgpack)")

    def export_jax2tf_tflite(self, out):
        import tensorflow as tf
        from jax.experimental import jax2tf

        fn = jax2tf.convert(self.apply(), with_gradient=False)
        extra = self.sentence_shape()
        for b, s in dict.fromkeys([*self.shapes(), *([extra] if extra else [])]):
            tff = tf.function(fn, input_signature=[tf.TensorSpec([b, s], tf.int32)],
                              autograph=False)
            converter = tf.lite.TFLiteConverter.from_concrete_functions(
                [tff.get_concrete_function()], tff)
            (out / f"model-{b}x{s}.tflite").write_bytes(converter.convert())
        return ("jax2tf.convert (native serialization), TFLiteConverter, static shapes "
                "(the grid's and the sentence pairs'), weights as constants")


class JaxExport(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import jax
        from jax import export

        import flax.serialization

        self.jax = jax
        exp = export.deserialize(bytearray((path / "model.jaxexport").read_bytes()))
        self.params = jax.device_put(flax.serialization.msgpack_restore(
            (path / "params.msgpack").read_bytes()))
        self.fn = jax.jit(exp.call)
        self.setup = (f"jax.export.deserialize, flax.serialization.msgpack_restore, "
                      f"jax.jit(exported.call), JAX {jax.__version__}")

    def inputs(self, ids):
        return self.jax.device_put(np.asarray(ids, dtype=np.int32))

    def run(self, x):
        return self.fn(self.params, x)


# === runtimes of artifacts several frameworks make: ONNX Runtime, LiteRT ===========
class OnnxRuntime(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        # ONNX Runtime's idle threads spin for tens of ms after a call by
        # default: beside it in the interleaved schedule, PyTorch eager then
        # ran MiniLM 1 x 128 in 54 ms instead of 26 ms (5 ms after an ORT
        # call; 44 ms after 20 ms), while ORT itself took 22.3 ms without
        # spinning against 25.4 ms with it (2-core AMD EPYC, 2026-11-24).
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

RUNTIMES = {"onnx": OnnxRuntime, "tflite": LiteRT, "torchscript": TorchScript,
            "savedmodel": SavedModel, "jax-export": JaxExport}
