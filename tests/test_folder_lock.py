"""One run per output folder (fwcompare.core.folder_lock): a second run,
report or merge into a folder in use stops before measuring, naming the
process that holds it; a killed run leaves its folder free, and the next run
resumes it."""
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml
from conftest import SMOKE_TIMING

from fwcompare import run_study
from fwcompare.commands import cli
from fwcompare.core import folder_lock
from fwcompare.core.folder_lock import LOCK_NAME, OWNERS_ENV, FolderInUse, hold
from fwcompare.core.paths import ROOT


def _taken(folder) -> bool:
    """Whether some open file of the lock holds its flock now."""
    with open(folder / LOCK_NAME, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_a_held_folder_names_its_holder_and_is_free_once_released(tmp_path):
    folder = tmp_path / "run"
    with hold(folder):
        with hold(folder):  # re-entrant: `fwcompare run` and run_study both hold it
            assert _taken(folder)
        assert _taken(folder)  # the outer hold still has it
        who = json.loads((folder / LOCK_NAME).read_text())
        assert who["pid"] == os.getpid() and who["host"] and who["started"]
        assert str(os.getpid()) in os.environ[OWNERS_ENV].split(",")
    assert not _taken(folder)


def test_another_holder_is_refused_with_a_sentence_but_a_parent_holder_is_not(tmp_path,
                                                                              monkeypatch):
    """A lock taken through another open file (as another process's would be):
    hold refuses, naming the pid, command and start it wrote, and holds none of
    the folders it was given; the same holder listed among this process's
    owners (a report whose notebook kernel this is) lets it write."""
    free, busy = tmp_path / "free", tmp_path / "busy"
    busy.mkdir()
    other = open(busy / LOCK_NAME, "a+")
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    other.write(json.dumps({"pid": 4242, "command": "fwcompare run training",
                            "started": "2026-12-08 02:00:00 UTC", "host": "elsewhere"}))
    other.flush()
    try:
        monkeypatch.setenv(OWNERS_ENV, "1")
        with pytest.raises(FolderInUse) as err:
            with hold(free, busy):
                pass
        said = str(err.value)
        assert said.startswith(f"{busy.resolve()} is in use by another fwcompare process")
        for part in ("pid 4242 on elsewhere", "`fwcompare run training`",
                     "since 2026-12-08 02:00:00 UTC", "--out"):
            assert part in said, said
        assert not _taken(free) and not folder_lock._held  # the first one given, let go
        monkeypatch.setenv(OWNERS_ENV, "1,4242")
        with hold(busy):  # written for its parent: nothing more to hold
            assert not folder_lock._held
    finally:
        other.close()
    with hold(busy):  # once the holder is gone, it is this process's
        assert json.loads((busy / LOCK_NAME).read_text())["pid"] == os.getpid()


def _holder(folder):
    """Another process holding ``folder`` until it is killed."""
    code = ("import sys, time; from fwcompare.core.folder_lock import hold\n"
            f"with hold({str(folder)!r}):\n    print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow  # a holder process, and a command's
def test_a_run_and_a_report_into_a_folder_in_use_stop_before_measuring(tmp_path):
    from fwcompare.suite import report

    study = tmp_path / "smoke" / "inference_sweep"
    holder = _holder(study)
    try:
        p = subprocess.run([sys.executable, "-m", "fwcompare", "run", "inference_sweep",
                            "--profile", "smoke", "--out", str(study)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == cli.BAD_INPUT, p.stderr
        assert f"is in use by another fwcompare process: pid {holder.pid}," in p.stderr
        assert "`python -c " in p.stderr  # the holder's command line
        with pytest.raises(FolderInUse, match=f"pid {holder.pid}"):
            report.build("smoke", out_root=tmp_path, studies=["training", "inference_sweep"],
                         progress=False)
        assert not (study / "results").exists()  # nothing measured, nothing written
        assert not (tmp_path / "smoke" / "training" / "results").exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # a run's command, killed, then a run of its own
def test_a_killed_run_leaves_its_folder_to_the_next_which_resumes_it(tmp_path):
    """``kill -9`` of a run after its first cell: its fork server and worker
    end, the folder is free, and the next run keeps the finished cell and
    measures only the other."""
    params = {"models": ["tiny-bert"], "frameworks": ["torch"], "modes": {"torch": ["eager"]},
              "batch_sizes": [1], "seq_lens": [8, 16], "group_timeout_s": 120.0,
              **SMOKE_TIMING, "min_time_s": 2.0, "max_time_s": 2.0}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "fwcompare", "-q", "run", "inference_sweep",
                             "--params", str(tmp_path / "p.yaml"), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cells = out / "results" / "cells"
    try:
        end = time.monotonic() + 180
        while not list(cells.glob("*.parquet")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < end, "no cell finished"
            time.sleep(0.05)
        started = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    (first,) = cells.glob("*.parquet")  # the other cell was still sampling
    kept = first.stat().st_mtime_ns
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, alive  # its fork server ended, and took its worker with it
    res = run_study("inference_sweep", params, output_dir=out, progress=False)
    assert len(res.results) == 2 and set(res.results["status"]) == {"ok"}
    assert first.stat().st_mtime_ns == kept  # not measured again
