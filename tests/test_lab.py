"""A notebook run by hand in JupyterLab (nothing injected) never writes into a
report's results, and papermill runs this environment's own kernel."""
import ast
import json
import os
import sys

import pytest

import fwcompare
from fwcompare.suite import claims, params, report
from fwcompare.core.paths import NOTEBOOKS
from fwcompare.studies import STUDIES


def parameters_source(nb: dict) -> str:
    return "".join(next(c["source"] for c in nb["cells"]
                        if "parameters" in c["metadata"].get("tags", [])))


@pytest.mark.parametrize("study", list(STUDIES))
def test_a_study_notebook_run_by_hand_writes_to_the_lab_folder(study):
    nb = json.loads((NOTEBOOKS / STUDIES[study].notebook).read_text())
    ns: dict = {}
    exec(compile(ast.parse(parameters_source(nb)), study, "exec"), ns)  # noqa: S102
    out = fwcompare.study_dir(study, ns["profile"], ns["output_dir"] or None)
    assert out.parent.name == fwcompare.LAB and out.name == study
    assert ns["profile"] not in ("smoke", "quick", "full")
    assert nb["metadata"]["kernelspec"]["name"] == report.KERNEL


def test_the_kernel_is_this_environment():
    from jupyter_client.kernelspec import KernelSpecManager

    assert report.ensure_kernel() == report.KERNEL
    spec = KernelSpecManager().get_kernel_spec(report.KERNEL)
    assert spec.argv[0] == sys.executable


def snapshot(root):
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_run_all_in_lab_leaves_the_report_untouched(tmp_path, monkeypatch):
    """The scorecard notebook executed as JupyterLab's Run All does (nbclient,
    the notebook's own kernel, no parameters injected) over a report's
    folder: every file of the report stays as it was, byte for byte, and the
    notebook's scorecard lands in outputs/lab/summary."""
    import nbformat
    from nbclient import NotebookClient

    from fwcompare.results.store import ResultStore, make_row
    from fwcompare.core.spec import RunSpec

    outputs = tmp_path / "outputs"
    quick = outputs / "quick"
    store = ResultStore(quick / "inference_sweep" / "results", run_id="r")
    s = RunSpec(study="inference_sweep", model="bert-base-cased", framework="torch",
                mode="eager", device="cpu", dtype="float32", batch_size=1, seq_len=32, threads=2)
    store.append(make_row(s, status="ok", run_id="r"), [0.01] * 6)
    store.begin("hash-of-the-report")
    (quick / "inference_sweep" / ".inputs").write_text("stamp")
    (quick / "summary").mkdir(parents=True)
    (quick / "summary" / "scorecard.json").write_text("{}")
    (quick / "summary" / ".inputs").write_text("stamp")
    before = snapshot(quick)
    monkeypatch.setenv("FWCOMPARE_OUTPUTS", str(outputs))
    report.ensure_kernel()
    nb = nbformat.read(NOTEBOOKS / report.SUMMARY_NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert snapshot(quick) == before
    card = json.loads((outputs / fwcompare.LAB / "summary" / "scorecard.json").read_text())
    assert len(card["claims"]) == len(claims.load_claims())
    assert set(os.listdir(outputs)) == {"quick", fwcompare.LAB}


def test_parameters_cell_names_the_lab_folder():
    assert params.RUNTIME_KEYS["profile"] == fwcompare.LAB
    assert f"outputs/lab/{'training'}" in params.parameters_cell("training")
