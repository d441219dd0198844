"""The one timing protocol, shared by every framework and mode.

1. The first call is timed on its own: it pays for tracing, compilation and
   first allocations, which are reported apart (``first_call_s``), never mixed
   into steady-state time.
2. Warm-up: at least ``warmup_iters`` calls and ``warmup_s`` seconds.
3. Each sample times a block of calls with ``perf_counter_ns`` and ends with the
   framework's sync (CUDA synchronize, block_until_ready, fetching a TF
   result), so asynchronous dispatch cannot make a call look free. The block
   grows until the timer's own overhead is under 0.1% of a sample.
4. Sampling stops once ``min_iters`` samples and ``min_time_s`` have passed and
   the 95% CI of the median is within ``target_rel_ci`` of it, or at
   ``max_time_s``; then ``converged`` is False, and that is recorded. It never
   stops before ``min_iters`` samples (6 are the fewest that give a 95% CI of
   the median).
5. Every raw sample is kept (seconds per call, with the block size).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .stats import rel_ci_halfwidth

# Timer overhead must stay under this share of a sample.
MAX_TIMER_SHARE = 1e-3


@dataclass(frozen=True)
class TimingConfig:
    warmup_iters: int = 2
    warmup_s: float = 0.2
    min_iters: int = 7
    min_time_s: float = 1.0
    max_time_s: float = 10.0
    target_rel_ci: float = 0.02
    confidence: float = 0.95


@dataclass
class Timing:
    first_call_s: float
    samples_s: list[float] = field(default_factory=list)  # seconds per call
    calls_per_sample: int = 1
    converged: bool = False
    rel_ci: float = float("nan")


def timer_overhead_ns(repeats: int = 1000) -> float:
    """Median cost of one pair of perf_counter_ns calls."""
    costs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        t1 = time.perf_counter_ns()
        costs.append(t1 - t0)
    costs.sort()
    return float(max(costs[len(costs) // 2], 1))


def _time_block(fn: Callable[[], Any], sync: Callable[[Any], None], calls: int) -> int:
    t0 = time.perf_counter_ns()
    out = None
    for _ in range(calls):
        out = fn()
    sync(out)
    return time.perf_counter_ns() - t0


def measure(fn: Callable[[], Any], sync: Callable[[Any], None] = lambda out: None,
            config: TimingConfig = TimingConfig(),
            on_first: Callable[[Any], None] | None = None) -> Timing:
    """Time ``fn`` under the protocol above; ``sync(out)`` waits for its result.
    ``on_first(out)`` gets the first call's output, untimed, before warm-up
    (e.g. to check a compiled mode's output before its steady state is timed)."""
    t0 = time.perf_counter_ns()
    out = fn()
    sync(out)
    first_ns = time.perf_counter_ns() - t0
    result = Timing(first_call_s=first_ns / 1e9)
    if on_first is not None:
        on_first(out)
    del out

    warm_start = time.perf_counter()
    done = 0
    while done < config.warmup_iters or time.perf_counter() - warm_start < config.warmup_s:
        sync(fn())
        done += 1

    # Block size: grow until the timer is a negligible share of a sample.
    min_block_ns = timer_overhead_ns() / MAX_TIMER_SHARE
    calls = 1
    while True:
        elapsed = _time_block(fn, sync, calls)
        if elapsed >= min_block_ns:
            break
        calls = max(calls * 2, int(calls * min_block_ns / max(elapsed, 1)) + 1)
    result.calls_per_sample = calls

    start = time.perf_counter()
    while True:
        elapsed_ns = _time_block(fn, sync, calls)
        result.samples_s.append(elapsed_ns / 1e9 / calls)
        spent = time.perf_counter() - start
        if len(result.samples_s) >= config.min_iters and spent >= config.min_time_s:
            result.rel_ci = rel_ci_halfwidth(result.samples_s, config.confidence)
            if result.rel_ci <= config.target_rel_ci:
                result.converged = True
                break
        if spent >= config.max_time_s and len(result.samples_s) >= config.min_iters:
            result.rel_ci = rel_ci_halfwidth(result.samples_s, config.confidence)
            break
    return result
