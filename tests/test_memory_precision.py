import numpy as np
import pytest

from fwcompare.memory import PeakRSS, current_rss_bytes
from fwcompare.precision import error_metrics


def test_peak_rss_sees_a_transient_allocation():
    before = current_rss_bytes()
    with PeakRSS() as peak:
        block = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
        del block
    assert peak.method in ("cpu_rss_hwm", "cpu_rss_sampled")
    assert peak.peak_bytes - before > 180 * 2**20


def test_peak_rss_without_allocation_stays_near_baseline():
    with PeakRSS() as peak:
        pass
    assert peak.peak_bytes - current_rss_bytes() < 50 * 2**20


def test_error_metrics_hand_computed():
    ref = np.array([[3.0, 4.0]])
    out = np.array([[3.0, 4.5]])
    m = error_metrics(out, ref)
    assert m["max_abs_err"] == pytest.approx(0.5)
    assert m["rel_l2_err"] == pytest.approx(0.5 / 5.0)
    assert m["cosine_similarity"] == pytest.approx((9 + 18) / (5 * np.hypot(3, 4.5)))
    assert m["argmax_agreement"] == 1.0
    assert m["n_nonfinite"] == 0


def test_error_metrics_counts_non_finite():
    m = error_metrics(np.array([np.nan, np.inf, 1.0]), np.array([1.0, 1.0, 1.0]))
    assert (m["n_nan"], m["n_inf"], m["n_nonfinite"]) == (1, 1, 2)


def test_error_metrics_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        error_metrics(np.zeros((2, 3)), np.zeros((3, 2)))
