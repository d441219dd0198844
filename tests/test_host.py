"""What else the machine did while cells were timed (fwcompare.host), measured
on this machine with a process that keeps one core busy."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from fwcompare.host import HostMeter


@pytest.fixture
def burner():
    """A process whose child spins one core until killed: the run's own
    processes are the ones it names and their descendants (a launch's ranks
    under its launcher)."""
    spin = "while True: pass"
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.Popen("
                          f"[sys.executable, '-c', {spin!r}]).wait()"], start_new_session=True)
    while not psutil.Process(p.pid).children():
        time.sleep(0.05)
    time.sleep(0.3)  # started and spinning
    yield p
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def cpu_of_tree(pid) -> float:
    proc = psutil.Process(pid)
    return sum(sum(q.cpu_times()[:2]) for q in [proc, *proc.children(recursive=True)])


@pytest.mark.slow  # it starts a process
def test_a_busy_process_outside_the_run_is_other_work_and_inside_it_is_not(burner):
    """Two meters over the same window, one counting the busy process (and so
    its spinning child) as the run's own: what sets them apart is that tree's
    CPU time, whatever else the machine does meanwhile (no figure depends on an
    idle machine)."""
    outside, inside = HostMeter(), HostMeter()
    before, t0 = cpu_of_tree(burner.pid), time.monotonic()
    outside.start()
    inside.start([burner.pid])
    time.sleep(1.5)
    got_in = inside.stop([burner.pid])
    got_out = outside.stop()
    burned, wall = cpu_of_tree(burner.pid) - before, time.monotonic() - t0
    assert burned > 0.1, burned  # it ran: the window has something to tell apart
    share = burned / (wall * outside.cores)
    # the counters tick every 10 ms on each core: a few ticks of slack
    assert got_out["host_other_cpu"] - got_in["host_other_cpu"] == pytest.approx(
        share, abs=0.04), (got_out, got_in, share)
    assert 0.0 <= got_out["host_steal"] <= 1.0 and 0.0 <= got_in["host_steal"] <= 1.0


def test_a_meter_never_started_gives_no_figure():
    figures = HostMeter().stop()
    assert set(figures) == {"host_other_cpu", "host_steal"}
    assert all(v != v for v in figures.values())  # NaN
