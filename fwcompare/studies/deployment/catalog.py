"""The deployment paths: what each framework exports and how (:data:`PATHS`),
where a path's artifact lives, and the sentence-pair check every path is
judged by (the prepare job's reference, the worker's comparison)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SENTENCE_PAIRS = Path(__file__).resolve().parents[2] / "data" / "sentence_pairs.tsv"


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
