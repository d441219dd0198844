"""What else the machine did while cells were timed (fwcompare.core.machine_load), measured
on this machine with a process that keeps one core busy."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from fwcompare.core.machine_load import HostMeter


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


@pytest.mark.slow  # it starts a process
@pytest.mark.serial  # a second test process would be work on the other core
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell apart")
def test_work_on_a_core_the_run_cannot_use_is_not_counted(burner):
    """A meter of one core and a meter of two, over the same window, with the
    busy process pinned to the second core: the first sees none of its work,
    the second all of it (as a run under ``taskset`` meters the cores it has)."""
    mine, other = sorted(os.sched_getaffinity(0))[:2]
    spinner = psutil.Process(burner.pid).children()[0]
    spinner.cpu_affinity([other])
    time.sleep(0.2)  # moved
    one, both = HostMeter([mine]), HostMeter([mine, other])
    before, t0 = cpu_of_tree(burner.pid), time.monotonic()
    one.start()
    both.start()
    time.sleep(1.5)
    got_both, got_one = both.stop(), one.stop()
    burned, wall = cpu_of_tree(burner.pid) - before, time.monotonic() - t0
    assert burned > 0.5 * wall, burned  # it spun on its own core most of the window
    # the two cores' counters differ by the spinner's time, a few 10 ms ticks of slack
    assert 2 * got_both["host_other_cpu"] - got_one["host_other_cpu"] == pytest.approx(
        burned / wall, abs=0.08), (got_one, got_both, burned / wall)
    assert one.cores == 1 and both.cores == 2
