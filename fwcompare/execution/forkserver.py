"""Worker processes forked from a pre-imported template (a fork server).

Importing a framework with transformers takes seconds of CPU, and a quick
report starts about sixty worker processes (a lane per variant and round):
their imports were a sixth of its time (measurements.md, "comments quoted"). A fork server
imports once per framework and run (its framework, transformers' model
modules, the study; ``fwcompare report`` keeps one set for all its studies,
and a worker of another study imports that study itself), then forks each
worker from that state. The worker is
still a fresh process for what is measured: the server never runs a model,
creates a framework runtime or a thread pool (PyTorch's OpenMP pool,
TensorFlow's executors, XLA's client all start in the child, with the
child's thread settings), so allocator state, compiled code and caches are
the child's own, as with a new interpreter. What is shared is the imported
modules' memory, copy-on-write; the CPU memory figure is the peak over the
child's own pre-model baseline, so it does not count them (as before).

Python's multiprocessing has a fork server too, but one per parent process
with one set of preloaded modules and the parent's environment; here each
framework needs its own (``USE_TF`` and the like are read at import), and a
worker needs its own stdin, stdout and log, which the parent passes as file
descriptors over a Unix socket (``socket.send_fds``).

Parent side: :class:`ForkServer` (start, ``spawn``, ``close``) and
:class:`Forked`, the handle of one forked worker with the parts of
``subprocess.Popen`` the runner uses. Server side: ``python -m
fwcompare.commands.forkserver_main SOCKET_FD THREADS FRAMEWORK STUDY STUDY_FILE [MODEL...]``
The server ends when the parent closes the socket or dies, and kills the
workers it forked on its way out.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..core.folder_lock import OWNERS_ENV
from ..core.paths import ROOT

# The environment a worker may set on top of its server's (read at use, not
# at import): its own compile caches and temporary directory, a data-parallel
# rank's place in its launch (torch.distributed's env:// variables, TensorFlow's
# TF_CONFIG, JAX's coordinator and process: frameworks.jax.parallel.DataParallel),
# the launch's directory (messages.LAUNCH_DIR_ENV), and the holders of the output
# folders (folder_lock.OWNERS_ENV: set when a run takes its first folder, read by no worker).
PER_WORKER_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FWCOMPARE_XLA_CACHE",
                  "TMPDIR", "RANK", "LOCAL_RANK",
                  "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                  "TF_CONFIG", "FWCOMPARE_JAX_COORDINATOR", "FWCOMPARE_JAX_PROCESS_ID",
                  "FWCOMPARE_JAX_PROCESSES", "FWCOMPARE_LAUNCH_DIR", OWNERS_ENV)
_MSG = 65536


def env_key(env: dict) -> tuple:
    """What must match for a worker to be forked from a server: the whole
    environment but the per-worker keys."""
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER_ENV))


def kill_group(pid: int) -> None:
    """SIGKILL the process group that ``pid`` leads (a worker and whatever it
    started); one already gone is no error."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class ForkServerError(RuntimeError):
    """The server could not start or fork (the caller starts a plain process)."""


# -- parent side --------------------------------------------------------------------
class Forked:
    """A worker forked by a server: ``pid``, ``stdin``, ``stdout``,
    ``returncode``, ``poll()`` and ``wait()`` as ``subprocess.Popen`` has them.
    It runs in a session of its own (its process group id is its pid)."""

    def __init__(self, server: "ForkServer", pid: int, stdin, stdout):
        self.server, self.pid, self.stdin, self.stdout = server, pid, stdin, stdout
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and not self.server.alive():
            self._orphaned()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while not self._ended.wait(0.2):
            if self.poll() is not None:
                break
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        return self.returncode

    def _orphaned(self) -> None:
        """The server died first: nobody will report this exit; a worker
        still running is killed (no process outlives the run)."""
        kill_group(self.pid)
        self._exited(-signal.SIGKILL)


class ForkServer:
    """One pre-imported server process for workers of one environment."""

    def __init__(self, env: dict, threads: int, framework: str, study: str,
                 study_file: str, models: list[str], log_path: Path):
        self.env = dict(env)
        self.key = env_key(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._log = open(log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fwcompare.commands.forkserver_main", str(theirs.fileno()),
             str(threads), framework, study, study_file, *models],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=self._log, env=self.env, start_new_session=True, cwd=ROOT)
        theirs.close()
        self.log_path = log_path
        self._replies: queue.Queue = queue.Queue()
        self._children: dict[int, Forked] = {}
        self._early_exits: dict[int, int] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._gone = threading.Event()
        self._spawn_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self._sock.recv(_MSG)
                if not data:
                    break
                msg = json.loads(data)
                if "exit" in msg:
                    with self._lock:
                        child = self._children.pop(msg["exit"], None)
                        if child is None:  # before spawn() recorded it
                            self._early_exits[msg["exit"]] = msg["code"]
                    if child is not None:
                        child._exited(msg["code"])
                elif msg.get("ready"):
                    self._ready.set()
                else:
                    self._replies.put(msg)
        except OSError:
            pass
        finally:
            self._gone.set()
            self._replies.put(None)
            with self._lock:
                orphans = list(self._children.values())
                self._children.clear()
            for child in orphans:
                child._orphaned()

    def alive(self) -> bool:
        return not self._gone.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Whether its imports finished within ``timeout`` (False: it failed)."""
        end = time.monotonic() + timeout
        while not self._ready.wait(0.2):
            if self._gone.is_set() or time.monotonic() > end:
                return False
        return True

    def spawn(self, job_path: Path, env: dict, log, events: bool = True,
              compiles: bool = False) -> Forked:
        """Fork a worker for ``job_path`` with ``env`` (equal to the server's
        but for ``PER_WORKER_ENV``), its stderr to the open file ``log``; its
        stdout is a pipe (``Forked.stdout``: its events), or with ``events``
        false goes to ``log`` too (a rank that sends none). ``compiles``: the
        worker compiles device code; the server first makes its framework's
        compiler checks of the machine (the backend's ``warm_compiler``), once."""
        if env_key(env) != self.key:
            raise ForkServerError("the worker's environment differs from the server's")
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe() if events else (None, os.dup(log.fileno()))
        try:
            with self._spawn_lock:
                request = json.dumps({"job": str(job_path), "env": env,
                                      "cwd": str(ROOT), "compiles": compiles}).encode()
                try:
                    socket.send_fds(self._sock, [request], [in_r, out_w, log.fileno()])
                except OSError as exc:
                    raise ForkServerError(f"fork server gone: {exc}") from exc
                reply = self._replies.get(timeout=60)
            if reply is None or "forked" not in reply:
                raise ForkServerError(f"fork server did not fork: {reply}")
        except queue.Empty:
            raise ForkServerError("fork server did not answer within 60 s") from None
        except BaseException:
            os.close(in_w)
            if out_r is not None:
                os.close(out_r)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        child = Forked(self, reply["forked"], os.fdopen(in_w, "w"),
                       None if out_r is None else os.fdopen(out_r, "r"))
        with self._lock:
            code = self._early_exits.pop(child.pid, None)
            if code is None:
                self._children[child.pid] = child
        if code is not None:
            child._exited(code)
        return child

    def shutdown(self) -> None:
        """Tell the server to end (it kills the workers it forked that still
        run, then exits); :meth:`close` waits for it."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """End the server and wait for it."""
        self.shutdown()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            kill_group(self.proc.pid)
            self.proc.wait()
        self._sock.close()
        self._log.close()


class ForkServers:
    """The fork servers of one study run, one per worker environment, started
    ahead (their imports overlap the weights' preparation) and closed at the
    end (``with`` or :meth:`close`)."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self._servers: dict[tuple, ForkServer] = {}
        self._failed: set[tuple] = set()

    def start(self, env: dict, threads: int, framework: str, study: str, study_file: str,
              models: list[str]) -> None:
        key = env_key(env)
        if key in self._servers or key in self._failed:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._servers[key] = ForkServer(env, threads, framework, study, study_file, models,
                                        self.log_dir / f"forkserver-{framework}.log")

    def server_for(self, env: dict, timeout: float) -> ForkServer | None:
        """A ready server for ``env`` (waiting for its imports), or None: none
        was started for it, or it failed (the caller starts a plain process)."""
        key = env_key(env)
        server = self._servers.get(key)
        if server is None:
            return None
        if server.alive() and server.wait_ready(timeout):
            return server
        del self._servers[key]
        self._failed.add(key)
        server.close()
        return None

    def close(self) -> None:
        for server in self._servers.values():  # all told first: they end side by side
            server.shutdown()
        for server in self._servers.values():
            server.close()
        self._servers.clear()

    def __enter__(self) -> "ForkServers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
