"""A study notebook that fails keeps its partial output, shows in the index, and the
report says so with a non-zero exit instead of stopping silently."""
import nbformat
import pytest

from fwcompare import report


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
    with pytest.raises(report.ReportError, match="boom in the study"):
        report.build("smoke", out_root=tmp_path / "out", studies=["inference_sweep"])
    out = tmp_path / "out" / "smoke"
    failed = out / "inference_sweep" / "inference_sweep.failed.ipynb"
    assert failed.is_file() and "boom in the study" in failed.read_text()
    index = (out / "index.html").read_text()
    assert "This study failed" in index and "inference_sweep.failed.ipynb" in index
    assert not (out / "inference_sweep" / ".inputs").exists()  # will run again next time
