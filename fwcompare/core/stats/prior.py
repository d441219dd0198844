"""The variance prior of a report's timed claims: the moderated (empirical
Bayes) variance of a figure from its own rounds and the report's typical
spread, the outlier rule that keeps a figure that spreads more on its own
variance, the t quantiles and the median's standard-error factor the
intervals use, and the confidence of each look of a claim that takes extra
rounds. Pure functions on numbers, built on scipy."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import numpy as np
from scipy import special as _special
from scipy import stats as _st


def own_variance(var: float, dof: float, prior: "VariancePrior | None") -> bool:
    """Whether per-round values of variance ``var`` on ``dof`` degrees of
    freedom keep it as it is, with its floor (:func:`rounds_t_interval`):
    without a prior, or as an outlier of it (:meth:`VariancePrior.typical`);
    otherwise it is moderated."""
    return prior is None or not prior.typical(var, dof)


def look_confidence(look: int, looks: int, confidence: float = 0.95) -> float:
    """The two-sided confidence of the interval at look ``look`` (1: the
    report's own rounds) of at most ``looks`` at one claim, so that however
    many looks are taken, and whichever stops the claim, its verdict is wrong
    with a chance of at most ``1 - confidence`` (5% at 95%).

    Why this holds: a verdict is wrong only where the interval lies wholly on
    one side of the true value (supported while the truth is outside the band:
    the interval misses it on the band's side; contradicted while it is
    inside: it misses it on the other), which a two-sided interval of
    confidence c does with a chance of at most (1 - c) / 2. The chances of
    the looks add up to at most their sum (Bonferroni: whatever their
    dependence), so the first look keeps ``confidence`` (the verdicts of a
    report without extra rounds are as before) and spends half of the error,
    and the later looks share the other half equally: at 95% and three extra
    looks, 98.3% each. An alpha-spending rule in the sense of Lan and DeMets
    (1983), with the union bound in place of the joint normal law, which the
    few rounds (3 to 6) and the median-of-rounds estimator do not give.
    A wrong "contradicted" on a two-edged ("about") band can come from either
    tail where the band is narrower than the interval: there the bound is
    ``1 - confidence`` from each side, twice that at worst (methodology.md)."""
    if not 1 <= look <= looks:
        raise ValueError(f"look {look} of {looks}: looks are numbered 1 to {looks}")
    alpha = 1.0 - confidence
    if look == 1:
        return confidence
    return 1.0 - alpha / (looks - 1)


@dataclasses.dataclass(frozen=True)
class VariancePrior:
    """What many figures' per-round variances say of one more (Smyth 2004,
    "Linear models and empirical Bayes methods for assessing differential
    expression in microarray experiments", the moderated t of limma): the
    variances are taken as drawn from a scaled inverse chi-square law with
    ``dof`` (d0) degrees of freedom around ``var`` (s0^2), whose two
    parameters :func:`variance_prior` estimates from the figures themselves.
    ``figures``: how many it was estimated from.

    A figure whose own variance the prior finds atypically large keeps its
    own t (:attr:`OUTLIER_P`): figures are not all alike, even within one
    class of claims (``claims.prior_class``), and Smyth's prior, which takes
    them as alike, pulls such a figure's interval down to the others' width.
    The cut was set on constructed reports of one figure spreading 3 times as
    much as eleven others (``tests/test_stats.py``) and on a real report's
    unequal spreads (``benchmarks/prior_coverage.py``; its figures:
    docs/measurements.md, "the variance prior by class"): the cut keeps such
    a figure's coverage near its level, where Smyth's prior alone lost a
    fifth of it. The idea is Phipson et al.'s (2016, "Robust hyperparameter
    estimation protects against hypervariable genes and improves power to
    detect differential expression"), in its simplest form: a cut in place
    of their weights, whose ranks need more figures than a report has."""

    var: float
    dof: float
    figures: int
    # the figures' own degrees of freedom, summed: what the prior can be worth
    # at most to one of them (:meth:`weight`)
    total_dof: float = math.inf

    # the upper-tail probability of a figure's variance under the prior below
    # which the figure keeps its own t
    OUTLIER_P = 0.35

    def weight(self, dof: float) -> float:
        """The degrees of freedom the prior adds to a figure's own ``dof``: d0,
        at most what the other figures have between them. Their pooled
        variance is all a prior estimated from them knows, so a d0 beyond
        that (Smyth's estimate is infinite where the variances spread no more
        than sampling explains, as a few alike figures' often do) would claim
        more than was measured."""
        return max(min(self.dof, self.total_dof - dof), 0.0)

    def typical(self, var: float, dof: float) -> bool:
        """Whether a variance on ``dof`` degrees of freedom is no outlier:
        s^2 / s0^2 has the F law on (d, d0) degrees of freedom under the
        prior; its upper tail there is at least :attr:`OUTLIER_P`."""
        # the function f.sf wraps: its argument handling cost more than the tail (measurements.md)
        return bool(_special.fdtrc(dof, min(self.dof, 1e9), var / self.var) >= self.OUTLIER_P)

    def moderate(self, var: float, dof: float) -> tuple[float, float]:
        """One figure's variance (on ``dof`` degrees of freedom) moderated:
        (d0 s0^2 + d s^2) / (d0 + d), on d0 + d degrees of freedom; an
        outlier's (:meth:`typical`) as it is. d0 is :meth:`weight`'s: at most
        the other figures' degrees of freedom, so an infinite estimate (the
        variances spread no more than sampling alone explains) gives their
        pooled variance with this figure's, on as many degrees of freedom as
        the figures have in all."""
        if not self.typical(var, dof):
            return var, dof
        d0 = self.weight(dof)
        return (d0 * self.var + dof * var) / (d0 + dof), d0 + dof


def variance_prior(spreads: Sequence[tuple[float, float]]) -> VariancePrior | None:
    """Smyth's (2004, section 6.2) moment estimates of the prior of
    ``spreads`` ((variance, degrees of freedom) of each figure's per-round
    values): on log variances, whose mean and spread beyond what sampling
    alone gives (digamma and trigamma of d / 2) fix s0^2 and d0. None from
    fewer than 3 figures, or where a variance is 0 (no log). A figure that
    spreads far more than the rest is in the estimate (a second estimate
    without the figures the first found atypical left the estimate of alike
    figures biased low, and with a Bonferroni cut left it unchanged on the
    constructed reports: measurements.md, "the variance prior by class"); it
    keeps its own t all the same (:meth:`VariancePrior.typical`)."""
    from scipy import optimize, special

    v = np.asarray([x for x, d in spreads if d >= 1], dtype=float)
    d = np.asarray([d for x, d in spreads if d >= 1], dtype=float)
    if v.size < 3 or not np.all(v > 0):
        return None
    total = float(d.sum())
    e = np.log(v) - special.digamma(d / 2) + np.log(d / 2)
    extra = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, d / 2)))
    if extra <= 0:
        return VariancePrior(float(np.exp(np.mean(e))), math.inf, int(v.size), total)
    half = optimize.brentq(lambda x: special.polygamma(1, x) - extra, 1e-8, 1e8)
    return VariancePrior(float(np.exp(np.mean(e) + special.digamma(half) - np.log(half))),
                         float(2 * half), int(v.size), total)


@functools.lru_cache(maxsize=4096)
def t_quantile(confidence: float, dof: float) -> float:
    """Student's t factor of a two-sided interval of ``confidence`` on ``dof``
    degrees of freedom (what :func:`rounds_t_interval` multiplies by)."""
    return float(_st.t.ppf((1 + confidence) / 2, dof))


@functools.lru_cache(maxsize=None)
def median_se_factor(n: int) -> float:
    """The standard error of the median of ``n`` normal values over that of
    their mean: 1 for n <= 2 (the median is the mean), 1.160 for 3, 1.092 for
    4, tending to sqrt(pi / 2) = 1.253. From 200,000 draws of a fixed seed
    (within 0.3%): the even sizes' variance has no closed form."""
    if n <= 2:
        return 1.0
    z = np.random.default_rng(0).standard_normal((200_000, n))
    return float(np.std(np.median(z, axis=1)) / np.std(np.mean(z, axis=1)))
