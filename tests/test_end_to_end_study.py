"""The end-to-end study (issue 50): bad params refused by key before anything
runs, and a run that never reaches its target is a row that says so, not an
error (the smoke report runs the whole study for every framework)."""
import math
import tempfile

import pytest

import fwcompare
from fwcompare.suite import params
from fwcompare.core.paths import PARAMS
from fwcompare.plan.schema import ParamsError

SMOKE = params.load_file(PARAMS / "end_to_end" / "smoke.yaml").to_dict()


@pytest.mark.parametrize("change, key, words", [
    ({"target_accuracy": 0.0}, "target_accuracy", "must be in (0, 1]"),
    ({"target_accuracy": 1.5}, "target_accuracy", "must be in (0, 1]"),
    ({"loaders": {"torch": ["dataloader-w9"]}}, "loaders", "unknown mode 'dataloader-w9'"),
    ({"fed": {"tensorflow": ["grain"]}}, "fed", "unknown mode 'grain'"),
    ({"fit_pipeline": {"tensorflow": ["tfdata-cache"]}}, "fit_pipeline",
     "unknown mode 'tfdata-cache'"),
    ({"fit_pipeline": {"torch": ["dataloader-w0", "dataloader-w1"]}}, "fit_pipeline",
     "one per framework"),
    ({"batch_sizes": [512]}, "batch_sizes", "larger than the training split"),
    ({"eval_examples": 70}, "eval_examples", "no whole number of evaluation batches"),
    ({"max_steps": 10}, "max_steps", "no multiple of eval_every"),
    ({"seq_lens": [8]}, "seq_lens", "shorter than a sentence"),
    ({"own_share": 0.5}, "own_share", "must be in (0.5, 1]"),
])
def test_bad_params_are_refused_by_key_before_anything_runs(change, key, words, tmp_path):
    with pytest.raises(ParamsError) as err:
        fwcompare.run_study("end_to_end", {**SMOKE, **change}, output_dir=tmp_path,
                            progress=False)
    assert repr(key) in str(err.value) and words in str(err.value), str(err.value)
    assert not any(tmp_path.iterdir())  # nothing was measured or written


@pytest.mark.slow
def test_a_run_short_of_its_target_is_a_row_that_says_so(tmp_path, no_orphans):
    # Four steps at random init cannot reach 100% on the held-out split.
    p = {**SMOKE, "frameworks": ["torch"], "loaders": {}, "fed": {}, "max_steps": 4,
         "eval_every": 2, "target_accuracy": 1.0, "rounds": 1}
    res = fwcompare.run_study("end_to_end", p, output_dir=tmp_path, progress=False)
    row = res.results.iloc[0]
    assert len(res.results) == 1 and row["task"] == "fit" and row["status"] == "ok"
    assert math.isnan(row["time_to_target_s"]) and math.isnan(row["steps_to_target"])
    assert 0 < row["best_accuracy"] < 1.0 and row["train_steps"] == 4
    assert "did not reach the target accuracy 1" in row["error"], row["error"]
    assert row["total_s"] > row["first_step_s"] > 0 and row["steady_step_s"] > 0


@pytest.mark.slow
def test_a_worker_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch, no_orphans):
    """A worker leaves with ``os._exit``, which skips what a framework deletes
    only at interpreter exit: TensorFlow autograph's generated modules (32
    from one smoke run of this study's TensorFlow cells). They go to the
    worker's own TMPDIR (``launch.fresh_tmpdir``), removed when it ends."""
    system = tmp_path / "tmp"
    system.mkdir()
    monkeypatch.setenv("TMPDIR", str(system))
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    p = {**SMOKE, "frameworks": ["tensorflow"], "loaders": {}, "fed": {}, "max_steps": 4,
         "eval_every": 2, "rounds": 1}
    res = fwcompare.run_study("end_to_end", p, output_dir=tmp_path / "out", progress=False)
    assert list(res.results["status"]) == ["ok"]  # Keras fit: traced, so autograph ran
    left = sorted(f.name for f in system.iterdir())
    assert not [n for n in left if n.startswith(("__autograph", "fwcompare-tmp-"))], left


def test_the_fit_table_reads_rows_from_before_a_phase_existed():
    """Rows stored before ``end_s`` (a run's end after its last evaluation)
    was a phase: the table gives it NaN, and every other figure as before."""
    import pandas as pd

    from fwcompare.studies.end_to_end import fit_table

    def row(rnd, total, end=None):
        r = dict(task="fit", status="ok", model="m", framework="torch", mode="trainer",
                 batch_size=16, seq_len=32, round=rnd, data_s=0.1, setup_s=0.1,
                 first_step_s=0.5, steps_s=2.0, eval_s=0.8, total_s=total,
                 throughput_samples_per_s=80.0 + rnd, time_to_target_s=3.0 + rnd,
                 best_accuracy=0.9, peak_mem_bytes=6e8, loss_step0=0.675)
        return r if end is None else dict(r, end_s=end)
    old = fit_table(pd.DataFrame([row(0, 3.5), row(1, 3.7), row(2, 3.6)])).iloc[0]
    assert math.isnan(old["end_s"]) and old["total_s"] == 3.6 and old["rounds"] == 3
    assert old["time_to_target_s_low"] < old["time_to_target_s"] == pytest.approx(4.0, rel=0.01)
    new = fit_table(pd.DataFrame([row(0, 3.5, 0.0), row(1, 3.7, 0.2)])).iloc[0]
    assert new["end_s"] == pytest.approx(0.1)
