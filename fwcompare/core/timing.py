"""The one timing protocol, shared by every framework, mode and study.

1. The first call is timed on its own: it pays for tracing, compilation and
   first allocations, which are reported apart (``first_call_s``), never mixed
   into steady-state time.
2. Warm-up: at least ``warmup_iters`` calls and ``warmup_s`` seconds.
3. Each sample times a block of calls with ``perf_counter_ns`` and ends with the
   framework's sync (CUDA synchronize, block_until_ready, fetching a TF
   result), so asynchronous dispatch cannot make a call look free. The block
   grows until the timer's own overhead is under 0.1% of a sample (and, in an
   interleaved schedule, until it lasts ``min_block_s``: one block is one turn).
4. Sampling stops once ``min_iters`` samples and ``min_time_s`` have passed and
   the 95% CI of the median is within ``target_rel_ci`` of it, or at
   ``max_time_s``; then ``converged`` is False, and that is recorded. It never
   stops before ``min_iters`` samples (6 are the fewest that give a 95% CI of
   the median).
5. Every raw sample is kept (seconds per call, with the block size).

Steps 1-3 are :func:`prepare`, which returns a :class:`Sampler`; step 4 is
:class:`StoppingRule`, written once and used by :meth:`Sampler.sample_until_stop`,
by the data-parallel ranks (which time steps across processes) and by any
schedule that asks a prepared cell for a few blocks at a time
(:meth:`Sampler.take`). :func:`measure` is the whole protocol in one call.
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
    """The protocol's settings; these defaults are the params schema's defaults too."""

    warmup_iters: int = 2
    warmup_s: float = 0.3
    min_iters: int = 7
    min_time_s: float = 1.0
    max_time_s: float = 8.0
    target_rel_ci: float = 0.02
    confidence: float = 0.95
    min_block_s: float = 0.0  # a block lasts at least this long (interleaved schedule)


@dataclass
class Timing:
    first_call_s: float
    checked_s: float = 0.0  # seconds ``on_first`` took but its calls (untimed checks)
    made_s: float = 0.0  # seconds of the calls ``on_first`` made (warm-up calls)
    samples_s: list[float] = field(default_factory=list)  # seconds per call
    calls_per_sample: int = 1
    converged: bool = False
    rel_ci: float = float("nan")


class StoppingRule:
    """Step 4 of the protocol: fed the samples so far and the seconds spent
    sampling, says whether to stop; ``converged`` and ``rel_ci`` say why."""

    def __init__(self, config: TimingConfig):
        self.config = config
        self.converged = False
        self.rel_ci = float("nan")

    def done(self, samples: list[float], spent_s: float) -> bool:
        cfg = self.config
        if len(samples) < cfg.min_iters:
            return False
        if spent_s >= cfg.min_time_s:
            self.rel_ci = rel_ci_halfwidth(samples, cfg.confidence)
            if self.rel_ci <= cfg.target_rel_ci:
                self.converged = True
                return True
        if spent_s >= cfg.max_time_s:
            self.rel_ci = rel_ci_halfwidth(samples, cfg.confidence)
            return True
        return False


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


class Sampler:
    """A prepared callable (first call, warm-up and block size done): takes
    sample blocks on request and keeps every one in ``timing.samples_s``."""

    def __init__(self, fn: Callable[[], Any], sync: Callable[[Any], None],
                 config: TimingConfig, timing: Timing):
        self.fn, self.sync, self.config, self.timing = fn, sync, config, timing

    def take(self, blocks: int) -> list[float]:
        """``blocks`` more samples (seconds per call), appended and returned."""
        calls = self.timing.calls_per_sample
        new = [_time_block(self.fn, self.sync, calls) / 1e9 / calls for _ in range(blocks)]
        self.timing.samples_s.extend(new)
        return new

    def sample_until_stop(self) -> Timing:
        """Sample block after block until the stopping rule says stop."""
        rule = StoppingRule(self.config)
        start = time.perf_counter()
        while True:
            self.take(1)
            if rule.done(self.timing.samples_s, time.perf_counter() - start):
                break
        self.timing.converged, self.timing.rel_ci = rule.converged, rule.rel_ci
        return self.timing


def prepare(fn: Callable[[], Any], sync: Callable[[Any], None] = lambda out: None,
            config: TimingConfig = TimingConfig(),
            on_first: Callable[[Any], list[int] | None] | None = None) -> Sampler:
    """Steps 1-3: the first call timed apart, warm-up, block size.
    ``on_first(out)`` gets the first call's output, untimed, before warm-up
    (e.g. to check a compiled mode's output before its steady state is timed);
    it may return the durations (ns, sync included) of calls it made that do
    ``fn``'s own work (training's agreement steps on the cell's batch): they
    count as warm-up calls, so the warm-up makes only what they leave."""
    t0 = time.perf_counter_ns()
    out = fn()
    sync(out)
    first_ns = time.perf_counter_ns() - t0
    timing = Timing(first_call_s=first_ns / 1e9)
    warm_ns: list[int] = []  # each warm-up call, as a block of one call
    if on_first is not None:
        t0 = time.perf_counter()
        warm_ns += on_first(out) or []
        timing.made_s = sum(warm_ns) / 1e9
        timing.checked_s = time.perf_counter() - t0 - timing.made_s
    del out

    warm_start = time.perf_counter() - sum(warm_ns) / 1e9
    while len(warm_ns) < config.warmup_iters or time.perf_counter() - warm_start < config.warmup_s:
        warm_ns.append(_time_block(fn, sync, 1))

    # Block size: grow until the timer is a negligible share of a sample.
    min_block_ns = max(timer_overhead_ns() / MAX_TIMER_SHARE, config.min_block_s * 1e9)
    timing.calls_per_sample = _block_size(fn, sync, min_block_ns, warm_ns[-2:])
    return Sampler(fn, sync, config, timing)


# A warm-up call this many times a block's least length is a block of one call
# without a second to confirm it: an interruption that long is rare, and a
# block shorter than meant would still keep the timer's share far below
# MAX_TIMER_SHARE (a training step: 0.1-2 s against blocks of 20 ms).
LONG_CALL = 10


def _block_size(fn, sync, min_block_ns: float, warm_ns: list[int]) -> int:
    """Calls per block: doubled until a block lasts ``min_block_ns``, confirmed
    by a second block (one interrupted block must not set the size). The last
    warm-up calls count as blocks of one call: a call that long already (a
    training step, a large cell) costs no extra calls here, and one warm-up
    call ``LONG_CALL`` times that long needs no second (training's one
    warm-up step after its agreement steps: 5 s of a quick report's steps)."""
    if warm_ns and warm_ns[-1] >= LONG_CALL * min_block_ns:
        return 1
    calls, seen = 1, list(warm_ns)
    while True:
        elapsed = seen.pop(0) if seen else _time_block(fn, sync, calls)
        if elapsed >= min_block_ns:
            elapsed = seen.pop(0) if seen else _time_block(fn, sync, calls)
            if elapsed >= min_block_ns / 2:
                return calls
        seen = []  # a longer block from here on: the warm-up calls say no more
        calls = max(calls * 2, int(calls * min_block_ns / max(elapsed, 1)) + 1)


def measure(fn: Callable[[], Any], sync: Callable[[Any], None] = lambda out: None,
            config: TimingConfig = TimingConfig(),
            on_first: Callable[[Any], list[int] | None] | None = None) -> Timing:
    """Time ``fn`` under the whole protocol; ``sync(out)`` waits for its result."""
    return prepare(fn, sync, config, on_first).sample_until_stop()
