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
from ..cell import CellFailure, CellPlan, WorkerContext, inject_fault
from ..claims import Claim, Measurement, Metric, StudyData, cell_label, check_cells
from ..gate import REF_ROWS, fp64_key, token_ids
from ..params import TIMING, Param, grid_params, non_negative, positive
from ..results import MEASURED
from ..stats import geomean_ratio_ci
from ..tables import baseline_pairs, both_measured, samples_by_cell
from ..workloads import EQUIV_TOL, FP64_COLUMNS, plan_inference
from . import register
from .base import Study, per_mode

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
    # The export process it shares with its framework's other paths (""), or
    # one of its own: a path that builds on no other's step and is slow to
    # export runs beside them when ``export_jobs`` allows.
    process: str = ""


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
        "tf2onnx": DeployPath("tf2onnx.convert.from_function", "ONNX Runtime", artifact="onnx",
                              process="tf2onnx"),
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
    blob = json.dumps([job.model_key, framework, mode, job.device, p["batch_sizes"],
                       p["seq_lens"], p["sentence_len"], p["onnx_opset"],
                       p["representative_batches"], job.seed,
                       dict(job.provenance.get("versions", {})),
                       job.provenance.get("git_commit", "")], sort_keys=True)
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
    (imports of one framework only; a path with a ``process`` of its own
    apart); an artifact whose record matches its
    :func:`export_key` is kept. A process that dies marks the path it was
    exporting ``error`` with its message, and a fresh one takes the rest.
    ``export_jobs`` processes export at once (each mostly one thread of
    Python and converter passes), the framework groups first in PATHS order."""
    from concurrent.futures import ThreadPoolExecutor

    groups: dict[tuple[str, str], list[str]] = {}
    for fw in PATHS:
        for m in export_modes(job, fw):
            groups.setdefault((fw, path_of(fw, m).process), []).append(m)
    with ThreadPoolExecutor(max_workers=job.params["export_jobs"]) as pool:
        for done in [pool.submit(_export_group, job, fw, name, modes, threads)
                     for (fw, name), modes in groups.items()]:
            done.result()


def _export_group(job, fw: str, name: str, modes: list[str], threads: int) -> None:
    """Paths of one framework that share an export process (see DeployPath.process)."""
    from ..launch import log_tail
    from ..runner import _ONLY, worker_env

    timeout = job.params["export_timeout_s"]
    log = Path(job.gate_dir).parent / "jobs" / f"export-{fw}{'-' + name if name else ''}-" \
                                               f"{job.model_key}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    todo = [m for m in modes
            if (read_record(job, fw, m) or {}).get("key") != export_key(job, fw, m)]
    if job.device == "gpu":
        for m in [m for m in todo if path_of(fw, m).runtime in CPU_ONLY]:
            _write_record(job, fw, m, {"key": export_key(job, fw, m), "status": "unsupported",
                                       "message": CPU_ONLY[path_of(fw, m).runtime]})
            todo.remove(m)
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
    from ..frameworks import backend_options, get_backend
    from ..job import Job

    job = Job.read(job_path)
    backend = get_backend(framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    from ..gate import Gate

    gate = Gate(job.gate_path)
    modes = os.environ["FWCOMPARE_EXPORT_MODES"].split(",")
    exporter = {"torch": TorchExporter, "tensorflow": TensorFlowExporter,
                "jax": JaxExporter}[framework](job, backend, gate)
    try:
        for mode in modes:
            export_one(job, framework, mode, exporter)
    finally:
        import shutil

        shutil.rmtree(exporter.tmp, ignore_errors=True)
    return 0


def export_one(job, framework: str, mode: str, exporter) -> None:
    """One path's artifact and its record (the converter's message if it fails)."""
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
        inject_fault(f"export {framework}/{mode}")
        setup = exporter.export(mode, out) or ""
        record = {"status": "ok", "message": "", "export_s": time.perf_counter() - t0
                  + exporter.reused_s, "artifact_bytes": _dir_bytes(out), "setup": setup}
    except Exception as exc:
        import traceback

        traceback.print_exc()
        record = {"status": converter_status(exc), "message": converter_message(exc)}
    _write_record(job, framework, mode, dict(record, key=key, exporter_pid=os.getpid()))


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


# Runtimes of this suite's pins that have no GPU path: their cells on a GPU
# are unsupported rows with the reason, and nothing is exported for them.
CPU_ONLY = {
    "ONNX Runtime": "the pinned onnxruntime is the CPU build; a GPU run needs onnxruntime-gpu "
                    "(CUDAExecutionProvider)",
    "LiteRT": "LiteRT's GPU delegate targets mobile GPUs (OpenCL, OpenGL), not a CUDA device",
}

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
        raise CellFailure(record["status"], f"not exported: {record['message']}")
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


# -- tables (the notebook's) ------------------------------------------------------------
PATH_KEYS = ["device", "model", "framework", "batch_size", "seq_len"]


def deployment_table(summary: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: how the path was made and run, its median with CI,
    its speed-up over its framework's baseline at the same model and shape
    (baseline time / path time, CI from the paired samples), its errors
    against float64, the sentence-pair agreement, and the artifact's size,
    export and cold-load times."""
    if summary.empty:
        return pd.DataFrame()
    by_cell = samples_by_cell(samples)
    base = summary["mode"] == summary["framework"].map(BASELINE)
    rows = []
    for r, b, status in baseline_pairs(summary, PATH_KEYS, base):
        p = path_of(r["framework"], r["mode"])
        row = {"model": r["model"], "framework": r["framework"], "path": r["variant"],
               "runtime": p.runtime, "weights": p.precision, "batch_size": r["batch_size"],
               "seq_len": r["seq_len"], "device": r["device"], "status": status,
               "median_s": r["median_s"], "ci_low_s": r["ci_low_s"], "ci_high_s": r["ci_high_s"],
               "speedup": math.nan, "speedup_low": math.nan, "speedup_high": math.nan,
               **{c: r.get(c, math.nan) for c in (*FP64_COLUMNS, *STS_COLUMNS)},
               "artifact_mb": r["artifact_bytes"] / 1e6, "export_s": r["export_s"],
               "load_s": r["load_s"], "first_call_s": r["first_call_s"],
               "peak_mem_mb": r["peak_mem_bytes"] / 1e6, "cell_id": r["cell_id"],
               "baseline_cell_id": b["cell_id"] if b is not None else "",
               "error": r["error"]}
        if b is not None and b["cell_id"] == r["cell_id"]:
            row["speedup"] = 1.0 if r["status"] in MEASURED else math.nan
        elif both_measured(r, b, by_cell):
            row["speedup"], row["speedup_low"], row["speedup_high"] = geomean_ratio_ci(
                [(by_cell[b["cell_id"]], by_cell[r["cell_id"]])])
        rows.append(row)
    order = {m: i for fw in PATHS for i, m in enumerate(PATHS[fw])}
    out = pd.DataFrame(rows)
    out["_o"] = [(list(PATHS).index(fw), order[v.split("/", 1)[1]])
                 for fw, v in zip(out["framework"], out["path"])]
    return out.sort_values(["model", "_o", "batch_size", "seq_len"]).drop(columns="_o") \
        .reset_index(drop=True)


def paths_table(table: pd.DataFrame) -> pd.DataFrame:
    """Which paths worked on which models: per path and model, the status
    of its cells (ok, not_equivalent, or the failure) and the first message."""
    if table.empty:
        return pd.DataFrame()
    rows = []
    for (path, model), g in table.groupby(["path", "model"], sort=False):
        statuses = g["status"].value_counts()
        msg = next((e for e, st in zip(g["error"], g["status"]) if e and st != "ok"), "")
        rows.append({"path": path, "runtime": g["runtime"].iloc[0], "model": model,
                     "result": ", ".join(f"{k} {n}" if len(g) > 1 else k
                                         for k, n in statuses.items()),
                     "message": msg.splitlines()[0][:300] if msg else ""})
    return pd.DataFrame(rows)


def path_summary(table: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per path: geometric-mean speed-up over its framework's baseline with a
    CI over the cells both ran, the worst error against float64, the lowest
    sentence-pair agreement, the artifact's size and its times."""
    by_cell = samples_by_cell(samples)
    rows = []
    for path, g in table.groupby("path", sort=False):
        ok = g[g["status"].isin(MEASURED)]
        pairs = [(by_cell[b], by_cell[c]) for c, b in zip(ok["cell_id"], ok["baseline_cell_id"])
                 if b and b != c and b in by_cell and c in by_cell]
        if len(ok) and (ok["cell_id"] == ok["baseline_cell_id"]).all():
            gm, lo, hi = 1.0, math.nan, math.nan  # the baseline itself
        else:
            gm, lo, hi = geomean_ratio_ci(pairs) if pairs else (math.nan,) * 3
        rows.append({"path": path, "runtime": g["runtime"].iloc[0],
                     "weights": g["weights"].iloc[0], "cells": len(g), "cells_ok": len(ok),
                     "geomean_speedup": gm, "speedup_low": lo, "speedup_high": hi,
                     "max_fp64_rel_l2_err": ok["fp64_rel_l2_err"].max(),
                     "min_sts_spearman": ok["sts_spearman"].min(),
                     "artifact_mb": ok["artifact_mb"].max(), "export_s": ok["export_s"].max(),
                     "load_s": ok["load_s"].max(),
                     "statuses": ", ".join(sorted(set(g["status"]) - {"ok"})) or "ok"})
    return pd.DataFrame(rows)


class Deployment(Study):
    name = "deployment"
    title = "Deployment: export, runtimes and quantization"
    modes = DEPLOY_MODES
    # Its prepare job is mostly the exports, which are measured (export_s,
    # artifact_bytes); the weights and gate references are a few seconds of it.
    prepare_phase = "exports (export_s, artifact sizes), weights and gate references"
    figure_phases = (prepare_phase,)

    def schema(self):
        return {
            **grid_params(["all-minilm-l6-v2"], {fw: list(m) for fw, m in DEPLOY_MODES.items()},
                          DEPLOY_MODES, [1], [128], 1800.0, tf_autograph=None),
            "equiv_tol": EQUIV_TOL,
            "mp_equiv_rtol": Param("float", 1.0, "relative L2 error against float64 on the gate batch above which a float16 or INT8 path is flagged not_equivalent: a bound against a broken conversion (an unrelated output of the same size scores about 1.4), not a judgement of accuracy (see the sentence-pair agreement)", positive),
            "onnx_opset": Param("int", 18, "ONNX opset of torch.onnx.export and tf2onnx", positive),
            "representative_batches": Param("int", 8, "calibration batches of full-integer TFLite quantization (seeded token ids at the smallest shape)", positive),
            "export_jobs": Param("int", 1, "export processes at once in the prepare job (one per framework, and one per path that has a process of its own); each is mostly one thread, so 2 on a 2-core machine nearly halves the wait, and each export time then shares the machine with another's", positive),
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


# -- claim metrics (params/claims.yaml names them) ------------------------------------
def _rows(data: StudyData, devices, variant: str, claim: Claim) -> pd.DataFrame:
    s = data.summary
    s = s[s["device"].isin(devices) & (s["variant"] == variant)]
    if claim.models:
        s = s[s["model"].isin(claim.models)]
    return s


def size_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """Artifact size of path a / of path b, geometric mean over the models
    both exported. A size is exact: no CI."""
    from ..stats import geomean

    a, b = claim.cells["a"], claim.cells["b"]
    m = Measurement(unit=f"{a} artifact bytes / {b} artifact bytes")
    ra = _rows(data, devices, a, claim).drop_duplicates("model").set_index("model")
    rb = _rows(data, devices, b, claim).drop_duplicates("model").set_index("model")
    both = [k for k in ra.index.intersection(rb.index)
            if ra.loc[k, "artifact_bytes"] > 0 and rb.loc[k, "artifact_bytes"] > 0]
    if not both:
        m.note = (f"no model where both {a} and {b} exported an artifact "
                  f"({a}: {', '.join(sorted(set(ra['status']))) or 'no cells'}; "
                  f"{b}: {', '.join(sorted(set(rb['status']))) or 'no cells'})")
        return m
    ratios = [ra.loc[k, "artifact_bytes"] / rb.loc[k, "artifact_bytes"] for k in both]
    m.value = geomean(ratios)
    m.cells = [f"{k}: {ra.loc[k, 'artifact_bytes'] / 1e6:.1f} MB / "
               f"{rb.loc[k, 'artifact_bytes'] / 1e6:.1f} MB" for k in both]
    m.points = list(zip(both, ratios))
    m.devices = set(ra.loc[both, "device"])
    m.note = "artifact sizes are exact: no CI"
    return m


def sentence_agreement_metric(data: StudyData, claim: Claim, devices) -> Measurement:
    """Spearman correlation of path a's sentence-pair similarities with
    PyTorch float32's, the lowest over the models with a tokenizer (real
    weights); one figure per cell, no CI."""
    a = claim.cells["a"]
    m = Measurement(unit=f"Spearman correlation of {a}'s pair similarities with float32's")
    rows = _rows(data, devices, a, claim)
    rows = rows[rows["status"].isin(MEASURED) & rows["sts_spearman"].notna()]
    if rows.empty:
        m.note = (f"no {a} cell with a sentence-pair check (real weights with a tokenizer)"
                  if len(_rows(data, devices, a, claim)) else f"{a} did not run")
        return m
    worst = rows.loc[rows["sts_spearman"].idxmin()]
    m.value = float(worst["sts_spearman"])
    m.cells = [cell_label(r) for _, r in rows.iterrows()]
    m.points = list(zip(m.cells, rows["sts_spearman"]))
    m.devices = set(rows["device"])
    m.note = (f"lowest of {len(rows)} cell(s): {cell_label(worst)}; largest change of a pair's "
              f"similarity {worst['sts_max_abs_diff']:.3f}; one figure per cell: no CI")
    return m


def path_works(data: StudyData, claim: Claim, devices) -> Measurement:
    """Share of path a's cells that ran and matched the reference (status
    ok): 1 when the path exports, loads and computes the same function on
    every model tried. A share of cells: no CI."""
    a = claim.cells["a"]
    m = Measurement(unit=f"share of {a} cells ok")
    rows = _rows(data, devices, a, claim)
    if rows.empty:
        m.note = f"{a} did not run"
        return m
    m.value = float((rows["status"] == "ok").mean())
    m.cells = [f"{cell_label(r)}: {r['status']}" for _, r in rows.iterrows()]
    m.points = [(cell_label(r), float(r["status"] == "ok")) for _, r in rows.iterrows()]
    m.devices = set(rows["device"])
    bad = rows[rows["status"] != "ok"]
    m.note = "; ".join(f"{r['model']}: {r['status']}: {r['error'].splitlines()[0][:160]}"
                       for _, r in bad.drop_duplicates("model").iterrows()
                       if r["error"]) or "every cell ok"
    return m


Deployment.metrics = {
    "size_ratio": Metric(size_ratio, ("a", "b"), check_cells),
    "sentence_agreement": Metric(sentence_agreement_metric, ("a",), check_cells),
    "path_works": Metric(path_works, ("a",), check_cells),
}
STUDY = register(Deployment())


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
WEIGHTS_MARKER = {"float32": "o", "float16": "^", "int8": "s"}
# Where the labels of successive points go (points offset, alignment), so
# that paths with the same error (float32 rounding) do not print over each other.
_LABEL_OFFSETS = ((4, 5, "left"), (4, -11, "left"), (-4, 5, "right"), (-4, -11, "right"),
                  (4, 14, "left"), (-4, -20, "right"))


def speed_vs_error(table: pd.DataFrame, manifest: dict):
    """Per model: each path's cells as points, x the speed-up over its
    framework's baseline (95% CI as a bar), y the relative L2 error against
    float64 (log). Colour: path; marker: the weights' precision. Paths that
    did not run are listed under the panels."""
    import matplotlib.pyplot as plt

    from ..plots import NO_LABEL, SHORT, footer, palette

    if table.empty:
        from ..plots import no_data

        return no_data("no deployment cells")
    models_ = list(dict.fromkeys(table["model"]))
    colors = palette(table["framework"])
    fig, axes = plt.subplots(1, len(models_), squeeze=False,
                             figsize=(6.0 * len(models_) + 2.4, 5.2))
    failed = []
    shapes = {m: min(zip(g["batch_size"], g["seq_len"]), key=lambda t: (t[0] * t[1], t[0]))
              for m, g in table.groupby("model")}
    for j, model in enumerate(models_):
        ax, labelled = axes[0, j], 0
        for _, r in table[table["model"] == model].iterrows():
            if not (math.isfinite(r["speedup"]) and r["fp64_rel_l2_err"] > 0):
                failed.append(f"{r['path']} ({r['status']})")
                continue
            lo, hi = r["speedup_low"], r["speedup_high"]
            xerr = ([[r["speedup"] - lo], [hi - r["speedup"]]]
                    if math.isfinite(lo) and math.isfinite(hi) else None)
            ax.errorbar(r["speedup"], r["fp64_rel_l2_err"], xerr=xerr,
                        marker=WEIGHTS_MARKER.get(r["weights"], "o"), ms=7, ls="", capsize=2,
                        color=colors[r["framework"]],
                        mfc="none" if r["status"] == "not_equivalent" else colors[r["framework"]])
            if (r["batch_size"], r["seq_len"]) == shapes[model]:  # one label per path
                dx, dy, ha = _LABEL_OFFSETS[labelled % len(_LABEL_OFFSETS)]
                labelled += 1
                ax.annotate(r["path"].split("/", 1)[1], (r["speedup"], r["fp64_rel_l2_err"]),
                            xytext=(dx, dy), textcoords="offset points", fontsize=7, ha=ha,
                            color=colors[r["framework"]])
        ax.axvline(1.0, color="0.5", lw=1, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(SHORT)
        lo, hi = ax.get_xlim()
        ax.xaxis.set_minor_formatter(SHORT if hi / lo < 4 else NO_LABEL)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("speed-up over the framework's baseline (> 1: faster)")
        if j == 0:
            ax.set_ylabel("relative L2 error vs float64")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in colors.items()]
    handles += [plt.Line2D([], [], color="0.3", marker=mk, ls="", label=f"{w} weights")
                for w, mk in WEIGHTS_MARKER.items() if w in set(table["weights"])]
    handles.append(plt.Line2D([], [], color="0.3", marker="o", mfc="none", ls="",
                              label="not equivalent (hollow)"))
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("Deployment paths: speed-up against error", x=0.02, ha="left")
    note = ("baselines: PyTorch eager, tf.function, jax.jit; bars: 95% CI of the speed-up; "
            "labels at each model's smallest shape")
    if failed:
        note += "; not drawn: " + ", ".join(dict.fromkeys(failed))
    footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.08, 0.8, 0.95))
    return fig


def size_and_load(table: pd.DataFrame, manifest: dict):
    """Per path (rows) and model (colour): the artifact's size, its export
    time from the model, and its cold load in a fresh process. Paths with no
    artifact (the baselines load the shared weights) show only a load time;
    paths that did not export are marked."""
    import matplotlib.pyplot as plt

    from ..plots import footer, palette

    if table.empty:
        from ..plots import no_data

        return no_data("no deployment cells")
    t = table.drop_duplicates(["model", "path"])
    paths = list(dict.fromkeys(t["path"]))
    models_ = list(dict.fromkeys(t["model"]))
    colors = palette(models_)
    fig, axes = plt.subplots(1, 3, sharey=True, figsize=(13, 0.38 * len(paths) + 2.2))
    h = 0.8 / len(models_)
    for k, (col, label) in enumerate([("artifact_mb", "artifact size (MB)"),
                                      ("export_s", "export time from the model (s)"),
                                      ("load_s", "cold load in a fresh process (s)")]):
        ax = axes[k]
        for i, model in enumerate(models_):
            g = t[t["model"] == model].set_index("path")
            for y, path in enumerate(paths):
                if path not in g.index:
                    continue
                v = g.loc[path, col]
                pos = y + (i - (len(models_) - 1) / 2) * h
                if math.isfinite(v):
                    ax.barh(pos, v, height=h, color=colors[model],
                            label=model if y == 0 or k else None)
                elif g.loc[path, "status"] not in MEASURED and col == "artifact_mb":
                    ax.text(0, pos, f" {g.loc[path, 'status']}", va="center", fontsize=7,
                            color="firebrick")
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(paths)), paths, fontsize=8)
    axes[0].invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[m], label=m) for m in models_]
    fig.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle("What each path costs before its first call", x=0.02, ha="left")
    footer(fig, manifest, "baselines have no artifact: they load the shared safetensors weights")
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return fig
