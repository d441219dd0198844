"""A framework this machine lacks (issue 49: the GPU machines' image has no
TensorFlow): the doctor and the report say so once, its cells are
``unsupported`` with that reason, and the other frameworks run. TensorFlow's
modules are hidden from ``importlib.util.find_spec`` here (a fake missing
module): nothing is uninstalled, and a worker never sees the fake."""
import importlib.util

import pytest

from fwcompare import doctor, frameworks, report, run_study

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
    res = run_study("inference_sweep", p, output_dir=tmp_path, progress=False)
    df = res.results.set_index("framework")
    assert df.loc["torch", "status"] == "ok" and df.loc["torch", "median_s"] > 0
    assert df.loc["tensorflow", "status"] == "unsupported"
    assert df.loc["tensorflow", "error"] == REASON


def test_a_framework_this_process_does_not_know_is_not_called_missing():
    """A framework declared outside fwcompare is unknown to a process that did
    not import its file (a shard job's parent): its workers load it, so it is
    not "not installed" (a shard job failed on this: issue 49's first merge)."""
    assert frameworks.not_installed("numpy_toy_declared_elsewhere") == ""
