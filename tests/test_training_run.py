"""Training end to end (issue 50): the settings a run is refused for, and
what a run's log says of each phase and of the target accuracy (NaN where it
was never reached). That Hugging Face Trainer, Keras fit and a Flax loop from
the same weights on the same batches start from the same loss and evaluate at
the same steps, the smoke report's end-to-end study shows
(``test_smoke_report.py``)."""
import math

import pytest

from fwcompare.core.training_run import FitLog, FitSettings


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
