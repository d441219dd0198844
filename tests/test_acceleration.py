"""Acceleration: the library parts, on real numbers (the study itself runs in
test_smoke_report)."""
import math
import re

import numpy as np
import pytest

from fwcompare.suite import claims, params
from fwcompare.core import models
from fwcompare import run_study
from fwcompare.results import tables
from fwcompare.frameworks import get_backend
from fwcompare.results.store import ResultStore, make_row
from fwcompare.core.spec import RunSpec
from fwcompare.studies import acceleration as study
from fwcompare.core.stats import median_diff_ci
from fwcompare.core.timing import TimingConfig, measure


@pytest.mark.parametrize("first, per_call, eager_first, eager_per_call, expected", [
    (10.0, 1.0, 0.0, 2.0, 11),     # 10 + 10*1 = 20 <= 0 + 10*2 = 20; at n=10, 19 > 18
    (10.5, 1.0, 0.5, 2.0, 11),     # only the difference of the first calls counts
    (0.1, 5.0, 0.2, 1.0, 1),       # first call not slower: pays off at once
    (10.0, 2.0, 0.0, 2.0, math.inf),  # slower first, no saving per call: never
    (10.0, 3.0, 0.0, 2.0, math.inf),
    (1.0, 0.5, 0.0, 1.0, 3),       # 1 + 2*0.5 = 2 <= 2; n=2: 1.5 > 1
])
def test_breakeven_calls(first, per_call, eager_first, eager_per_call, expected):
    n = study.breakeven_calls(first, per_call, eager_first, eager_per_call)
    assert n == expected
    if math.isfinite(n) and n > 1:  # the definition, checked directly
        assert first + (n - 1) * per_call <= eager_first + (n - 1) * eager_per_call
        assert first + (n - 2) * per_call > eager_first + (n - 2) * eager_per_call


def test_breakeven_needs_both_figures():
    assert math.isnan(study.breakeven_calls(1.0, math.nan, 0.1, 0.2))


def test_median_diff_ci_covers_the_difference():
    rng = np.random.default_rng(1)
    a = 0.030 * (1 + 0.02 * rng.standard_normal(40))
    b = 0.010 * (1 + 0.02 * rng.standard_normal(40))
    d, lo, hi = median_diff_ci(a, b)
    assert d == pytest.approx(0.020, rel=0.02) and lo < d < hi
    assert lo > 0.019 and hi < 0.021
    d, lo, hi = median_diff_ci([3.0], [1.0])
    assert d == 2.0 and math.isnan(lo) and math.isnan(hi)


def test_on_first_sees_the_first_output_before_warm_up():
    calls, seen = [], []

    def fn():
        calls.append(len(calls))
        return len(calls)  # the first call returns 1
    cfg = TimingConfig(warmup_iters=1, warmup_s=0.0, min_iters=6, min_time_s=0.0,
                       max_time_s=0.01)
    measure(fn, config=cfg, on_first=lambda out: seen.append((out, len(calls))))
    assert seen == [(1, 1)]  # exactly once, with the first output, after one call
    assert len(calls) > 6


def test_modes_must_include_eager_and_options_are_checked():
    with pytest.raises(params.ParamsError, match="must include eager for tensorflow"):
        params.validate("acceleration", {"modes": {"torch": ["eager", "compile"],
                                                   "tensorflow": ["xla"], "jax": ["eager"]}})
    with pytest.raises(params.ParamsError, match="torch_compile_mode"):
        params.validate("acceleration", {"torch_compile_mode": "fastest"})
    with pytest.raises(params.ParamsError, match="unknown mode 'trace'"):
        params.validate("acceleration", {"modes": {"torch": ["eager", "trace"],
                                                   "tensorflow": ["eager"], "jax": ["eager"]}})
    full = params.validate("acceleration", {})
    assert full["torch_compile_dynamic"] == "auto" and full["accel_tol"] > 0


def _spec(fw, mode, b, s):
    return RunSpec(study="acceleration", model="m", framework=fw, mode=mode, device="cpu",
                   dtype="float32", batch_size=b, seq_len=s, threads=1)


@pytest.fixture
def accel(tmp_path):
    """torch eager 20 ms per call, first call 30 ms; torchscript 10 ms per call,
    first call 2 s (cold) at 1x8, then 15 ms at 1x16 (no re-trace); XLA at 1x8
    fails; tensorflow eager only at 1x8."""
    store = ResultStore(tmp_path / "results")
    rng = np.random.default_rng(0)

    def add(fw, mode, b, s, per_call, first, status="ok", **figures):
        spec = _spec(fw, mode, b, s)
        if status != "ok":
            store.append(make_row(spec, status=status, error="boom"))
            return
        for rnd in (0, 1):  # two processes per variant: a timed claim needs two
            x = per_call * (1 + 0.01 * rng.standard_normal(30))
            store.append(make_row(spec, status="ok", figures={"first_call_s": first, **figures},
                                  round=rnd), list(x))
    add("torch", "eager", 1, 8, 0.020, 0.030)
    add("torch", "eager", 1, 16, 0.020, 0.030)
    add("torch", "torchscript", 1, 16, 0.010, 0.015, recompiles=0.0, accel_max_abs_err=0.0)
    add("torch", "torchscript", 1, 8, 0.010, 2.0, recompiles=1.0, accel_max_abs_err=1e-6)
    add("tensorflow", "eager", 1, 8, 0.040, 0.050)
    add("tensorflow", "xla", 1, 8, 0, 0, status="error")
    add("tensorflow", "xla", 1, 16, 0.010, 3.0, recompiles=1.0)
    return store


def test_acceleration_table(accel):
    samples = accel.load_samples()
    s = tables.summarize(accel.load(), samples)
    t = study.acceleration_table(s, samples).set_index(["variant", "shape"])
    assert len(t) == 4  # compiled cells only; eager is the baseline
    ts = t.loc[("torch/torchscript", "1x8")]
    # Sweep order is ascending size, whatever order the rows were stored in.
    assert bool(ts["cold"]) and ts["sweep_order"] == 0
    assert not t.loc[("torch/torchscript", "1x16"), "cold"]
    assert ts["speedup"] == pytest.approx(2.0, rel=0.02)
    assert ts["speedup_low"] < ts["speedup"] < ts["speedup_high"]
    assert ts["first_call_overhead_s"] == pytest.approx(2.0 - ts["median_s"])
    # (2.0 - 0.030) / (0.020 - 0.010) = 197 calls of saving, + 1
    assert ts["breakeven_calls"] == pytest.approx(198, abs=6)
    assert ts["breakeven_low"] <= ts["breakeven_calls"] <= ts["breakeven_high"]
    # A first call faster than eager's pays off at once.
    assert t.loc[("torch/torchscript", "1x16"), "breakeven_calls"] == 1
    assert t.loc[("tensorflow/xla", "1x8"), "status"] == "error"
    assert math.isnan(t.loc[("tensorflow/xla", "1x8"), "speedup"])
    assert t.loc[("tensorflow/xla", "1x16"), "status"] == "no baseline"

    summ = study.acceleration_summary(t.reset_index(), samples).set_index("variant")
    ts = summ.loc["torch/torchscript"]
    assert ts["cells_ok"] == 2 and ts["geomean_speedup"] == pytest.approx(2.0, rel=0.02)
    assert ts["time_to_first_result_s"] == 2.0 and ts["cold_shape"] == "1x8"
    assert ts["recompiles_after_first"] == 0
    assert summ.loc["tensorflow/xla", "cells_ok"] == 0
    assert "error" in summ.loc["tensorflow/xla", "statuses"]

    figs = [study.speedup_heatmaps(t.reset_index(), {}), study.time_to_first_result(
        t.reset_index(), {}), study.breakeven(t.reset_index(), {}),
        study.recompilations(t.reset_index(), {})]
    heat_texts = [x.get_text() for ax in figs[0].axes for x in ax.texts]
    assert "ERR" in heat_texts and any(x.startswith("2.0") for x in heat_texts)
    ttfr_texts = [x.get_text() for ax in figs[1].axes for x in ax.texts]
    assert any("breakeven" in x for x in ttfr_texts) and "ERR" in ttfr_texts
    # Every compiled cell failed (a quick report saw it): the page still renders.
    failed = t.reset_index().query("status == 'error'")
    texts = [x.get_text() for ax in study.recompilations(failed, {}).axes for x in ax.texts]
    assert "no first call measured" in texts


def test_acceleration_claims_come_from_claims_yaml_and_pick_shapes(accel):
    """The notebook's claims table: claims.yaml's claims about this study,
    judged on its results (no copy of a claim in the library)."""
    c = claims.study_table("acceleration", accel.dir.parent)
    assert set(c.index) == {x.id for x in claims.load_claims() if x.study == "acceleration"}
    avg = c.loc["torchscript-speedup"]  # eager time / torchscript time = 2 in both cells
    assert avg["cells"] == 2 and avg["measured"].startswith("2.0")
    assert avg["verdict"] == "contradicted"  # claimed about 1.2
    large = c.loc["torchscript-slower-large-inputs"]
    assert large["cells"] == 1  # only the largest shape of the model
    # No cell where both XLA and tf.function ran: nothing measured, and it says why.
    xla = c.loc["xla-speedup"]
    assert xla["cells"] == 0 and xla["verdict"] == "not measured here"
    assert "did not run" in xla["note"]


# transformers' PyTorch classes import TensorFlow and Flax beside it, where installed
@pytest.mark.frameworks("torch", "tensorflow", "jax")
def test_torchscript_traces_once_and_matches_eager():
    torch_backend = get_backend("torch")
    torch_backend.configure(1, "cpu")
    wdir = models.weights_dir("tiny-bert", 0)
    model = torch_backend.load(wdir, "cpu")
    eager = torch_backend.make_forward(model, "eager", "cpu")
    traced = torch_backend.make_forward(model, "torchscript", "cpu")
    assert traced.compile_count() == 0 and eager.compile_count() is None
    assert "torch.jit.trace" in traced.setup
    for shape, traces in [((2, 8), 1), ((3, 16), 1)]:  # traced once, reused at a new shape
        x = torch_backend.make_inputs(np.arange(np.prod(shape)).reshape(shape) % 90 + 5, "cpu")
        out = torch_backend.to_numpy(traced(x))
        assert traced.compile_count() == traces
        assert np.abs(out - torch_backend.to_numpy(eager(x))).max() < 1e-5


@pytest.mark.slow
def test_a_failing_compiled_cell_keeps_the_others(tmp_path, monkeypatch, smoke_timing,
                                                  no_orphans):
    # A compiled mode that fails at one shape: that cell is recorded with its
    # status and message, its next shape and the other modes still run, each
    # mode in a worker process of its own.
    monkeypatch.setenv("FWCOMPARE_FAULT", "oom:torchscript b=1 s=8")
    res = run_study("acceleration", {
        "models": ["tiny-bert"], "frameworks": ["torch"],
        "modes": {"torch": ["eager", "torchscript"]}, "batch_sizes": [1], "seq_lens": [8, 16],
        **smoke_timing}, output_dir=tmp_path, progress=False)
    df = res.results.set_index(["mode", "seq_len"])
    assert df.loc[("torchscript", 8), "status"] == "oom"
    assert "out-of-memory" in df.loc[("torchscript", 8), "error"]
    assert df.loc[("torchscript", 16), "status"] == "ok"
    assert (df.loc["eager", "status"] == "ok").all()
    # The failed cell never called the mode, so the next shape made the first trace.
    assert df.loc[("torchscript", 16), "recompiles"] == 1
    assert df.loc[("torchscript", 16), "first_call_s"] > df.loc[("torchscript", 16), "median_s"]
    jobs = tmp_path / "results" / "work" / "jobs"
    assert sorted(p.name.split("-")[1] for p in jobs.glob("torch-*.json")) == [
        "eager", "torchscript"]


@pytest.mark.slow
def test_later_rounds_reuse_round_zeros_compile_cache(tmp_path, smoke_timing, no_orphans):
    # Round 0 compiles cold; round 1's fresh process finds round 0's
    # torch.compile cache (a hit: its first call is a fraction of the cold
    # one), and the reported first call is round 0's.
    res = run_study("acceleration", {
        "models": ["tiny-bert"], "frameworks": ["torch"],
        "modes": {"torch": ["eager", "compile"]}, "batch_sizes": [1], "seq_lens": [8],
        "rounds": 2, **smoke_timing}, output_dir=tmp_path, progress=False)
    df = res.results
    first = df[df["mode"] == "compile"].set_index("round")["first_call_s"]
    assert (df["status"] == "ok").all() and sorted(first.index) == [0, 1]
    assert first[1] < 0.6 * first[0], first.to_dict()
    logs = (tmp_path / "results" / "work" / "jobs").glob("torch-compile-*.log")
    pids = set(re.findall(r"fwcompare worker: pid (\d+)", "".join(p.read_text() for p in logs)))
    assert len(pids) == 2  # two processes, not one
    summary = tables.summarize(df, res.samples)
    assert summary.loc[summary["mode"] == "compile", "first_call_s"].item() == first[0]
    assert not (tmp_path / "results" / "work" / "compile").exists()  # removed after the run
