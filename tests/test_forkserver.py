"""Workers forked from a pre-imported fork server: every round still gets
fresh processes, a server that cannot start leaves plain processes, and a
parent killed outright leaves no worker behind."""
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import SMOKE_TIMING, children_alive

from fwcompare import run_study
from fwcompare.execution.forkserver import ForkServers
from fwcompare.core.paths import ROOT
from fwcompare.frameworks import worker_env

# it starts worker processes, and tests the servers of a run: its own
pytestmark = [pytest.mark.slow, pytest.mark.own_servers]

BASE = {"models": ["tiny-bert"], "frameworks": ["torch"], "modes": {"torch": ["eager"]},
        "batch_sizes": [1], "seq_lens": [8], "group_timeout_s": 120.0, **SMOKE_TIMING}


def _pids(jobs):
    """(pid, parent) of every worker, from the line each writes to its log."""
    found = {}
    for log in jobs.glob("*.log"):
        if log.name.startswith("forkserver"):
            continue
        found[log.stem] = [tuple(map(int, m)) for m in re.findall(
            r"fwcompare worker: pid (\d+), parent (\d+)", log.read_text())]
    return found


def test_workers_are_forked_and_every_round_gets_fresh_ones(tmp_path):
    res = run_study("inference_sweep", {**BASE, "rounds": 2}, output_dir=tmp_path,
                    progress=False)
    assert sorted(res.results["round"]) == [0, 1] and set(res.results["status"]) == {"ok"}
    jobs = tmp_path / "results" / "work" / "jobs"
    pids = _pids(jobs)
    lane = [p for name, p in pids.items() if name.startswith("torch-eager")]
    assert len(lane) == 1 and len(lane[0]) == 2  # one log, a worker per round
    (pid0, parent0), (pid1, parent1) = lane[0]
    assert pid0 != pid1  # round 1 ran in a process of its own
    # Both forked by the same server, which also forked the prepare job; none
    # is a child of this (the parent) process, as a fresh interpreter would be.
    prep = [p for name, p in pids.items() if name.startswith("prepare")]
    assert parent0 == parent1 == prep[0][0][1] != os.getpid()
    assert not children_alive()  # the server ended with the run


def test_a_server_that_cannot_start_leaves_plain_processes(tmp_path):
    servers = ForkServers(tmp_path)
    env = worker_env(1, "cpu", "torch")
    servers.start(env, 1, "torch", "no_such_study", str(tmp_path / "missing.py"), [])
    try:
        assert servers.server_for(env, timeout=120) is None  # it died while importing
        assert "Traceback" in (tmp_path / "forkserver-torch.log").read_text()
        # Asked again, no second server is started for that environment.
        servers.start(env, 1, "torch", "inference_sweep", "", [])
        assert servers.server_for(env, timeout=1) is None
    finally:
        servers.close()
    assert not children_alive()


_RUN = """
import sys
from fwcompare import run_study
run_study("inference_sweep", {params!r}, output_dir={out!r}, progress=False)
"""


def test_a_killed_parent_leaves_no_worker(tmp_path):
    """SIGKILL gives the runner no chance to clean up: the server sees its
    socket close and kills the workers it forked (here one hung in a cell),
    and removes their temporary directories (launch.fresh_tmpdir)."""
    system = tmp_path / "tmp"  # the parent's TMPDIR, where it makes the workers'
    system.mkdir()
    env = dict(os.environ, FWCOMPARE_FAULT="hang:b=1 s=8", PYTHONPATH=str(ROOT),
               TMPDIR=str(system))
    parent = subprocess.Popen([sys.executable, "-c", _RUN.format(params=BASE,
                                                                 out=str(tmp_path))],
                              env=env, start_new_session=True)
    jobs = tmp_path / "results" / "work" / "jobs"
    try:
        deadline = time.monotonic() + 180
        lane_logs = lambda: list(jobs.glob("torch-eager-*.log")) if jobs.exists() else []
        while not any("injected hang" in log.read_text() for log in lane_logs()):
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.5)
        family = psutil.Process(parent.pid).children(recursive=True)
        worker = [p for name, ps in _pids(jobs).items() if name.startswith("torch-eager")
                  for p, _ in ps][0]
        assert worker in {p.pid for p in family}
        assert any(d.name.startswith("fwcompare-tmp-") for d in system.iterdir())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        gone, alive = psutil.wait_procs(family, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
        assert not [d.name for d in system.iterdir() if d.name.startswith("fwcompare-tmp-")]
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
