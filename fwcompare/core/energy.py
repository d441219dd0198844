"""Energy per call on an NVIDIA GPU, from NVML's total-energy counter.

``nvmlDeviceGetTotalEnergyConsumption`` counts millijoules since the driver
loaded (Volta and later). The driver refreshes it every 20-100 ms, so a
difference over a short window is mostly rounding: a cell's energy is read
over a window of calls of its own, at least ``WINDOW_S`` long (ten times the
slowest refresh), one lane at a time (the memory pass's step, in round 0):
energy per call = (counter after - counter before) / calls. The same window
gives the mean power, and the row keeps the GPU's SM and memory clocks at its
end and the power limit in force, which bound what a call can cost.

The counter is the whole GPU's: another process's work in the window would
count too, so the runner's other lanes are idle then. A GPU or driver without
the counter (CodeCarbon then reports 0 kWh) gets no figure and a note that
says so, never a guess from the power draw.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

WINDOW_S = 1.0  # ten times NVML's slowest refresh of the energy counter (100 ms)
FIGURES = ("energy_per_call_j", "gpu_power_w", "energy_window_s", "gpu_sm_clock_mhz",
           "gpu_mem_clock_mhz", "gpu_power_limit_w")


def device_index() -> int:
    """NVML's index of the GPU this process uses: the first of
    ``CUDA_VISIBLE_DEVICES`` where it names one by index, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def per_call(fn: Callable[[], Any], sync: Callable[[Any], Any],
             window_s: float = WINDOW_S, nvml=None) -> dict:
    """Calls ``sync(fn())`` for at least ``window_s`` and returns the
    figures of :data:`FIGURES` (``energy_note`` where the energy is missing:
    no NVML, no GPU, no counter). ``nvml``: the pynvml module (tests pass a
    fake one)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return {"energy_note": "no NVML here (nvidia-ml-py is not installed)"}
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return {"energy_note": f"NVML did not start: {exc}"}
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(device_index())
        out = {"gpu_power_limit_w": _read(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, h, 1e-3)}
        try:
            e0 = nvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except nvml.NVMLError as exc:
            return {**out, "energy_note": f"this GPU has no total-energy counter ({exc}): "
                                          "no energy figure"}
        t0, calls = time.perf_counter(), 0
        while True:
            sync(fn())
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= window_s:
                break
        e1 = nvml.nvmlDeviceGetTotalEnergyConsumption(h)
        joules = (e1 - e0) / 1000.0
        out.update(energy_per_call_j=joules / calls, gpu_power_w=joules / elapsed,
                   energy_window_s=elapsed,
                   gpu_sm_clock_mhz=_read(nvml, nvml.nvmlDeviceGetClockInfo, h,
                                          1.0, nvml.NVML_CLOCK_SM),
                   gpu_mem_clock_mhz=_read(nvml, nvml.nvmlDeviceGetClockInfo, h,
                                           1.0, nvml.NVML_CLOCK_MEM))
        if joules <= 0:  # the counter did not move over the window: no figure
            out.update(energy_per_call_j=float("nan"), gpu_power_w=float("nan"),
                       energy_note=f"NVML's energy counter did not move over {elapsed:.2f} s")
        return out
    except nvml.NVMLError as exc:
        return {"energy_note": f"NVML failed: {exc}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _read(nvml, fn, h, scale: float, *args) -> float:
    try:
        return float(fn(h, *args)) * scale
    except nvml.NVMLError:
        return float("nan")
