"""benchmarks/budget.py: the quick report's time as a ratio to a baseline
commit's, back to back on one machine, read from the reports' own logs."""
import subprocess
import sys

import pytest

from conftest import benchmark, running

from fwcompare.core.paths import ROOT

# The two forms of the report's last lines (debf5ae's, then today's).
OLD = """[8/8] memory: measuring (profile quick, round 3 of 3)
times: inference_sweep 1:22.0, training 2:05.8, memory 6:46.3, notebooks 1:04.0 (8, 2 at \
a time), scorecard 26.5 s; report 28:47.3
other work while cells were sampled (...): inference_sweep 0%, training 3%, memory 1%
"""
NEW = """memory: extra round 1 of 4 cells for checkpointing-costs-20pct-time
memory: extra round 1 took 31.5 s (148 s left)
deployment: extra round 1 for onnxruntime-fusions-speedup not started: it would take about \
4 s and 0 s are left of the report's time budget
times: inference_sweep 1:03.7, training 1:19.5, memory 4:12.5, end_to_end 3:48.9, \
notebooks and scorecard 1:08.2 (9 and the scorecard's, 2 at a time; the scorecard 32.0 s); \
report 23:33.2
other work while cells were sampled (...): inference_sweep 0%, training 0%, memory 2%
"""


def _parse(text):
    return benchmark("budget").parse_log(text)


def test_a_reports_log_gives_its_parts_extra_rounds_and_total():
    old, new = _parse(OLD), _parse(NEW)
    assert old["report_s"] == 28 * 60 + 47.3
    assert old["parts"] == {"inference_sweep": 82.0, "training": 125.8, "memory": 406.3,
                            "notebooks": 64.0, "scorecard": 26.5}
    assert old["other_work"] == 0.03 and old["extra_rounds"] == 0
    # the scorecard's 32.0 s inside the notebooks' parentheses is not a part of its own
    assert new["parts"] == {"inference_sweep": 63.7, "training": 79.5, "memory": 252.5,
                            "end_to_end": 228.9, "notebooks and scorecard": 68.2}
    assert new["report_s"] == 23 * 60 + 33.2
    assert (new["extra_rounds"], new["extra_s"], new["extra_skipped"]) == (1, 31.5, 1)
    # a report whose budget was spent before any claim was judged for a round
    spent = _parse("extra rounds: none started: the report's time budget was spent while it "
                   "measured\n" + OLD)
    assert (spent["extra_rounds"], spent["extra_skipped"]) == (0, 1)


def test_an_unfinished_report_is_refused():
    import pytest

    with pytest.raises(ValueError, match="did not finish"):
        _parse(OLD.split("times:")[0])


@pytest.mark.slow
def test_the_pairs_ratio_and_what_it_makes_of_the_reference(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(OLD)
    b.write_text(NEW)
    r = subprocess.run([sys.executable, "benchmarks/budget.py", "--logs", str(a), str(b),
                        "--reference", "20:00"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    ratio = (23 * 60 + 33.2) / (28 * 60 + 47.3)  # 0.818
    assert f"| 1 | {ratio:.3f} | {(23 * 60 + 33.2 - 31.5) / (28 * 60 + 47.3):.3f} |" in r.stdout
    assert "| memory | 6:46.3 | 4:12.5 | 0.621 |" in r.stdout
    assert "in the candidate only: end_to_end 3:48.9, notebooks and scorecard 1:08.2" in r.stdout
    assert "makes the candidate's 16:21.8 (1 pair(s); without its extra rounds 15:59.9)" \
        in r.stdout  # 0.818 and 0.800 of 20:00


@pytest.mark.slow
def test_ctrl_c_ends_the_running_report_and_its_workers(tmp_path):
    """The benchmark runs each report in a session of its own (Ctrl-C in the
    terminal does not reach it); stopped, it ends that session: the report
    (here a stand-in for ``python -m fwcompare``) and the workers it started."""
    import os
    import signal
    import time

    fake = tmp_path / "tree" / "fwcompare"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(tmp_path / 'worker.pid')!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n")
    script = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
              "import budget\nfrom pathlib import Path\n"
              f"t = Path({str(tmp_path)!r})\n"
              "budget.run_report(t / 'tree', 'quick', t / 'out', t / 'report.log')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    pid_file = tmp_path / "worker.pid"
    try:
        end = time.monotonic() + 60
        while not (pid_file.is_file() and pid_file.read_text()):
            assert proc.poll() is None and time.monotonic() < end, "the report did not start"
            time.sleep(0.1)
        worker = int(pid_file.read_text())
        assert running(worker)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=90) != 0
        end = time.monotonic() + 15
        while running(worker) and time.monotonic() < end:
            time.sleep(0.1)
        assert not running(worker), "the report's worker outlived the benchmark"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
