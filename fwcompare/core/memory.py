"""Peak memory of a region, measured in a pass separate from timing.

GPU: each framework's own peak counter (allocator bytes), never device-wide
NVML "used" memory, which mixes allocators and other processes.
CPU: peak resident set size (RSS) of the process over a baseline taken before
the model was loaded. On Linux the kernel keeps the RSS high-water mark
(VmHWM) and resets it when "5" is written to /proc/self/clear_refs, which is
exact and costs nothing while the region runs; where that reset is not
allowed, a thread samples RSS every millisecond instead (``mem_method`` says
which was used).
"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def current_rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def _hwm_bytes() -> int | None:
    try:
        m = re.search(r"VmHWM:\s+(\d+) kB", _STATUS.read_text())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    hwm = _hwm_bytes()
    return hwm is not None and hwm <= current_rss_bytes() * 1.05 + (1 << 20)


# glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
REUSE_BYTES = 1 << 30  # reuse_freed_memory's thresholds: above any block or free run here
# the largest mmap threshold an older glibc takes on 64 bits (DEFAULT_MMAP_THRESHOLD_MAX;
# 2.36 takes REUSE_BYTES)
MMAP_THRESHOLD_MAX = 32 << 20
_SETUP = ["C library as it comes"]  # what this process set: allocator_setup()


def allocator_setup() -> str:
    """What this process did to its C allocator (``fix_mmap_threshold``,
    ``reuse_freed_memory``), for the rows' ``c_allocator``."""
    return _SETUP[0]


def _mallopt(param: int, value: int) -> bool:
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").mallopt(param, int(value)))
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(nbytes: int = 64 * 1024) -> bool:
    """Make glibc's malloc serve every block of ``nbytes`` or more with its own
    mapping, returned to the OS when freed (``mallopt(M_MMAP_THRESHOLD)``,
    which also stops the threshold from adapting). By default the threshold
    rises after a large block is freed (up to 32 MiB), so later blocks come
    from the heap and freed ones stay resident: the peak RSS then follows
    what the heap once held, not the bytes in use, and hides what a technique
    saves (tiny-bert-deep 16 x 256, a PyTorch training step: 256-258 MB plain
    against 207-249 MB with gradient checkpointing by default; 286 against
    124 MB, the same in every pass, with the threshold fixed). The price: each
    large block is a fresh mapping, page faults included, so step times move
    too. Returns whether glibc took it."""
    if not _mallopt(M_MMAP_THRESHOLD, nbytes):
        return False
    _SETUP[0] = f"glibc: mmap threshold {nbytes} bytes (every larger block its own mapping)"
    return True


def reuse_freed_memory() -> str:
    """Make glibc's malloc keep freed memory for the next allocation: blocks
    under the mmap threshold come from the heap, not mappings of their own,
    and freed heap under the trim threshold is not given back to the system
    (``mallopt``; an explicit ``malloc_trim``, as before a memory pass, still
    gives it back). Both thresholds go to ``REUSE_BYTES``; an older glibc
    refuses an mmap threshold above ``MMAP_THRESHOLD_MAX`` (32 MiB), which
    then serves. The main thread's arena follows both; another thread's
    arena maps blocks above 64 MiB apart whatever the threshold. By default
    a PyTorch training step's gradients (``zero_grad(set_to_none=True)``) and
    AdamW's temporaries are fresh pages every step (docs/methodology.md,
    "PyTorch reuses the memory it frees"). Returns what took effect
    (also :func:`allocator_setup`), "" where nothing did: another C library
    (with jemalloc or TCMalloc preloaded, glibc's answer says nothing: they
    reuse freed memory of their own accord)."""
    mmap = next((v for v in (REUSE_BYTES, MMAP_THRESHOLD_MAX)
                 if _mallopt(M_MMAP_THRESHOLD, v)), 0)
    trim = REUSE_BYTES if _mallopt(M_TRIM_THRESHOLD, REUSE_BYTES) else 0
    if not (mmap or trim):
        return ""
    _SETUP[0] = ("glibc, freed memory reused: "
                 + (f"mmap threshold {mmap >> 20} MiB" if mmap else "mmap threshold as it was")
                 + ", " + (f"trim threshold {trim >> 20} MiB" if trim
                           else "trim threshold as it was"))
    return _SETUP[0]


class PeakRSS:
    """Context manager: ``peak_bytes`` is the highest RSS seen inside it."""

    def __init__(self, interval_s: float = 1e-3):
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.method = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        proc = psutil.Process()
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, proc.memory_info().rss)
            time.sleep(self.interval_s)

    def __enter__(self) -> "PeakRSS":
        self.peak_bytes = current_rss_bytes()
        if _reset_hwm():
            self.method = "cpu_rss_hwm"
        else:
            self.method = "cpu_rss_sampled"
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        else:
            self.peak_bytes = max(self.peak_bytes, _hwm_bytes() or 0)
        self.peak_bytes = max(self.peak_bytes, current_rss_bytes())


# GPU memory (every framework, the same scope): bytes in use at the highest
# point of one call or training step after warm-up, by the framework's own
# allocator, the model's resident weights and the call's inputs included. Each
# backend's ``gpu_memory(run)`` measures it; what follows is the part shared
# by allocators whose peak counter cannot be reset.

def lifted_peak(stats, hold, run, plan_bytes=None, name: str = "allocator") -> dict:
    """The peak of ``run()`` (a call and its sync) on an allocator whose peak
    counter cannot be reset (JAX's: jax-ml/jax#8096).

    ``stats()`` -> (bytes in use, peak bytes in use); ``hold(nbytes)`` -> a
    buffer of ``nbytes`` on the device (freed when dropped), or an exception.
    Before the call, a buffer of the gap between the earlier peak (loading,
    a compile's autotuning, a larger cell) and the bytes in use is held, so
    the peak counter stands at the bytes in use: any byte the call allocates
    then raises it, and the call's peak is the bytes in use before the buffer
    plus the rise. No earlier peak can mask a cell. Where the buffer cannot
    be had (the gap does not fit on the device), the figure is the bytes in
    use plus XLA's plan for the call (``plan_bytes``: temporaries and outputs
    of the compiled program; None without one), and ``mem_method`` says so."""
    in_use, peak = stats()
    own, held = in_use, []
    try:
        for _ in range(3):  # again if the allocator rounded a buffer down
            if peak <= in_use:
                break
            held.append(hold(peak - in_use))
            in_use, peak = stats()
        if peak > in_use:
            raise RuntimeError("the peak kept rising while the gap was filled")
    except Exception:
        held.clear()
        run()
        if plan_bytes is None:
            return {"peak_mem_bytes": None,
                    "mem_method": f"{name}_peak_not_liftable_and_no_compiled_plan"}
        return {"peak_mem_bytes": own + plan_bytes,
                "mem_method": "bytes_in_use_plus_xla_memory_analysis"}
    run()
    _, after = stats()
    del held
    return {"peak_mem_bytes": own + (after - in_use),
            "mem_method": f"{name}_peak_lifted_to_in_use"}
