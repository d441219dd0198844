"""One writer per output folder: a run, a report or a merge holds its folder
while it writes, and a second one into the same folder stops at once (exit 2)
with a sentence naming the process that holds it. Two runs into one folder
would both measure, each under the other's load, and the folder would keep
whichever wrote last.

The lock is ``flock`` on ``FOLDER/.fwcompare.lock``: the kernel releases it
when its process ends, a killed one (``kill -9``) too, so a folder is never
left locked, and the next run takes it and resumes as any rerun does (the
finished cells kept). The file says who holds it (pid, command, start, host);
a holder removes it as it lets go (a killed one leaves it, unlocked).

A holder's children may write its folders (a report's notebook kernels run
``run_study`` on the study folders the report holds): each holder adds its pid
to :data:`OWNERS_ENV`, which they inherit. Within one process the lock is
re-entrant (``fwcompare run`` and ``run_study`` both hold the study's folder).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = ".fwcompare.lock"
# pids (comma-separated) whose folders this process may write: its holding parents
OWNERS_ENV = "FWCOMPARE_FOLDER_OWNERS"

_held: dict[Path, list] = {}  # resolved folder: [open lock file, times held]


class FolderInUse(Exception):
    """Another process holds the output folder; the message names it."""


def _owners() -> set[int]:
    return {int(p) for p in os.environ.get(OWNERS_ENV, "").split(",") if p.strip().isdigit()}


def _holder(f) -> dict:
    """What the holder wrote in the lock file (empty: it has not written yet)."""
    f.seek(0)
    try:
        doc = json.loads(f.read() or "{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _describe(folder: Path, who: dict) -> str:
    if not who.get("pid"):
        return (f"{folder} is in use by another fwcompare process (it has not written who it "
                f"is yet): wait for it to end, or write this one elsewhere (--out)")
    where = "" if who.get("host") == socket.gethostname() else f" on {who.get('host', '?')}"
    return (f"{folder} is in use by another fwcompare process: pid {who['pid']}{where}, "
            f"`{who.get('command', '?')}`, since {who.get('started', '?')}. Wait for it to "
            f"end, stop it (a stopped or killed run frees the folder; the next run resumes "
            f"it), or write this one elsewhere (--out)")


def _acquire(folder: Path) -> bool:
    """Hold ``folder`` (made if missing); False where this process or an owner
    among its parents holds it already. :class:`FolderInUse` otherwise."""
    folder = folder.resolve()
    if folder in _held:
        _held[folder][1] += 1
        return True
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    while True:
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(f)
            f.close()
            if who.get("pid") in _owners():  # a parent of this process holds it
                return False
            raise FolderInUse(_describe(folder, who)) from None
        except OSError:  # a filesystem without flock: nothing to hold, as before
            f.close()
            return False
        try:  # still the file at that path? (a holder letting go removes it)
            if os.fstat(f.fileno()).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "command": _command(),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                        "host": socket.gethostname()}))
    f.flush()
    _held[folder] = [f, 1]
    if os.getpid() not in _owners():
        os.environ[OWNERS_ENV] = ",".join(map(str, sorted(_owners() | {os.getpid()})))
    return True


def _release(folder: Path) -> None:
    entry = _held.get(folder.resolve())
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _held[folder.resolve()]
        try:  # removed while still held: a run that ends leaves no file behind
            os.unlink(folder.resolve() / LOCK_NAME)
        except OSError:
            pass
        entry[0].close()  # closing the file releases the flock


def _command() -> str:
    """This process's command line as its user typed it (cut to 200 characters)."""
    argv = list(getattr(sys, "orig_argv", sys.argv)) or ["python"]
    if argv[1:3] == ["-m", "fwcompare"]:
        argv = ["fwcompare", *argv[3:]]
    argv[0] = Path(argv[0]).name or "python"
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:199] + "…"


@contextlib.contextmanager
def hold(*folders: Path | str):
    """Hold every folder of ``folders`` while the block runs (each made if
    missing); :class:`FolderInUse`, holding none of them, where another
    process holds one."""
    taken: list[Path] = []
    try:
        for folder in folders:
            if _acquire(Path(folder)):
                taken.append(Path(folder))
        yield
    finally:
        for folder in reversed(taken):
            _release(folder)
