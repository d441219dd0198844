import math

import numpy as np
import pytest

from fwcompare import stats


def test_median_ci_ten_samples_hand_computed():
    # n=10, 95%: P(B <= 1) = 11/1024 = 0.0107 <= 0.025 < P(B <= 2) = 0.0547 -> k = 2.
    med, lo, hi = stats.median_ci(np.arange(10, 0, -1))  # order must not matter
    assert (med, lo, hi) == (5.5, 2.0, 9.0)


def test_median_ci_twenty_samples_hand_computed():
    # n=20: P(B <= 5) = 0.0207 <= 0.025 < P(B <= 6) = 0.0577 -> k = 6: [x_6, x_15].
    assert stats.median_ci(np.arange(1, 21)) == (10.5, 6.0, 15.0)


def test_median_ci_smallest_n_with_an_interval():
    # n=6: P(B <= 0) = 1/64 <= 0.025 -> [min, max]; n=5: 1/32 > 0.025 -> none.
    assert stats.median_ci([3, 1, 2, 6, 5, 4]) == (3.5, 1.0, 6.0)
    med, lo, hi = stats.median_ci([1, 2, 3, 4, 5])
    assert med == 3.0 and math.isnan(lo) and math.isnan(hi)


def test_one_sample_has_a_median_and_no_interval():
    med, lo, hi = stats.median_ci([0.25])
    assert med == 0.25 and math.isnan(lo) and math.isnan(hi)
    assert math.isnan(stats.rel_ci_halfwidth([0.25]))


def test_no_samples():
    assert all(math.isnan(v) for v in stats.median_ci([]))


def test_rel_ci_halfwidth():
    # [2, 9] around 5.5 -> half-width 3.5 -> 3.5 / 5.5
    assert stats.rel_ci_halfwidth(np.arange(1, 11)) == pytest.approx(3.5 / 5.5)


def test_iqr_hand_computed():
    assert stats.iqr([1, 2, 3, 4, 5]) == 2.0


def test_geomean():
    assert stats.geomean([1, 4]) == pytest.approx(2.0)
    assert stats.geomean([2, 8, 0.5]) == pytest.approx(2.0)
    assert math.isnan(stats.geomean([1, 0]))


def test_geomean_of_ratios_exact_for_constant_samples():
    pairs = [(np.full(10, 2.0), np.full(10, 1.0)), (np.full(10, 8.0), np.full(10, 1.0))]
    gm, lo, hi = stats.geomean_ratio_ci(pairs)
    assert gm == pytest.approx(4.0) and lo == pytest.approx(4.0) and hi == pytest.approx(4.0)


def test_ratio_ci_covers_true_ratio_and_is_ordered():
    rng = np.random.default_rng(1)
    a = 2.0 * (1 + 0.02 * rng.standard_normal(40))
    b = 1.0 * (1 + 0.02 * rng.standard_normal(40))
    r, lo, hi = stats.ratio_ci(a, b)
    assert lo < r < hi
    assert lo < 2.0 < hi
    assert hi - lo < 0.1


def test_ratio_ci_one_sample_has_no_interval():
    r, lo, hi = stats.ratio_ci([3.0], [1.5])
    assert r == pytest.approx(2.0) and math.isnan(lo) and math.isnan(hi)
