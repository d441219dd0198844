"""Failures are data: crashes, hangs, OOM and unsupported cells become rows with a
status, the other cells still run, and an interrupted run resumes."""

import numpy as np
import pytest
from conftest import SMOKE_TIMING, children_alive

from fwcompare import run_study
from fwcompare.core.spec import RunSpec

pytestmark = pytest.mark.slow  # every test starts worker processes

BASE = {"models": ["tiny-bert"], "frameworks": ["torch"], "modes": {"torch": ["eager"]},
        "batch_sizes": [1, 2], "seq_lens": [8], "group_timeout_s": 120.0, **SMOKE_TIMING}


def statuses(res):
    df = res.results
    return {(r.batch_size, r.seq_len): r.status for r in df.itertuples()}, df


def no_orphans():
    assert not children_alive()


@pytest.mark.parametrize("schedule", ["interleaved", "sequential"])
def test_crash_in_one_cell_keeps_the_others(tmp_path, monkeypatch, schedule):
    monkeypatch.setenv("FWCOMPARE_FAULT", "crash:b=1 s=8")
    res = run_study("inference_sweep", {**BASE, "seq_lens": [8, 300], "schedule": schedule},
                    output_dir=tmp_path, progress=False)
    st, df = statuses(res)
    assert st[(1, 8)] == "error"
    assert st[(2, 8)] == "ok"  # a fresh worker picked up the rest of the group
    assert st[(1, 300)] == st[(2, 300)] == "unsupported"  # tiny-bert has 256 positions
    err = df.set_index("batch_size").query("seq_len == 8").loc[1, "error"]
    assert "exit code 3" in err
    assert "256 positions" in df[df["seq_len"] == 300]["error"].iloc[0]
    # Failed rows carry no measured figure, not even the variant's gate figures
    # (load time, equivalence error) that the worker knew when they failed.
    failed = df[df["status"] != "ok"]
    measured = ["median_s", "load_s", "equiv_max_abs_err", "equiv_rel_err", "first_call_s"]
    assert failed[measured].isna().all().all(), failed[["status", *measured]]
    ok = df[df["status"] == "ok"].iloc[0]
    assert ok["median_s"] > 0 and ok["n_samples"] >= 5 and ok["schedule"] == schedule
    no_orphans()


def test_oom_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("FWCOMPARE_FAULT", "oom:b=2 s=8")
    st, df = statuses(run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False))
    assert st == {(1, 8): "ok", (2, 8): "oom"}
    oom = df[df["status"] == "oom"].iloc[0]
    assert "out-of-memory" in oom["error"]
    assert oom["median_s"] != oom["median_s"]  # NaN


def test_hung_group_times_out_in_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setenv("FWCOMPARE_FAULT", "hang:b=2 s=8")
    st, df = statuses(run_study("inference_sweep", {**BASE, "group_timeout_s": 12.0},
                                output_dir=tmp_path, progress=False))
    assert st == {(1, 8): "ok", (2, 8): "timeout"}
    assert "group timeout" in df[df["status"] == "timeout"]["error"].iloc[0]
    no_orphans()


@pytest.mark.parametrize("schedule", ["interleaved", "sequential"])
def test_hung_cell_times_out_and_the_group_goes_on(tmp_path, monkeypatch, schedule):
    monkeypatch.setenv("FWCOMPARE_FAULT", "hang:b=1 s=8")
    st, df = statuses(run_study("inference_sweep", {**BASE, "cell_timeout_s": 8.0,
                                                    "schedule": schedule},
                                output_dir=tmp_path, progress=False))
    assert st == {(1, 8): "timeout", (2, 8): "ok"}  # a fresh worker ran the next cell
    assert "cell_timeout_s" in df[df["status"] == "timeout"]["error"].iloc[0]
    no_orphans()


def test_interrupted_run_resumes_and_keeps_finished_cells(tmp_path, monkeypatch):
    res = run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False)
    assert set(res.results["status"]) == {"ok"}
    cells = sorted((tmp_path / "results" / "cells").glob("*.parquet"))
    assert len(cells) == 2
    kept, lost = cells
    kept_mtime = kept.stat().st_mtime_ns
    lost.unlink()  # as if the run was interrupted during this cell
    res2 = run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False)
    assert kept.stat().st_mtime_ns == kept_mtime  # not measured again
    assert lost.exists() and set(res2.results["status"]) == {"ok"}
    assert len(res2.results) == 2
    # A complete run started again has nothing left to measure: no worker starts.
    from fwcompare.execution import runner

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker started for a run with nothing left to measure")
    monkeypatch.setattr(runner.Worker, "__init__", no_worker)
    again = run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False)
    assert len(again.results) == 2 and set(again.results["status"]) == {"ok"}


def test_a_cell_file_cut_short_is_set_aside_and_measured_again(tmp_path):
    """A zero-byte cell file (a full disk, a copy cut short): the next run says
    so in a line naming it, measures that cell again and keeps the other."""
    from fwcompare.results.store import UNREADABLE, UnreadableResult

    run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False)
    kept, cut = sorted((tmp_path / "results" / "cells").glob("*.parquet"))
    kept_mtime = kept.stat().st_mtime_ns
    cut.write_bytes(b"")
    with pytest.warns(UnreadableResult, match=f"{cut.name}: unreadable") as said:
        res = run_study("inference_sweep", BASE, output_dir=tmp_path, progress=False)
    (line,) = [str(w.message) for w in said if w.category is UnreadableResult]
    assert "measures the cell again" in line and "\n" not in line
    assert len(res.results) == 2 and set(res.results["status"]) == {"ok"}
    assert cut.stat().st_size > 0 and cut.with_name(cut.name + UNREADABLE).is_file()
    assert kept.stat().st_mtime_ns == kept_mtime  # not measured again


def test_rounds_run_again_in_fresh_processes_and_pool(tmp_path):
    from fwcompare.results import tables

    res = run_study("inference_sweep", {**BASE, "batch_sizes": [1], "rounds": 2},
                    output_dir=tmp_path, progress=False)
    df = res.results
    assert sorted(df["round"]) == [0, 1] and set(df["status"]) == {"ok"}
    assert df["cell_id"].nunique() == 1
    s = tables.summarize(df, res.samples)
    assert len(s) == 1 and s.iloc[0]["rounds"] == 2
    assert s.iloc[0]["n_samples"] == df["n_samples"].sum()  # samples of both rounds pooled
    # one memory pass per cell, in its first round: the cell's figure is round 0's
    mem = df.set_index("round")["peak_mem_bytes"]
    assert mem[0] > 0 and np.isnan(mem[1]) and s.iloc[0]["peak_mem_bytes"] == mem[0]


def test_rounds_for_claims_repeats_only_the_variants_a_claim_compares(tmp_path):
    from fwcompare.suite.claims import claimed_variants

    # cpu-inference-pytorch-faster compares torch/eager; no inference claim names torchscript.
    assert "torch/eager" in claimed_variants("inference_sweep", "cpu")
    assert "torch/torchscript" not in claimed_variants("inference_sweep", "cpu")
    res = run_study("inference_sweep", {**BASE, "batch_sizes": [1], "rounds": 2,
                                        "rounds_for": "claims",
                                        "modes": {"torch": ["eager", "torchscript"]}},
                    output_dir=tmp_path, progress=False)
    df = res.results
    rounds = df.groupby("mode")["round"].apply(sorted).to_dict()
    assert rounds == {"eager": [0, 1], "torchscript": [0]}
    assert set(df["status"]) == {"ok"}
    no_orphans()


def test_a_technique_claim_repeats_the_technique_and_plain_in_every_framework():
    """checkpointing-costs-20pct-time compares checkpointing with plain in
    each framework of the memory study; gradient-accumulation-lowers-memory
    compares accumulate-4 with plain, a memory figure per round: those repeat
    too, and take a memory pass every round."""
    from fwcompare.plan.run import is_claimed
    from fwcompare.suite.claims import claimed_variants

    def cell(fw, mode, task="train", dtype="float32"):
        return RunSpec(study="memory", model="gpt2", framework=fw, mode=mode, device="cpu",
                       dtype=dtype, batch_size=8, seq_len=64, threads=1, task=task)

    keep = claimed_variants("memory", "cpu")
    assert {"*/checkpointing", "*/plain"} <= keep
    assert is_claimed(cell("jax", "checkpointing"), keep)
    assert is_claimed(cell("tensorflow", "plain"), keep)
    # accumulate-4's claim is about memory: its figure is per round, so it repeats
    assert is_claimed(cell("torch", "accumulate-4"), keep)
    assert not is_claimed(cell("torch", "checkpointing"), claimed_variants("training", "cpu"))
    memory = claimed_variants("memory", "cpu", memory=True)
    assert {"*/checkpointing", "*/plain", "*/accumulate-4"} <= memory
    # the training study's memory claim compares TensorFlow's graph step with PyTorch's
    assert claimed_variants("training", "cpu", memory=True) == {"tensorflow/graph",
                                                                "torch/eager"}
    assert not claimed_variants("inference_sweep", "cpu", memory=True)


def test_a_precision_claim_repeats_its_task_and_precisions_only():
    """mixed-precision-training-speedup (a GPU claim) compares float16 training
    with float32 training in every framework: those cells repeat, the other
    precisions and the inference cells do not."""
    from fwcompare.plan.run import is_claimed
    from fwcompare.suite.claims import claimed_variants

    keep = claimed_variants("mixed_precision", "gpu")
    assert keep == {"*/*@train/float16", "*/*@train/float32"}
    assert not claimed_variants("mixed_precision", "cpu")  # the claim is about GPUs

    def cell(fw, mode, task, dtype):
        return RunSpec(study="mixed_precision", model="bert-base-cased", framework=fw,
                       mode=mode, device="gpu", dtype=dtype, batch_size=16, seq_len=128,
                       threads=1, task=task)
    assert is_claimed(cell("jax", "jit", "train", "float16"), keep)
    assert is_claimed(cell("torch", "eager", "train", "float32"), keep)
    assert not is_claimed(cell("torch", "eager", "train", "bfloat16"), keep)
    assert not is_claimed(cell("torch", "eager", "inference", "float16"), keep)


def test_the_memory_studys_rounds_go_to_its_claims_variants():
    """The memory study's quick params (rounds 3, fit_rounds 2, rounds_for
    claims): the timing claim's and the memory claims' variants take three
    rounds, each with a memory pass, and the searches of pytorch-oom-first
    two (the second from the first's bracket: tests/test_largest_batch.py);
    JAX's search is not in quick."""
    from collections import Counter

    from fwcompare.core.paths import PARAMS
    from fwcompare.studies import STUDIES
    from fwcompare.suite.api import run_plan
    from fwcompare.suite.params import load_file, validate

    p = validate("memory", load_file(PARAMS / "memory" / "quick.yaml"))
    assert p["rounds"] == 3
    plan = run_plan("memory", p)
    planned = plan.cells
    rounds = Counter((c.spec.task, c.spec.framework, c.spec.mode) for c in planned)
    for fw in ("torch", "jax"):
        assert rounds[("train", fw, "checkpointing")] == rounds[("train", fw, "plain")] == 3
    # TensorFlow runs no checkpointing (transformers has none for its models):
    # its plain step repeats beside its accumulate-4 (a memory claim's)
    assert ("train", "tensorflow", "checkpointing") not in rounds
    assert rounds[("train", "tensorflow", "plain")] == 3
    assert sum(n for (task, _, mode), n in rounds.items() if mode == "accumulate-4") == 9
    # every training cell is a memory claim's: a memory pass in every round
    assert all(plan.memory_every_round(c.spec) for c in planned if c.spec.task == "train")
    searches = Counter(c.spec.framework for c in planned if c.spec.task == "largest_batch")
    assert searches == {"torch": 2, "tensorflow": 2}
    # with checkpointing named for TensorFlow, its plain step repeats beside it
    p = validate("memory", {**load_file(PARAMS / "memory" / "quick.yaml").to_dict(),
                            "modes": {**p["modes"], "tensorflow": ["plain", "checkpointing"]}})
    planned = run_plan("memory", p).cells
    assert sum(1 for c in planned if (c.spec.framework, c.spec.mode, c.spec.task)
               == ("tensorflow", "plain", "train")) == 3
    # a claim that names TensorFlow's plain step keeps it repeating without a technique
    study = STUDIES["memory"]
    quick = validate("memory", load_file(PARAMS / "memory" / "quick.yaml"))
    tf_plain = next(c for c in study.cells(quick) if (c.framework, c.mode, c.task)
                    == ("tensorflow", "plain", "train"))
    assert not study.repeats(tf_plain, quick, {"*/plain", "*/checkpointing"})
    assert study.repeats(tf_plain, quick, {"*/plain", "tensorflow/plain"})
    assert not study.repeats(tf_plain, quick, {"tensorflow/plain@largest_batch/*"})
