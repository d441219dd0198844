"""Energy per call from NVML's total-energy counter (fwcompare/core/energy.py),
against a fake NVML whose counter and clocks this test sets: the figures come
from the window of calls, a GPU without the counter says so, and a counter
that did not move gives no figure."""
import math
import time

import pytest

from fwcompare.core import energy


class FakeNVML:
    """pynvml's calls that energy.py makes; the counter grows at ``watts``
    (millijoules since an epoch, refreshed every ``period_s``, as NVML's)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1

    class NVMLError(Exception):
        pass

    def __init__(self, watts=300.0, period_s=0.05, counter=True):
        self.watts, self.period_s, self.counter = watts, period_s, counter
        self.t0 = time.perf_counter()
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000  # milliwatts

    def nvmlDeviceGetClockInfo(self, h, which):
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.counter:
            raise self.NVMLError("Not Supported")
        t = time.perf_counter() - self.t0
        return int(self.watts * (t - t % self.period_s) * 1000)


def _call():
    time.sleep(0.01)
    return 1


def test_energy_per_call_over_a_window_of_calls():
    nvml = FakeNVML(watts=300.0)
    got = energy.per_call(_call, lambda out: out, window_s=0.5, nvml=nvml)
    assert got["energy_window_s"] >= 0.5
    # 300 W over the window, to the counter's 50 ms refresh
    assert got["gpu_power_w"] == pytest.approx(300.0, rel=0.15)
    calls = got["energy_window_s"] / 0.0101
    assert got["energy_per_call_j"] == pytest.approx(300.0 * 0.0101, rel=0.25)
    assert calls > 20
    assert got["gpu_power_limit_w"] == 700.0
    assert (got["gpu_sm_clock_mhz"], got["gpu_mem_clock_mhz"]) == (1980.0, 2619.0)
    assert "energy_note" not in got and nvml.shut


def test_a_gpu_without_the_counter_gets_a_note_not_a_figure():
    got = energy.per_call(_call, lambda out: out, window_s=0.1, nvml=FakeNVML(counter=False))
    assert "no total-energy counter" in got["energy_note"]
    assert "energy_per_call_j" not in got


def test_a_counter_that_does_not_move_gives_no_figure():
    got = energy.per_call(_call, lambda out: out, window_s=0.1,
                          nvml=FakeNVML(watts=300.0, period_s=1e6))
    assert math.isnan(got["energy_per_call_j"])
    assert "did not move" in got["energy_note"]


def test_the_device_index_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert energy.device_index() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert energy.device_index() == 0


def test_the_gpu_table_keeps_gpu_cells_and_divides_by_the_batch():
    import pandas as pd

    from fwcompare.results.tables import gpu_table

    summary = pd.DataFrame({
        "model": ["bert-base-cased"] * 3, "variant": ["torch/eager", "jax/jit", "torch/eager"],
        "dtype": ["float32"] * 3, "batch_size": [8, 8, 8], "seq_len": [128] * 3,
        "status": ["ok", "ok", "ok"], "device": ["gpu", "gpu", "cpu"],
        "energy_per_call_j": [3.349, 3.416, float("nan")], "gpu_power_w": [440.0, 579.0, None],
        "gpu_sm_clock_mhz": [1980.0] * 3, "gpu_mem_clock_mhz": [3201.0] * 3,
        "gpu_power_limit_w": [700.0] * 3, "energy_note": ["", "", ""],
        "round_spread": [1.11, float("nan"), 1.02]})
    t = gpu_table(summary)
    assert list(t["variant"]) == ["jax/jit", "torch/eager"]  # the CPU cell is left out
    assert t.loc[t["variant"] == "torch/eager", "energy_per_sample_j"].item() == \
        pytest.approx(3.349 / 8, abs=1e-4)
    assert t.loc[t["variant"] == "torch/eager", "round_spread"].item() == 1.11
    assert gpu_table(summary[summary["device"] == "cpu"]).empty
