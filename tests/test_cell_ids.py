"""Cell ids are the resume keys of every stored result: a change to the code
must not change them. tests/data/cell_ids.json holds the ids every params file
gave before the redesign of issue 47 (tools/behaviour_snapshot.py made it). A params
file that drops cells drops their ids there; the others must stay as they were
(2026-11-28: generation's quick profile without torch static-compile; 2026-11-29:
distributed's quick profile without its 1-worker launches, memory's gpu profile without
TensorFlow's checkpointing). A cell's threads are part of its id, and ``threads: 0``
means the cores the run may use: the ids were stored on 2 cores, so the test counts 2
(a test process of ``make test`` is pinned to one)."""
import json
from pathlib import Path

import pytest

from fwcompare.core import env
from fwcompare.suite import params
from fwcompare.studies import STUDIES

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "tests" / "data" / "cell_ids.json").read_text())


def test_every_params_file_is_stored():
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "params").glob("*/*.yaml")
                   if p.parent.name in STUDIES)
    assert files == sorted(STORED)


@pytest.mark.parametrize("path", sorted(STORED))
def test_cell_ids_unchanged(path, monkeypatch):
    monkeypatch.setattr(env, "default_threads", lambda: 2)
    file = ROOT / path
    study = STUDIES[file.parent.name]
    ids = [c.cell_id for c in study.cells(params.load_file(file, study.name))]
    assert len(ids) == len(STORED[path])
    assert ids == STORED[path]


def test_the_tool_stores_a_new_params_files_ids_as_this_test_reads_them(monkeypatch):
    """tools/cell_ids.py (what a new study runs once) adds only the files not
    stored, with the ids this test would compare."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    monkeypatch.setattr(env, "default_threads", env.default_threads)  # the tool sets it: undone after
    import cell_ids

    assert cell_ids.new_ids("inference_sweep", STORED) == {}
    key = "params/inference_sweep/quick.yaml"
    fewer = {k: v for k, v in STORED.items() if k != key}
    assert cell_ids.new_ids("inference_sweep", fewer) == {key: STORED[key]}
