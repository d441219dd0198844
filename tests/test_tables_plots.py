"""Tables and figures keep failed cells visible and derive statistics from raw samples."""
import math

import numpy as np
import pytest

from fwcompare.results import plots, tables
from fwcompare.results.store import ResultStore, make_row
from fwcompare.core.spec import RunSpec


def spec(fw, mode, b):
    return RunSpec(study="inference_sweep", model="tiny-bert", framework=fw, mode=mode,
                   device="cpu", dtype="float32", batch_size=b, seq_len=8, threads=2)


@pytest.fixture
def stored(tmp_path):
    """torch eager at 10 ms and 20 ms; tensorflow graph at 2x that, except an OOM cell."""
    store = ResultStore(tmp_path)
    rng = np.random.default_rng(0)
    for fw, mode, b, base in [("torch", "eager", 1, 0.010), ("torch", "eager", 2, 0.020),
                              ("tensorflow", "graph", 1, 0.020)]:
        x = base * (1 + 0.01 * rng.standard_normal(30))
        store.append(make_row(spec(fw, mode, b), status="ok",
                              figures={"median_s": float(np.median(x))}), list(x))
    store.append(make_row(spec("tensorflow", "graph", 2), status="oom", error="OOM"))
    return store


def test_summary_recomputes_from_samples_and_keeps_failures(stored):
    s = tables.summarize(stored.load(), stored.load_samples())
    assert len(s) == 4
    oom = s[s["status"] == "oom"].iloc[0]
    assert math.isnan(oom["median_s"])
    ok = s[(s["variant"] == "torch/eager") & (s["batch_size"] == 1)].iloc[0]
    assert ok["ci_low_s"] < ok["median_s"] < ok["ci_high_s"]
    assert ok["tokens_per_s"] == pytest.approx(8 / ok["median_s"])


def test_ratio_table_and_summary(stored):
    s = tables.summarize(stored.load(), stored.load_samples())
    r = tables.ratio_table(s, stored.load_samples()).set_index("batch_size")
    assert r.loc[1, "time_ratio"] == pytest.approx(2.0, rel=0.02)
    assert r.loc[1, "ci_low"] < 2.0 < r.loc[1, "ci_high"]
    assert r.loc[2, "status"] == "oom" and math.isnan(r.loc[2, "time_ratio"])
    summ = tables.summary_table(s, stored.load_samples()).set_index("variant")
    # Only the cell both variants completed (batch 1) enters the comparison.
    assert summ.loc["tensorflow/graph", "cells"] == 1
    assert summ.loc["tensorflow/graph", "failed_cells"] == 1
    assert summ.loc["tensorflow/graph", "geomean_time_ratio_vs_torch/eager"] == pytest.approx(2.0, rel=0.02)
    assert summ.loc["torch/eager", "arith_mean_latency_s"] == pytest.approx(0.010, rel=0.02)


def test_figures_mark_failed_cells(stored):
    s = tables.summarize(stored.load(), stored.load_samples())
    heat = plots.ratio_heatmaps(tables.ratio_table(s, stored.load_samples()), {})
    texts = [t.get_text() for ax in heat.axes for t in ax.texts]
    assert "OOM" in texts and any(t.startswith("2.0") for t in texts)
    lat = plots.latency_vs_seq(s, {})
    assert "OOM" in [t.get_text() for ax in lat.axes for t in ax.texts]


def test_a_round_that_failed_loses_itself_not_the_rounds_that_measured(tmp_path):
    """An extra round that crashes must not hide a claim's cell: the cell keeps
    the figure of its measured rounds, says which round failed and how, and
    counts it in ``lost_rounds``; a cell that measured in no round keeps its
    failure."""
    store = ResultStore(tmp_path)
    a = RunSpec(study="inference_sweep", model="m", framework="torch", mode="eager",
                device="cpu", dtype="float32", batch_size=1, seq_len=8, threads=1)
    b = RunSpec(study="inference_sweep", model="m", framework="torch", mode="eager",
                device="cpu", dtype="float32", batch_size=2, seq_len=8, threads=1)
    for r, median in ((0, 0.010), (1, 0.012)):
        store.append(make_row(a, status="ok", figures={"median_s": median, "n_samples": 3},
                              round=r), [median] * 3)
    store.append(make_row(a, status="timeout", error="no answer in 60 s", round=2))
    store.append(make_row(b, status="error", error="boom", round=0))
    store.append(make_row(b, status="timeout", error="no answer", round=1))
    s = tables.summarize(store.load(), store.load_samples()).set_index("batch_size")
    assert s.loc[1, "status"] == "ok" and s.loc[1, "rounds"] == 2 and s.loc[1, "lost_rounds"] == 1
    assert s.loc[1, "error"] == "round 2: timeout: no answer in 60 s"
    assert 0.010 <= s.loc[1, "median_s"] <= 0.012
    # its two rounds' medians moved by 20%; a cell with no measured round has none
    assert s.loc[1, "round_spread"] == pytest.approx(1.2)
    assert math.isnan(s.loc[2, "round_spread"])
    assert s.loc[2, "status"] == "error" and s.loc[2, "rounds"] == 2
    assert s.loc[2, "lost_rounds"] == 0 and "boom" in s.loc[2, "error"]
