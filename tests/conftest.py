"""Shared fixtures: smoke-sized timing, and the check that nothing is left running."""
import psutil
import pytest

from fwcompare.timing import TimingConfig

# Smoke-sized timing params: a few short samples per cell, enough for a median
# and its CI (every test that runs cells through the runner uses these).
SMOKE_TIMING = {"warmup_iters": 1, "warmup_s": 0.0, "min_iters": 6, "min_time_s": 0.05,
                "max_time_s": 0.3, "target_rel_ci": 0.1}


@pytest.fixture
def smoke_timing() -> dict:
    """The smoke-sized timing params (a fresh dict: tests may change it)."""
    return dict(SMOKE_TIMING)


@pytest.fixture
def smoke_config() -> TimingConfig:
    """The same protocol settings as a TimingConfig, for in-process timing."""
    return TimingConfig(**SMOKE_TIMING)


def children_alive() -> list[psutil.Process]:
    """This process's children, now (a worker the runner ended was waited for)."""
    return psutil.Process().children(recursive=True)


@pytest.fixture
def no_orphans():
    """After the test: no worker, rank or launcher of it left running."""
    yield
    assert not children_alive()
