"""A study notebook that fails keeps its partial output, shows in the index, and the
report says so with a non-zero exit instead of stopping silently."""
import nbformat
import pytest
from conftest import running

from fwcompare.suite import report


@pytest.mark.report
def test_failed_study_is_reported_not_lost(tmp_path, monkeypatch):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile = 'x'\noutput_dir = ''",
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError('boom in the study')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, nbdir / "inference_sweep.ipynb")
    monkeypatch.setattr(report, "NOTEBOOKS", nbdir)
    monkeypatch.setattr(report, "run_studies",  # the notebook alone fails here
                        lambda runs, **kw: (dict.fromkeys(runs, 0.0), {}))
    with pytest.raises(report.ReportError, match="boom in the study"):
        report.build("smoke", out_root=tmp_path / "out", studies=["inference_sweep"])
    out = tmp_path / "out" / "smoke"
    failed = out / "inference_sweep" / "inference_sweep.failed.ipynb"
    assert failed.is_file() and "boom in the study" in failed.read_text()
    index = (out / "index.html").read_text()
    assert "This study failed" in index and "inference_sweep.failed.ipynb" in index
    assert not (out / "inference_sweep" / ".inputs").exists()  # will run again next time


@pytest.mark.report
def test_an_interrupted_report_stops_its_notebooks_and_their_kernels(tmp_path):
    """The notebooks run side by side in processes of their own; Ctrl-C in the
    report (SIGINT to its process alone) ends them and their kernels."""
    import os
    import signal
    import subprocess
    import sys
    import time

    if report.notebook_jobs() < 2:
        pytest.skip("one core: the notebooks run one at a time")
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    for name in ("a", "b"):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("profile = 'x'\noutput_dir = ''",
                                              metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(
                        f"import os, time\nopen({str(tmp_path / name)!r} + '.pid', 'w')"
                        f".write(str(os.getpid()))\ntime.sleep(300)")]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, nbdir / f"{name}.ipynb")
    (tmp_path / "p.yaml").write_text("{}\n")
    script = (
        "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from pathlib import Path\nfrom fwcompare.suite import report\n"
        f"t = Path({str(tmp_path)!r})\n"
        "report.run_notebooks([report.NotebookJob(n, 'x', t / n, 'digest', {}, "
        "str(t / 'notebooks' / (n + '.ipynb')), t / 'p.yaml') for n in 'ab'], {})\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=report.ROOT,
                            start_new_session=True)  # the SIGINT below reaches it alone
    try:
        end = time.monotonic() + 120
        pids = [tmp_path / f"{n}.pid" for n in "ab"]
        while not all(p.is_file() and p.read_text() for p in pids):
            assert proc.poll() is None and time.monotonic() < end, "the notebooks did not start"
            time.sleep(0.2)
        kernels = [int(p.read_text()) for p in pids]
        assert all(running(k) for k in kernels)  # both at once
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) != 0
        end = time.monotonic() + 15
        while any(running(k) for k in kernels) and time.monotonic() < end:
            time.sleep(0.2)
        assert not any(running(k) for k in kernels), "a kernel outlived the report"
        for n in "ab":  # papermill kept each partial notebook; none was stamped done
            assert (tmp_path / n / f"{n}.failed.ipynb").is_file()
            assert not (tmp_path / n / ".inputs").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.report
def test_the_time_breakdown_keeps_the_measurements_over_a_notebooks_retry(tmp_path,
                                                                           monkeypatch):
    """A study's notebook that measures a failed cell again writes its own run's
    time breakdown over the measurement's: the report's breakdown is the
    measurement's (it once counted a distributed study's launches as "study,
    other" so)."""
    import json

    import pandas as pd

    from fwcompare.core.atomic import write_json
    from fwcompare.results.store import BREAKDOWN

    out = tmp_path / "out" / "smoke"
    stored = out / "inference_sweep" / "results" / BREAKDOWN.format(task="inference")
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile = 'x'\noutput_dir = ''",
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(  # the retry's run: one cell, 2 s
                    f"import json\nopen({str(stored)!r}, 'w').write(json.dumps("
                    "{'timing samples': 1.0, 'total': 2.0}))")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, nbdir / "inference_sweep.ipynb")
    monkeypatch.setattr(report, "NOTEBOOKS", nbdir)

    def measure(runs, **kw):
        write_json(stored, {"timing samples": 80.0, "total": 100.0})
        return {"inference_sweep": 100.0}, {}
    monkeypatch.setattr(report, "run_studies", measure)
    with pytest.raises(report.ReportError):  # the scorecard's notebook is not in nbdir
        report.build("smoke", out_root=tmp_path / "out", studies=["inference_sweep"])
    assert json.loads(stored.read_text())["total"] == 2.0  # the notebook wrote over it
    phases = pd.read_csv(out / "time_breakdown.csv").set_index("phase")["seconds"]
    assert phases["timing samples"] == 80.0
    assert phases["runner, other (process exits, scheduling)"] == 20.0
    assert phases["study, other (params, plan, loading results)"] == 0.0


@pytest.mark.report
def test_the_time_breakdown_leaves_out_an_earlier_reports_measuring(tmp_path, monkeypatch):
    """A report whose cells were all measured before (no --fresh, params
    unchanged) measures nothing: the breakdowns stored by the earlier report
    are not this report's time (its phases once came to 346% of a 1:53 report)."""
    import pandas as pd

    from fwcompare.core.atomic import write_json
    from fwcompare.results.store import BREAKDOWN

    out = tmp_path / "out" / "smoke"
    results = out / "inference_sweep" / "results"
    write_json(results / BREAKDOWN.format(task="inference"),  # the earlier report's
               {"timing samples": 80.0, "total": 100.0})
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile = 'x'\noutput_dir = ''",
                                          metadata={"tags": ["parameters"]})]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, nbdir / "inference_sweep.ipynb")
    monkeypatch.setattr(report, "NOTEBOOKS", nbdir)

    def measure(runs, **kw):  # this report's: one task measured again, one with nothing left
        write_json(results / BREAKDOWN.format(task="train"),
                   {"timing samples": 3.0, "total": 4.0})
        return {"inference_sweep": 5.0}, {}
    monkeypatch.setattr(report, "run_studies", measure)
    with pytest.raises(report.ReportError):  # the scorecard's notebook is not in nbdir
        report.build("smoke", out_root=tmp_path / "out", studies=["inference_sweep"])
    phases = pd.read_csv(out / "time_breakdown.csv").set_index("phase")
    assert phases.loc["timing samples", "seconds"] == 3.0
    assert phases.loc["runner, other (process exits, scheduling)", "seconds"] == 1.0
    assert phases.loc["study, other (params, plan, loading results)", "seconds"] == 1.0


def test_report_times_round_before_they_split_into_minutes():
    # a quick report printed "distributed 4:60.0" for 299.96 s
    assert report._mmss(299.96) == "5:00.0"
    assert report._mmss(59.96) == "1:00.0"
    assert report._mmss(59.94) == "59.9 s"
    assert report._mmss(1656.1) == "27:36.1"


@pytest.mark.report
def test_notebook_processes_take_job_after_job_and_one_that_dies_loses_its_own(tmp_path):
    """The notebooks run in a few processes that each take job after job (their
    imports once: about 3 s a notebook before); a process that dies loses only
    the notebook it ran, and a fresh one takes the rest."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    names = [f"n{i}" for i in range(report.notebook_jobs() + 2)]  # more than the processes
    for name in names:
        nb = nbformat.v4.new_notebook()
        body = ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)" if name == "n0" else
                f"import os\nopen({str(tmp_path / name)!r} + '.ppid', 'w')"
                ".write(str(os.getppid()))")
        nb.cells = [nbformat.v4.new_code_cell("profile = 'x'\noutput_dir = ''",
                                              metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(body)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, nbdir / f"{name}.ipynb")
    (tmp_path / "p.yaml").write_text("{}\n")
    failures = {}
    took = report.run_notebooks(
        [report.NotebookJob(n, "x", tmp_path / n, "digest", {},
                            str(nbdir / f"{n}.ipynb"), tmp_path / "p.yaml") for n in names],
        failures, progress=False)
    rest = names[1:]
    assert set(took) == set(rest) and list(failures) == ["n0"], failures
    assert "the notebook's process ended with code -9" in failures["n0"]
    assert not (tmp_path / "n0" / ".inputs").exists()
    for n in rest:
        assert (tmp_path / n / ".inputs").read_text() == "digest"
        assert (tmp_path / n / f"{n}.html").is_file()
    # a kernel's parent is its notebook process: the rest ran in the processes left
    # and the one that replaced the dead one, fewer than the notebooks
    parents = {(tmp_path / f"{n}.ppid").read_text() for n in rest}
    assert len(parents) < len(rest), parents
    assert not any(running(int(p)) for p in parents), "a notebook process outlived its jobs"


def test_a_page_nbconvert_cannot_render_says_why_in_one_line(tmp_path, monkeypatch):
    """nbconvert without its templates (a `pip install --target` of it leaves them
    outside the Jupyter path; on the H200 of 2026-11-30 every study "FAILED
    (ValueError: <tab>/usr/share/jupyter)": the last line of its message)."""
    import functools

    import nbconvert

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1")]
    nbformat.write(nb, tmp_path / "study.ipynb")
    monkeypatch.setattr(nbconvert, "HTMLExporter", functools.partial(
        nbconvert.HTMLExporter, template_name="no-such-template"))
    with pytest.raises(RuntimeError) as err:
        report._render_html(tmp_path / "study.ipynb", tmp_path / "study.html")
    why = str(err.value)
    assert "\n" not in why and why.startswith("study.ipynb ran, but nbconvert could not render"), why
    assert "No template sub-directory with name 'no-such-template'" in why, why
    assert not (tmp_path / "study.html").exists()
