"""The smoke profile end to end through papermill: real runs, real figures.
This file: the studies of the first of tests/smoke.py's two groups, then the
whole report (scorecard, index, browser, export); ``test_smoke_studies.py``
holds the second group's, so that the two groups are built at once in two
test processes.

Each test names the studies it reads (``@pytest.mark.smoke``; none: the whole
report, scorecard and index); tests/smoke.py builds them once. A study that
fails fails the tests that read it, each naming it, and the others pass."""
import io
import re
import socket
import tarfile

import numpy as np
import pandas as pd
import pytest
from html import escape

from fwcompare.suite import claims, report
from fwcompare.results import archive as export, tables
from fwcompare import frameworks, load_results
from fwcompare.core import models
from fwcompare.suite.params import load_file
from fwcompare.core.paths import PARAMS
from fwcompare.studies import STUDIES, deployment, generation, memory
from smoke import (GROUPS, each, has_its_share_of_the_peak, n_variants, renders_page_and_figures,
                   results_and_params)

pytestmark = pytest.mark.report


@pytest.mark.parametrize("name", each(GROUPS[0]))
def test_each_study_renders_its_page_and_figures(smoke, name):
    renders_page_and_figures(smoke, name)


# Generation is left out: its smoke profile's T5 has no FLOP estimate (an
# encoder-decoder; its decoders' rows have one, and it draws a roofline); so is
# end_to_end, whose whole training runs and input pipelines carry no FLOP estimate.
@pytest.mark.parametrize("study", each(("deployment", "memory")))
def test_every_measured_cell_has_its_share_of_the_measured_peak(smoke, study):
    has_its_share_of_the_peak(smoke, study)


@pytest.mark.smoke("deployment")
def test_deployment_every_path_exports_loads_and_is_checked(smoke):
    """Every path of every framework is a row: ok with its error within the
    bound of its weights' precision (float32 near float32 rounding; INT8 below
    mp_equiv_rtol and above float32's error), or a failure with its message.
    Artifacts shrink with their weights; each was loaded in a process of its
    own that did not export it; every runtime got the run's threads."""
    res, p = results_and_params(smoke, "deployment")
    df = res.results.assign(variant=res.results["framework"] + "/" + res.results["mode"])
    assert len(df) == sum(len(deployment.PATHS[fw]) for fw in p["frameworks"])
    assert set(df["framework"]) == {"torch", "tensorflow", "jax"}
    weights = [deployment.path_of(fw, m).precision for fw, m in zip(df["framework"], df["mode"])]
    df = df.assign(weights=weights, artifact=[bool(deployment.path_of(fw, m).artifact)
                                              for fw, m in zip(df["framework"], df["mode"])])
    failed = df[~df["status"].isin(["ok", "not_equivalent"])]
    assert (failed["error"].str.len() > 10).all(), failed[["mode", "error"]]
    assert set(failed["status"]) <= {"unsupported", "error"}
    # tf2onnx 1.17 has no handler for MiniLM's Gelu (Erfc): the conversion
    # ends where tf2onnx says so, with its words, and leaves no model behind.
    t2o = df.set_index("variant").loc["tensorflow/tf2onnx"]
    assert t2o["status"] == "unsupported", t2o["error"]
    assert "Unsupported ops: Counter({'Erfc'" in t2o["error"]
    assert not list(smoke.study("deployment").rglob("tf2onnx/model.onnx"))
    ok = df[df["status"] == "ok"]
    baselines = ok[~ok["artifact"]]
    assert len(baselines) == 3  # eager, tf.function, jax.jit: the references of the speed-ups
    f32 = ok[ok["weights"] == "float32"]
    assert (f32["fp64_rel_l2_err"] < 1e-5).all(), f32[["mode", "fp64_rel_l2_err"]]
    assert (f32["equiv_max_abs_err"] <= p["equiv_tol"]).all()
    int8 = df[(df["weights"] == "int8") & df["status"].isin(["ok", "not_equivalent"])]
    assert len(int8) >= 3, df[["mode", "status", "error"]]
    assert (int8[int8["status"] == "ok"]["fp64_rel_l2_err"] < 1.0).all()
    assert (int8["fp64_rel_l2_err"] > 10 * f32["fp64_rel_l2_err"].max()).all()
    # What a user notices: float32 paths rank the sentence pairs as PyTorch float32 does.
    assert (f32["sts_spearman"] > 0.999).all(), f32[["mode", "sts_spearman"]]
    assert ok["sts_spearman"].between(-1, 1).all()
    # Sizes follow the weights' precision.
    size = ok[ok["artifact"]].set_index("variant")["artifact_bytes"]
    assert size["tensorflow/tflite-dynamic-int8"] < size["tensorflow/tflite-float16"] \
        < size["tensorflow/tflite-float32"]
    assert size["torch/onnxruntime-int8"] < size["torch/onnxruntime"] / 3
    arts = ok[ok["artifact"]]
    assert ((arts["export_s"] > 0) & (arts["load_s"] > 0) & (arts["artifact_bytes"] > 0)).all()
    # A fresh process: loaded where it was not exported, one process per path.
    assert (arts["exporter_pid"] > 0).all() and (arts["runtime_pid"] > 0).all()
    assert not set(arts["exporter_pid"]) & set(ok["runtime_pid"])
    assert ok["runtime_pid"].is_unique
    threads = int(df["threads"].iloc[0])
    setup = ok.set_index("variant")["mode_setup"]
    assert f"intra_op_num_threads={threads}" in setup["torch/onnxruntime"]
    assert f"num_threads={threads}" in setup["tensorflow/tflite-float32"]
    table = deployment.deployment_table(tables.summarize(res.results, res.samples), res.samples)
    assert table.loc[~table["path"].isin(baselines["variant"]) & (table["status"] == "ok"),
                     "speedup"].gt(0).all()


@pytest.mark.smoke("generation")
def test_generation_tokens_agree_and_prefill_decode_and_compile_are_apart(smoke):
    """Every mode of every framework generates, or says why it cannot; the
    greedy tokens of every measured cell are PyTorch's; the first token and
    the per-token decode are real and apart; a compiled mode's first call is
    counted apart from its steady state, and TensorFlow's XLA bucket serves a
    second prompt length without compiling again."""
    res, p = results_and_params(smoke, "generation")
    df = res.results.assign(variant=res.results["framework"] + "/" + res.results["mode"])
    lengths = len({1, *p["new_tokens"]})
    assert len(df) == (len(p["models"]) * n_variants(p) * len(p["batch_sizes"])
                       * len(p["seq_lens"]) * lengths)
    assert set(df["framework"]) == {"torch", "tensorflow", "jax"}
    # Token-exact agreement: no measured cell departs from PyTorch eager's tokens.
    measured = df[df["status"].isin(["ok", "not_equivalent"])]
    assert (measured["status"] == "ok").all(), measured[measured["status"] != "ok"][
        ["model", "variant", "seq_len", "error"]]
    assert (measured["tokens_agreed"] == measured["new_tokens"]).all()
    assert (measured["ref_min_margin"] > 0).all()
    # The decoder of the GPT-2 architecture runs in every mode; a failure elsewhere
    # names its cause in a sentence, not a cut traceback.
    gpt2 = df[df["model"] == "tiny-gpt2"]
    assert (gpt2["status"] == "ok").all(), gpt2[gpt2["status"] != "ok"][["variant", "error"]]
    # A cell that cannot run says why it is unsupported; none fails (Flax T5 under JAX
    # 0.10 did: frameworks.jax.backend._numpy_clip_keywords).
    failed = df[~df["status"].isin(["ok", "not_equivalent"])]
    assert (failed["status"] == "unsupported").all(), failed[["variant", "status", "error"]]
    assert failed["error"].str.match(r"^[A-Za-z_][\w.]*: \S").all(), failed[["variant", "error"]]
    assert ((measured["median_s"] > 0) & (measured["peak_mem_bytes"] > 0)).all()
    assert np.allclose(measured["tokens_per_s"],
                       measured["batch_size"] * measured["new_tokens"] / measured["median_s"])
    # The analytic KV cache: batch x (prompt + new tokens) x what one token holds.
    kv, _ = generation.kv_bytes_per_token(models.config_for("tiny-gpt2"))
    g = gpt2[gpt2["status"] == "ok"]
    assert np.allclose(g["kv_cache_bytes"],
                       g["batch_size"] * (g["seq_len"] + g["new_tokens"]) * kv)
    # Time to first token and decode per token, from the one-token and full cells.
    table = generation.generation_table(tables.summarize(res.results, res.samples))
    ok = table[table["status"] == "ok"]
    assert len(ok) >= len(p["seq_lens"]) * n_variants(p)
    # A tiny model's decode (tens of microseconds a token) is the difference of two
    # medians: on a loaded machine one cell's can come out at or below zero, never
    # one whose interval lies there, nor more than one.
    shown = ok[["variant", "ttft_s", "decode_s_per_token", "decode_low_s", "decode_high_s"]]
    assert (ok["ttft_s"] > 0).all() and (ok["decode_high_s"] > 0).all(), shown
    assert (ok["decode_s_per_token"] <= 0).sum() <= 1, shown
    assert (ok["decode_low_s"] <= ok["decode_s_per_token"]).all()
    assert (ok["decode_s_per_token"] <= ok["decode_high_s"]).all()
    longest = ok[(ok["model"] == "tiny-gpt2") & (ok["prompt"] == max(p["seq_lens"]))
                 & ok["variant"].isin(["torch/eager", "tensorflow/xla", "jax/jit"])]
    assert len(longest) == 3, longest[["variant", "ttft_s", "decode_s_per_token"]]
    # Compiles apart from the steady state: the first prompt compiles (and its first
    # call says so), the second prompt in the same TensorFlow bucket does not.
    first, second = sorted(p["seq_lens"])[:2]
    for variant in ("tensorflow/xla", "jax/jit", "torch/static-compile"):
        v = g[(g["variant"] == variant) & (g["seq_len"] == first) & (g["new_tokens"] > 1)]
        assert len(v) == 1 and v["recompiles"].iloc[0] >= 1, variant
        assert v["first_call_s"].iloc[0] > 5 * v["median_s"].iloc[0], variant
    xla = g[(g["variant"] == "tensorflow/xla") & (g["seq_len"] == second)]
    assert (xla["padded_len"] == frameworks.bucket(first, p["prompt_buckets"])).all()
    assert len(xla) == lengths and (xla["recompiles"] == 0).all(), xla
    jax_second = g[(g["variant"] == "jax/jit") & (g["seq_len"] == second)]
    assert (jax_second["recompiles"] >= 1).all()  # no buckets: a new shape compiles
    data = claims.StudyData(smoke.study("generation"))
    claim = next(c for c in claims.load_claims() if c.id == "tf-xla-buckets-no-retrace")
    row, _ = claims.evaluate(claim, data)
    # the count, from the one round a smoke run takes: shown, not decided
    assert row["value"] == 0 and row["verdict"] == "inconclusive", row
    assert "from one process" in row["note"], row


@pytest.mark.smoke("memory")
def test_memory_techniques_agree_and_the_search_brackets_each_limit(smoke):
    res, p = results_and_params(smoke, "memory")
    df = res.results
    summary = tables.summarize(df, res.samples)
    t = memory.technique_table(summary, res.samples).set_index(["framework", "technique"])
    # transformers' TensorFlow models have no gradient checkpointing: a row says so.
    tf_ck = t.loc[("tensorflow", "checkpointing")]
    assert tf_ck["status"] == "unsupported" and "no gradient checkpointing" in tf_ck["error"]
    # Every other technique ran, and its losses follow the plain step's (the same
    # function): checkpointing and accumulation change memory, not the update.
    ran = t[t["status"] != "unsupported"]
    assert (ran["status"] == "ok").all(), ran[["status", "error"]]
    for fw in p["frameworks"]:
        losses = res.losses[res.losses["framework"] == fw]
        plain = losses[losses["mode"] == "plain"].sort_values("step")["loss"].to_numpy()
        assert len(plain) == p["agreement_steps"]
        for mode in set(losses["mode"]) - {"plain"}:
            other = losses[losses["mode"] == mode].sort_values("step")["loss"].to_numpy()
            np.testing.assert_allclose(other, plain, rtol=1e-4, err_msg=f"{fw} {mode}")
    # Checkpointing lowers the activations (the rest over parameters, gradients
    # and AdamW state) on the 12-layer model in PyTorch (0.49 and 0.70 of the
    # plain step's in two runs of 2026-11-24). In JAX, Flax's remat
    # leaves XLA's compiled plan of the step near the plain step's on a CPU: the
    # row shows it (plan_ratio), and the measured peak follows the plan.
    assert t.loc[("torch", "checkpointing"), "rest_mib"] < 0.8 * t.loc[("torch", "plain"), "rest_mib"]
    jax_ck = t.loc[("jax", "checkpointing")]
    assert jax_ck["rest_mib"] < 0.8 * t.loc[("jax", "plain"), "rest_mib"] or \
        jax_ck["plan_ratio"] > 0.9, jax_ck
    # Accumulating 4 micro-batches lowers PyTorch's and JAX's peak.
    for fw in ("torch", "jax"):
        assert t.loc[(fw, "accumulate-4"), "memory_ratio"] < 0.9, fw
    # The search: every try a row of its own, ok or oom, nothing else lost; each
    # framework's limit lies between an ok try and an oom try one batch apart,
    # and every fitting try's whole peak is within the budget.
    budget = p["fit_budget_gib"] * 2 ** 30
    tries, searches = df[df["task"] == "fit"], df[df["task"] == "largest_batch"]
    assert set(tries["status"]) == {"ok", "oom"}, tries[["status", "error"]]
    assert len(searches) == len(p["frameworks"]) and (searches["status"] == "ok").all()
    for _, s in searches.iterrows():
        mine = tries[tries["framework"] == s["framework"]]
        ok, bad = mine[mine["status"] == "ok"], mine[mine["status"] == "oom"]
        assert s["largest_batch"] == ok["batch_size"].max() > 1, s["framework"]
        assert s["oom_batch"] == bad["batch_size"].min() == s["largest_batch"] + 1
        assert s["fit_tries"] == len(mine) <= 16
        assert (ok["peak_mem_bytes"] <= budget).all() and (ok["peak_mem_bytes"] > 0).all()
        assert bad["error"].str.startswith("over the budget").all()
        assert bad["peak_mem_bytes"].isna().all() and (bad["budget_bytes"] == budget).all()
        assert s["peak_mem_bytes"] == ok.set_index("batch_size").loc[s["largest_batch"],
                                                                     "peak_mem_bytes"]


@pytest.mark.smoke("end_to_end")
def test_end_to_end_runs_agree_at_the_start_and_every_pipeline_is_measured(smoke):
    from fwcompare.studies import end_to_end

    res, p = results_and_params(smoke, "end_to_end")
    df = res.results
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["variant", "error"]]
    fit = df[df["task"] == "fit"].set_index("framework")
    assert set(fit.index) == set(p["frameworks"]) and (fit["train_steps"] == p["max_steps"]).all()
    # Every phase took time and they add up to no more than the run; the steady
    # step is the samples' median (one per evaluation interval after the first).
    for key in ("setup_s", "first_step_s", "steps_s", "eval_s", "median_s"):
        assert (fit[key] > 0).all(), (key, fit[key])
    assert (fit["total_s"] >= fit[["data_s", "setup_s", "first_step_s", "steps_s",
                                   "eval_s"]].sum(axis=1) - 1e-6).all()
    assert (fit["n_samples"] == p["max_steps"] // p["eval_every"] - 1).all()
    assert np.allclose(fit["throughput_samples_per_s"], p["batch_sizes"][0] / fit["median_s"])
    reached = fit["time_to_target_s"].notna()
    assert (fit.loc[reached, "time_to_target_s"] <= fit.loc[reached, "total_s"]).all()
    assert (fit.loc[~reached, "best_accuracy"] < p["target_accuracy"]).all()
    # Same weights, same first batches: the same first losses (Keras' epsilon
    # placement moves its later steps by up to 1e-4 here), and the same accuracy
    # at the first evaluation.
    curve = end_to_end.curves(smoke.study("end_to_end"))
    first = end_to_end.first_losses(curve)
    assert len(first) == p["agreement_steps"]
    diffs = first[[c for c in first.columns if " - torch/" in c]]
    assert diffs.shape[1] == 2 and (diffs.iloc[0].abs() < 1e-5).all(), first
    assert (diffs.abs() < 1e-3).all().all(), first
    ev = curve[(curve["kind"] == "eval") & (curve["step"] == p["eval_every"])]
    assert len(ev) == 3 and ev["accuracy"].nunique() == 1, ev
    # Every pipeline alone and feeding the step, with its throughput and interval.
    pipes = end_to_end.pipeline_table(tables.summarize(df, res.samples))
    loaders = {(fw, k) for fw in p["frameworks"] for k in p["loaders"][fw]}
    assert set(zip(pipes["framework"], pipes["pipeline"])) == loaders
    assert (pipes["loader_low"] <= pipes["loader_examples_per_s"]).all()
    assert (pipes["loader_examples_per_s"] <= pipes["loader_high"]).all()
    fed = pipes.dropna(subset=["fed_examples_per_s"])
    assert len(fed) == sum(len(p["fed"][fw]) for fw in p["frameworks"])
    # A step fed by any pipeline is slower than that pipeline alone.
    assert (fed["fed_examples_per_s"] < fed["loader_examples_per_s"]).all()
    assert (fed[fed["pipeline"] == "memory"]["fed_time_vs_memory"] == 1.0).all()


@pytest.mark.smoke("end_to_end")
def test_end_to_end_stacks_evaluate_at_the_same_steps_and_their_phases_add_up(smoke):
    """Each stack's run: its evaluations at the same steps, the last where the
    run's end begins; its phases split the whole run; JAX's losses are
    PyTorch's at every agreement step (Keras' epsilon placement moves
    TensorFlow's later ones), and they move."""
    from fwcompare.studies import end_to_end

    res, p = results_and_params(smoke, "end_to_end")
    fit = res.results[res.results["task"] == "fit"].set_index("framework")
    # what no phase holds (a stack's imports) is a sliver of the run
    parts = fit[["data_s", "setup_s", "first_step_s", "steps_s", "eval_s", "end_s"]].sum(axis=1)
    assert (fit["end_s"] >= 0).all(), fit
    assert ((parts > 0.9 * fit["total_s"]) & (parts <= fit["total_s"] + 1e-6)).all(), fit
    assert (fit["time_to_target_s"].isna() == fit["steps_to_target"].isna()).all()
    curve = end_to_end.curves(smoke.study("end_to_end"))
    evals = curve[curve["kind"] == "eval"]
    acc = evals.pivot_table(index="step", columns="framework", values="accuracy")
    assert list(acc.index) == list(range(p["eval_every"], p["max_steps"] + 1,
                                         p["eval_every"])), acc
    assert acc.notna().all().all() and ((acc >= 0) & (acc <= 1)).all().all(), acc
    last = evals.sort_values("step").groupby("framework")["at_s"].last()
    assert np.allclose(fit["end_s"], fit["total_s"] - last.reindex(fit.index)), (fit, last)
    first = end_to_end.first_losses(curve)
    jax = [c for c in first.columns if c.startswith("jax/") and " - torch/" in c]
    assert len(jax) == 1 and (first[jax].abs() < 1e-5).all().all(), first
    torch_loss = first[next(c for c in first.columns if c.startswith("torch/"))]
    assert abs(torch_loss.iloc[-1] - torch_loss.iloc[0]) > 1e-3, first


# -- the whole report: both groups, the scorecard judged over them ---------------------
@pytest.mark.smoke()
def test_the_index_shows_every_figure_and_every_link_resolves(smoke):
    out, index = smoke.report()
    page = index.read_text()
    for name in STUDIES:
        study = out / name
        for png in (study / "figures").glob("*.png"):
            stem = png.name[:-4]
            assert f"{name}/figures/{stem}.png" in page
            assert f"{name}/figures/{stem}.svg" in page and f"{name}/figures/{stem}.csv" in page
            cap = (study / "figures" / f"{stem}.caption.txt").read_text().strip()
            assert escape(cap) in page, (png, cap)
    for href in re.findall(r'href="((?!data:)[^"#]+)"', page):
        assert (out / href).exists(), href


@pytest.mark.smoke()
def test_second_report_with_unchanged_inputs_is_skipped(smoke, monkeypatch):
    out, index = smoke.report()
    # the scorecard ran beside the notebooks, its stamp taken before them: they
    # rewrote nothing it reads, so it is not run again either; nor is a cell measured
    nbs = [out / name / f"{name}.ipynb" for name in STUDIES] + [out / "summary" / "summary.ipynb"]
    before = [nb.stat().st_mtime_ns for nb in nbs]
    called = []
    monkeypatch.setattr(report, "run_notebooks",
                        lambda jobs, *a, **k: called.extend(jobs) or {})
    cells = sorted(out.glob("*/results/cells/*.parquet"))
    stamps = [f.stat().st_mtime_ns for f in cells]
    assert report.build("smoke", out_root=out.parent, progress=False) == index
    assert called == [], [job.name for job in called]
    assert [nb.stat().st_mtime_ns for nb in nbs] == before
    assert sorted(out.glob("*/results/cells/*.parquet")) == cells
    assert [f.stat().st_mtime_ns for f in cells] == stamps


@pytest.mark.smoke()
def test_scorecard_judges_every_claim_from_the_smoke_results(smoke):
    out, _ = smoke.report()
    card = claims.read(out / "summary")
    listed = [c.id for c in claims.load_claims()]
    assert [r["id"] for r in card["claims"]] == listed
    assert all(r["verdict"] in claims.VERDICTS for r in card["claims"])
    by_id = {r["id"]: r for r in card["claims"]}
    # CPU inference, recomputed here from the raw samples: the geometric mean over
    # shared cells of TensorFlow graph / PyTorch eager, each cell's ratio the median
    # of the per-turn ratios (interleaved: block i of each in turn i; else the
    # ratio of medians).
    res = load_results(out / "inference_sweep")
    df = res.results
    blocks = {c: g.sort_values("sample") for c, g in res.samples.groupby("cell_id")}
    keys = ["model", "batch_size", "seq_len"]
    tf = df[(df["framework"] == "tensorflow") & (df["mode"] == "graph")].set_index(keys)
    pt = df[(df["framework"] == "torch") & (df["mode"] == "eager")].set_index(keys)

    def ratio(a, b):
        a, b = blocks[a], blocks[b]
        if len(a) == len(b) and (a["schedule"] == "interleaved").all() and (
                b["schedule"] == "interleaved").all():
            return np.exp(np.median(np.log(a["seconds"].to_numpy() / b["seconds"].to_numpy())))
        return a["seconds"].median() / b["seconds"].median()

    ratios = [ratio(tf.loc[k, "cell_id"], pt.loc[k, "cell_id"]) for k in tf.index]
    row = by_id["cpu-inference-pytorch-faster"]
    assert row["n_cells"] == len(ratios) == len(df) // n_variants(load_file(
        PARAMS / "inference_sweep" / "smoke.yaml"))
    assert np.isclose(row["value"], np.exp(np.mean(np.log(ratios))), rtol=1e-9)
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    band = (row["band_low"], row["band_high"])
    assert claims.judge(row["value"], row["ci_low"], row["ci_high"], band) != "not measured here"
    # smoke measures one round: one process per variant decides no timed claim
    assert row["rounds"] == 1 and row["verdict"] == "inconclusive" and "one process" in row["note"]
    # No GPU in the smoke run: GPU claims are never judged, whatever the CPU shows.
    for r in card["claims"]:
        if r["claim_hardware"] == "gpu":
            assert r["verdict"] == "not measured here" and "GPU" in r["note"], r
        png = out / "summary" / "figures" / f"claim_{r['id']}.png"
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    # The scorecard at a glance: one marker per judged claim, named with its verdict.
    drawn = pd.read_csv(out / "summary" / "figures" / "scorecard_forest.csv")
    marks = drawn.loc[(drawn["kind"] == "point") & drawn["series"].str.contains(": ", na=False),
                      "series"]
    judged = [f"{r['id']}: {r['verdict']}" for r in card["claims"]
              if r["verdict"] != "not measured here"]
    assert judged and sorted(marks) == sorted(judged)


@pytest.mark.smoke()
def test_index_in_headless_chromium(smoke, tmp_path):
    """The report as a reader opens it: from disk, no server, no network."""
    from browser import chromium, local_path
    from selenium.webdriver.common.by import By

    out, index = smoke.report()
    driver = chromium(tmp_path)
    try:
        driver.get(index.as_uri())
        # The page opens with the scorecard: its first section, a verdict per claim.
        first = driver.find_element(By.CSS_SELECTOR, "section")
        assert first.get_attribute("id") == "scorecard"
        rows = driver.find_elements(By.CSS_SELECTOR, "table.scorecard tbody tr")
        listed = [c.id for c in claims.load_claims()]
        assert [r.get_attribute("id") for r in rows] == [f"claim-{i}" for i in listed]
        verdicts = [r.find_element(By.CSS_SELECTOR, "td.verdict").text for r in rows]
        assert all(v in claims.VERDICTS for v in verdicts), verdicts
        # Every image loaded (decoded with a size), and none comes from the network.
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.src, i.complete, i.naturalWidth])")
        assert len(images) >= 16
        for src, complete, width in images:
            assert local_path(src) is not None, src
            assert complete and width > 0, f"image did not load: {src}"
        # Every link resolves: to a file on disk, or to an element of this page.
        links = driver.execute_script(
            "return Array.from(document.links).map(a => [a.getAttribute('href'), a.href])")
        assert len(links) >= 30
        for raw, url in links:
            if raw.startswith("#"):
                assert driver.find_elements(By.ID, raw[1:]), f"no element for {raw}"
                continue
            path = local_path(url)
            assert path is not None and path.is_file(), f"link does not resolve: {raw}"
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
        # The scorecard at a glance: loaded, wide, above the scorecard's table.
        glance, top_of_table = driver.execute_script(
            "const i = document.querySelector('#scorecard .glance img');"
            "const t = document.querySelector('table.scorecard');"
            "return [i && [i.complete, i.naturalWidth, i.getBoundingClientRect().top],"
            "        t.getBoundingClientRect().top]")
        assert glance is not None and glance[0] and glance[1] > 1000, glance
        assert glance[2] < top_of_table, (glance, top_of_table)
        # Each claim's figure is linked from its row and opens as an image.
        for claim_id in listed:
            driver.get((out / "summary" / "figures" / f"claim_{claim_id}.png").as_uri())
            w = driver.execute_script("return document.images[0].naturalWidth")
            assert w > 300, claim_id
    finally:
        driver.quit()


@pytest.mark.smoke()
def test_export_of_the_smoke_report_drops_the_host(smoke, tmp_path):
    out, _ = smoke.report()
    archive = export.export(out, tmp_path / "smoke.tar.gz", drop_host=True)
    host = socket.gethostname()
    with tarfile.open(archive) as t:
        files = {m.name.split("/", 1)[1]: t.extractfile(m).read() for m in t.getmembers()}
    for study in ("inference_sweep", "training", "generation", "deployment"):
        for f in ("results/results.parquet", "results/samples.parquet", "results/env.json",
                  f"{study}.html", "params.yaml"):
            assert f"{study}/{f}" in files, (study, f)
        for png in (out / study / "figures").glob("*.png"):
            for ext in (".png", ".svg", ".csv", ".caption.txt"):
                assert f"{study}/figures/{png.name[:-4]}{ext}" in files, (png, ext)
        rows = pd.read_parquet(io.BytesIO(files[f"{study}/results/results.parquet"]))
        assert len(rows) and set(rows["hostname"]) == {""}
    assert {"summary/scorecard.json", "summary/scorecard.csv", "index.html"} <= set(files)
    pattern = re.compile(rf"(?<![A-Za-z0-9+/=_.-]){re.escape(host)}(?![A-Za-z0-9+/=_-])")
    for name, data in files.items():
        if name.endswith((".html", ".json", ".csv", ".ipynb", ".txt", ".yaml")):
            assert not pattern.search(data.decode("utf-8", "replace")), name


@pytest.mark.smoke()
def test_the_scorecard_judges_the_memory_claims_from_its_rows(smoke):
    out, _ = smoke.report()
    df = load_results(out / "memory").results
    lb = df[df["task"] == "largest_batch"].set_index("framework")["largest_batch"]
    card = {r["id"]: r for r in claims.read(out / "summary")["claims"]}
    row = card["pytorch-oom-first"]
    assert row["value"] == pytest.approx(lb["torch"] / lb["tensorflow"])
    assert row["verdict"] in ("supported", "contradicted")
    for cid in ("gradient-accumulation-lowers-memory", "checkpointing-lowers-memory",
                "checkpointing-costs-20pct-time"):
        assert card[cid]["verdict"] != "not measured here", card[cid]


@pytest.mark.smoke()
def test_the_scorecard_judges_the_end_to_end_claims_from_its_rows(smoke):
    """One round: its timed claims stay inconclusive, each with its value."""
    out, _ = smoke.report()
    df = load_results(out / "end_to_end").results
    fit = df[df["task"] == "fit"].set_index("framework")
    card = {r["id"]: r for r in claims.read(out / "summary")["claims"]}
    mine = [c for c in claims.load_claims() if c.study == "end_to_end"]
    assert len(mine) >= 6
    for c in mine:
        row = card[c.id]
        assert row["verdict"] == "inconclusive" and np.isfinite(row["value"]), row
        assert row["rounds"] == 1 and "one process" in row["note"], row
    tt = card["pytorch-reaches-accuracy-first"]
    if fit["time_to_target_s"].notna().all():
        assert tt["value"] == pytest.approx(fit.loc["tensorflow", "time_to_target_s"]
                                            / fit.loc["torch", "time_to_target_s"])
