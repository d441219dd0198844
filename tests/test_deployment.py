"""The deployment study's pieces: the sentence-pair check, params, an
export process that dies, and a step two export processes share (the smoke
report runs every path end to end)."""
import os
import time

import numpy as np
import pytest

from fwcompare.suite import params
from fwcompare import run_study
from fwcompare.studies import deployment


def test_sentence_pairs_ship_long_enough_and_split_in_pairs():
    pairs = deployment.read_pairs()
    assert len(pairs) >= 20
    assert all(len(a.split()) >= 14 and len(b.split()) >= 14 for a, b in pairs)


def test_pair_similarities_and_agreement_see_a_reordering():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(2 * 12, 5, 8))
    sims = deployment.pair_similarities(emb)
    assert sims.shape == (12,) and np.all(np.abs(sims) <= 1)
    # Mean pooling then cosine: one pair's rows made identical gives 1.
    emb[1] = emb[0]
    assert np.isclose(deployment.pair_similarities(emb)[0], 1.0)
    same = deployment.sentence_agreement(sims, sims)
    assert same["sts_spearman"] == 1.0 and same["sts_max_abs_diff"] == 0.0
    shuffled = deployment.sentence_agreement(sims[::-1].copy(), sims)
    assert shuffled["sts_spearman"] < 0.9 and shuffled["sts_max_abs_diff"] > 0
    assert np.isnan(deployment.sentence_agreement(sims * np.nan, sims)["sts_spearman"])


def test_every_framework_keeps_its_baseline_and_modes_are_checked():
    with pytest.raises(params.ParamsError, match="must include 'eager'"):
        params.validate("deployment", {"frameworks": ["torch"],
                                       "modes": {"torch": ["onnxruntime"]}})
    with pytest.raises(params.ParamsError, match="unknown mode 'tflite-int4'"):
        params.validate("deployment", {"frameworks": ["tensorflow"],
                                       "modes": {"tensorflow": ["graph", "tflite-int4"]}})


def test_a_framework_registered_later_brings_its_deployment_paths():
    """The catalog reads the registry when used: a framework declared outside
    fwcompare (a test's) brings its paths, modes and baseline, and takes them
    away when it leaves; the built-in ones are the study's defaults."""
    from fwcompare import frameworks
    from fwcompare.frameworks import DeployPath, Framework

    toy = Framework(name="toyfw", modes=("plain",), deploy_paths={
        "plain": DeployPath("numpy (the baseline)", "NumPy"),
        "frozen": DeployPath("weights saved with np.save", "NumPy", artifact="npz")})
    assert "toyfw" not in deployment.PATHS
    frameworks.register(toy)
    try:
        assert list(deployment.PATHS)[-1] == "toyfw"
        assert deployment.DEPLOY_MODES["toyfw"] == ("plain", "frozen")
        assert deployment.BASELINE["toyfw"] == "plain"
        assert deployment.path_of("toyfw", "frozen").artifact == "npz"
        assert "toyfw" not in params.validate("deployment", {})["modes"]
    finally:
        frameworks.unregister("toyfw")
    assert "toyfw" not in deployment.PATHS and list(deployment.BASELINE) == list(
        frameworks.BUILT_IN)


def test_converter_message_keeps_the_lines_that_say_what_failed():
    exc = RuntimeError("Conversion failed.\n" + "note: called from\n" * 50
                       + "error: 'tfl.reshape' op requires at most one dynamic dimension")
    msg = deployment.converter_message(exc)
    assert msg.startswith("RuntimeError: Conversion failed.")
    assert "tfl.reshape" in msg and msg.count("called from") <= 1
    assert deployment.converter_status(deployment.ExportUnsupported("x")) == "unsupported"
    assert deployment.converter_status(ValueError("x")) == "error"


@pytest.mark.slow
def test_an_export_process_that_dies_costs_its_path_only(tmp_path, monkeypatch, no_orphans):
    """The export process is killed inside one path's export: that path is an
    error row with the exit named, a fresh process exports the next one."""
    monkeypatch.setenv("FWCOMPARE_FAULT", "crash:export torch/torchscript")
    res = run_study("deployment", {
        "models": ["tiny-bert"], "frameworks": ["torch"],
        "modes": {"torch": ["eager", "torchscript", "dynamic-int8"]},
        "batch_sizes": [1], "seq_lens": [8], "warmup_iters": 1, "warmup_s": 0.01,
        "min_iters": 6, "min_time_s": 0.05, "max_time_s": 0.3},
        profile="test", output_dir=tmp_path, progress=False)
    rows = res.results.set_index("mode")
    assert rows.loc["torchscript", "status"] == "error"
    assert "exit code 3" in rows.loc["torchscript", "error"]
    assert rows.loc["eager", "status"] == "ok" and rows.loc["dynamic-int8", "status"] == "ok"
    assert rows.loc["dynamic-int8", "artifact_bytes"] > 0


def _slow_step(where, tmp, log, out):
    """A process of an export stage asking for a step that takes 1 s to make."""
    import json

    from fwcompare.frameworks.export import shared_step

    def make(d):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        (d / "model").mkdir()
        (d / "model" / "weights").write_text("made once")
        return d / "model"
    path, seconds, made, waited = shared_step(where, make, tmp)
    out.write_text(json.dumps(dict(path=str(path), seconds=seconds, made=made, waited=waited)))


@pytest.mark.slow  # it forks the two processes
def test_a_step_two_export_processes_ask_for_at_once_is_made_once(tmp_path, monkeypatch):
    """The SavedModel under the TFLite paths of two export processes: whoever
    asks first makes it; the other waits, then reads it where it was moved,
    and is told how long it waited (its export time leaves that out)."""
    import json
    import multiprocessing

    from fwcompare.frameworks.export import SHARED_STEPS_ENV, Exporter

    shared, tmp = tmp_path / "shared", tmp_path / "own"
    shared.mkdir(), tmp.mkdir()
    where, log = shared / "Exporter-savedmodel", tmp_path / "makers"
    outs = [tmp_path / f"out{i}.json" for i in range(2)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_slow_step, args=(where, tmp, log, o)) for o in outs]
    for p in procs:
        p.start()
        time.sleep(0.2)  # the second asks while the first makes it
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    got = [json.loads(o.read_text()) for o in outs]
    assert len(log.read_text().split()) == 1  # made once
    assert sorted(g["made"] for g in got) == [False, True]
    assert got[0]["path"] == got[1]["path"] == str(where / "model")
    assert (where / "model" / "weights").read_text() == "made once"
    assert all(g["seconds"] >= 1.0 for g in got)  # the maker's time, told to both
    waiter = next(g for g in got if not g["made"])
    assert 0.5 < waiter["waited"] < got[0]["seconds"] + 1.0
    # An exporter of this stage reuses it: the step's seconds, none waited.
    monkeypatch.setenv(SHARED_STEPS_ENV, str(shared))
    ex = object.__new__(Exporter)
    ex.steps, ex.reused_s, ex.tmp = {}, 0.0, tmp
    assert ex.step("savedmodel", lambda d: 1 / 0) == where / "model"
    assert ex.reused_s == pytest.approx(got[0]["seconds"], abs=0.05)
    assert len(log.read_text().split()) == 1
