"""Damaged files a user meets: a result file cut short or empty, a bad
``env.json``, a bad scorecard, an export stopped halfway. Each is met with a
sentence naming the file and what to do, or set aside and measured again,
and never costs the other cells."""
import os
import tarfile
import zipfile

import pandas as pd
import pytest

from fwcompare.suite import claims, report
from fwcompare.commands import cli
from fwcompare.results import archive as export
from fwcompare.core.atomic import UnreadableFile
from fwcompare.results.store import (UNREADABLE, ResultStore, UnreadableResult, load_results,
                                     make_row)
from fwcompare.core.spec import RunSpec
from test_publish import make_run


def spec(batch):
    return RunSpec(study="inference_sweep", model="tiny-bert", framework="torch", mode="eager",
                   device="cpu", dtype="float32", batch_size=batch, seq_len=8, threads=2)


def three_cells(directory):
    store = ResultStore(directory, run_id="r1")
    for b in (1, 2, 4):
        store.append(make_row(spec(b), status="ok", figures={"median_s": 0.01 * b},
                              run_id="r1"), [0.01 * b] * 3)
    return store


def cut(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep if keep >= 0 else len(data) // 2])


def test_an_empty_and_a_cut_cell_file_are_set_aside_and_the_others_kept(tmp_path):
    store = three_cells(tmp_path / "results")
    empty, half = (store.cells_dir / f"{spec(b).cell_id}-r0.parquet" for b in (1, 2))
    cut(empty, 0)
    cut(half, -1)
    with pytest.warns(UnreadableResult) as said:
        df = store.load()
    assert list(df["batch_size"]) == [4]  # the good cell, whole
    lines = sorted(str(w.message) for w in said)
    assert len(lines) == 2 and all("\n" not in m for m in lines), lines
    for f in (empty, half):
        msg = next(m for m in lines if m.startswith(str(f)))
        assert "measures the cell again" in msg and "--fresh" in msg, msg
        # set aside, with its samples: a resumed run measures the cell again
        assert not f.exists() and f.with_name(f.name + UNREADABLE).is_file()
        assert not (store.samples_dir / f.name).exists()
    assert store.finished() == {(spec(4).cell_id, 0)}
    samples = store.load_samples()
    assert set(samples["cell_id"]) == {spec(4).cell_id}


def test_a_cut_samples_file_sets_its_row_aside_too(tmp_path):
    store = three_cells(tmp_path / "results")
    name = f"{spec(2).cell_id}-r0.parquet"
    cut(store.samples_dir / name, 10)
    with pytest.warns(UnreadableResult, match=name):
        samples = store.load_samples()
    assert spec(2).cell_id not in set(samples["cell_id"])
    assert spec(2).cell_id not in {c for c, _ in store.finished()}  # measured again
    res = load_results(tmp_path)
    assert len(res.results) == 2 and len(res.samples) == 6


def test_a_bad_env_json_is_named_with_what_to_do(tmp_path, capsys):
    store = three_cells(tmp_path / "a" / "results")
    for bad in ("", '{"cpu_model": "C"', "[1, 2]"):
        (store.dir / "env.json").write_text(bad)
        with pytest.raises(UnreadableFile) as err:
            load_results(tmp_path / "a")
        msg = str(err.value)
        assert msg.startswith(str(store.dir / "env.json")) and "--fresh" in msg, msg
        assert "\n" not in msg
    # the command line says it in one line, exit 2, no traceback
    three_cells(tmp_path / "b" / "results")
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "env.json: not a readable environment manifest" in err, err


def test_a_bad_scorecard_is_named_and_judged_anew(tmp_path):
    make_run(tmp_path / "quick")
    card = tmp_path / "quick" / "summary" / "scorecard.json"
    for bad in ('{"claims": [', '{"verdicts": {}}', "\x00\x01"):
        card.write_text(bad)
        with pytest.raises(UnreadableFile, match="fwcompare report` again") as err:
            claims.read(card.parent)
        assert str(err.value).startswith(str(card)) and "\n" not in str(err.value)
        assert not report._readable_scorecard(card.parent)  # the report runs it again
        # the index is still written, and says what is wrong where the scorecard goes
        page = report.write_index("quick", tmp_path / "quick").read_text()
        assert "not a readable scorecard" in page
    card.write_text('{"claims": []}')
    assert report._readable_scorecard(card.parent)


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_an_export_stopped_halfway_leaves_no_archive_and_no_temporary_file(
        tmp_path, monkeypatch, suffix):
    make_run(tmp_path / "quick")
    target = tmp_path / "out" / f"quick{suffix}"
    written = []

    def stop_after_two(write):
        def wrapped(self, *args, **kwargs):
            written.append(args[0])
            if len(written) > 2:
                raise KeyboardInterrupt  # Ctrl-C while it writes
            return write(self, *args, **kwargs)
        return wrapped
    if suffix == ".zip":
        monkeypatch.setattr(zipfile.ZipFile, "writestr", stop_after_two(zipfile.ZipFile.writestr))
    else:
        monkeypatch.setattr(tarfile.TarFile, "addfile", stop_after_two(tarfile.TarFile.addfile))
    with pytest.raises(KeyboardInterrupt):
        export.export(tmp_path / "quick", target)
    assert len(written) == 3
    assert os.listdir(target.parent) == []  # neither the archive nor its temporary file
    # an earlier archive of that name is left as it was
    target.write_bytes(b"earlier")
    written.clear()
    with pytest.raises(KeyboardInterrupt):
        export.export(tmp_path / "quick", target)
    assert os.listdir(target.parent) == [target.name] and target.read_bytes() == b"earlier"


def test_a_consolidated_copy_cut_short_is_made_again(tmp_path):
    store = three_cells(tmp_path / "study" / "results")
    store.consolidate()
    cut(store.dir / "results.parquet", 0)
    assert report._measures_again(tmp_path / "study")  # its notebook consolidates anew
    assert report.host_line(tmp_path, ["study"]).endswith("not measured")
    store.consolidate()
    assert len(pd.read_parquet(store.dir / "results.parquet")) == 3
    assert report._measures_again(tmp_path / "study") is False
