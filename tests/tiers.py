"""The test tiers and their guard (a pytest plugin, loaded by conftest.py).

A test with none of the cost markers is *fast*: it starts no process of its
own (no worker, fork server, launch, interpreter or papermill kernel: no
``fork`` and no Python started through ``subprocess``) and imports no framework
it does not name with ``@pytest.mark.frameworks(...)``. ``slow`` tests start
processes; ``report`` tests run notebooks through papermill; ``gpu`` tests need a
CUDA GPU. The guard fails a fast test that breaks the rule, saying which marker
it needs. A framework is caught by the first fast test that imports it (one
imported already, or at collection, is not seen again).
"""
import os
import sys
from pathlib import Path

import pytest

COST_MARKERS = ("slow", "report", "gpu")
# The frameworks whose import a fast test must name: each costs seconds and
# hundreds of MB, and a test that loads one in passing hides what it costs.
FRAMEWORK_MODULES = {"torch": "torch", "tensorflow": "tensorflow", "jax": "jax",
                     "flax": "jax", "keras": "tensorflow", "tf_keras": "tensorflow"}


class FastTierError(Exception):
    """A fast test did what only a marked one may."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on its test (the guard reads whether the call failed)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _is_python(args) -> bool:
    """Whether a command line starts a Python interpreter (a worker, a kernel,
    a fork server, a launcher's ranks, papermill's notebook process)."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args or [])
    if not argv:
        return False
    first = os.fsdecode(argv[0]).split()[0] if isinstance(args, str) else os.fsdecode(argv[0])
    name = Path(first).name
    return (first == sys.executable or name.startswith("python") or name in
            ("torchrun", "jupyter", "papermill", "fwcompare"))


@pytest.fixture(autouse=True)
def _tier_guard(request, monkeypatch):
    """A fast test that starts a Python process or forks, or first imports a
    framework it does not name, fails (the reason says which marker it needs)."""
    if any(request.node.get_closest_marker(m) for m in COST_MARKERS):
        yield
        return
    import subprocess

    seen: list[str] = []
    popen_init = subprocess.Popen.__init__

    def guarded_init(self, args, *a, **kw):
        if _is_python(args):
            why = (f"a fast test started a Python process ({args!r}): mark it "
                   f"@pytest.mark.slow (or report, for papermill)")
            seen.append(why)
            raise FastTierError(why)
        return popen_init(self, args, *a, **kw)

    def guarded_fork():
        why = ("a fast test forked a process (multiprocessing, a DataLoader's workers): "
               "mark it @pytest.mark.slow")
        seen.append(why)
        raise FastTierError(why)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
    monkeypatch.setattr(os, "fork", guarded_fork)
    marker = request.node.get_closest_marker("frameworks")
    named = set(marker.args) if marker is not None else set()
    before = {m for m in FRAMEWORK_MODULES if m in sys.modules}
    yield
    imported = {FRAMEWORK_MODULES[m] for m in FRAMEWORK_MODULES
                if m in sys.modules and m not in before}
    unnamed = sorted(imported - named)
    if unnamed:
        seen.append(f"a fast test imported {', '.join(unnamed)} without naming it: mark it "
                    f"@pytest.mark.frameworks({', '.join(map(repr, unnamed))}) or slow")
    call = getattr(request.node, "rep_call", None)
    if seen and not (call is not None and call.failed):  # failed already: said once
        pytest.fail("; ".join(seen), pytrace=False)


def pytest_configure(config):
    """Under pytest-xdist, each test process on cores of its own (as many
    processes as cores: one each). A study a test runs measures with the
    cores it is given (``threads: 0``), so two test processes do not share a
    core: its thread pools never compete with the other process's work (a
    PyTorch cell measured beside another test process on shared cores ran
    7-22 times slower: docs/measurements.md, 2026-12-06)."""
    info = getattr(config, "workerinput", None)
    if info is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    n, i = int(info["workercount"]), int(info["workerid"].removeprefix("gw"))
    if n <= len(cores):
        os.sched_setaffinity(0, cores[i * len(cores) // n:(i + 1) * len(cores) // n])


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the costly tests first (the smoke report's two
    files, then the other papermill tests, then processes, then the fast
    ones): with ``--dist loadfile --no-loadscope-reorder`` the files are handed
    out in the order of their first test, so the two smoke builds start at
    once in two test processes, the long ones next, and the short ones fill
    the end. The order is the same in every test process."""
    if not hasattr(config, "workerinput"):
        return

    def cost(item):
        return 0 if "smoke" in item.fixturenames else \
            1 if item.get_closest_marker("report") else \
            2 if item.get_closest_marker("slow") else 3
    items.sort(key=cost)  # stable: a file's own order within each tier
