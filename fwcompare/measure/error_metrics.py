"""Error metrics of an output against a reference (both as NumPy arrays)."""
from __future__ import annotations

import math

import numpy as np


def error_metrics(out: np.ndarray, ref: np.ndarray) -> dict:
    """max abs error, relative L2 error, cosine similarity, argmax agreement of
    the last axis, and counts of non-finite values in ``out``."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: output {out.shape} vs reference {ref.shape}")
    finite = np.isfinite(out)
    diff = out - ref
    ref_norm = float(np.linalg.norm(ref))
    out_norm = float(np.linalg.norm(out))
    cos = float(np.sum(out * ref) / (out_norm * ref_norm)) if out_norm and ref_norm else math.nan
    return {
        "max_abs_err": float(np.max(np.abs(diff))) if diff.size else math.nan,
        "rel_l2_err": float(np.linalg.norm(diff) / ref_norm) if ref_norm else math.nan,
        "cosine_similarity": cos,
        "argmax_agreement": float(np.mean(out.argmax(-1) == ref.argmax(-1))) if out.ndim else math.nan,
        "n_nan": int(np.isnan(out).sum()),
        "n_inf": int(np.isinf(out).sum()),
        "n_nonfinite": int((~finite).sum()),
    }
