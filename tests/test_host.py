"""What else the machine did while cells were timed (fwcompare.host), measured
on this machine with a process that keeps one core busy."""
import subprocess
import sys
import time

import pytest

from fwcompare.host import HostMeter


@pytest.fixture
def burner():
    """A process spinning one core until killed."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)  # started and spinning
    yield p
    p.kill()
    p.wait()


def test_a_busy_process_outside_the_run_is_other_work_and_inside_it_is_not(burner):
    meter = HostMeter()
    meter.start()
    time.sleep(1.5)
    outside = meter.stop()
    # One core of the machine's cores spinning: 1 / cores of its capacity.
    assert outside["host_other_cpu"] >= 0.6 / meter.cores, outside
    assert 0.0 <= outside["host_steal"] <= 1.0
    meter.start([burner.pid])
    time.sleep(1.5)
    inside = meter.stop([burner.pid])
    assert inside["host_other_cpu"] < 0.25 / meter.cores, inside


def test_a_meter_never_started_gives_no_figure():
    figures = HostMeter().stop()
    assert set(figures) == {"host_other_cpu", "host_steal"}
    assert all(v != v for v in figures.values())  # NaN
