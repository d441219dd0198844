"""The fork server's own process: ``python -m fwcompare.commands.forkserver_main
SOCKET_FD THREADS FRAMEWORK STUDY STUDY_FILE [MODEL...]`` (the parent side,
which starts it, is :mod:`fwcompare.execution.forkserver`).

It imports what a worker of one framework will (the backend, transformers'
model modules, the study), then forks a worker per request from that state;
each child runs the worker's entry point (:mod:`fwcompare.commands.worker`). Like the
worker, it is the top of its process: it may import anything.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile

from ..execution.forkserver import _MSG, kill_group
from ..core.messages import TMPDIR_PREFIX


def _preload(framework: str, study: str, study_file: str, models: list[str]) -> None:
    """Import what a worker of ``framework`` will: the backend (its framework
    and transformers), the study, and the model modules of ``models``.
    Nothing runs: no runtime, device or thread pool is created here."""
    import importlib

    from ..measure import cell, gate
    from ..core import stats
    from .. import studies
    from . import worker  # noqa: F401
    from .. import frameworks

    studies.load(study, study_file)
    fw = frameworks.find(framework)
    if fw is None:
        fw = frameworks.get(frameworks.REFERENCE)  # the prepare job: the reference only
    frameworks.get_backend(fw.name)
    prefix, extra = fw.model_module_prefix, fw.preload
    from ..core import models as zoo

    for model in models:
        try:
            kind = zoo.model_type(model).replace("-", "_")
        except Exception:  # a model the study will report on; only a preload here
            continue
        extra += (f"transformers.models.{kind}.modeling_{prefix}{kind}",)
    for name in extra:
        try:
            importlib.import_module(name)
        except Exception:
            pass


def _child(sock: socket.socket, wake_r: int, fds: list[int], req: dict) -> None:
    """In the forked worker: take its stdin, stdout and log, its environment,
    then run the worker's entry point. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        sock.close()
        os.close(wake_r)
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        tempfile.tempdir = None  # the worker's TMPDIR, not what the server's imports found
        os.chdir(req["cwd"])
        from .worker import main

        sys.argv = [main.__code__.co_filename, req["job"]]
        code = main([req["job"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _warm(framework: str) -> None:
    """The framework's compiler checks of the machine (its backend's
    ``warm_compiler``), made before the first worker that compiles is forked;
    checks that fail are left to the worker."""
    from .. import frameworks

    if frameworks.find(framework) is None:  # the prepare job's server
        return
    try:
        frameworks.get_backend(framework).warm_compiler()
    except Exception as exc:  # noqa: BLE001: the worker makes the checks itself
        print(f"fwcompare: the fork server's compiler checks failed ({exc}); each "
              f"worker makes them", file=sys.stderr, flush=True)


def serve(sock: socket.socket, framework: str = "") -> None:
    """Fork a worker per request until the parent closes the socket; report
    each worker's exit; kill the workers still running on the way out, and
    remove their own temporary directories (a parent killed outright could
    not: ``launch.fresh_tmpdir``). Before the first worker that compiles,
    ``framework``'s compiler checks of the machine (:func:`_warm`)."""
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up byte is the point
    children: dict[int, str] = {}  # pid: its TMPDIR
    warmed = False

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.pop(pid, None)
            sock.send(json.dumps({"exit": pid,
                                  "code": os.waitstatus_to_exitcode(status)}).encode())

    sock.send(json.dumps({"ready": True}).encode())
    try:
        while True:
            readable, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in readable:
                os.read(wake_r, 512)
            reap()
            if sock not in readable:
                continue
            msg, fds, _, _ = socket.recv_fds(sock, _MSG, 3)
            if not msg:
                return  # the parent closed its end, or died
            req = json.loads(msg)
            if req.get("compiles") and not warmed:
                _warm(framework)
                warmed = True
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(sock, wake_r, fds, req)
            for fd in fds:
                os.close(fd)
            children[pid] = req["env"].get("TMPDIR", "")
            sock.send(json.dumps({"forked": pid}).encode())
    except OSError:
        return
    finally:
        import shutil

        for pid in children:
            kill_group(pid)
        for tmp in set(children.values()):  # a launch's ranks share theirs
            if os.path.basename(tmp).startswith(TMPDIR_PREFIX):
                shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    fd, threads, framework, study, study_file, *models = argv
    sock = socket.socket(fileno=int(fd))
    from ..core.machine_load import pin_threads

    pin_threads(int(threads))  # before any import, as a worker does (children inherit it)
    _preload(framework, study, study_file, models)
    serve(sock, framework)
    # Nothing left to do: skip the interpreter's teardown of the imported
    # frameworks (seconds for TensorFlow), which the runner would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
