"""Launching the ranks of one data-parallel run, with the frameworks' own launchers.

- PyTorch: ``torchrun`` (``python -m torch.distributed.run``) with a static
  rendezvous at ``MASTER_ADDR:MASTER_PORT``; it starts ``nproc_per_node``
  ranks on this host and ends them all when one fails. On one host with a
  fork server (the runner's), the ranks are forked from it instead, each
  with the variables torchrun would set (:func:`torch_rank_envs`), and
  :class:`Launch` ends them all when one fails.
- TensorFlow: one process per worker with ``TF_CONFIG`` naming the whole
  cluster (every worker's host:port) and this worker's index;
  ``MultiWorkerMirroredStrategy`` connects them. Forked from a fork server
  where there is one (on one host). ``ParameterServerStrategy`` (mode ps, one
  host): a chief, the workers and the parameter servers, each with its task
  in ``TF_CONFIG``; the chief runs the steps (its stdout carries the events),
  the others serve it until the launch ends them.
- JAX: one process per rank with the coordinator's address (rank 0's host),
  the process count and this process's id, for ``jax.distributed.initialize``
  (``frameworks.jax.parallel.DataParallel``); forked likewise.

What each framework's launch is (its command, the variables of each rank,
its ports) lives in its package (``frameworks/<name>/launch.py``, named by
``Framework.launcher``); this module starts and watches the processes.

On one host every rank listens on loopback, on ports found free at launch.
Across hosts (``hosts`` in the params, ``node_rank`` on each), the same study
runs on every host; the ports are then fixed: ``master_port`` for torchrun's
rendezvous and JAX's coordinator, ``master_port + 1 + i`` for TensorFlow worker ``i``.

:class:`Launch` watches the ranks of this host as one worker for the runner:
rank 0's events, and the first rank that exits with an error ends the launch.
Killing it kills every process it started, torchrun's ranks included (they
run in sessions of their own), so no rank outlives its cell and its ports.
"""
from __future__ import annotations

import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

import psutil

from .forkserver import ForkServerError, kill_group
from ..core.paths import ROOT
from ..frameworks.base import WORKER_MODULE
from ..core.messages import LAUNCH_DIR_ENV, TMPDIR_PREFIX, parse_event

# Every rank runs the worker entry point; the job names its study, whose
# ``work`` hook is the rank's program.
MODULE = WORKER_MODULE


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports nobody listens on now (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now (as torchrun's store and
    TensorFlow's server do: connections left in TIME_WAIT do not count)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def launcher(framework: str):
    """The module that says how ``framework``'s ranks start (its package's
    ``launch``: ``RENDEZVOUS``, ``ports_needed``, ``commands``)."""
    import importlib

    from ..frameworks import get

    fw = get(framework)
    if not fw.launcher:
        raise ValueError(f"{framework} has no data-parallel launch")
    return importlib.import_module(fw.launcher)


def choose_ports(framework: str, workers: int, hosts: list[str], master_port: int,
                 servers: int = 0) -> list[int]:
    """The framework's launcher says how many (``ports_needed``): one for a
    launch with a rendezvous (torch: torchrun's; jax: the coordinator's),
    else one per process (tensorflow: every worker's, with ``servers``
    parameter servers the chief's and the servers' too)."""
    plan = launcher(framework)
    one = plan.RENDEZVOUS
    n = plan.ports_needed(workers, servers)
    if master_port:
        return [master_port] if one else [master_port + 1 + j for j in range(n)]
    if len(hosts) > 1:
        raise ValueError("several hosts need a fixed master_port")
    return free_ports(n)


def fresh_compile_cache(env: dict) -> str:
    """An empty torch.compile cache directory for one worker or launch, set in
    ``env``: every run pays (and reports) a cold compile, not the previous
    run's. The XLA caches stay off (nothing would read them again)."""
    cache_dir = tempfile.mkdtemp(prefix="fwcompare-compile-")
    use_compile_cache(env, cache_dir)
    return cache_dir


def fresh_tmpdir(env: dict) -> str:
    """A new temporary directory for one worker or launch, set as ``TMPDIR``
    in ``env``; the caller removes it once its processes have ended. A worker
    leaves with ``os._exit``, so what a framework deletes only at interpreter
    exit (TensorFlow autograph's ``__autograph_generated_file*.py``, one per
    traced function: a day's reports and tests left 2,415 in one machine's
    /tmp) goes with it. It is made in the system's temporary directory, not in
    the run's folder: multiprocessing binds AF_UNIX sockets under it (a
    DataLoader worker handing a batch back: ``resource_sharer``), and such a
    path may not pass 107 bytes (under a test's folder a DataLoader with a
    worker failed, "AF_UNIX path too long")."""
    path = tempfile.mkdtemp(prefix=TMPDIR_PREFIX)
    env["TMPDIR"] = path
    return path


def use_compile_cache(env: dict, cache_dir: Path | str, xla: bool = False) -> None:
    """Set ``env`` to use the torch.compile cache ``cache_dir`` (a fresh one,
    or one kept by the caller: ``Runner.compile_cache``); ``xla``: JAX's and
    TensorFlow's persistent XLA compilation caches too, in ``cache_dir/xla``
    (``FWCOMPARE_XLA_CACHE``, which each backend's ``configure`` reads: the
    frameworks' own variables are read at import, before a forked worker's
    environment is set). A variable set outside fwcompare is not used: a
    round 0 must compile cold."""
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache_dir), TRITON_CACHE_DIR=str(cache_dir))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop("FWCOMPARE_XLA_CACHE", None)
    if xla:
        env["FWCOMPARE_XLA_CACHE"] = str(Path(cache_dir) / "xla")


def log_tail(path: Path, chars: int = 1500) -> str:
    """The last non-blank lines of a worker's log."""
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return "\n".join(lines[-15:])[-chars:]


def last_error_line(text: str) -> str:
    """The line of a log that names what failed: the last line of the form
    ``SomeError: message`` (a traceback's last), else the last line."""
    import re

    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Exit|Interrupt)\b", ln)]
    return (named or lines or [""])[-1]


def describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


class Launch:
    """This host's ranks of one data-parallel run, watched as one worker
    (``events``, ``kill``, ``proc``, ``exit_description``, ``stderr_tail``).
    Its ranks run their cells on their own: the runner only listens."""

    autonomous = True
    # What the runner reads of any worker it watches (runner.Worker's): a
    # launch's ranks are never stopped for a budget of the runner's own, so
    # none; without it a rank killed by SIGKILL ended the whole study run
    # (AttributeError in Runner.after_stop).
    stop_note = ""

    def __init__(self, job, job_dir: Path, name: str, env: dict, *, framework: str,
                 workers: int, hosts: list[str], node_rank: int = 0, master_port: int = 0,
                 server=None, servers: int = 0):
        """``server``: a fork server of this environment (fwcompare.execution.forkserver):
        the ranks are forked from it, with the environment torchrun or
        TF_CONFIG would give them, instead of started as fresh interpreters
        (their imports were most of a launch: measurements.md, "comments quoted"). ``servers``:
        TensorFlow's parameter servers (a ParameterServerStrategy cluster on
        this host; 0: none, MultiWorkerMirroredStrategy's workers)."""
        path = job.write(job_dir / f"{name}.json")
        self.ports = choose_ports(framework, workers, hosts, master_port, servers)
        self.servers = servers
        env = dict(env)
        self.cache_dir = fresh_compile_cache(env)
        self.tmp_dir = fresh_tmpdir(env)  # the ranks' own (fresh_tmpdir)
        env[LAUNCH_DIR_ENV] = self.cache_dir
        # What each process is called in an error: the ParameterServerStrategy
        # cluster's tasks by name, other launches' ranks by number.
        self.names: list[str] = []
        self.events: queue.Queue = queue.Queue()
        self.procs: list = []  # subprocess.Popen or forkserver.Forked
        self.log_paths: list[Path] = []
        self._logs = []
        self.failed: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        leader = node_rank == 0
        if server is not None:
            try:
                self._start(path, job_dir, name, env, server, leader,
                            self._commands(path, framework, workers, hosts, node_rank, True))
            except ForkServerError as exc:  # the server is gone: fresh processes instead
                for proc in self.procs:
                    kill_group(proc.pid)
                for log in self._logs:
                    log.write(f"fwcompare: fork server failed ({exc}); fresh processes\n")
                    log.close()
                self.procs, self.log_paths, self._logs = [], [], []
                server = None
        if server is None:
            self._start(path, job_dir, name, env, None, leader,
                        self._commands(path, framework, workers, hosts, node_rank, False))
        if leader:  # rank 0's stdout carries the events
            self._reader = threading.Thread(target=self._read, args=(self.procs[0],),
                                            daemon=True)
            self._reader.start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _commands(self, path: Path, framework: str, workers: int, hosts: list[str],
                  node_rank: int, forked: bool) -> list[tuple[list[str] | None, dict]]:
        """(command, extra environment) of each process on this host, as the
        framework's launcher gives them (torch, not forked: torchrun's one
        for all its ranks), and what each is called in an error."""
        commands, self.names = launcher(framework).commands(
            path, workers, hosts, node_rank, self.ports, forked, self.servers)
        return commands

    def _start(self, path: Path, job_dir: Path, name: str, env: dict, server, leader: bool,
               commands: list) -> None:
        """Each process, its output to a log of its own; on the leading host
        the first one's stdout is a pipe (rank 0's events). Forked from
        ``server`` if given."""
        for i, (cmd, extra) in enumerate(commands):
            events = leader and i == 0
            log_path = job_dir / f"{name}-{i}.log"
            log = open(log_path, "a")
            self.log_paths.append(log_path)
            self._logs.append(log)
            if server is not None:
                proc = server.spawn(path, dict(env, **extra), log, events=events)
                proc.stdin.close()  # a rank reads no requests
            else:
                proc = subprocess.Popen(
                    cmd, stdout=subprocess.PIPE if events else log, stderr=log,
                    text=True, env=dict(env, **extra), start_new_session=True, cwd=ROOT)
            self.procs.append(proc)

    def _read(self, proc) -> None:
        for line in proc.stdout:
            ev = parse_event(line)  # launchers may prefix a rank's lines
            if ev is not None:
                self.events.put(ev)
        self.events.put(None)

    def _watch(self) -> None:
        """The first rank to fail ends the launch: the others would wait for it."""
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [p for p, rc in zip(self.procs, codes) if rc not in (None, 0)]
            if bad:
                self.failed = self._culprit()
                # Events rank 0 sent before the failure come first (which cell
                # was in flight); its output may stay open if it hangs.
                if self._reader is not None:
                    self._reader.join(timeout=5)
                self.events.put(None)
                return
            if all(rc is not None for rc in codes):
                self.events.put(None)
                return
            time.sleep(0.2)

    # How long the ends of a launch's processes may take to land after the
    # first (``_culprit``): at least SETTLE_S, and up to SETTLE_MAX_S while
    # no process has crashed by a signal of its own and some still run.
    SETTLE_S, SETTLE_MAX_S = 1.0, 6.0

    def _culprit(self):
        """The process whose failure ends the launch, or None if none failed:
        one that crashed (a signal other than SIGKILL: SIGSEGV, SIGABRT),
        else one killed by SIGKILL (the kernel's out-of-memory killer, or a
        teardown after a peer's end), else one that exited with an error, as
        the others' errors follow from it (a chief that lost its parameter
        server exits with an error; a worker whose peer crashed may be
        killed). A forked process's end comes from its fork server, maybe
        after that of a peer it made fail: ends land for ``SETTLE_S``, and
        for up to ``SETTLE_MAX_S`` while none is a crash and some process
        still runs (a crash's end landing after a peer's SIGKILL made the
        cell out of memory instead of an error)."""
        if not any(p.poll() not in (None, 0) for p in self.procs):
            return None

        def rank(p):  # lower first: a crash, SIGKILL, an error exit (in process order)
            return 2 if p.returncode > 0 else 1 if p.returncode == -signal.SIGKILL else 0

        start = time.monotonic()
        while True:
            time.sleep(0.1)
            codes = [p.poll() for p in self.procs]
            bad = sorted((p for p, rc in zip(self.procs, codes) if rc not in (None, 0)),
                         key=rank)
            waited = time.monotonic() - start
            if waited >= self.SETTLE_S and (
                    rank(bad[0]) == 0 or None not in codes or waited >= self.SETTLE_MAX_S):
                return bad[0]

    @property
    def proc(self) -> subprocess.Popen:
        return self.failed or self.procs[0]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def kill(self) -> None:
        if self.failed is None:  # before this kill's own signals blur who failed
            self.failed = self._culprit()
        victims = [d for p in self.procs for d in descendants(p.pid)]
        for p in self.procs:
            if p.poll() is None:
                kill_group(p.pid)
        for d in victims:
            try:
                d.kill()
            except psutil.NoSuchProcess:
                pass
        for p in self.procs:
            p.wait()
        psutil.wait_procs(victims, timeout=10)
        for log in self._logs:
            log.close()
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def stderr_tail(self, chars: int = 1500) -> str:
        """The failing rank's last lines (rank 0's if none failed)."""
        return log_tail(self.log_paths[self.procs.index(self.proc)], chars)

    def exit_description(self) -> str:
        i = self.procs.index(self.proc)
        who = self.names[i] if self.names else "" if len(self.procs) == 1 else f"worker {i}"
        return (who and f"{who}: ") + describe_exit(self.proc.returncode)
