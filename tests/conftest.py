"""Shared fixtures: smoke-sized timing, and the check that nothing is left running."""
import time

import psutil
import pytest

from fwcompare.timing import TimingConfig

# Smoke-sized timing params: a few short samples per cell, enough for a median
# and its CI (every test that runs cells through the runner uses these).
SMOKE_TIMING = {"warmup_iters": 1, "warmup_s": 0.0, "min_iters": 5, "min_time_s": 0.05,
                "max_time_s": 0.3, "target_rel_ci": 0.1}


@pytest.fixture
def smoke_timing() -> dict:
    """The smoke-sized timing params (a fresh dict: tests may change it)."""
    return dict(SMOKE_TIMING)


@pytest.fixture
def smoke_config() -> TimingConfig:
    """The same protocol settings as a TimingConfig, for in-process timing."""
    return TimingConfig(**SMOKE_TIMING)


def children_alive(grace_s: float = 5.0) -> list[psutil.Process]:
    """This process's children still alive after ``grace_s`` (reaped ones leave)."""
    end = time.monotonic() + grace_s
    while True:
        alive = [p for p in psutil.Process().children(recursive=True) if p.is_running()
                 and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.2)


@pytest.fixture
def no_orphans():
    """After the test: no worker, rank or launcher of it left running."""
    yield
    assert not children_alive()
