"""Deployment: every path from a trained model to a runtime, with what it
costs in speed, size and accuracy.

Each path is a ``mode`` of its framework (:data:`PATHS`). From the shared
weights, the prepare job exports every path of a model, one process per
framework (``fwcompare.studies.deployment`` run as ``export_main``): the
artifact, its export time and size, or the converter's message when a path
does not export. Each path's cells then run in a worker process of their own
that never held the framework's model: the artifact's load there is a cold
load in a fresh process (``load_s``), its first call and steady state are
timed by the shared protocol, interleaved with the framework's own baseline
(PyTorch eager, TensorFlow ``tf.function``, ``jax.jit``). Every cell's output
is compared with a float64 PyTorch reference (max abs, relative L2, cosine,
argmax agreement); on real weights with a tokenizer, the cosine similarities
of the sentence pairs in ``fwcompare/data/sentence_pairs.tsv`` are compared
with PyTorch float32's (Spearman correlation): what a user of a sentence
embedding model would notice.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .. import models
from ..cell import CellFailure, CellPlan, WorkerContext
from ..claims import Claim, Measurement, Metric, StudyData, cell_label, check_cells
from ..gate import REF_ROWS, fp64_key, token_ids
from ..params import TIMING, Param, grid_params, non_negative, positive
from ..results import MEASURED
from ..stats import geomean_ratio_ci
from ..tables import baseline_pairs, both_measured, samples_by_cell
from . import register
from .base import Study, per_mode
from .inference_sweep import EQUIV_TOL, plan_inference
from .mixed_precision import FP64_COLUMNS

SENTENCE_PAIRS = Path(__file__).resolve().parent.parent / "data" / "sentence_pairs.tsv"


@dataclass(frozen=True)
class DeployPath:
    """One path: how it is made (``how``), what runs it, the precision of its
    weights (float32, float16, int8: the gate's tolerance and the size
    order), and its artifact's kind (the runtime that loads it; "" for the
    framework's own baseline, which loads the shared weights)."""

    how: str
    runtime: str
    precision: str = "float32"
    artifact: str = ""


PATHS: dict[str, dict[str, DeployPath]] = {
    "torch": {
        "eager": DeployPath("PyTorch eager (the baseline)", "PyTorch"),
        "torchscript": DeployPath("torch.jit.trace, saved to a file, torch.jit.load", "TorchScript", artifact="torchscript"),
        "dynamic-int8": DeployPath("torch.ao.quantization.quantize_dynamic (Linear layers, qint8), traced and saved as TorchScript", "TorchScript", "int8", "torchscript"),
        "onnxruntime": DeployPath("torch.onnx.export(dynamo=True)", "ONNX Runtime", artifact="onnx"),
        "onnxruntime-fused": DeployPath("torch.onnx.export(dynamo=True), then onnxruntime.transformers.optimizer (transformer fusions)", "ONNX Runtime", artifact="onnx"),
        "onnxruntime-int8": DeployPath("the fused ONNX model, then onnxruntime.quantization.quantize_dynamic (QInt8 weights)", "ONNX Runtime", "int8", "onnx"),
    },
    "tensorflow": {
        "graph": DeployPath("tf.function (the baseline)", "TensorFlow"),
        "savedmodel": DeployPath("tf.saved_model.save with a serving signature, tf.saved_model.load", "TensorFlow", artifact="savedmodel"),
        "tflite-float32": DeployPath("TFLiteConverter, no optimisation", "LiteRT", artifact="tflite"),
        "tflite-float16": DeployPath("TFLiteConverter, Optimize.DEFAULT, float16 weights", "LiteRT", "float16", "tflite"),
        "tflite-dynamic-int8": DeployPath("TFLiteConverter, Optimize.DEFAULT (dynamic-range INT8 weights)", "LiteRT", "int8", "tflite"),
        "tflite-int8": DeployPath("TFLiteConverter, Optimize.DEFAULT, representative dataset, TFLITE_BUILTINS_INT8 only (full integer)", "LiteRT", "int8", "tflite"),
        "tf2onnx": DeployPath("tf2onnx.convert.from_function", "ONNX Runtime", artifact="onnx"),
    },
    "jax": {
        "jit": DeployPath("jax.jit (the baseline)", "JAX"),
        "jax-export": DeployPath("jax.export with symbolic batch and sequence, serialised StableHLO, deserialised and jitted", "JAX", artifact="jax-export"),
        "jax2tf-tflite": DeployPath("jax2tf.convert, then TFLiteConverter (one artifact per shape)", "LiteRT", artifact="tflite"),
    },
}
DEPLOY_MODES = {fw: tuple(paths) for fw, paths in PATHS.items()}
BASELINE = {fw: next(m for m, p in paths.items() if not p.artifact) for fw, paths in PATHS.items()}
# Columns of the sentence-pair check (real weights with a tokenizer).
STS_COLUMNS = ("sts_spearman", "sts_max_abs_diff")


def path_of(framework: str, mode: str) -> DeployPath:
    return PATHS[framework][mode]


def artifact_dir(job, framework: str, mode: str) -> Path:
    """Where a model's path is exported: beside the gate files of the run."""
    return Path(job.gate_dir).parent / "deploy" / job.model_key / framework / mode


def sentences_path(job) -> Path:
    return Path(job.gate_dir) / f"{job.model_key}-sentences.npz"


def read_pairs(path: Path = SENTENCE_PAIRS) -> list[tuple[str, str]]:
    rows = [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [(a, b) for a, b in rows[1:]]


def pair_similarities(emb: np.ndarray) -> np.ndarray:
    """Cosine similarity of each pair (rows 2i, 2i+1) of mean-pooled embeddings."""
    pooled = np.asarray(emb, dtype=np.float64).mean(axis=1)
    a, b = pooled[0::2], pooled[1::2]
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def sentence_agreement(sims: np.ndarray, reference: np.ndarray) -> dict:
    """Spearman correlation of a path's pair similarities with float32's, and
    their largest absolute difference."""
    from scipy.stats import spearmanr

    if not np.all(np.isfinite(sims)):
        return {"sts_spearman": math.nan, "sts_max_abs_diff": math.nan}
    return {"sts_spearman": float(spearmanr(sims, reference).statistic),
            "sts_max_abs_diff": float(np.max(np.abs(sims - reference)))}


# -- export (prepare side: one process per framework) ---------------------------------
def export_key(job, framework: str, mode: str) -> str:
    """What an artifact depends on: the weights, the path, the shapes, the
    export settings and the library versions."""
    p = job.params
    blob = json.dumps([job.model_key, framework, mode, p["batch_sizes"], p["seq_lens"],
                       p["onnx_opset"], p["representative_batches"], job.seed,
                       dict(job.provenance.get("versions", {}))], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _record_path(job, framework: str, mode: str) -> Path:
    return artifact_dir(job, framework, mode) / "record.json"


def read_record(job, framework: str, mode: str) -> dict | None:
    try:
        return json.loads(_record_path(job, framework, mode).read_text())
    except (OSError, ValueError):
        return None


def _write_record(job, framework: str, mode: str, record: dict) -> None:
    from ..atomic import write_json

    path = _record_path(job, framework, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != "record.json")


def export_modes(job, framework: str) -> list[str]:
    """The paths of ``framework`` a prepare job exports (artifact paths among the params' modes)."""
    if framework not in job.params["frameworks"]:
        return []
    return [m for m in job.params["modes"].get(framework, []) if path_of(framework, m).artifact]


def export_all(job, threads: int) -> None:
    """Every artifact path of the job's model, one process per framework
    (imports of one framework only); an artifact whose record matches its
    :func:`export_key` is kept. A process that dies marks the path it was
    exporting ``error`` with its message, and a fresh one takes the rest."""
    from ..launch import log_tail
    from ..runner import _ONLY, worker_env

    timeout = job.params["export_timeout_s"]
    log = Path(job.gate_dir).parent / "jobs" / f"export-{job.model_key}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    for fw in ("torch", "tensorflow", "jax"):
        todo = [m for m in export_modes(job, fw)
                if (read_record(job, fw, m) or {}).get("key") != export_key(job, fw, m)]
        while todo:
            env = worker_env(threads, job.device, fw)
            for name in ("USE_TF", "USE_FLAX", "USE_TORCH"):  # the prepare job's, not fw's
                if name not in _ONLY[fw]:
                    env.pop(name, None)
            env["FWCOMPARE_EXPORT_MODES"] = ",".join(todo)
            with open(log, "a") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-c", "import sys; from fwcompare.studies.deployment "
                     "import export_main; sys.exit(export_main(sys.argv[1], sys.argv[2]))",
                     str(job.write(log.with_suffix(".json"))), fw],
                    env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
                try:
                    proc.wait(timeout=timeout)
                    why = "" if proc.returncode == 0 else f"exit code {proc.returncode}"
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    why = f"no result within export_timeout_s ({timeout:g} s)"
            left = []
            for m in todo:
                rec = read_record(job, fw, m)
                if rec is not None and rec.get("key") == export_key(job, fw, m) \
                        and rec["status"] != "started":
                    continue
                if rec is not None and rec.get("status") == "started":  # the one it died in
                    status = "timeout" if why.startswith("no result") else "error"
                    _write_record(job, fw, m, dict(rec, status=status, message=(
                        f"the export process stopped ({why}): {log_tail(log, 1200)}")))
                else:
                    left.append(m)
            if left == todo:  # nothing was started: do not loop
                for m in left:
                    _write_record(job, fw, m, {"key": export_key(job, fw, m), "status": "error",
                                               "message": f"the export process stopped before "
                                                          f"{m} ({why}): {log_tail(log, 1200)}"})
                left = []
            todo = left


def export_main(job_path: str, framework: str) -> int:
    """An export process: the modes in FWCOMPARE_EXPORT_MODES of ``framework``."""
    from ..frameworks import get_backend
    from ..job import Job

    job = Job.read(job_path)
    backend = get_backend(framework)
    backend.configure(job.threads, job.device)
    from ..gate import Gate

    gate = Gate(job.gate_path)
    modes = os.environ["FWCOMPARE_EXPORT_MODES"].split(",")
    exporter = {"torch": TorchExporter, "tensorflow": TensorFlowExporter,
                "jax": JaxExporter}[framework](job, backend, gate)
    for mode in modes:
        key = export_key(job, framework, mode)
        out = artifact_dir(job, framework, mode)
        if out.exists():
            import shutil

            shutil.rmtree(out)
        _write_record(job, framework, mode, {"key": key, "status": "started",
                                             "exporter_pid": os.getpid()})
        print(f"fwcompare: exporting {framework}/{mode} of {job.model}", file=sys.stderr,
              flush=True)
        t0 = time.perf_counter()
        try:
            setup = exporter.export(mode, out) or ""
            record = {"status": "ok", "message": "", "export_s": time.perf_counter() - t0,
                      "artifact_bytes": _dir_bytes(out), "setup": setup}
        except Exception as exc:
            import traceback

            traceback.print_exc()
            record = {"status": converter_status(exc), "message": converter_message(exc)}
        _write_record(job, framework, mode, dict(record, key=key, exporter_pid=os.getpid()))
    return 0


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
        out.mkdir(parents=True, exist_ok=True)
        return getattr(self, "export_" + mode.replace("-", "_"))(out)


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

    def _onnx(self, path: Path) -> None:
        import torch

        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
        torch.onnx.export(self.module(), (self.ids(),), str(path), dynamo=True,
                          input_names=["input_ids"], output_names=["output"],
                          dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                          opset_version=self.job.params["onnx_opset"], external_data=False,
                          verbose=False)

    def export_onnxruntime(self, out):
        self._onnx(out / "model.onnx")
        return f"torch.onnx.export(dynamo=True, opset {self.job.params['onnx_opset']})"

    def _fused(self, out: Path) -> str:
        from onnxruntime.transformers.optimizer import optimize_model

        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / "plain.onnx"
            self._onnx(plain)
            kind = ORT_MODEL_TYPES.get(self.model.config.model_type, "bert")
            opt = optimize_model(str(plain), model_type=kind, num_heads=0, hidden_size=0,
                                 opt_level=0)
            opt.save_model_to_file(str(out / "model.onnx"))
        fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        return (f"optimizer model_type {kind}: "
                + (", ".join(f"{k} {v}" for k, v in fused.items()) or "no fusion applied"))

    def export_onnxruntime_fused(self, out):
        return self._fused(out)

    def export_onnxruntime_int8(self, out):
        import tempfile

        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            setup = self._fused(Path(tmp))
            quantize_dynamic(str(Path(tmp) / "model.onnx"), str(out / "model.onnx"),
                             weight_type=QuantType.QInt8)
        return f"{setup}; quantize_dynamic(weight_type QInt8)"


# onnxruntime.transformers.optimizer's model types, by transformers' model_type.
ORT_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "distilbert": "bert", "gpt2": "gpt2",
                   "bart": "bart", "t5": "t5", "vit": "vit"}


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

    def export_savedmodel(self, out):
        import tensorflow as tf

        tf.saved_model.save(self.model, str(out / "savedmodel"),
                            signatures={"serving_default": self.serve().get_concrete_function()})
        return "tf.saved_model.save(signatures=serving_default: int32 ids [None, None])"

    def _tflite(self, out: Path, kind: str) -> str:
        import tensorflow as tf

        fn = self.serve()
        converter = tf.lite.TFLiteConverter.from_concrete_functions(
            [fn.get_concrete_function()], self.model)
        setup = "TFLiteConverter.from_concrete_functions"
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


class JaxExporter(_Exporter):
    def apply(self):
        model, head, params = self.model, self.job.head, self.model.params

        def forward(ids):
            out = model(ids, params=params, train=False)
            return out.last_hidden_state if head == "base" else out.logits
        return forward

    def export_jax_export(self, out):
        import jax
        import jax.numpy as jnp
        from jax import export

        b, s = export.symbolic_shape("b, s")
        exp = export.export(jax.jit(self.apply()))(jax.ShapeDtypeStruct((b, s), jnp.int32))
        (out / "model.jaxexport").write_bytes(exp.serialize())
        return (f"jax.export (symbolic b, s; platforms {', '.join(exp.platforms)}), "
                "weights as constants")

    def export_jax2tf_tflite(self, out):
        import tensorflow as tf
        from jax.experimental import jax2tf

        fn = jax2tf.convert(self.apply(), with_gradient=False)
        for b, s in self.shapes():
            tff = tf.function(fn, input_signature=[tf.TensorSpec([b, s], tf.int32)],
                              autograph=False)
            converter = tf.lite.TFLiteConverter.from_concrete_functions(
                [tff.get_concrete_function()], tff)
            (out / f"model-{b}x{s}.tflite").write_bytes(converter.convert())
        return "jax2tf.convert (native serialization), TFLiteConverter, static shapes"


# -- runtimes (worker side: a fresh process per path) ---------------------------------
class Runtime:
    """A loaded artifact: ``inputs(ids)`` makes its inputs (outside timing),
    ``run(x)`` one call, returning the runtime's own output."""

    setup = ""

    def inputs(self, ids: np.ndarray):
        return ids

    def run(self, x):
        raise NotImplementedError


class OnnxRuntime(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import onnxruntime as ort

        if device == "gpu":
            raise CellFailure("unsupported", "onnxruntime is the CPU build here; a GPU run "
                                             "needs onnxruntime-gpu (CUDAExecutionProvider)")
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(str(path / "model.onnx"), so,
                                            providers=["CPUExecutionProvider"])
        inp = self.session.get_inputs()[0]
        self.name = inp.name
        self.dtype = np.int64 if "int64" in inp.type else np.int32
        self.setup = (f"onnxruntime {ort.__version__} CPUExecutionProvider, "
                      f"intra_op_num_threads={threads}, inter_op_num_threads=1, "
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

        if device == "gpu":
            raise CellFailure("unsupported", "LiteRT's GPU delegate targets mobile GPUs "
                                             "(OpenCL/OpenGL), not a CUDA device")
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


class JaxExport(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import jax
        from jax import export

        self.jax = jax
        exp = export.deserialize(bytearray((path / "model.jaxexport").read_bytes()))
        self.fn = jax.jit(exp.call)
        self.setup = f"jax.export.deserialize, jax.jit(exported.call), JAX {jax.__version__}"

    def inputs(self, ids):
        return self.jax.device_put(np.asarray(ids, dtype=np.int32))

    def run(self, x):
        return self.fn(x)


RUNTIMES = {"onnx": OnnxRuntime, "tflite": LiteRT, "torchscript": TorchScript,
            "savedmodel": SavedModel, "jax-export": JaxExport}


class ArrayBackend:
    """A framework backend that also takes plain numpy outputs (ONNX Runtime's
    and LiteRT's), which are computed by the time they are returned."""

    def __init__(self, base):
        self._base = base

    def __getattr__(self, name):
        return getattr(self._base, name)

    def sync(self, out) -> None:
        if not isinstance(out, np.ndarray):
            self._base.sync(out)

    def to_numpy(self, out) -> np.ndarray:
        if isinstance(out, np.ndarray):
            return out.astype(np.float64)
        return self._base.to_numpy(out)


@dataclass
class Loaded:
    runtime: Runtime
    load_s: float
    record: dict
    checked: tuple | None = None  # (gate figures, not-equivalent reason) once gated


def load_artifact(ctx: WorkerContext, framework: str, mode: str) -> Loaded:
    """The path's artifact, loaded in this process (which never held the
    model): its record says what the export found."""
    from ..cell import release_freed_heap
    from ..memory import current_rss_bytes

    record = read_record(ctx.job, framework, mode)
    if record is None:
        raise CellFailure("error", f"{framework}/{mode}: the prepare job left no export record")
    if record["status"] != "ok":
        raise CellFailure(record["status"], f"export failed: {record['message']}")
    release_freed_heap()
    ctx.baseline_rss = current_rss_bytes()  # memory counts from the artifact's load
    t0 = time.perf_counter()
    runtime = RUNTIMES[path_of(framework, mode).artifact](
        artifact_dir(ctx.job, framework, mode), ctx.job.threads, ctx.device)
    return Loaded(runtime, time.perf_counter() - t0, record)


def after_checks(ctx: WorkerContext, spec, embed):
    """``after`` of a cell: its output against the float64 reference and, on
    real weights, the sentence pairs' similarities against float32's.
    ``embed(ids) -> numpy`` runs the path on other token ids."""
    from ..precision import error_metrics

    ref = ctx.gate.fp64(fp64_key(spec.batch_size, spec.seq_len))
    sentences = sentences_path(ctx.job)

    def after(fn):
        figures = {}
        if ref is not None:
            err = error_metrics(ctx.backend.to_numpy(fn())[:REF_ROWS], ref)
            figures.update({col: err[k] for col, k in FP64_COLUMNS.items()})
        if sentences.is_file():
            with np.load(sentences) as s:
                figures.update(sentence_agreement(pair_similarities(embed(s["ids"])),
                                                  s["reference"]))
        return figures
    return after


def plan_path(ctx: WorkerContext, spec) -> CellPlan:
    """One cell of an artifact path: load once per process, gate on the first
    call of the gate's shape (or a call of its own), time, then the checks."""
    from ..gate import check_output

    fw, mode = spec.framework, spec.mode
    path = path_of(fw, mode)
    v = ctx.variant(("artifact", mode), lambda: load_artifact(ctx, fw, mode))
    rt = v.runtime
    skip = ctx.skip_reason(spec)
    known = {"load_s": v.load_s, "export_s": v.record["export_s"],
             "artifact_bytes": v.record["artifact_bytes"]}
    if skip:
        return CellPlan(lambda: None, known=known, skip=skip)
    tol = ctx.params["equiv_tol"], ctx.params["mp_equiv_rtol"]

    def check(out):
        v.checked = check_output(ctx.backend.to_numpy(out), ctx.gate, mode, path.precision, *tol)
        return v.checked
    first = None
    ids = ctx.token_ids(spec)
    if v.checked is None:
        if np.array_equal(ids, ctx.gate.ids):
            def first(out):
                return (*check(out), [])
        else:
            x = rt.inputs(ctx.gate.ids)
            check(rt.run(x))
    gate_figures, bad = v.checked if v.checked is not None else ({}, "")

    def call():
        x = rt.inputs(ids)
        return lambda: rt.run(x)

    def embed(sentence_ids):
        return ctx.backend.to_numpy(rt.run(rt.inputs(sentence_ids)))
    setup = f"{path.how}; export: {v.record.get('setup', '')}; runtime: {rt.setup}"
    return CellPlan(call, known=dict(known, **gate_figures),
                    flops=models.forward_flops(ctx.info, spec.batch_size, spec.seq_len),
                    traffic=models.weight_traffic_bytes(ctx.info, "inference"),
                    problem=bad, first=first, after=after_checks(ctx, spec, embed),
                    provenance={"mode_setup": setup, "exporter_pid": v.record["exporter_pid"],
                                "runtime_pid": os.getpid()})


class Deployment(Study):
    name = "deployment"
    title = "Deployment: export, runtimes and quantization"
    modes = DEPLOY_MODES

    def schema(self):
        return {
            **grid_params(["all-minilm-l6-v2"], {fw: list(m) for fw, m in DEPLOY_MODES.items()},
                          DEPLOY_MODES, [1], [128], 1800.0),
            "equiv_tol": EQUIV_TOL,
            "mp_equiv_rtol": Param("float", 1.0, "relative L2 error against float64 on the gate batch above which a float16 or INT8 path is flagged not_equivalent: a bound against a broken conversion (an unrelated output of the same size scores about 1.4), not a judgement of accuracy (see the sentence-pair agreement)", positive),
            "onnx_opset": Param("int", 18, "ONNX opset of torch.onnx.export and tf2onnx", positive),
            "representative_batches": Param("int", 8, "calibration batches of full-integer TFLite quantization (seeded token ids at the smallest shape)", positive),
            "export_timeout_s": Param("float", 900.0, "seconds one framework's exports of one model may take before the path in progress is stopped as timeout", positive),
            "sentence_len": Param("int", 16, "tokens per sentence of the sentence-pair check (real weights with a tokenizer; each sentence cut to this length, so every path sees one batch of one shape); 0: no check", non_negative),
            **TIMING,
        }

    def check(self, params):
        problems = []
        for fw in params["frameworks"]:
            base = BASELINE[fw]
            modes = params["modes"].get(fw, [])
            if modes and base not in modes:
                problems.append(f"modes: {fw} must include {base!r} (the baseline of every "
                                f"{fw} path's speed-up)")
        return problems

    def head(self, task, model):
        if models.model_type(model) in models.DECODERS:
            return "causal_lm"  # logits: argmax agreement is next-token agreement
        return "base"

    def fp64_shapes(self, task, cells):
        return sorted({(s.batch_size, s.seq_len) for s in cells})

    def groups(self, task, cells):
        return per_mode(cells)  # a fresh process per path

    def backend(self, framework):
        from ..frameworks import get_backend

        return ArrayBackend(get_backend(framework))

    def prepare(self, job):
        from ..gate import prepare

        prepare(job)
        write_sentences(job)
        export_all(job, job.threads)

    def plan(self, ctx, spec):
        if path_of(spec.framework, spec.mode).artifact:
            return plan_path(ctx, spec)
        plan = plan_inference(ctx, spec)
        fwd = ctx.variant(("inference", spec.dtype), None).forwards[spec.mode]

        def embed(ids):
            out = fwd(ctx.backend.make_inputs(ids, ctx.device))
            ctx.backend.sync(out)
            return ctx.backend.to_numpy(out)
        plan.after = after_checks(ctx, spec, embed)
        plan.provenance = dict(plan.provenance, runtime_pid=os.getpid())
        return plan


def write_sentences(job) -> None:
    """The sentence pairs' token ids (each sentence cut to ``sentence_len``
    tokens) and PyTorch float32's similarities of them, for a model with a
    tokenizer and hidden states; nothing otherwise."""
    from ..atomic import write_atomic
    from ..frameworks import get_backend

    path = sentences_path(job)
    path.unlink(missing_ok=True)
    n = job.params["sentence_len"]
    local = models.local_path(job.model)
    if not n or job.head != "base" or local is None or not (
            (local / "tokenizer.json").is_file() or (local / "vocab.txt").is_file()):
        return
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(local), local_files_only=True)
    texts = [t for pair in read_pairs() for t in pair]
    ids = np.array([tok(t, truncation=True, max_length=n)["input_ids"] for t in texts
                    if len(tok(t)["input_ids"]) >= n])
    if len(ids) != len(texts):
        raise ValueError(f"every sentence of {SENTENCE_PAIRS.name} must fill sentence_len "
                         f"({n}) tokens of {job.model}'s tokenizer")
    torch_backend = get_backend("torch")
    from ..gate import Gate

    net = torch_backend.load(Gate(job.gate_path).info["weights_dir"], "cpu", job.head)
    forward = torch_backend.make_forward(net, "eager", "cpu", job.head)
    reference = pair_similarities(torch_backend.to_numpy(forward(
        torch_backend.make_inputs(ids, "cpu"))))

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, ids=ids, reference=reference)
    write_atomic(path, write)


STUDY = register(Deployment())
