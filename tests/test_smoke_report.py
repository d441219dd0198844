"""The smoke profile end to end through papermill: real runs, real figures."""
import re
import time

import numpy as np
import pytest

from fwcompare import load_results, report
from fwcompare.paths import PARAMS
from fwcompare.params import load_file

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    t0 = time.perf_counter()
    index = report.build("smoke", out_root=root)
    return root / "smoke", index, time.perf_counter() - t0


def test_every_cell_ran_and_is_real(smoke):
    out, _, _ = smoke
    res = load_results(out / "inference_sweep")
    df = res.results
    p = load_file(PARAMS / "inference_sweep" / "smoke.yaml")
    n_variants = sum(len(p["modes"][fw]) for fw in p["frameworks"])
    expected = len(p["models"]) * n_variants * len(p["batch_sizes"]) * len(p["seq_lens"])
    assert len(df) == expected
    assert set(df["framework"]) == {"torch", "tensorflow", "jax"}
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["framework", "error"]]
    assert (df["median_s"] > 0).all()
    assert (df["ci_low_s"] <= df["median_s"]).all() and (df["median_s"] <= df["ci_high_s"]).all()
    assert (df["first_call_s"] > 0).all() and (df["n_samples"] >= p["min_iters"]).all()
    assert (df["equiv_max_abs_err"] < p["equiv_tol"]).all()
    assert (df["peak_mem_bytes"] > 0).all()
    assert np.allclose(df["tokens_per_s"], df["batch_size"] * df["seq_len"] / df["median_s"])
    assert df["versions"].str.contains('"torch"').all() and (df["git_commit"] != "").all()
    # Raw samples are kept for every cell and the median derives from them.
    s = res.samples.groupby("cell_id")["seconds"].median()
    assert np.allclose(s.loc[df["cell_id"]].to_numpy(), df["median_s"].to_numpy())


def test_training_every_framework_trains_and_agrees(smoke):
    out, _, _ = smoke
    res = load_results(out / "training")
    df, losses = res.results, res.losses
    p = load_file(PARAMS / "training" / "smoke.yaml")
    n_variants = sum(len(p["modes"][fw]) for fw in p["frameworks"])
    assert len(df) == len(p["models"]) * n_variants * len(p["batch_sizes"]) * len(p["seq_lens"])
    assert set(df["framework"]) == {"torch", "tensorflow", "jax"}
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["framework", "error"]]
    assert (df["median_s"] > 0).all() and (df["peak_mem_bytes"] > 0).all()
    # The first step carries trace/compile for the compiled modes, and is reported apart.
    compiled = df[df["mode"].isin(["graph", "xla", "jit"])]
    assert (compiled["first_call_s"] > compiled["median_s"]).all()
    # Memory breakdown: fp32 params = grads, AdamW state = 2x params.
    assert (df["param_bytes"] > 0).all()
    assert (df["optimizer_state_bytes"] == 2 * df["param_bytes"]).all()
    # Losses: every framework/mode of every model, finite, falling on the fixed batch,
    # first losses within loss_tol of PyTorch's.
    assert len(losses) == len(p["models"]) * n_variants * p["agreement_steps"]
    for _, g in losses.groupby(["model", "framework", "mode"]):
        g = g.sort_values("step")
        assert np.isfinite(g["loss"]).all()
        assert g["loss"].iloc[-1] < g["loss"].iloc[0]
        assert abs(g["loss"].iloc[0] - g["reference_loss"].iloc[0]) < p["loss_tol"]
        rel = ((g["loss"] - g["reference_loss"]).abs() / g["reference_loss"]).max()
        assert rel < p["loss_curve_rtol"]


def test_report_files_exist_and_link(smoke):
    out, index, _ = smoke
    figures = {"inference_sweep": ("latency", "speed_ratio", "throughput", "peak_memory"),
               "training": ("loss_agreement", "step_time", "speed_ratio", "throughput",
                            "peak_memory")}
    for name, pngs in figures.items():
        study = out / name
        for fig in pngs:
            png = study / "figures" / f"{fig}.png"
            assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
            assert f"{name}/figures/{fig}.png" in index.read_text()
        html = (study / f"{name}.html").read_text()
        assert "run_study(" not in html  # code hidden
        assert not list(study.glob(".*.running.ipynb"))
    assert "Equivalence gate" in (out / "inference_sweep" / "inference_sweep.html").read_text()
    assert "Loss agreement" in (out / "training" / "training.html").read_text()
    for href in re.findall(r'href="([^"#]+)"', index.read_text()):
        assert (out / href).exists(), href


def test_second_report_with_unchanged_inputs_is_skipped(smoke):
    out, index, first_s = smoke
    before = (out / "inference_sweep" / "inference_sweep.ipynb").stat().st_mtime_ns
    t0 = time.perf_counter()
    report.build("smoke", out_root=out.parent)
    assert time.perf_counter() - t0 < 15 < first_s
    assert (out / "inference_sweep" / "inference_sweep.ipynb").stat().st_mtime_ns == before
