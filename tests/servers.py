"""Fork servers kept for a whole test process (a pytest plugin, loaded by
conftest.py).

A study run starts a fork server per framework and one for its prepare job,
and closes them when it ends (fwcompare.execution.forkserver): each test that runs a
study paid the frameworks' imports again (seconds each on one core:
docs/measurements.md). Here a built-in study's run takes its
servers from one set that the test process keeps until it ends, as
``fwcompare report`` keeps one set for its studies. The workers are still
forked fresh for every cell group, so what a test measures is unchanged; what
is shared is the imported modules.

A study a test registers gets kept servers of its own, by its name and the
file it is defined in as well as the environment: a server imports its study
by name once, from that file, and two tests may register different studies of
one name (from two files). Not shared: every server of a test marked
``own_servers`` (it tests how servers start, fail or end with their run).
"""
from __future__ import annotations

import sys

import pytest

from fwcompare.execution import forkserver
from fwcompare.studies import STUDIES

BUILT_IN = frozenset(STUDIES)
# Read by the worker at run time from the environment its request carries, not by
# the server's imports: a server of another value of these serves just as well.
RUN_TIME_ENV = ("PYTEST_CURRENT_TEST", "FWCOMPARE_FAULT")
KEEP = 8  # servers kept at most: each holds its framework's modules in memory
# A registered study's servers, kept apart: theirs never push out a built-in
# framework's (whose imports take longer to make again).
KEEP_REGISTERED = 4


def _key(env: dict) -> tuple:
    return forkserver.env_key({k: v for k, v in env.items() if k not in RUN_TIME_ENV})


def _registered(key: tuple) -> bool:
    return bool(key) and key[0] == "registered"


def _running(server) -> bool:
    """Alive and its process not ended (a SIGKILL shows in poll() before alive())."""
    return server.alive() and server.proc.poll() is None


_ForkServers = forkserver.ForkServers  # the library's, before a test replaces it


class KeptServers(_ForkServers):
    """The test process's servers, by environment less the run-time keys;
    one that died (a test killed it) or failed is started again by the next
    run that needs it."""

    def start(self, env, threads, framework, study, study_file, models, key=None) -> None:
        key = key or _key(env)
        server = self._servers.get(key)
        if server is not None and _running(server):
            self._servers[key] = self._servers.pop(key)  # the most recent last
            return
        if server is not None:
            self._servers.pop(key).close()
        kind = [k for k in self._servers if _registered(k) == _registered(key)]
        while len(kind) >= (KEEP_REGISTERED if _registered(key) else KEEP):
            self._servers.pop(kind.pop(0)).close()  # the least recent first
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._servers[key] = forkserver.ForkServer(
            env, threads, framework, study, study_file, models,
            self.log_dir / f"forkserver-{framework}.log")

    def server_for(self, env, timeout, key=None):
        key = key or _key(env)
        server = self._servers.get(key)
        if server is None:
            return None
        if _running(server) and server.wait_ready(timeout):
            # the run-time keys may differ from the server's: the worker takes the
            # request's environment (ForkServer.spawn checks the rest)
            server.key = forkserver.env_key(env)
            return server
        self._servers.pop(key).close()
        return None

    def pids(self) -> set[int]:
        return {s.proc.pid for s in self._servers.values()}


class RunServers(_ForkServers):
    """What a study run gets in place of its own ``ForkServers``: the kept
    servers, by environment for a built-in study, by environment, name and
    file for a study a test registered."""

    def __init__(self, kept: KeptServers, log_dir):
        super().__init__(log_dir)
        self.kept = kept
        self.registered: dict[tuple, tuple] = {}  # this run's env keys: their kept keys

    def start(self, env, threads, framework, study, study_file, models) -> None:
        key = None
        if study not in BUILT_IN:
            key = self.registered[_key(env)] = ("registered", _key(env), study,
                                                str(study_file))
        self.kept.start(env, threads, framework, study, study_file, models, key=key)

    def server_for(self, env, timeout):
        return self.kept.server_for(env, timeout, key=self.registered.get(_key(env)))


KEPT: KeptServers | None = None


def kept_pids() -> set[int]:
    """The kept servers' processes (children of this one that no test left)."""
    return KEPT.pids() if KEPT is not None else set()


@pytest.fixture(autouse=True)
def _shared_servers(request, monkeypatch, tmp_path_factory):
    """A study run of this test takes its fork servers from the kept set
    (``ForkServers`` replaced for the test, where ``fwcompare.run_study`` and
    ``report.build`` make theirs), unless the test is marked ``own_servers``."""
    global KEPT
    if request.node.get_closest_marker("own_servers") is None:
        if KEPT is None:
            KEPT = KeptServers(tmp_path_factory.mktemp("kept-forkservers"))

        def servers(log_dir):
            return RunServers(KEPT, log_dir)
        monkeypatch.setattr(forkserver, "ForkServers", servers)  # a study run's
        # a report's (imported by the tests that build one)
        if "fwcompare.suite.report" in sys.modules:
            monkeypatch.setattr(sys.modules["fwcompare.suite.report"], "ForkServers", servers)
    yield


def pytest_sessionfinish(session, exitstatus):
    if KEPT is not None:
        KEPT.close()
