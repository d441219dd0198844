"""The fork servers a test process keeps (tests/servers.py): two runs of a
built-in study fork their workers from the same server, which no test counts
as left running; one that died is started again by the next run."""
import os
import signal
import time

import pytest
from conftest import children_alive, running
from servers import kept_pids
from test_forkserver import BASE, _pids

from fwcompare import run_study

pytestmark = pytest.mark.slow  # it runs the study's workers


def parents(out) -> set[int]:
    """The parents of the run's workers (the line each writes to its log)."""
    return {parent for name, found in _pids(out / "results" / "work" / "jobs").items()
            if name.startswith("torch-") for _, parent in found}


def test_runs_fork_from_the_kept_server_and_one_that_died_is_started_again(tmp_path):
    runs = []
    for name in ("a", "b"):
        res = run_study("inference_sweep", BASE, output_dir=tmp_path / name, progress=False)
        assert set(res.results["status"]) == {"ok"}
        runs.append(parents(tmp_path / name))
    assert runs[0] == runs[1] and len(runs[0]) == 1  # one server forked both runs' workers
    (server,) = runs[0]
    assert server in kept_pids() and server != os.getpid()
    assert server not in {p.pid for p in children_alive()}  # kept, not left running
    os.kill(server, signal.SIGKILL)
    while running(server):
        time.sleep(0.05)
    res = run_study("inference_sweep", BASE, output_dir=tmp_path / "c", progress=False)
    assert set(res.results["status"]) == {"ok"}
    (again,) = parents(tmp_path / "c")
    assert again != server and again in kept_pids()
