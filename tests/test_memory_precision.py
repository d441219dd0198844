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


class FakeDevice:
    """A GPU allocator's counters: ``peak`` is what ``memory_stats`` reports."""

    def __init__(self, peak):
        self.peak = peak

    def memory_stats(self):
        return {"peak_bytes_in_use": self.peak}


def test_jax_gpu_peak_counts_only_when_it_rises_above_the_mark(monkeypatch):
    """JAX's allocator peak cannot be reset: below the mark (the loading peak,
    say) there is no figure, not the loading peak."""
    from fwcompare.frameworks import jax as jax_backend

    dev = FakeDevice(1_200)
    monkeypatch.setattr(jax_backend, "_device", lambda device: dev)
    monkeypatch.setattr(jax_backend, "_peak_before", {})
    assert jax_backend.PEAK_RESETTABLE is False
    jax_backend.reset_peak_memory("gpu")      # mark: loading left 1200
    assert jax_backend.peak_memory_bytes("gpu") is None
    dev.peak = 1_500                          # the cell set a new peak
    assert jax_backend.peak_memory_bytes("gpu") == 1_500
    assert jax_backend.peak_memory_bytes("cpu") is None  # CPU: the caller uses RSS


def _gpu_cell(backend, fn):
    """One GPU cell measured by cell.measure_cell with a fake backend; its result."""
    from fwcompare.cell import CellPlan, measure_cell
    from fwcompare.spec import RunSpec
    from fwcompare.timing import TimingConfig

    spec = RunSpec(study="inference_sweep", model="m", framework="jax", mode="jit",
                   device="gpu", dtype="float32", batch_size=1, seq_len=8, threads=0)
    cfg = TimingConfig(warmup_iters=1, warmup_s=0, min_iters=3, min_time_s=0, max_time_s=0.2)
    result = measure_cell(backend, "fake", "gpu", spec, CellPlan(lambda: fn, flops=1.0), cfg)
    assert result.status == "ok", result
    return dict(result.figures, status=result.status, error=result.error)


def test_worker_marks_a_non_resettable_peak_at_cell_start(monkeypatch):
    """The cell's first (compiling) call sets its peak; the memory pass after
    timing adds nothing, so the mark must come before the cell, not before the
    memory pass (which, seen on an H100, masked every JAX cell). Runs the real
    JAX backend on a fake allocator."""
    from fwcompare.frameworks import jax as backend

    dev = FakeDevice(1_000)  # the peak loading the model left
    monkeypatch.setattr(backend, "_device", lambda device: dev)
    monkeypatch.setattr(backend, "_peak_before", {})

    def big_cell():
        dev.peak = max(dev.peak, 1_800)
    row = _gpu_cell(backend, big_cell)
    assert row["peak_mem_bytes"] == 1_800
    assert row["mem_method"] == "fake_allocator_peak_since_cell_start"

    row = _gpu_cell(backend, lambda: None)  # below the earlier peak
    assert row["peak_mem_bytes"] is None
    assert row["mem_method"] == "fake_allocator_peak_masked_by_earlier_peak"


def test_worker_resets_a_resettable_peak_right_before_the_memory_pass():
    """PyTorch-like: reset before the memory pass, so warm-up and compile
    allocations are not charged to the cell."""
    class Backend:
        PEAK_RESETTABLE = True

        def __init__(self):
            self.peak, self.calls = 0, 0

        def reset_peak_memory(self, device):
            self.peak = 0

        def peak_memory_bytes(self, device):
            return self.peak

        def sync(self, out):
            pass
    backend = Backend()

    def cell():
        backend.calls += 1
        backend.peak = max(backend.peak, 5_000 if backend.calls == 1 else 700)  # 1st: compile
    row = _gpu_cell(backend, cell)
    assert row["peak_mem_bytes"] == 700
    assert row["mem_method"] == "fake_allocator_peak"
