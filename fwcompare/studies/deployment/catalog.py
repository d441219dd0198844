"""The deployment paths: what each framework exports and how (:data:`PATHS`,
from each framework's declaration), where a path's artifact lives, and the
sentence-pair check every path is judged by (the prepare job's reference,
the worker's comparison)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...frameworks import DeployPath, Framework, declared

SENTENCE_PAIRS = Path(__file__).resolve().parents[2] / "data" / "sentence_pairs.tsv"


def _baseline(fw: Framework) -> str:
    return next((m for m, p in fw.deploy_paths.items() if not p.artifact), "")


# Each framework's paths, as its package declares them (``Framework.deploy_paths``),
# their modes, and its baseline (the path that exports nothing).
# Read when used: a framework registered later (a test's) brings its own.
PATHS: Mapping[str, Mapping[str, DeployPath]] = declared(lambda fw: fw.deploy_paths)
DEPLOY_MODES: Mapping[str, tuple[str, ...]] = declared(lambda fw: tuple(fw.deploy_paths))
BASELINE: Mapping[str, str] = declared(_baseline)
# Columns of the sentence-pair check (real weights with a tokenizer).
STS_COLUMNS = ("sts_spearman", "sts_max_abs_diff")


def path_of(framework: str, mode: str) -> DeployPath:
    return PATHS[framework][mode]


def model_dir(job) -> Path:
    """Where a model's paths are exported: beside the gate files of the run."""
    return Path(job.gate_dir).parent / "deploy" / job.model_key


def artifact_dir(job, framework: str, mode: str) -> Path:
    return model_dir(job) / framework / mode


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
