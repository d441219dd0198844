import math

import pandas as pd
import pytest

from fwcompare.results.store import ResultStore, make_row
from fwcompare.core.spec import RunSpec


def spec(batch=1):
    return RunSpec(study="inference_sweep", model="tiny-bert", framework="torch", mode="eager",
                   device="cpu", dtype="float32", batch_size=batch, seq_len=8, threads=2)


def test_cell_id_is_stable_and_distinct():
    assert spec().cell_id == spec().cell_id
    assert spec(1).cell_id != spec(2).cell_id
    assert RunSpec.from_dict(spec().to_dict()) == spec()


def test_round_trip(tmp_path):
    store = ResultStore(tmp_path)
    ok = make_row(spec(1), status="ok", figures={"median_s": 0.01, "ci_low_s": 0.009,
                                                 "ci_high_s": 0.011, "n_samples": 3,
                                                 "calls_per_sample": 2, "converged": True},
                  provenance={"versions": {"torch": "x"}, "git_commit": "abc"}, run_id="r1")
    bad = make_row(spec(2), status="oom", error="out of memory", run_id="r1")
    store.append(ok, [0.009, 0.01, 0.011])
    store.append(bad)
    df = store.load().set_index("batch_size")
    assert df.loc[1, "median_s"] == 0.01 and df.loc[1, "status"] == "ok"
    assert bool(df.loc[1, "converged"]) is True
    assert df.loc[1, "versions"] == '{"torch": "x"}'
    assert df.loc[2, "status"] == "oom" and df.loc[2, "error"] == "out of memory"
    assert math.isnan(df.loc[2, "median_s"])  # NaN, never a string
    assert df["median_s"].dtype == "float64"
    s = store.load_samples()
    assert list(s["seconds"]) == [0.009, 0.01, 0.011]
    assert set(s["calls_per_sample"]) == {2}
    store.consolidate()
    again = pd.read_parquet(tmp_path / "results.parquet")
    assert len(again) == 2 and set(again["status"]) == {"ok", "oom"}


def test_finished_keeps_final_statuses_only(tmp_path):
    store = ResultStore(tmp_path)
    store.append(make_row(spec(1), status="ok"))
    store.append(make_row(spec(2), status="error", error="boom"))
    assert store.finished() == {(spec(1).cell_id, 0)}


def test_unknown_status_and_column_are_rejected():
    with pytest.raises(ValueError):
        make_row(spec(), status="N/A")
    with pytest.raises(KeyError):
        make_row(spec(), status="ok", figures={"median": 1.0})


def test_changed_params_archive_never_overwrite(tmp_path):
    store = ResultStore(tmp_path / "res")
    store.begin("hash1")
    store.append(make_row(spec(1), status="ok"))
    store.begin("hash1")
    assert len(store.load()) == 1  # same params: resume
    store.begin("hash2")
    assert len(store.load()) == 0
    archived = list((tmp_path / "res" / "previous").glob("*/cells/*.parquet"))
    assert len(archived) == 1


def test_consolidated_copies_know_when_a_row_came_after_them(tmp_path):
    """A run stopped between its last cell and ``consolidate`` leaves the copies
    behind: ``consolidated`` says so, and an idle run (the runner) consolidates again."""
    import os

    store = ResultStore(tmp_path)
    store.append(make_row(spec(1), status="ok"), [0.01, 0.02])
    assert not store.consolidated()  # none yet
    store.consolidate()
    assert store.consolidated()
    for f in tmp_path.rglob("*.parquet"):  # as if all written a while ago
        earlier = f.stat().st_mtime_ns - 10**10
        os.utime(f, ns=(earlier, earlier))
    assert store.consolidated()
    store.append(make_row(spec(2), status="ok"), [0.03])
    assert not store.consolidated()
    store.consolidate()
    assert store.consolidated() and len(pd.read_parquet(tmp_path / "results.parquet")) == 2


def test_a_study_with_cells_to_retry_is_measured_again_by_its_notebook(tmp_path):
    """The report runs the scorecard beside the notebooks only where no notebook
    will measure: none consolidated, or a cell in error or timeout, measures."""
    from fwcompare.suite.report import _measures_again

    store = ResultStore(tmp_path / "results")
    assert _measures_again(tmp_path)
    store.append(make_row(spec(1), status="ok"))
    store.append(make_row(spec(2), status="unsupported", error="no GPU"))
    store.consolidate()
    assert not _measures_again(tmp_path)
    store.append(make_row(spec(3), status="timeout", error="900 s"))
    store.consolidate()
    assert _measures_again(tmp_path)


def test_a_cells_memory_pass_waits_for_a_round_that_measured(tmp_path):
    """One memory pass per cell (cell.serve): round 1 skips it after a round 0
    that stored a peak, and takes it after a round 0 that failed."""
    from fwcompare.measure.cell import _memory_stored

    store = ResultStore(tmp_path)
    ok, failed = spec(1).cell_id, spec(2).cell_id
    store.append(make_row(spec(1), status="ok", figures={"peak_mem_bytes": 5e8}))
    store.append(make_row(spec(2), status="timeout", error="cell_timeout"))
    assert not _memory_stored(store, ok, 0)  # round 0 always measures
    assert _memory_stored(store, ok, 1) and _memory_stored(store, ok, 2)
    assert not _memory_stored(store, failed, 1)
    store.append(make_row(spec(2), status="ok", figures={"peak_mem_bytes": 5e8}, round=1))
    assert _memory_stored(store, failed, 2)
    # a memory claim's cell takes it in every round (its figure is per round)
    from fwcompare.measure.cell import memory_pass_due
    from types import SimpleNamespace

    assert not memory_pass_due(SimpleNamespace(memory_rounds=()), store, ok, 1)
    assert memory_pass_due(SimpleNamespace(memory_rounds=(ok,)), store, ok, 1)


def test_samples_know_the_turns_they_were_taken_in():
    """results.with_turns keys each sample by its set's turns: the cells of one
    interleaved set share a key (one run, round, task, model, shape and
    sampling window); a cell of another shape, a cell measured again later,
    alone, in the same round (its own window), and a cell sampled on its own
    (sequential) share none. A store without some key column still loads."""
    from fwcompare.results.store import with_turns

    base = dict(run_id="r1", round=0, task="inference", model="m", device="cpu",
                seq_len=8, schedule="interleaved", host_steal=0.0, host_retakes=0)
    rows = pd.DataFrame([
        dict(base, cell_id="a", batch_size=1, host_other_cpu=0.011),
        dict(base, cell_id="b", batch_size=1, host_other_cpu=0.011),
        dict(base, cell_id="c", batch_size=2, host_other_cpu=0.020),  # another shape
        dict(base, cell_id="d", batch_size=1, host_other_cpu=0.034),  # measured again alone
        dict(base, cell_id="e", batch_size=1, host_other_cpu=0.011, schedule="sequential"),
    ])
    samples = pd.DataFrame({"cell_id": list("aabbccddee"), "round": [0] * 10,
                            "sample": [0, 1] * 5, "seconds": [1.0] * 10})
    turns = with_turns(samples, rows).groupby("cell_id")["turns"].agg(set)
    assert all(len(t) == 1 for t in turns)
    key = {c: next(iter(t)) for c, t in turns.items()}
    assert key["a"] == key["b"] != "" and key["e"] == ""
    assert len({key["a"], key["c"], key["d"]}) == 3
    old = with_turns(samples, rows.drop(columns=["device", "host_retakes"]))
    assert old.groupby("cell_id")["turns"].first()["a"] == old.groupby(
        "cell_id")["turns"].first()["b"]
    assert with_turns(samples.iloc[:0], rows).empty


def test_time_breakdowns_are_read_by_task_as_the_runner_wrote_them(tmp_path):
    from fwcompare.core.atomic import write_json
    from fwcompare.results.store import BREAKDOWN, time_breakdowns

    write_json(tmp_path / BREAKDOWN.format(task="train"), {"timing samples": 2.0, "total": 3.0})
    write_json(tmp_path / BREAKDOWN.format(task="largest_batch"), {"total": 1.5})
    write_json(tmp_path / "last_run_train.json", {"seconds": 3.0})  # not a breakdown
    assert time_breakdowns(tmp_path) == {"largest_batch": {"total": 1.5},
                                         "train": {"timing samples": 2.0, "total": 3.0}}
    assert time_breakdowns(tmp_path / "absent") == {}
