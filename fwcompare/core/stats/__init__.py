"""Statistics of timing samples: pure functions on arrays, built on scipy.stats.

Why the median: latency distributions on a shared machine are right-skewed
(interrupts, other tenants). The median is robust to that tail and, unlike the
minimum that ``transformers.benchmark`` reported, it describes a typical call.
Its confidence interval needs no distributional assumption: the number of
samples below the true median is Binomial(n, 1/2), so a pair of order statistics
brackets it with a known probability.

Intervals of medians and ratios from several rounds (a round: fresh worker
processes) are two-level: each round's median (or ratio: of two cells sampled
in the same turns, the median of their per-turn ratios, :func:`round_log_ratio`)
carries the noise of its blocks, and the spread of those per-round figures carries the
between-process variance on top. The interval is Student's t on the per-round
logs with R - 1 degrees of freedom (:func:`rounds_t_interval`; on a figure's
own variance, never on less than one round's figure has from its blocks
alone; a variance moderated by the report's prior takes no floor), the standard
interval of a balanced nested design (Kalibera and Jones, "Rigorous
Benchmarking in Reasonable Time", ISMM 2013: repeat at the level where the
variance is, and put that level into the interval), centred on the rounds'
median rather than their mean: one disturbed round of three moves a mean by a
third of its shift and a median hardly at all (the interval's width is scaled
to the median's standard error, so it keeps its coverage). A bootstrap over so few
rounds is too narrow: drawing 2 or 3 rounds with replacement sees a fraction
(R - 1) / R of their variance and ignores that it is estimated from R values
(constructed runs of 3 rounds with a 5% process effect, tests/test_stats.py:
the bootstrap covered the true ratio in 152 of 200, t in 191). With one
round there is no between-process level to see: the interval is the blocks'
(bootstrap or order statistics), and the scorecard says the verdict came
from a single process.

The variance prior (moderated variances, the outlier rule, the t quantiles
and the confidence of a look) is :mod:`fwcompare.core.stats.prior`; its names are
this module's too.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as _st

from .prior import (VariancePrior, look_confidence, median_se_factor, own_variance,  # noqa: F401
                    t_quantile, variance_prior)


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


def fewest_for_median_ci(confidence: float = 0.95) -> int:
    """The fewest samples for which :func:`median_ci` gives an interval (6 at 95%)."""
    n = 1
    while _st.binom.ppf((1 - confidence) / 2, n, 0.5) < 1:
        n += 1
    return n


def rel_ci_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's CI, relative to the median (NaN if none)."""
    med, lo, hi = median_ci(samples, confidence)
    if not (med > 0) or math.isnan(lo):
        return math.nan
    return (hi - lo) / 2 / med


def iqr(samples: Sequence[float]) -> float:
    q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 75])
    return float(q3 - q1)


def geomean(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=float)
    if v.size == 0 or np.any(~(v > 0)):
        return math.nan
    return float(np.exp(np.mean(np.log(v))))


class CellSamples:
    """One cell's raw seconds per call, kept per round (a round: one fresh
    worker process), and whether they were taken interleaved (sample i of
    every cell of an interleaved set was timed in the same turn, so two such
    cells pair block by block). ``turns``: per round, the key of the set whose
    turns its samples were taken in (``results.with_turns``); two cells pair
    in a round only where their keys are equal, or where neither has one
    (samples built by hand). ``np.asarray`` gives every round pooled."""

    def __init__(self, rounds: Mapping[int, Sequence[float]], interleaved: bool = False,
                 turns: Mapping[int, str] | None = None):
        self.rounds = {int(r): np.asarray(x, dtype=float) for r, x in sorted(rounds.items())
                       if len(x)}
        self.interleaved = bool(interleaved)
        self.turns = {int(r): str(k) for r, k in (turns or {}).items() if k}

    @classmethod
    def of(cls, x) -> "CellSamples":
        """``x`` itself, or a plain sequence of samples as one round."""
        return x if isinstance(x, CellSamples) else cls({0: x})

    @property
    def pooled(self) -> np.ndarray:
        return (np.concatenate(list(self.rounds.values())) if self.rounds
                else np.empty(0))

    def __array__(self, dtype=None, copy=None):
        return self.pooled if dtype is None else self.pooled.astype(dtype)

    def __len__(self) -> int:
        return int(sum(x.size for x in self.rounds.values()))

    def __repr__(self) -> str:
        sizes = ", ".join(f"r{r}: {x.size}" for r, x in self.rounds.items())
        return f"CellSamples({sizes}{', interleaved' if self.interleaved else ''})"


def _paired(a: CellSamples, b: CellSamples, r: int) -> bool:
    """Whether sample i of ``a`` and of ``b`` in round ``r`` were timed in the
    same turn: both interleaved, as many samples, in the same set."""
    return (a.interleaved and b.interleaved and r in a.rounds and r in b.rounds
            and a.rounds[r].size == b.rounds[r].size and a.turns.get(r) == b.turns.get(r))


def round_log_ratio(a: CellSamples, b: CellSamples, r: int) -> float:
    """One round's log ratio of ``a`` to ``b``: where they were sampled in the
    same turns (:func:`_paired`), the median over turns of log(a_i / b_i);
    otherwise log(median a / median b).

    Why paired: the blocks of one turn follow each other (a block lasts
    ``block_s`` or more), and what slows the machine for a moment slows both:
    the log times of two variants' blocks in one turn correlate, and the
    per-turn ratio's median moves between rounds less than the ratio of
    medians (docs/measurements.md, "the figures the library's comments
    quoted"; docs/methodology.md). Comparing two variants measured together,
    not each alone, is the duet procedure of Bulej et al. ("Duet
    Benchmarking: Improving Measurement Accuracy in the Cloud", ICPE 2020),
    here with the pair a turn apart rather than at once (two cores)."""
    x, y = a.rounds[r], b.rounds[r]
    if _paired(a, b, r):
        return float(np.median(np.log(x) - np.log(y)))
    return float(np.log(np.median(x)) - np.log(np.median(y)))


def _round_ratio_replicates(pairs, r: int, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of round ``r``'s figure of ``pairs`` (the mean over
    pairs of :func:`round_log_ratio`) from its blocks alone: a paired pair's
    turns resampled, each other pair's blocks by :func:`two_level_medians`
    (the same draws as before pairing existed)."""
    paired = [(a, b) for a, b in pairs if _paired(a, b, r)]
    others = [(_one_round(a, r), _one_round(b, r)) for a, b in pairs if not _paired(a, b, r)]
    total = np.zeros(n_resamples)
    if others:
        med_a, med_b = two_level_medians(others, n_resamples, seed)
        with np.errstate(all="ignore"):
            total += np.sum(np.log(med_a) - np.log(med_b), axis=1)
    rng = np.random.default_rng([seed, 1])  # draws of their own, not the others'
    for a, b in paired:
        d = np.log(a.rounds[r]) - np.log(b.rounds[r])
        total += np.median(d[rng.integers(d.size, size=(n_resamples, d.size))], axis=1)
    return total / len(pairs)


def _one_round(x: CellSamples, r: int) -> CellSamples:
    """``x``'s samples of round ``r`` alone, with its set's key."""
    return CellSamples({r: x.rounds[r]}, x.interleaved, {r: x.turns.get(r)})


def ratio_value(a, b) -> float:
    """The ratio a / b of one cell that :func:`geomean_ratio_ci` gives as its
    value, without the interval: the median over common rounds of
    :func:`round_log_ratio`; from one round, that round's; else the ratio of
    the pooled medians."""
    a, b = CellSamples.of(a), CellSamples.of(b)
    rounds = common_rounds([(a, b)])
    if len(rounds) >= 2 or (rounds and len(a.rounds) == len(b.rounds) == 1):
        return float(np.exp(np.median([round_log_ratio(a, b, r) for r in rounds])))
    return float(np.median(a.pooled) / np.median(b.pooled))


def two_level_medians(pairs: Sequence[tuple], n_resamples: int = 2000,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap replicates of the pooled median of each side of each pair:
    the rounds drawn once per replicate for every pair (a round's processes ran
    all of its cells), then the blocks within each drawn round. Blocks of two
    cells timed in the same turns of a round (:func:`_paired`) are drawn
    together, so a slow minute that hit both stays in both. What :func:`geomean_ratio_ci`
    uses when fewer than 2 rounds are common to every side (usually one
    round: blocks only). Returns two arrays of shape (n_resamples,
    len(pairs)): the medians of the a and b sides."""
    pairs = [(CellSamples.of(a), CellSamples.of(b)) for a, b in pairs]
    rng = np.random.default_rng(seed)
    ids = sorted({r for a, b in pairs for r in (*a.rounds, *b.rounds)})
    top = rng.integers(len(ids), size=(n_resamples, len(ids)))  # rounds drawn per replicate
    med_a = np.empty((n_resamples, len(pairs)))
    med_b = np.empty_like(med_a)
    for p, (a, b) in enumerate(pairs):
        width = max(x.size for x in (*a.rounds.values(), *b.rounds.values()))
        cols_a, cols_b = [], []
        for j in range(len(ids)):  # each drawn position: its round's blocks, resampled
            va = np.full((n_resamples, width), np.nan)
            vb = np.full_like(va, np.nan)
            for k, r in enumerate(ids):
                rows = top[:, j] == k
                if not rows.any():
                    continue
                xa, xb = a.rounds.get(r), b.rounds.get(r)
                ia = rng.integers(xa.size, size=(rows.sum(), xa.size)) if xa is not None else None
                ib = (ia if _paired(a, b, r) else
                      rng.integers(xb.size, size=(rows.sum(), xb.size)) if xb is not None else None)
                if xa is not None:
                    va[rows, :xa.size] = xa[ia]
                if xb is not None:
                    vb[rows, :xb.size] = xb[ib]
            cols_a.append(va)
            cols_b.append(vb)
        med_a[:, p] = row_nanmedians(np.concatenate(cols_a, axis=1))
        med_b[:, p] = row_nanmedians(np.concatenate(cols_b, axis=1))
    return med_a, med_b


def row_nanmedians(x: np.ndarray) -> np.ndarray:
    """``np.nanmedian(x, axis=1)`` of a 2-D array, the same numbers, without
    its loop over rows (numpy takes one row at a time in Python where rows are
    long: the bootstrap took half a quick scorecard's time, measurements.md, "comments quoted"):
    each row sorted (NaN last), the middle one or two of its numbers; NaN for
    a row of none."""
    if not x.shape[1]:
        return np.full(x.shape[0], np.nan)
    s = np.sort(x, axis=1)
    n = np.count_nonzero(~np.isnan(x), axis=1)
    lo = np.take_along_axis(s, (np.maximum(n - 1, 0) // 2)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(s, (n // 2)[:, None], axis=1)[:, 0]
    with np.errstate(all="ignore"):
        out = (lo + hi) / 2  # a lone middle: (m + m) / 2 == m
    out[n == 0] = np.nan
    return out


def _interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    x = replicates[np.isfinite(replicates)]
    if x.size < 0.9 * replicates.size:  # too many replicates without a figure
        return math.nan, math.nan
    lo, hi = np.percentile(x, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(lo), float(hi)


def _enough(pairs) -> bool:
    """Every side has at least 2 samples (a bootstrap needs something to draw)."""
    return all(len(x) >= 2 for pair in pairs for x in pair)


def rounds_t_interval(values, confidence: float = 0.95, floor_var: float = 0.0,
                      prior: "VariancePrior | None" = None) -> tuple[float, float, float]:
    """(centre, low, high) of per-round values (logs of a median or a ratio):
    the rounds' median, with Student's t half-width on R - 1 degrees of
    freedom, on the rounds' variance or ``floor_var`` if that is larger,
    scaled by :func:`median_se_factor`. NaN bounds with fewer than 2 values.
    With a ``prior`` (:func:`variance_prior`: what the other figures of the
    report say of such variances), the rounds' variance is moderated by it
    and t has R - 1 + d0 degrees of freedom (:meth:`VariancePrior.moderate`),
    and the floor is not used; a figure that keeps its own t (an outlier of
    the prior) keeps its floor (:func:`own_variance`).

    The floor is the variance one round's value has from its blocks alone
    (:func:`_block_var`): the rounds cannot truly vary less than that, and
    from 2 or 3 values their own variance is itself so uncertain (chi-square
    with 1 or 2 degrees of freedom) that it comes out near zero now and then.
    A moderated variance needs no floor: the prior keeps it from zero. And
    the floor runs high, so where it binds it widens an interval past its
    level: the bootstrap's variance of a median converges slowly (relative
    error of order n^(-1/4): Hall and Martin 1988, "Exact convergence rate of
    bootstrap quantile variance estimator") and comes out above the true one
    on a round's 10-30 blocks (constructed rounds: by 10% for normal blocks,
    by 20-50% for blocks with occasional slow spikes); over a max() with the
    rounds' own variance it adds its noise upward: on a noisy machine it set
    most of the error-rate benchmark's moderated intervals, at about twice
    the width they needed (docs/measurements.md, "the figures the library's
    comments quoted").

    Why the median: pairing cancels a slow stretch only where it slows every
    variant alike: one round slowed for most of its turns, some variants
    more than others, moved the mean of the rounds' logs past the other
    runs' intervals (docs/measurements.md, as above). The median of the
    rounds ignores one such round; the half-width, scaled to the median's
    standard error, still covers at its level under normal round effects
    (constructed runs, as above). With 2 rounds the median is the mean and
    nothing changes."""
    v = np.asarray(values, dtype=float)
    centre = float(np.median(v)) if v.size else math.nan
    if v.size < 2:
        return centre, math.nan, math.nan
    var, dof = float(np.var(v, ddof=1)), float(v.size - 1)
    if own_variance(var, dof, prior):
        var = max(var, floor_var)
    else:
        var, dof = prior.moderate(var, dof)
    h = float(t_quantile(confidence, dof) * math.sqrt(var / v.size) * median_se_factor(v.size))
    return centre, centre - h, centre + h


def _block_var(pairs, rounds, replicates, n_resamples: int, seed: int) -> float:
    """The variance one round's figure has from its blocks alone: per round,
    ``replicates(pairs, r, n_resamples, seed)`` bootstraps its blocks (paired
    where sampled in the same turns): the ratios' :func:`_round_ratio_replicates`,
    or :func:`_of_medians` for a figure of the two sides' medians; their
    variance, averaged over the rounds."""
    out = []
    for r in rounds:
        if not _enough([(a.rounds[r], b.rounds[r]) for a, b in pairs]):
            continue
        reps = replicates(pairs, r, n_resamples, seed + r)
        with np.errstate(all="ignore"):
            out.append(float(np.nanvar(reps, ddof=1)))
    return float(np.mean(out)) if out else 0.0


def _of_medians(stat):
    """Replicates of ``stat(medians a, medians b)`` from round r's blocks
    alone (:func:`two_level_medians`), for :func:`_block_var`."""
    def replicates(pairs, r, n_resamples, seed):
        one = [(_one_round(a, r), _one_round(b, r)) for a, b in pairs]
        return stat(*two_level_medians(one, n_resamples, seed))
    return replicates


def _half_scale(n: int) -> float:
    """The variance of the median of ``n`` normal values over that of the
    difference of the medians of its two interleaved halves
    (:func:`median_se_factor`)."""
    half = sum(median_se_factor(m) ** 2 / m for m in ((n + 1) // 2, n // 2))
    return median_se_factor(n) ** 2 / n / half


def within_round_var(a: CellSamples, b: CellSamples, r: int) -> float:
    """The variance round ``r``'s log ratio (:func:`round_log_ratio`) has from
    its turns alone, from split halves: the figure taken from the round's odd
    turns and from its even turns (per-turn log ratios where the two were
    sampled in the same turns, else each side's median), their difference
    squared and scaled to the whole round's figure (:func:`_half_scale`).
    Turns a few apart share a slow stretch, so slow drift within a round lands
    in both halves alike and counts as the rounds' own. One round gives one
    noisy estimate (one degree of freedom); average it over rounds and
    figures. NaN under 4 blocks a side."""
    x, y = np.log(a.rounds[r]), np.log(b.rounds[r])
    if min(x.size, y.size) < 4:
        return math.nan
    if _paired(a, b, r):
        d = x - y
        return float((np.median(d[0::2]) - np.median(d[1::2])) ** 2 * _half_scale(d.size))
    diff = (np.median(x[0::2]) - np.median(x[1::2])) - (np.median(y[0::2]) - np.median(y[1::2]))
    return float(diff ** 2 * (_half_scale(x.size) + _half_scale(y.size)) / 2)


@dataclasses.dataclass(frozen=True)
class Levels:
    """Where one figure's noise is (Kalibera and Jones, "Rigorous Benchmarking
    in Reasonable Time", ISMM 2013, for two levels: turns within a round, and
    rounds: fresh processes). ``total``: the variance of its per-round log
    figures (one degree of freedom fewer than ``rounds``); ``within``: the
    part of it the rounds' own turns explain (:func:`within_round_var`,
    averaged); ``turns``: blocks per round (median)."""

    rounds: int
    turns: float
    total: float
    within: float

    @property
    def between(self) -> float:
        """The processes' own part: what the turns do not explain (0 where
        the turns explain it all: within a noisy estimate, none seen)."""
        return max(self.total - self.within, 0.0)

    def optimal_turns(self, round_s: float, turn_s: float) -> float:
        """Kalibera and Jones' repetition count for the lower level: the turns
        per round that give the figure the smallest variance for the time
        (Student's t over few rounds left aside), where a
        round costs ``round_s`` besides its turns (process start, build,
        first calls, warm-up) and a turn ``turn_s``:
        sqrt(round_s / turn_s * (variance of one turn) / (between)). Infinite
        where no between-process variance is seen: more turns, not rounds."""
        per_turn = self.within * self.turns
        if self.between <= 0:
            return math.inf
        return math.sqrt(round_s / turn_s * per_turn / self.between)


def variance_levels(pairs) -> Levels | None:
    """:class:`Levels` of the figure :func:`geomean_ratio_ci` gives ``pairs``
    (the mean over pairs of each round's log ratio), from its rounds common
    to every side; None from fewer than 2, or where no round has 4 blocks
    a side."""
    pairs = [(CellSamples.of(a), CellSamples.of(b)) for a, b in pairs]
    rounds = common_rounds(pairs)
    if len(rounds) < 2:
        return None
    figures = [np.mean([round_log_ratio(a, b, r) for a, b in pairs]) for r in rounds]
    within = [sum(within_round_var(a, b, r) for a, b in pairs) / len(pairs) ** 2
              for r in rounds]
    within = [w for w in within if math.isfinite(w)]
    if not within:
        return None
    turns = float(np.median([min(a.rounds[r].size, b.rounds[r].size)
                             for r in rounds for a, b in pairs]))
    return Levels(len(rounds), turns, float(np.var(figures, ddof=1)), float(np.mean(within)))


def common_rounds(pairs) -> list[int]:
    """The rounds in which every side of every pair has samples."""
    sets = [set(x.rounds) for pair in pairs for x in pair]
    return sorted(set.intersection(*sets)) if sets else []


def geomean_ratio_ci(pairs: Sequence[tuple], confidence: float = 0.95,
                     n_resamples: int = 2000, seed: int = 0,
                     prior: VariancePrior | None = None,
                     spreads: list | None = None) -> tuple[float, float, float]:
    """Geometric mean over cells of the ratio a / b, with its CI.

    ``pairs`` holds, per cell, the samples of A and of B: :class:`CellSamples`
    (rounds kept apart) or plain sequences (one round). A round's ratio of a
    cell is :func:`round_log_ratio`'s: the median of the per-turn ratios
    where A and B were sampled in the same turns, else the ratio of medians.
    With 2 or more rounds common to every side, the value is the median over
    rounds of each round's log geometric mean ratio and the interval is
    Student's t over those rounds (:func:`rounds_t_interval`, on a figure's
    own variance never narrower than the blocks' own noise allows, moderated
    by ``prior`` where it is given): it carries the between-process
    variance. From one round, the value is that round's and the interval a
    percentile bootstrap of its blocks (:func:`_round_ratio_replicates`: the
    turns of a pair sampled in the same turns, each side's blocks otherwise);
    where the sides' rounds differ, of every round's blocks pooled
    (:func:`two_level_medians`). Either covers only the noise within one
    sampling window.

    ``prior``: moderate the rounds' variance (:class:`VariancePrior`);
    ``spreads``: a list that gets (variance, degrees of freedom) of the
    per-round values, for :func:`variance_prior`.
    """
    pairs = [(CellSamples.of(a), CellSamples.of(b)) for a, b in pairs]
    pairs = [(a, b) for a, b in pairs if len(a) and len(b)]
    if not pairs:
        return math.nan, math.nan, math.nan
    rounds = common_rounds(pairs)
    if len(rounds) >= 2:
        per_round = [np.mean([round_log_ratio(a, b, r) for a, b in pairs]) for r in rounds]
        var, dof = float(np.var(per_round, ddof=1)), len(per_round) - 1
        floor = (_block_var(pairs, rounds, _round_ratio_replicates, n_resamples, seed)
                 if own_variance(var, dof, prior) else 0.0)
        if spreads is not None:
            spreads.append((var, dof))
        return tuple(float(np.exp(x)) for x in rounds_t_interval(per_round, confidence, floor,
                                                                 prior))
    if len(rounds) == 1 and all(len(a.rounds) == len(b.rounds) == 1 for a, b in pairs):
        r = rounds[0]  # one round: its ratios (turn by turn where paired) and their blocks
        point = float(np.exp(np.mean([round_log_ratio(a, b, r) for a, b in pairs])))
        if not _enough(pairs):
            return point, math.nan, math.nan
        reps = np.exp(_round_ratio_replicates(pairs, r, n_resamples, seed))
        return (point, *_interval(reps, confidence))
    point = float(np.exp(np.mean([np.log(np.median(a.pooled)) - np.log(np.median(b.pooled))
                                  for a, b in pairs])))
    if not _enough(pairs):
        return point, math.nan, math.nan
    med_a, med_b = two_level_medians(pairs, n_resamples, seed)
    with np.errstate(all="ignore"):
        reps = np.exp(np.mean(np.log(med_a) - np.log(med_b), axis=1))
    return (point, *_interval(reps, confidence))


def ratio_ci(a, b, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0,
             prior: VariancePrior | None = None,
             spreads: list | None = None) -> tuple[float, float, float]:
    """a / b with its CI (one pair of :func:`geomean_ratio_ci`: per round,
    turn by turn where they were sampled in the same turns)."""
    return geomean_ratio_ci([(a, b)], confidence, n_resamples, seed, prior, spreads)


def median_diff_ci(a, b, confidence: float = 0.95, n_resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float, float]:
    """median(a) - median(b) with its CI: with 2 or more rounds common to both,
    the median over rounds of each round's difference of medians and Student's t
    over them; otherwise a bootstrap of the blocks (percentile method), NaN
    bounds with fewer than 2 samples on a side."""
    a, b = CellSamples.of(a), CellSamples.of(b)
    if not (len(a) and len(b)):
        return math.nan, math.nan, math.nan
    rounds = common_rounds([(a, b)])
    if len(rounds) >= 2:
        floor = _block_var([(a, b)], rounds, _of_medians(lambda ma, mb: ma[:, 0] - mb[:, 0]),
                           n_resamples, seed)
        return rounds_t_interval([np.median(a.rounds[r]) - np.median(b.rounds[r])
                                  for r in rounds], confidence, floor)
    point = float(np.median(a.pooled) - np.median(b.pooled))
    if not _enough([(a, b)]):
        return point, math.nan, math.nan
    med_a, med_b = two_level_medians([(a, b)], n_resamples, seed)
    return (point, *_interval(med_a[:, 0] - med_b[:, 0], confidence))


def rounds_median_ci(x, confidence: float = 0.95, n_resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """A cell's median (every round's samples pooled) with its CI: from one
    round, the distribution-free interval of :func:`median_ci`; from several,
    Student's t over the rounds' log medians (:func:`rounds_t_interval`), so
    a shift between processes widens it."""
    x = CellSamples.of(x)
    if len(x.rounds) < 2:
        return median_ci(x.pooled, confidence)
    med, _, _ = median_ci(x.pooled, confidence)
    floor = _block_var([(x, x)], list(x.rounds), _of_medians(lambda ma, mb: np.log(ma[:, 0])),
                       n_resamples, seed)
    _, lo, hi = rounds_t_interval([np.log(np.median(v)) for v in x.rounds.values()],
                                  confidence, floor)
    return med, float(np.exp(lo)), float(np.exp(hi))


def pct_of_peak(achieved_flops_per_s, ceiling):
    """The share of a precision's ceiling a cell reached, in % (scalars or
    pandas Series; NaN without a ceiling)."""
    return 100.0 * achieved_flops_per_s / ceiling


def derived_figures(batch_size: int, seq_len: int, samples_s, confidence: float = 0.95,
                    flops: float = float("nan"), peak: float = float("nan"),
                    traffic: float = float("nan"), tokens: int | None = None) -> dict:
    """A cell's figures derived from its raw seconds-per-call samples: the one
    place median, CI, spread, throughput and achieved FLOP/s are computed
    (workers, data-parallel ranks and the tables that pool rounds use it).
    ``samples_s``: one sampling window's samples, or a ``stats.CellSamples``
    of several rounds (the CI is then two-level: rounds, then blocks).
    ``peak``: the machine's FLOP/s ceiling for the cell's precision
    (fwcompare.measure.peak); ``pct_of_peak`` is the achieved share of it, in %.
    ``tokens``: tokens per call (``spec.tokens_per_call``; default batch x
    sequence)."""
    import numpy as np

    cs = CellSamples.of(samples_s)
    med, lo, hi = rounds_median_ci(cs, confidence)
    samples_s = cs.pooled
    return dict(n_samples=len(samples_s), median_s=med, ci_low_s=lo, ci_high_s=hi,
                iqr_s=iqr(samples_s), mean_s=float(np.mean(samples_s)),
                p90_s=float(np.percentile(samples_s, 90)),
                throughput_samples_per_s=batch_size / med,
                tokens_per_s=(tokens or batch_size * seq_len) / med,
                flops_per_call=flops, achieved_flops_per_s=flops / med,
                pct_of_peak=pct_of_peak(flops / med, peak), bytes_per_call=traffic)
