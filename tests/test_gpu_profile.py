"""The `gpu` profile without a GPU (issue 49): its params validate and dry-run
for every study, interleaving on a GPU falls back to sequential where the
variants' memory does not fit (schedules/shared_gpu.py), and a distributed run with
fewer GPUs than ranks says so in every cell before anything starts."""
import pytest

from fwcompare.commands import cli
from fwcompare.core import env
from fwcompare.suite import params
from fwcompare.suite.api import planned, run_plan
from fwcompare.core.models import config_for
from fwcompare.core.paths import PARAMS
from fwcompare.execution.schedules import shared_gpu
from fwcompare.core.spec import RunSpec
from fwcompare.studies import STUDIES

GIB = 2 ** 30


@pytest.mark.frameworks("torch")
@pytest.mark.parametrize("study", list(STUDIES))
def test_every_study_has_a_gpu_profile_that_dry_runs(study, tmp_path, capsys):
    full = params.load_file(PARAMS / study / "gpu.yaml", study)
    # deployment's runtimes have no CUDA path in the pins: it runs on the host's CPU
    assert full["device"] == ("cpu" if study == "deployment" else "gpu")
    assert cli.main(["run", study, "--profile", "gpu", "--dry-run",
                     "--out", str(tmp_path / study)]) == 0
    out = capsys.readouterr().out
    assert f"{study}: " in out and "estimate: " in out, out
    assert not (tmp_path / study / "results" / "results.parquet").exists()


def test_gpu_profile_interleaves_where_it_can():
    """Every GPU study whose cells are timed side by side asks to interleave
    (generation: a static-compile lane captures CUDA graphs; distributed
    launches its ranks: both sequential)."""
    wanted = {s: params.load_file(PARAMS / s / "gpu.yaml", s)["schedule"] for s in STUDIES}
    assert {s for s, v in wanted.items() if v == "interleaved"} >= {
        "inference_sweep", "acceleration", "training", "memory", "mixed_precision"}


def test_param_count_from_a_config_is_near_the_built_models():
    """bert-base has 108.3M parameters, gpt2 124.4M (their PyTorch models,
    embeddings included): the estimate from the config within 3%."""
    assert shared_gpu.param_count(config_for("bert-base-cased")) == pytest.approx(108.3e6, rel=0.03)
    assert shared_gpu.param_count(config_for("gpt2")) == pytest.approx(124.4e6, rel=0.03)


def test_a_training_lane_needs_more_than_an_inference_lane():
    c = config_for("bert-base-cased")
    infer = shared_gpu.lane_bytes(c, "torch", 8, 128, training=False)
    train = shared_gpu.lane_bytes(c, "torch", 8, 128, training=True)
    weights = shared_gpu.param_count(c) * 4
    assert infer > weights + shared_gpu.reserve_gib("torch") * GIB
    # gradients and Adam's moments: at least three more copies of the weights
    assert train - infer > 3 * weights
    # activations grow with the batch
    assert shared_gpu.lane_bytes(c, "torch", 64, 512, True) > train + 5 * GIB


def _cells(frameworks, modes, task="inference", batch=8, seq=128, model="bert-base-cased"):
    return [RunSpec(study="inference_sweep", model=model, framework=fw, mode=m, device="gpu",
                    dtype="float32", batch_size=b, seq_len=seq, threads=1, task=task)
            for fw in frameworks for m in modes[fw] for b in (1, batch)]


def test_a_set_sums_its_lanes_at_each_lanes_largest_cell():
    cells = _cells(["torch", "jax"], {"torch": ["eager"], "jax": ["jit"]})
    needs = shared_gpu.set_bytes(cells, config_for, lambda s: (s.framework, s.mode))
    c = config_for("bert-base-cased")
    expected = (shared_gpu.lane_bytes(c, "torch", 8, 128, False)
                + shared_gpu.lane_bytes(c, "jax", 8, 128, False))
    assert needs == {"bert-base-cased": pytest.approx(expected)}


@pytest.mark.parametrize("free_gib, schedule", [(80.0, "interleaved"), (4.0, "sequential")])
def test_interleaving_on_a_gpu_falls_back_when_the_set_does_not_fit(free_gib, schedule):
    cells = _cells(["torch", "tensorflow", "jax"],
                   {"torch": ["eager"], "tensorflow": ["graph"], "jax": ["jit"]}, task="train",
                   batch=16)
    needs = shared_gpu.set_bytes(cells, config_for, lambda s: (s.framework, s.mode))
    got = shared_gpu.resolve("interleaved", "gpu", needs, free_gib * GIB)
    assert got.schedule == schedule
    if schedule == "sequential":
        assert "bert-base-cased's variants need about" in got.note
        assert "of its 4.0 GiB free: ran sequential" in got.note
    else:
        assert got.note == "" and got.need_bytes < shared_gpu.HEADROOM * free_gib * GIB
    # unknown free memory: sequential, said; a CPU or a sequential task: untouched
    assert shared_gpu.resolve("interleaved", "gpu", needs, None).schedule == "sequential"
    assert shared_gpu.resolve("interleaved", "cpu", needs, 1.0).schedule == "interleaved"
    assert shared_gpu.resolve("sequential", "gpu", needs, 1e15).schedule == "sequential"


@pytest.mark.parametrize("free_gib", [1.0, 1000.0])
def test_the_runner_resolves_the_schedule_once_and_rows_carry_the_note(
        free_gib, tmp_path, monkeypatch):
    """A Runner for the GPU profile (nothing run: a CPU machine) reads NVML's
    free memory once and keeps the outcome for the later round passes."""
    from fwcompare.execution.runner import Passes, Runner

    calls = []
    monkeypatch.setattr(env, "gpu_free_bytes", lambda: calls.append(1) or free_gib * GIB)
    study = STUDIES["training"]
    full = params.load_file(PARAMS / "training" / "gpu.yaml", "training")
    passes = Passes()
    plan = run_plan(study, full)
    first = Runner(plan, tmp_path / "r", task="train", progress=False, passes=passes)
    second = Runner(plan, tmp_path / "r", task="train", progress=False, passes=passes)
    assert len(calls) == 1 and second.gpu_schedule is first.gpu_schedule
    if free_gib < 10:
        assert first.gpu_schedule.schedule == "sequential"
        assert first.provenance["schedule"] == "sequential"
        assert "ran sequential" in first.provenance["schedule_note"]
        assert first.timing.min_block_s == 0.0  # sequential's timing, not interleaved's
    else:
        assert first.provenance == {**first.provenance, "schedule": "interleaved",
                                    "schedule_note": ""}


def test_distributed_on_too_few_gpus_says_so_in_every_cell(tmp_path, monkeypatch):
    """Each rank takes a GPU of its own: on one GPU the gpu profile's cells
    (up to 2 workers) are unsupported with the count, before any process."""
    from fwcompare import run_study

    monkeypatch.setattr(env, "gpus", lambda: [{"name": "NVIDIA H100"}])
    full = params.load_file(PARAMS / "distributed" / "gpu.yaml", "distributed")
    why = STUDIES["distributed"].machine_problem(full)
    assert why == "needs 2 GPUs (one per worker, up to 2 workers); this machine has 1"
    monkeypatch.setattr(env, "gpus", lambda: [{}, {}])
    assert STUDIES["distributed"].machine_problem(full) == ""
    assert STUDIES["distributed"].machine_problem({**full, "device": "cpu"}) == ""
    # the whole run: every cell a row saying why, no worker, no doctor needed
    monkeypatch.setattr(env, "gpus", lambda: [])
    import fwcompare.execution.runner as runner_mod
    from fwcompare.suite import doctor

    started = []
    monkeypatch.setattr(runner_mod.Runner, "start_servers", lambda *a: started.append(a))
    monkeypatch.setattr(doctor, "require", lambda *a, **k: None)  # no GPU to check here
    rows = run_study("distributed", dict(full), output_dir=tmp_path / "distributed",
                     progress=False).results
    assert set(rows["cell_id"]) == {c.cell_id for c in STUDIES["distributed"].cells(full)}
    assert set(rows["status"]) == {"unsupported"}
    assert set(rows["error"]) == {"needs 2 GPUs (one per worker, up to 2 workers); this "
                                  "machine has 0"}
    assert not started
    # the scorecard says why its claims are not measured
    from fwcompare.suite import claims

    card = claims.scorecard("gpu", results_dir=tmp_path, output_dir=tmp_path / "summary")
    mine = card.table[card.table["study"] == "distributed"]
    assert set(mine["verdict"]) == {"not measured here"}
    assert set(mine["note"]) == {"none of the study's cells ran here: needs 2 GPUs (one per "
                                 "worker, up to 2 workers); this machine has 0"}


@pytest.mark.frameworks("torch")  # model sizes from configs: transformers imports torch
def test_the_report_prints_one_estimate_of_its_studies_from_their_parts(tmp_path):
    """Before a first gpu report: the studies' estimates from their parts,
    the fork servers' imports counted once (the studies share them)."""
    from fwcompare.suite import report
    from fwcompare.execution.estimate import FIXED_S, NOTEBOOK_S, SCORECARD_S, estimate

    # (their extra rounds: the next test)
    chosen = planned({s: ({**params.load_file(PARAMS / s / "gpu.yaml", s), "more_rounds": 0},
                          tmp_path / s) for s in ("inference_sweep", "training")})
    line = report.total_estimate(chosen)
    ests = [estimate(plan, out / "results") for plan, out in chosen.values()]
    high = sum(e.seconds for e in ests) - FIXED_S["gpu"]["start"]
    low = sum(e.low_seconds for e in ests) - FIXED_S["gpu"]["start"]
    # then the two notebooks and the scorecard's, which runs first among them:
    # no less than the scorecard alone, the notebooks' waves, or the work shared out
    jobs = report.notebook_jobs()
    after = [max(s, -(-2 // jobs) * n, (2 * n + s) / jobs) for n, s in zip(NOTEBOOK_S, SCORECARD_S)]
    assert line.startswith(f"estimate for the report of 2 studies: {report._mmss(low + after[0])}"
                           f" to {report._mmss(high + after[1])}: measurements "), line
    assert f"to {report._mmss(high)} (inference_sweep, training: no earlier run here" in line
    assert line.endswith(f", then notebooks and scorecard {report._mmss(after[0])} to "
                         f"{report._mmss(after[1])}"), line
    # a time budget below the low end is named, one above it is not
    low_s = low + after[0]
    assert report.total_estimate(chosen, low_s + 1) == line
    assert report.total_estimate(chosen, low_s - 60).endswith(
        f"; over its time budget of {(low_s - 60) / 60:g} minutes even at its low end (the "
        "budget bounds only extra rounds; every planned cell runs)")


@pytest.mark.frameworks("torch")  # model sizes from configs: transformers imports torch
def test_the_report_estimate_adds_the_extra_rounds_budget(tmp_path):
    """quick's inference_sweep may spend its 40 s of extra rounds on doubtful
    claims: the upper end of the report's estimate includes them."""
    from fwcompare.suite import report

    quick = params.load_file(PARAMS / "inference_sweep" / "quick.yaml", "inference_sweep")
    line = report.total_estimate({"inference_sweep": (quick, tmp_path / "inference_sweep")})
    none = report.total_estimate({"inference_sweep": ({**quick, "more_rounds": 0},
                                                      tmp_path / "inference_sweep")})
    assert (f"up to {report._mmss(quick['more_rounds_s'])} of extra rounds for doubtful "
            "claims), then notebooks") in line, line
    assert "extra rounds" not in none
    # a report's time budget (quick's 20 minutes) bounds them: the line says so
    assert report.total_estimate({"inference_sweep": (quick, tmp_path / "inference_sweep")},
                                 1200.0).endswith(
        "; its time budget 20 minutes: extra rounds only where they fit in it"), line
    # they start only where they end before the budget less the notebooks: they may
    # spend what a measuring at the estimate's low end leaves, the report's upper end
    # counts what its upper end leaves, and none is said where even the low end fills it
    from fwcompare.execution.estimate import estimate

    e = estimate(run_plan("inference_sweep", quick), tmp_path / "inference_sweep" / "results")
    after = report.after_measuring(1)
    runs = {"inference_sweep": (quick, tmp_path / "inference_sweep")}
    assert e.low_seconds + 10.0 < e.seconds  # the parts' range is wider than 10 s
    line = report.total_estimate(runs, e.low_seconds + after[1] + 10.0)  # 10 s after the low end
    assert "up to 10.0 s of extra rounds for doubtful claims" in line, line
    assert f" to {report._mmss(e.seconds + after[1])}: measurements" in line, line
    line = report.total_estimate(runs, e.seconds + after[1] + 10.0)  # 10 s after the high end
    assert f" to {report._mmss(e.seconds + 10.0 + after[1])}: measurements" in line, line
    full = report.total_estimate(runs, e.low_seconds + after[1])
    assert "extra rounds for doubtful" not in full and (
        "; no room for extra rounds in its time budget of "
        f"{(e.low_seconds + after[1]) / 60:g} minutes") in full, full


@pytest.mark.frameworks("torch")  # model sizes from configs: transformers imports torch
def test_the_report_estimate_counts_sure_extra_rounds_at_its_upper_end_only(tmp_path):
    """A sure extra round (``more_rounds_sure``: quick's inference_sweep with
    two rounds and a third for the claims in doubt) runs only where a claim
    is in doubt: the estimate's low end takes none, its high end a round of
    every claimed cell, whatever the time budget."""
    from fwcompare.execution.estimate import estimate
    from fwcompare.suite import report

    quick = {**params.load_file(PARAMS / "inference_sweep" / "quick.yaml", "inference_sweep"),
             "rounds": 2, "more_rounds": 1, "more_rounds_sure": 1, "more_rounds_s": 0.0}
    runs = {"inference_sweep": (quick, tmp_path / "inference_sweep")}
    plan = run_plan("inference_sweep", quick)
    e = estimate(plan, tmp_path / "inference_sweep" / "results")
    third = estimate(plan.with_more(1), tmp_path / "inference_sweep" / "results").seconds
    assert third > e.seconds
    after = report.after_measuring(1)
    for budget in (None, 60.0):  # a budget far too small changes nothing
        line = report.total_estimate(runs, budget)
        assert (f"{report._mmss(e.low_seconds + after[0])} to "
                f"{report._mmss(third + after[1])}: measurements") in line, line
        assert "extra rounds for doubtful" not in line, line
