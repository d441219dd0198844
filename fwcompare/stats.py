"""Statistics of timing samples: pure functions on arrays, built on scipy.stats.

Why the median: latency distributions on a shared machine are right-skewed
(interrupts, other tenants). The median is robust to that tail and, unlike the
minimum that ``transformers.benchmark`` reported, it describes a typical call.
Its confidence interval needs no distributional assumption: the number of
samples below the true median is Binomial(n, 1/2), so a pair of order statistics
brackets it with a known probability.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats as _st


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Return (median, low, high): the distribution-free CI of the median.

    The interval is [x_(k), x_(n-k+1)] (1-based order statistics) with the
    largest k such that P(k <= B <= n-k) >= confidence for B ~ Binomial(n, 1/2).
    With too few samples for any such interval (n < 6 at 95%), low and high are
    NaN: no interval can honestly be given.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan
    med = float(np.median(x))
    # P(k <= B <= n-k) = 1 - 2*P(B <= k-1) for the symmetric binomial.
    # ppf is the smallest j with cdf(j) >= alpha/2, so cdf(j-1) < alpha/2: k = j.
    k = int(_st.binom.ppf((1 - confidence) / 2, n, 0.5))
    if k < 1:
        return med, math.nan, math.nan
    return med, float(x[k - 1]), float(x[n - k])


def rel_ci_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's CI, relative to the median (NaN if none)."""
    med, lo, hi = median_ci(samples, confidence)
    if not (med > 0) or math.isnan(lo):
        return math.nan
    return (hi - lo) / 2 / med


def iqr(samples: Sequence[float]) -> float:
    q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 75])
    return float(q3 - q1)


def _geomean_of_median_ratios(*arrays, axis=-1):
    """Statistic for bootstrap: arrays are (a_1, b_1, a_2, b_2, ...)."""
    logs = [np.log(np.median(a, axis=axis)) - np.log(np.median(b, axis=axis))
            for a, b in zip(arrays[0::2], arrays[1::2])]
    return np.exp(np.mean(logs, axis=0))


def geomean(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=float)
    if v.size == 0 or np.any(~(v > 0)):
        return math.nan
    return float(np.exp(np.mean(np.log(v))))


def geomean_ratio_ci(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
                     confidence: float = 0.95, n_resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """Geometric mean over cells of median(a)/median(b), with a bootstrap CI.

    ``pairs`` holds, per cell, the raw samples of A and of B. Each sample set is
    resampled independently (scipy.stats.bootstrap, percentile method), so the
    interval carries the timing noise of every cell. With one pair this is the
    CI of a single ratio of medians.
    """
    pairs = [(np.asarray(a, float), np.asarray(b, float)) for a, b in pairs]
    pairs = [(a, b) for a, b in pairs if a.size and b.size]
    if not pairs:
        return math.nan, math.nan, math.nan
    flat = [arr for pair in pairs for arr in pair]
    point = float(_geomean_of_median_ratios(*flat))
    if any(arr.size < 2 for arr in flat):
        return point, math.nan, math.nan
    res = _st.bootstrap(flat, _geomean_of_median_ratios, vectorized=True,
                        paired=False, confidence_level=confidence,
                        n_resamples=n_resamples, method="percentile",
                        rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return point, float(ci.low), float(ci.high)


def ratio_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
             n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(a)/median(b) with a bootstrap CI (see geomean_ratio_ci)."""
    return geomean_ratio_ci([(a, b)], confidence, n_resamples, seed)


def _median_difference(a, b, axis=-1):
    return np.median(a, axis=axis) - np.median(b, axis=axis)


def median_diff_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
                   n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(a) - median(b) with a bootstrap CI (each sample set resampled
    independently, percentile method); NaN bounds with fewer than 2 samples."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not (a.size and b.size):
        return math.nan, math.nan, math.nan
    point = float(_median_difference(a, b))
    if a.size < 2 or b.size < 2:
        return point, math.nan, math.nan
    res = _st.bootstrap((a, b), _median_difference, vectorized=True, paired=False,
                        confidence_level=confidence, n_resamples=n_resamples,
                        method="percentile", rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)
