"""Cell axes are a study's own: a study declares them (``Study.axes``), the
registry hands them to the spec and the results store, and nothing below the
studies names one. A toy study declares an axis from this file alone; the
built-in ones read as they did when the spec named them."""
import json
from pathlib import Path

import pandas as pd
import pytest

from fwcompare.results import store as results, tables
from fwcompare.core import spec as spec_module
from fwcompare import studies
from fwcompare.results.store import ResultStore, make_row
from fwcompare.core.spec import Axis, RunSpec, shape_text
from fwcompare.execution.study import Study


def cell(study="toy_axes", framework="torch", **more):
    return RunSpec(study=study, model="m", framework=framework, mode="eager", device="cpu",
                   dtype="float32", batch_size=2, seq_len=8, threads=1, **more)


class ToyAxes(Study):
    name = "toy_axes"
    axes = (Axis("repeats", 1, label=" x{repeats} repeated"),
            Axis("pad_to", 0, shape=True, label=" pad={pad_to}", short="~{pad_to}"))


@pytest.fixture
def toy():
    study = studies.register(ToyAxes())
    yield study
    studies.unregister(study.name)


def test_a_studys_axis_is_registered_and_unregistered_with_it(toy):
    assert {"repeats", "pad_to"} <= {a.name for a in spec_module.axes()}
    assert "repeats" in results.COLUMNS and results.DTYPES["repeats"] == "int64"
    studies.unregister(toy.name)
    assert "repeats" not in {a.name for a in spec_module.axes()}
    assert "repeats" not in results.COLUMNS
    with pytest.raises(ValueError, match=r"\['repeats'\] are declared by no registered study"):
        cell(axes={"repeats": 3})
    studies.register(toy)


def test_an_axis_at_its_default_leaves_the_cell_id_as_it_was(toy):
    plain = cell()
    assert cell(axes={"repeats": 1, "pad_to": 0}) == plain
    assert cell(axes={"repeats": 1}).cell_id == plain.cell_id
    shared = {f: getattr(plain, f) for f in results.SPEC_SHARED}
    assert plain.cell_id == _sha(shared)  # the id of the spec before the axis existed
    three = cell(axes={"repeats": 3})
    assert three.cell_id == _sha({**shared, "repeats": 3}) != plain.cell_id
    assert (three.repeats, three.pad_to, plain.repeats) == (3, 0, 1)


def _sha(d: dict) -> str:
    import hashlib

    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def test_an_axis_reads_in_labels_shapes_rows_and_tables(toy, tmp_path):
    a = cell(axes={"repeats": 3, "pad_to": 16})
    assert a.label == "m torch/eager x3 repeated b=2 s=8 pad=16"
    assert a.shape[:2] == (2, 8)
    assert dict(zip((x.name for x in spec_module.axes(True)), a.shape[2:]))["pad_to"] == 16
    assert shape_text(a.shape).endswith("~16") and shape_text(cell().shape) == "2x8"
    assert RunSpec.from_dict(a.to_dict()) == a
    assert a.to_dict()["repeats"] == 3 and cell().to_dict()["repeats"] == 1
    store = ResultStore(tmp_path)
    for s, median in ((cell(), 0.01), (a, 0.02)):
        store.append(make_row(s, status="ok", figures={"median_s": median, "n_samples": 3},
                              run_id="r"), [median] * 3)
    df = store.load()
    assert df["repeats"].dtype == "int64" and sorted(df["repeats"]) == [1, 3]
    assert {RunSpec.from_dict(r).cell_id for r in df.to_dict("records")} == \
        {cell().cell_id, a.cell_id}
    # a store from before the axis: read with its default
    old = tables.with_axes(df.drop(columns=["repeats", "pad_to"]))
    assert list(old["repeats"]) == [1, 1] and list(old["pad_to"]) == [0, 0]
    # the tables pair a variant's cells on the shape's axes, not on the variant's
    summary = tables.summarize(df, store.load_samples())
    assert "pad_to" in tables.cell_keys() and "repeats" not in tables.cell_keys()
    assert len(summary) == 2 and set(summary["pad_to"]) == {0, 16}


def test_an_axis_declared_twice_differently_is_refused(toy):
    with pytest.raises(ValueError, match="'repeats' declared twice, differently"):
        spec_module.add_axes([Axis("repeats", 2)])
    with pytest.raises(ValueError, match="'batch_size' is a field every cell has"):
        spec_module.add_axes([Axis("batch_size", 1)])


def test_the_built_in_studies_axes_read_as_the_spec_fields_did():
    d = cell("distributed", task="train", axes={"workers": 2, "scaling": "weak"})
    assert d.label == "m train torch/eager weak x2 b=2 s=8"
    g = cell("generation", axes={"new_tokens": 16})
    assert g.label == "m torch/eager b=2 s=8 new=16"
    assert shape_text(g.shape) == "2x8+16" and shape_text(cell("generation").shape) == "2x8"
    assert g.tokens_per_call == 2 * 16 and cell().tokens_per_call == 2 * 8
    assert spec_module.tokens_per_call({"batch_size": 2, "seq_len": 8, "new_tokens": 0}) == 16
    # every row has every built-in axis's column, at its default where not set
    row = make_row(cell(), status="ok")
    assert (row["workers"], row["scaling"], row["new_tokens"]) == (1, "", 0)
    assert results.SPEC_COLUMNS[-3:] == ["workers", "scaling", "new_tokens"]
    # nothing below the studies names one
    package = Path(spec_module.__file__).parents[1]
    for module in ("core/spec", "results/store", "results/tables", "suite/claims",
                   "results/judging", "results/compare"):
        src = (package / f"{module}.py").read_text()
        assert not any(n in src for n in ('"workers"', '"scaling"', '"new_tokens"')), module
    assert pd.Series([d.cell_id, g.cell_id]).is_unique


def test_a_jobs_cell_with_an_axis_no_registered_study_declares_is_refused(toy):
    d = cell(axes={"repeats": 3}).to_dict()
    assert RunSpec.from_dict(d, strict=True).repeats == 3
    studies.unregister(toy.name)
    try:
        with pytest.raises(ValueError, match=r"\['pad_to', 'repeats'\] are neither fields"):
            RunSpec.from_dict(d, strict=True)  # a worker reading a job: never dropped
        assert RunSpec.from_dict(d) == cell()  # a results row: other columns are left
    finally:
        studies.register(toy)


class ToyCells(Study):
    """Two cells, and a plan that says which it was given."""

    name = "toy_cells"

    def cells(self, params):
        return [cell(study=self.name, framework=fw) for fw in ("torch", "jax")]

    def plan(self, ctx, spec):
        return f"plan of {spec.framework}"


def test_with_axis_adds_a_variant_axis_to_a_study_in_the_callers_module():
    """What a benchmark measures beside a study (its twins, its allocators): each
    cell in the values the axis gives it, none dropping it; the new axis' plans
    made from the study's own; workers find it in the caller's file."""

    from fwcompare.execution.study import module_file, with_axis

    seen = []

    def plan(make, spec):
        seen.append(spec.framework)
        return f"{make()} in {spec.copies}"

    axis = Axis("copies", 1, label=" x{copies}")
    study = with_axis(ToyCells(), axis, lambda c: (1, 2) if c.framework == "torch" else (),
                      __name__, plan, figures=("copy_s",))
    studies.register(study)
    try:
        assert study.name == "toy_cells_copies" and study.axes[-1] == axis
        assert "copy_s" in study.columns.figures
        got = study.cells({})
        assert [(c.framework, c.copies) for c in got] == [("torch", 1), ("torch", 2)]
        assert got[0].cell_id != got[1].cell_id
        assert study.plan(None, got[1]) == "plan of torch in 2" and seen == ["torch"]
        assert Path(module_file(study)) == Path(__file__).resolve()
    finally:
        studies.unregister(study.name)
    plain = studies.register(with_axis(ToyCells(), axis, lambda c: (1,), __name__,
                                       name="toy_cells_plain"))
    try:
        assert plain.name == "toy_cells_plain"
        assert plain.plan(None, plain.cells({})[0]) == "plan of torch"
    finally:
        studies.unregister(plain.name)
