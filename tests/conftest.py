"""Shared fixtures: smoke-sized timing, a test run's own cache, the smoke
report, the tiers' guard (tests/tiers.py), the fork servers a test process
keeps (tests/servers.py), and the check that nothing is left running."""
import os
import tempfile
from pathlib import Path

# Every test run gets a weights/peaks cache of its own, as CI's fresh clone does:
# a bug that shows only with an empty cache shows here too. Set before fwcompare
# is imported (paths.CACHE is read once); a cache given by the caller is kept.
if "FWCOMPARE_CACHE" not in os.environ:
    os.environ["FWCOMPARE_CACHE"] = tempfile.mkdtemp(prefix="fwcompare-test-cache-")
    _OWN_CACHE = Path(os.environ["FWCOMPARE_CACHE"])
else:
    _OWN_CACHE = None

import psutil  # noqa: E402
import pytest  # noqa: E402

from fwcompare.core.timing import TimingConfig  # noqa: E402

pytest_plugins = ["tiers", "servers", "pytester"]

# Smoke-sized timing params: a few short samples per cell, enough for a median
# and its CI (every test that runs cells through the runner uses these).
SMOKE_TIMING = {"warmup_iters": 1, "warmup_s": 0.0, "min_iters": 6, "min_time_s": 0.05,
                "max_time_s": 0.3, "target_rel_ci": 0.1}


def pytest_sessionfinish(session, exitstatus):
    """The run's own cache goes with it (pytest-xdist's workers share the
    controller's, which removes it)."""
    if _OWN_CACHE is not None and not hasattr(session.config, "workerinput"):
        import shutil

        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture
def smoke_timing() -> dict:
    """The smoke-sized timing params (a fresh dict: tests may change it)."""
    return dict(SMOKE_TIMING)


@pytest.fixture
def smoke_config() -> TimingConfig:
    """The same protocol settings as a TimingConfig, for in-process timing."""
    return TimingConfig(**SMOKE_TIMING)


@pytest.fixture(scope="session")
def tiny_weights():
    """``tiny_weights(model, seed=0, head="base")``: the folder of a zoo
    model's weights, built once per test run into its own cache (the
    weights are a pure function of model, seed and head)."""
    from fwcompare.core import models

    def get(model: str = "tiny-bert", seed: int = 0, head: str = "base") -> Path:
        return models.weights_dir(model, seed, head=head)
    return get


@pytest.fixture(scope="session")
def smoke(tmp_path_factory, request):
    """The smoke report of the studies this run's tests read (tests/smoke.py),
    built once for every test process of the run."""
    from smoke import SmokeReport, needed, shared_root

    return SmokeReport(shared_root(tmp_path_factory, request.config),
                       needed(request.session.items))


def children_alive() -> list[psutil.Process]:
    """This process's children, now (a worker the runner ended was waited for),
    but the fork servers it keeps for every test (tests/servers.py): their
    workers count."""
    from servers import kept_pids

    kept = kept_pids()
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in kept]


def benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (a script, not a package: imported by path)."""
    import importlib.util

    from fwcompare.core.paths import ROOT

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
