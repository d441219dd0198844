"""Training end to end (issue 50): Hugging Face Trainer, Keras fit and a Flax
loop from the same weights on the same batches (the examples' shared order)
start from the same loss, evaluate at the same steps, and say what each phase
took and when the target accuracy was reached (NaN where it never was)."""
import math

import pytest

from fwcompare import models
from fwcompare.fitting import FitLog, FitSettings
from fwcompare.frameworks import get_backend
from fwcompare.studies.end_to_end import data

MODEL = "tiny-bert"  # 2 layers at random init: seconds per run
STEPS, EVERY = 12, 4


@pytest.fixture(scope="module")
def runs():
    task = data.make_task(0, 256, 64)
    vocab = models.config_for(MODEL).vocab_size
    train = data.tokenize(*task.train, 24, vocab, None, seed=1)
    held = data.tokenize(*task.eval, 24, vocab, None, seed=1)
    weights = models.weights_dir(MODEL, 0, head="seq_cls")
    settings = FitSettings(batch_size=16, max_steps=STEPS, eval_every=EVERY,
                           target_accuracy=1.0, eval_batch_size=32,
                           optimizer=dict(learning_rate=1e-3, weight_decay=0.01, beta1=0.9,
                                          beta2=0.999, eps=1e-8))
    out = {}
    for fw in ("torch", "tensorflow", "jax"):  # each framework as configured so far
        backend = get_backend(fw)
        log = FitLog()
        backend.fit(train, held, weights, "cpu", settings, log)
        out[fw] = (log, log.figures(settings))
    return settings, out


@pytest.mark.slow
def test_the_three_start_from_the_same_loss_and_evaluate_alike(runs):
    settings, out = runs
    first = {fw: log.losses for fw, (log, _) in out.items()}
    assert all(len(v) == settings.agreement_steps for v in first.values()), first
    # same weights, same batches: the same losses (a learning rate of 1e-3 moves
    # them 0.01-0.1 a step, so another batch would show); Keras' Adam places its
    # epsilon otherwise, so its later steps are held to 1e-3
    assert first["jax"] == pytest.approx(first["torch"], abs=1e-5), first
    assert first["tensorflow"][0] == pytest.approx(first["torch"][0], abs=1e-5), first
    assert first["tensorflow"] == pytest.approx(first["torch"], abs=1e-3), first
    assert abs(first["torch"][-1] - first["torch"][0]) > 1e-3, first  # they did move
    for fw, (log, fig) in out.items():
        assert [e["step"] for e in log.evals] == [4, 8, 12], fw
        assert fig["steps"] == STEPS and all(0 <= e["accuracy"] <= 1 for e in log.evals)
    accs = {fw: [e["accuracy"] for e in log.evals] for fw, (log, _) in out.items()}
    for fw in ("tensorflow", "jax"):
        assert max(abs(a - b) for a, b in zip(accs[fw], accs["torch"])) <= 0.1, accs


@pytest.mark.slow
def test_the_phases_and_the_target(runs):
    settings, out = runs
    for fw, (log, fig) in out.items():
        for key in ("setup_s", "first_step_s", "steps_s", "eval_s", "steady_step_s"):
            assert fig[key] > 0, (fw, key, fig)
        assert fig["total_s"] >= fig["setup_s"] + fig["first_step_s"] + fig["steps_s"]
        # the phases split the whole run, its end (the last evaluation to the stack's
        # return) included; what no phase holds (a stack's imports) is a sliver
        assert fig["end_s"] == pytest.approx(fig["total_s"] - log.evals[-1]["at_s"])
        assert fig["end_s"] >= 0, (fw, fig)
        parts = sum(fig[k] for k in ("data_s", "setup_s", "first_step_s", "steps_s", "eval_s",
                                     "end_s"))
        assert fig["total_s"] * 0.9 < parts <= fig["total_s"] + 1e-6, (fw, parts, fig)
        assert fig["examples_per_s"] == pytest.approx(16 / fig["steady_step_s"])
        # a target of 1.0 a 2-layer model at random init does not reach in 12 steps
        if fig["best_accuracy"] < 1.0:
            assert math.isnan(fig["time_to_target_s"]) and math.isnan(fig["steps_to_target"])


def test_bad_settings_are_refused_by_name():
    opt = dict(learning_rate=1e-3, weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8)
    base = dict(batch_size=8, max_steps=6, eval_every=2, target_accuracy=0.9, optimizer=opt)
    for change, words in ((dict(max_steps=7), "no multiple of eval_every"),
                          (dict(target_accuracy=1.5), "target_accuracy must be in"),
                          (dict(target_accuracy=0.0), "target_accuracy must be in"),
                          (dict(batch_size=0), "batch_size must be positive"),
                          (dict(optimizer={}), "optimizer lacks learning_rate")):
        with pytest.raises(ValueError, match=words):
            FitSettings(**{**base, **change})
    s = FitSettings(**base, eval_batch_size=32)
    s.check_held_out(64)
    for n in (48, 16):
        with pytest.raises(ValueError, match=f"held-out split .{n} examples. must be a whole"):
            s.check_held_out(n)


def test_a_stack_reads_its_own_pipelines_only():
    from fwcompare.frameworks import get

    opt = {k: 0.1 for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps")}
    base = dict(batch_size=8, max_steps=4, eval_every=2, target_accuracy=0.8, optimizer=opt)
    kinds = get("tensorflow").fit_pipelines
    assert FitSettings(**base).pipeline_in(kinds, "Keras fit") == kinds[0]  # its default
    assert FitSettings(**base, pipeline="tfdata").pipeline_in(kinds, "Keras fit") == "tfdata"
    with pytest.raises(ValueError, match="Keras fit reads tfdata-prefetch, tfdata, "
                                         "tfdata-pyfunc, not 'tfdata-cache'"):
        FitSettings(**base, pipeline="tfdata-cache").pipeline_in(kinds, "Keras fit")


def test_one_evaluation_and_none():
    s = FitSettings(batch_size=8, max_steps=4, eval_every=4, target_accuracy=0.8, optimizer={
        k: 0.1 for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps")})
    log = FitLog(t0=0.0)
    log.train_start, log.step_ends, log.end = 1.0, [2.0, 2.5, 3.0, 3.5], 4.0
    assert math.isnan(log.figures(s)["steady_step_s"])  # no evaluation: no interval
    assert math.isnan(log.figures(s)["best_accuracy"]) and log.figures(s)["total_s"] == 4.0
    log.evals = [{"step": 4, "accuracy": 0.9, "eval_loss": 0.1, "eval_s": 0.2, "at_s": 3.7}]
    fig = log.figures(s)  # one: from the first step's end to the evaluation, 3 steps
    assert fig["steady_step_s"] == pytest.approx(0.5) and fig["time_to_target_s"] == 3.7


def test_the_target_is_the_first_evaluation_at_or_above_it():
    log = FitLog(t0=0.0)
    opt = {k: 0.1 for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps")}
    s = FitSettings(batch_size=8, max_steps=6, eval_every=2, target_accuracy=0.8, optimizer=opt)
    log.train_start = 1.0
    log.step_ends = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5]  # the first step 2 s, the others 0.5 s
    # evaluations of 0.25 s after steps 2, 4, 6 (at_s: their ends, from t0)
    log.evals = [{"step": k, "accuracy": a, "eval_loss": 0.1, "eval_s": 0.25, "at_s": t}
                 for k, a, t in ((2, 0.5, 3.75), (4, 0.85, 4.75), (6, 0.9, 5.75))]
    fig = log.figures(s)
    assert fig["steps_to_target"] == 4 and fig["time_to_target_s"] == 4.75
    assert fig["best_accuracy"] == 0.9 and fig["final_accuracy"] == 0.9
    assert fig["first_step_s"] == 2.0 and fig["eval_s"] == 0.75
    # each interval after the first: 1.0 s less its 0.25 s evaluation, over 2 steps
    assert fig["steady_step_s"] == pytest.approx(0.375) and fig["examples_per_s"] == \
        pytest.approx(8 / 0.375)
    assert fig["steps_s"] == pytest.approx(5.75 - 1.0 - 2.0 - 0.75)
    s2 = FitSettings(batch_size=8, max_steps=6, eval_every=2, target_accuracy=0.95,
                     optimizer=opt)
    assert math.isnan(log.figures(s2)["time_to_target_s"])  # never reached: NaN
