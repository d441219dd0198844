import time

import numpy as np
import pytest

from fwcompare.core.timing import TimingConfig, measure

# Workloads of known duration, timed for real: they need the cores to themselves.
pytestmark = pytest.mark.serial

FAST = TimingConfig(warmup_iters=1, warmup_s=0.01, min_iters=15, min_time_s=0.1,
                    max_time_s=2.0, target_rel_ci=0.01)


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_known_duration_workload():
    t = measure(lambda: busy(0.005), config=FAST)
    med = float(np.median(t.samples_s))
    assert abs(med - 0.005) / 0.005 < 0.03, med
    assert t.calls_per_sample == 1
    assert len(t.samples_s) >= FAST.min_iters


def test_first_call_is_timed_apart():
    calls = []

    def fn():
        busy(0.05 if not calls else 0.002)
        calls.append(1)
    t = measure(fn, config=FAST)
    assert 0.05 <= t.first_call_s < 0.1
    assert float(np.median(t.samples_s)) < 0.004


def test_tiny_workload_gets_blocks_of_calls():
    t = measure(lambda: sum(range(10)), config=FAST)
    assert t.calls_per_sample > 1
    assert float(np.median(t.samples_s)) < 1e-4  # per call, not per block


def test_sync_ends_every_block():
    synced = []
    t = measure(lambda: 1, sync=synced.append, config=FAST)
    assert len(synced) >= len(t.samples_s)


def test_unconverged_run_is_reported_not_hidden():
    rng = np.random.default_rng(0)
    cfg = TimingConfig(warmup_iters=0, warmup_s=0.0, min_iters=5, min_time_s=0.05,
                       max_time_s=0.3, target_rel_ci=1e-6)
    t = measure(lambda: busy(rng.uniform(0.001, 0.003)), config=cfg)
    assert t.converged is False
    assert t.rel_ci > cfg.target_rel_ci
    assert len(t.samples_s) >= cfg.min_iters


def test_converges_on_a_steady_workload():
    t = measure(lambda: busy(0.002), config=TimingConfig(
        warmup_iters=1, warmup_s=0.0, min_iters=10, min_time_s=0.05, max_time_s=3.0,
        target_rel_ci=0.05))
    assert t.converged is True and t.rel_ci <= 0.05


def test_max_time_never_cuts_below_min_iters():
    cfg = TimingConfig(warmup_iters=0, warmup_s=0.0, min_iters=6, min_time_s=0.01,
                       max_time_s=0.01, target_rel_ci=1e-9)
    t = measure(lambda: busy(0.01), config=cfg)
    assert len(t.samples_s) == 6 and t.converged is False


def test_long_calls_set_the_block_size_from_the_warm_up():
    # Calls longer than a block: the last two warm-up calls are its evidence,
    # so preparing costs the first call and the warm-up, no extra calls.
    from fwcompare.core.timing import prepare

    calls = []

    def fn():
        busy(0.03)
        calls.append(1)
    cfg = TimingConfig(warmup_iters=2, warmup_s=0.0, min_block_s=0.02)
    sampler = prepare(fn, config=cfg)
    assert sampler.timing.calls_per_sample == 1 and len(calls) == 1 + 2
    # Short calls still get blocks that last min_block_s, as before.
    short = prepare(lambda: busy(0.002), config=cfg)
    assert short.timing.calls_per_sample >= 10
    assert np.median(short.take(3)) < 0.004  # per call


def test_one_warm_up_call_far_longer_than_a_block_is_the_block_size():
    """Training's one warm-up step (after its agreement steps) is a block of
    one call without a confirming call; a call only a few times a block's
    length still gets its second block."""
    from fwcompare.core.timing import LONG_CALL, prepare

    def calls_made(seconds):
        calls = []

        def fn():
            busy(seconds)
            calls.append(1)
        cfg = TimingConfig(warmup_iters=1, warmup_s=0.0, min_block_s=0.005)
        sampler = prepare(fn, config=cfg)
        return sampler.timing.calls_per_sample, len(calls)
    # First call and one warm-up call: nothing more.
    assert calls_made(LONG_CALL * 0.005 * 1.5) == (1, 2)
    # Twice a block: one call a block, confirmed by a third call.
    assert calls_made(0.01) == (1, 3)


def test_calls_on_first_made_count_as_warm_up():
    """Training's agreement steps on the cell's own batch follow its first call:
    the warm-up only makes what they leave (warmup_iters calls, warmup_s)."""
    from fwcompare.core.timing import prepare

    cfg = TimingConfig(warmup_iters=2, warmup_s=0.04, min_iters=6, min_time_s=0.0,
                       max_time_s=1.0, target_rel_ci=1.0)

    def calls_made(on_first):
        calls = []

        def fn():
            busy(0.01)
            calls.append(1)
        prepare(fn, config=cfg, on_first=on_first)
        return len(calls)
    alone = calls_made(None)  # first call, warm-up of 2 calls and at least 0.04 s
    assert alone >= 1 + 4
    # Two 10 ms steps already made: 2 calls but 0.02 s, so about 2 more for 0.04 s.
    assert 1 + 2 <= calls_made(lambda out: [10_000_000] * 2) <= alone - 1
    # Four: warmup_iters and warmup_s both met, and the block size (a 10 ms call
    # is far over the timer's share) taken from them: the first call only.
    assert calls_made(lambda out: [10_000_000] * 4) == 1


def test_checked_time_leaves_out_the_warm_up_calls_made_on_first():
    """The time breakdown charges ``checked_s`` to the gate and the rest of a
    prepare to warm-up: agreement steps made in ``on_first`` are warm-up calls."""
    from fwcompare.core.timing import prepare

    cfg = TimingConfig(warmup_iters=1, warmup_s=0.0, min_iters=6, min_time_s=0.0,
                       max_time_s=1.0, target_rel_ci=1.0)

    def on_first(out):
        t0 = time.perf_counter_ns()
        busy(0.05)  # two steps of 25 ms...
        step_ns = (time.perf_counter_ns() - t0) // 2
        busy(0.02)  # ...and a check of 20 ms
        return [step_ns, step_ns]
    timing = prepare(lambda: busy(0.001), config=cfg, on_first=on_first).timing
    assert 0.015 <= timing.checked_s <= 0.04
    assert 0.045 <= timing.made_s <= 0.06
