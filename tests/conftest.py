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


def benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (a script, not a package: imported by path)."""
    import importlib.util

    from fwcompare.paths import ROOT

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def no_orphans():
    """After the test: no worker, rank or launcher of it left running."""
    yield
    assert not children_alive()
