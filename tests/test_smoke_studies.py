"""The smoke profile end to end through papermill: the studies of the second
of tests/smoke.py's two groups (``test_smoke_report.py`` holds the first's and
the whole report's tests), built in one report at the same time as the first.
Each test names the studies it reads (``@pytest.mark.smoke``)."""
import numpy as np
import pytest

import fwcompare
from fwcompare.suite import claims, report
from fwcompare import load_results
from fwcompare.results import tables
from fwcompare.results.compare import compare
from fwcompare.suite.params import load_file
from fwcompare.core.paths import PARAMS
from fwcompare.studies import acceleration, distributed
from smoke import (GROUPS, each, has_its_share_of_the_peak, n_variants, renders_page_and_figures,
                   results_and_params)

pytestmark = pytest.mark.report


@pytest.mark.smoke("inference_sweep")
def test_every_cell_ran_and_is_real(smoke):
    res, p = results_and_params(smoke, "inference_sweep")
    df = res.results
    expected = len(p["models"]) * n_variants(p) * len(p["batch_sizes"]) * len(p["seq_lens"])
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


@pytest.mark.smoke("training")
def test_training_every_framework_trains_and_agrees(smoke):
    res, p = results_and_params(smoke, "training")
    df, losses = res.results, res.losses
    n_train = n_variants(p)
    assert len(df) == len(p["models"]) * n_train * len(p["batch_sizes"]) * len(p["seq_lens"])
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
    assert len(losses) == len(p["models"]) * n_train * p["agreement_steps"]
    for _, g in losses.groupby(["model", "framework", "mode"]):
        g = g.sort_values("step")
        assert np.isfinite(g["loss"]).all()
        assert g["loss"].iloc[-1] < g["loss"].iloc[0]
        assert abs(g["loss"].iloc[0] - g["reference_loss"].iloc[0]) < p["loss_tol"]
        rel = ((g["loss"] - g["reference_loss"]).abs() / g["reference_loss"]).max()
        assert rel < p["loss_curve_rtol"]


@pytest.mark.smoke("mixed_precision")
def test_mixed_precision_errors_and_stability(smoke):
    res, p = results_and_params(smoke, "mixed_precision")
    df, losses = res.results, res.losses
    inf = df[df["task"] == "inference"]
    assert len(inf) == (len(p["models"]) * n_variants(p) * len(p["precisions"])
                        * len(p["batch_sizes"]) * len(p["seq_lens"]))
    # Every framework is present in every precision, or marked unsupported with a reason.
    for (fw, dtype), g in inf.groupby(["framework", "dtype"]):
        bad = g[~g["status"].isin(["ok", "unsupported"])]
        assert bad.empty, bad[["framework", "dtype", "status", "error"]]
        assert (g.loc[g["status"] == "unsupported", "error"].str.len() > 10).all()
    assert set(inf.loc[inf["status"] == "ok", "framework"]) == {"torch", "tensorflow", "jax"}
    tf32 = inf[inf["dtype"] == "tf32"]  # the CPU has no TF32 mode
    assert (tf32["status"] == "unsupported").all() and tf32["error"].str.contains("GPU").all()
    ok = inf[inf["status"] == "ok"].set_index(["model", "framework", "batch_size", "seq_len",
                                               "dtype"])
    fp32 = ok.xs("float32", level="dtype")
    bf16 = ok.xs("bfloat16", level="dtype")
    # float32 sits at float32 rounding of the float64 reference; bfloat16 (8 mantissa
    # bits) errs far more, yet stays a close approximation; float16 in between.
    assert (fp32["fp64_rel_l2_err"] < 1e-5).all()
    assert (bf16["fp64_rel_l2_err"] > 10 * fp32.loc[bf16.index, "fp64_rel_l2_err"]).all()
    assert (bf16["fp64_rel_l2_err"] < 0.1).all() and (bf16["fp64_cosine"] > 0.99).all()
    assert (ok["out_nonfinite"] == 0).all() and (ok["fp64_argmax_agreement"] > 0.5).all()
    assert ok["precision_setup"].str.contains("autocast|policy|compute dtype|float32").all()
    # Real trained weights are among the models compared.
    assert "all-minilm-l6-v2" in set(ok.index.get_level_values("model"))
    # Training: every precision trained the same steps from the same first loss.
    train = df[(df["task"] == "train") & (df["status"] != "unsupported")]
    assert (train["status"] == "ok").all(), train[["framework", "dtype", "error"]]
    assert (train["median_s"] > 0).all()
    n_runs = len(p["train_models"]) * len(p["frameworks"]) * 3  # float32, bfloat16, float16
    assert len(losses) == n_runs * p["stability_steps"]
    for (fw, dtype), g in losses.groupby(["framework", "dtype"]):
        g = g.sort_values("step")
        assert np.isfinite(g["loss"]).all() and g["loss"].iloc[-1] < g["loss"].iloc[0]
        first = abs(g["loss"].iloc[0] - g["reference_loss"].iloc[0]) / g["reference_loss"].iloc[0]
        assert first < p["mp_loss_rtol"]
        # Only float16 runs scale the loss; the scale is recorded after every step.
        assert np.isfinite(g["loss_scale"]).all() == (dtype == "float16")
    # The stability steps after each first call are a phase of the report's time
    # breakdown of their own, counted as producing figures (not warm-up, not gate).
    import json

    out = smoke.study("mixed_precision").parent
    phases = json.loads((out / "mixed_precision" / "results" / "time_breakdown_train.json")
                        .read_text())
    assert phases["stability steps (loss curves)"] > 0
    breakdown = report.time_breakdown(out, {"mixed_precision": phases["total"]},
                                      phases["total"]).set_index("phase")
    assert breakdown.loc["stability steps (loss curves)", "figures"]
    assert not breakdown.loc["model build and gate", "figures"]


@pytest.mark.smoke("acceleration")
def test_acceleration_modes_match_eager_and_count_compiles(smoke):
    res, p = results_and_params(smoke, "acceleration")
    df = res.results
    assert len(df) == (len(p["models"]) * n_variants(p) * len(p["batch_sizes"])
                       * len(p["seq_lens"]))
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["framework", "mode", "error"]]
    assert (df["mode_setup"] != "").all() and (df["equiv_max_abs_err"] < p["equiv_tol"]).all()
    compiled = df[df["mode"] != "eager"]
    assert set(compiled["mode"]) == {"torchscript", "compile", "graph", "xla", "jit"}
    # Every compiled output matches its framework's eager output on the same input.
    assert (compiled["accel_max_abs_err"] < p["accel_tol"]).all()
    assert df.loc[df["mode"] == "eager", "recompiles"].isna().all()

    summary = tables.summarize(df, res.samples)
    table = acceleration.acceleration_table(summary, res.samples).set_index(["variant", "shape"])
    cold = table[table["cold"]]
    # The cold first call carries the trace/compile: positive and above a steady call.
    assert (cold["first_call_overhead_s"] > 0).all() and (cold["recompiles"] == 1).all()
    assert (table["speedup"] > 0).all() and table["speedup_low"].notna().all()
    # Breakeven is computed for every cell: a number of calls, or never (inf).
    assert (table["breakeven_calls"] >= 1).all()
    # The second shape: tf.function and jax.jit trace/compile it again, TorchScript
    # reuses its one trace, torch.compile recompiles (as dynamic).
    second = table[~table["cold"]]["recompiles"].droplevel("shape")
    assert second.loc[["tensorflow/graph", "tensorflow/xla", "jax/jit"]].eq(1).all()
    assert second.loc["torch/torchscript"] == 0 and second.loc["torch/compile"] >= 1
    judged = claims.study_table("acceleration", smoke.study("acceleration"))
    assert (judged["cells"] > 0).all() and (judged["measured"] != "-").all()


@pytest.mark.smoke("distributed")
def test_distributed_two_workers_agree_with_one_process(smoke):
    """The two-worker loopback case of each framework (torchrun + DDP/gloo,
    with the fp16 hook and FSDP2, TF_CONFIG + MultiWorkerMirroredStrategy and
    ParameterServerStrategy, jax.distributed + a jitted step over a global
    mesh, gloo): every rank of a replicating engine holds the same weights,
    the losses are those of one process over the same global batch, and the
    scaling figures derive from real step times."""
    res, p = results_and_params(smoke, "distributed")
    df, losses = res.results, res.losses
    assert len(df) == len(p["models"]) * n_variants(p) * len(p["workers"]) * len(p["scaling"])
    assert set(df["framework"]) == {"torch", "tensorflow", "jax"} and set(df["workers"]) == {1, 2}
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["framework", "error"]]
    # Weights across ranks: identical (the check is max-min over ranks, 0 for one
    # worker) where the engine keeps replicas; FSDP (shards) and the parameter
    # server (one copy) keep none: nothing to compare.
    one_copy = df["mode"].isin(["fsdp", "ps"])
    assert set(df.loc[one_copy, "mode"]) == {"fsdp", "ps"}
    assert df.loc[one_copy, "weight_max_abs_diff"].isna().all()
    assert (df.loc[~one_copy, "weight_max_abs_diff"] <= p["weight_tol"]).all()
    assert (df["rank_mem_min_bytes"] > 0).all()  # every rank's memory, every engine
    # Losses against the single-process PyTorch run over the same global batch.
    assert (df["equiv_max_abs_err"] <= p["loss_tol"]).all()
    assert len(losses) == n_variants(p) * len(p["workers"]) * p["agreement_steps"]
    for (fw, mode), g in losses.groupby(["framework", "mode"]):
        g = g.sort_values("step")
        assert (g["loss"] - g["reference_loss"]).abs().max() <= p["loss_tol"], (fw, mode)
        assert g["loss"].iloc[-1] < g["loss"].iloc[0]
    # Two workers: per-worker batch halves in strong scaling, stays in weak.
    two = df[df["workers"] == 2]
    assert (two[two["scaling"] == "weak"]["per_worker_batch"] == p["per_worker_batch"]).all()
    assert (two[two["scaling"] == "strong"]["per_worker_batch"] == p["global_batch"] // 2).all()
    assert (two["allreduce_s"] > 0).all() and (two["mode_setup"].str.contains("2 ")).all()
    assert (df["median_s"] > 0).all() and (df["n_samples"] >= p["min_iters"]).all()
    table = distributed.scaling_table(tables.summarize(df, res.samples), res.samples)
    rest = table[table["workers"] == 2]
    assert len(rest) == n_variants(p) * len(p["scaling"])
    assert (rest["efficiency"] > 0).all() and (rest["efficiency_low"] <= rest["efficiency"]).all()
    weak = rest[rest["scaling"] == "weak"].iloc[0]
    one = table[(table["variant"] == weak["variant"]) & (table["scaling"] == "weak")
                & (table["workers"] == 1)].iloc[0]
    assert np.isclose(weak["efficiency"], one["median_s"] / weak["median_s"], rtol=1e-9)


@pytest.mark.smoke("distributed")
def test_distributed_engines_train_as_their_plain_engines(smoke):
    """The two-worker strong launches: each engine says how it ran; PyTorch's
    fp16 compression hook keeps the replicas equal, and it and TensorFlow's
    parameter server end their agreement steps at their plain engine's loss;
    the engine table and the parameter-server claim read the launches. (A
    launch's processes, ports and logs after it ends: the crash, hang and
    SIGTERM tests of test_distributed.py.)"""
    res, _ = results_and_params(smoke, "distributed")
    df, losses = res.results, res.losses
    strong = df[(df["workers"] == 2) & (df["scaling"] == "strong")].set_index("mode")
    assert "fp16_compress_hook" in strong.loc["ddp-fp16", "mode_setup"]
    assert "compress" not in strong.loc["eager", "mode_setup"]
    assert "ParameterServerStrategy, synchronous: 2 worker(s)" in strong.loc["ps", "mode_setup"]
    assert strong.loc["ps", "mem_method"].startswith("cpu_rss_after_a_step_over_task_start")
    assert (strong.loc[["ddp-fp16", "graph"], "weight_max_abs_diff"] == 0).all()
    assert (df["rank_mem_min_bytes"] <= df["rank_mem_bytes"]).all()
    host = df[["host_other_cpu", "host_steal"]]  # each launch meters the rest of the machine
    assert host.notna().all().all() and host.ge(0).all().all() and host.le(1).all().all(), host
    last = losses[losses["mode"].str.endswith(" x2")].sort_values("step").groupby("mode")[
        "loss"].last()
    assert last["ddp-fp16 x2"] == pytest.approx(last["eager x2"], rel=1e-3), last
    assert last["ps x2"] == pytest.approx(last["graph x2"], rel=1e-4), last
    # The engine claim reads its two launches; one process each decides nothing.
    engines = distributed.engine_table(tables.summarize(df, res.samples), res.samples)
    ps = engines.set_index(["mode", "workers", "scaling"]).loc[("ps", 2, "strong")]
    ratio = strong.loc["graph", "median_s"] / strong.loc["ps", "median_s"]
    assert ps["speedup"] == pytest.approx(ratio, rel=0.35), (ps["speedup"], ratio)
    (claim,) = [c for c in claims.load_claims() if c.id == "ring-allreduce-beats-parameter-server"]
    row, _ = claims.evaluate(claim, claims.StudyData(smoke.study("distributed")))
    assert row["value"] == ps["speedup"] and row["rounds"] == 1
    assert row["verdict"] == "inconclusive" and "one process" in row["note"]
    pair = strong.loc[["graph", "ps"]]
    assert row["host_load"] == pytest.approx(float((pair["host_other_cpu"]
                                                    + pair["host_steal"]).max()))


@pytest.mark.smoke("inference_sweep")
def test_compare_two_real_runs(smoke, tmp_path):
    """The smoke inference sweep against a second real run of part of it
    (PyTorch on tiny-bert) minutes later: every shared cell is matched, has a
    ratio near 1 with an interval around it; the rest is in A only."""
    a_dir = smoke.study("inference_sweep")
    p = dict(load_file(PARAMS / "inference_sweep" / "smoke.yaml"))  # typed params are frozen
    p.update(models=["tiny-bert"], frameworks=["torch"])
    fwcompare.run_study("inference_sweep", p, profile="smoke", output_dir=tmp_path / "b",
                        progress=False)
    c = compare(a_dir, tmp_path / "b")
    a = load_results(a_dir).results
    shared = a[(a["model"] == "tiny-bert") & (a["framework"] == "torch")]
    assert len(c.cells) == shared["cell_id"].nunique() == 4
    assert (c.cells["status_a"] == "ok").all() and (c.cells["status_b"] == "ok").all()
    r = c.cells
    assert ((r["ci_low"] <= r["time_b_over_a"]) & (r["time_b_over_a"] <= r["ci_high"])).all()
    assert (r["time_b_over_a"] > 0).all()
    assert len(c.only) == a["cell_id"].nunique() - 4 and set(c.only["only_in"]) == {"a"}
    assert not c.env["key"].str.startswith("versions.").any()  # one environment
    assert "params_hash" in set(c.env["key"])  # the second run's params differ
    assert len(c.variants) == 1 and c.variants.iloc[0]["cells"] == 4


@pytest.mark.parametrize("name", each(GROUPS[1]))
def test_each_study_renders_its_page_and_figures(smoke, name):
    renders_page_and_figures(smoke, name)


@pytest.mark.parametrize("study", each(GROUPS[1]))
def test_every_measured_cell_has_its_share_of_the_measured_peak(smoke, study):
    has_its_share_of_the_peak(smoke, study)
