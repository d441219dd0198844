"""The claims scorecard: the claims file is checked, each metric computes its
figure from raw samples, and the verdict follows the CI against the band."""
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fwcompare.suite import claims
from fwcompare.suite.claims import Claim, judge

ISSUE_CLAIMS = {"cpu-inference-pytorch-faster", "gpu-inference-tensorflow-faster",
                "pytorch-oom-first", "torchscript-speedup", "torchscript-slower-large-inputs",
                "xla-speedup", "xla-most-for-small-inputs", "torch-compile-near-graph",
                "pytorch-trains-bert-faster", "tensorflow-less-training-memory",
                "mixed-precision-training-speedup", "bf16-more-stable-than-fp16",
                "data-parallel-near-linear"}


def test_judge_against_a_band():
    band = (1.1, 1.3)
    assert judge(1.2, 1.15, 1.25, band) == "supported"
    assert judge(1.0, 0.95, 1.05, band) == "contradicted"
    assert judge(1.4, 1.35, 1.5, band) == "contradicted"
    assert judge(1.12, 1.05, 1.2, band) == "inconclusive"   # straddles the lower edge
    assert judge(1.2, 1.0, 1.4, band) == "inconclusive"     # reaches past both edges
    assert judge(1.2, math.nan, math.nan, band) == "supported"  # no CI: the value decides
    assert judge(1.0, math.nan, math.nan, band) == "contradicted"
    assert judge(math.nan, math.nan, math.nan, band) == "not measured here"
    # A claim of "faster" needs more than a tie: the edge itself is outside.
    assert judge(1.02, 1.0, 1.02, (1.02, math.inf)) == "contradicted"


def claim(**kw):
    base = dict(id="c", claim="A is 1.2x B", source="s", claimed="1.2x", hardware="any",
                study="inference_sweep", metric="time_ratio",
                cells={"a": "torch/eager", "b": "tensorflow/graph"}, expected=1.2,
                direction="about", tolerance=0.1)
    return Claim(**{**base, **kw})


def test_bands_by_direction():
    assert claim().band == pytest.approx((1.1, 1.3))
    assert claim(direction="above", reference=1.0, tolerance=0.02).band == (1.02, math.inf)
    assert claim(direction="below", reference=1.0, tolerance=0.0).band == (-math.inf, 1.0)


def test_the_project_claims_file_has_the_issue_claims():
    cs = claims.load_claims()
    assert ISSUE_CLAIMS <= {c.id for c in cs}
    for c in cs:
        assert c.source_text and c.claimed and c.claim.endswith(".")
        assert c.band[0] < c.band[1]


CLAIM_X = ("  - id: x\n    claim: A.\n    source: s\n"
           "    claimed: '1x'\n    hardware: cpu\n    study: inference_sweep\n"
           "    metric: time_ratio\n    cells: {a: torch/eager, b: tensorflow/graph}\n"
           "    expected: 1.0\n    direction: about\n")


@pytest.mark.parametrize("edit, message", [
    ("    tolerance: 0.1\n    colour: red\n", "claim 'x': unknown key 'colour'"),
    ("    tolerance: -0.1\n", "claim 'x': key 'tolerance': must be >= 0"),
    ("    tolerance: 0.1\n" + CLAIM_X + "    tolerance: 0.1\n", "claim 'x': duplicate id"),
    ("    tolerance: yes\n", "claim 'x': key 'tolerance': expected a number, got True"),
    ("    tolerance: 0.1\n    adaptation: [gpu]\n", "claim 'x': key 'adaptation': expected str"),
])
def test_bad_claims_files_are_named(tmp_path, edit, message):
    text = "sources: {s: a source}\nclaims:\n" + CLAIM_X
    f = tmp_path / "claims.yaml"
    f.write_text(text + edit)
    with pytest.raises(claims.ClaimsError, match=message):
        claims.load_claims(f)


def test_an_adapted_claim_says_how_in_its_note(tmp_path):
    """A claim whose measurement differs from its source's says how in its
    note, judged or not; the project's adapted claims each have a pair or a
    reason."""
    f = tmp_path / "claims.yaml"
    f.write_text("sources: {s: a source}\nclaims:\n" + CLAIM_X + "    tolerance: 0.1\n"
                 "    adaptation: >-\n      on a CPU; the source\n      used a GPU\n")
    c = claims.load_claims(f)[0]
    assert c.adaptation == "on a CPU; the source used a GPU"
    row, _ = claims.evaluate(c, SimpleNamespace(present=False, manifest={}, **STUDY_DATA))
    assert "adapted from the source: on a CPU; the source used a GPU" in row["note"], row
    adapted = {c.id: c.adaptation for c in claims.load_claims() if c.adaptation}
    assert {"xla-speedup", "pytorch-oom-first", "py-function-costs-30pct",
            "jax-faster-than-pytorch"} <= set(adapted)
    ids = {c.id for c in claims.load_claims()}
    assert {"jax-faster-than-compiled-pytorch", "jax-faster-than-tensorflow-xla"} <= ids


def test_claims_file_problems_each_named(tmp_path):
    f = tmp_path / "claims.yaml"
    f.write_text("sources: {s: a source}\nclaims:\n"
                 "  - {id: a, claim: A., source: t, claimed: x, hardware: tpu, study: inference_sweep,"
                 " metric: time_ratio, cells: {a: torch/eager}, expected: 1, direction: above,"
                 " tolerance: 0}\n"
                 "  - {id: b, claim: B., source: s, claimed: x, hardware: cpu, study: nope,"
                 " metric: speed, cells: {}, expected: 1, direction: about, tolerance: 0}\n")
    with pytest.raises(claims.ClaimsError) as exc:
        claims.load_claims(f)
    msg = str(exc.value)
    for part in ["claim 'a': key 'source': unknown value 't'",
                 "claim 'a': key 'hardware': unknown value 'tpu'",
                 "claim 'a': direction 'above' needs a 'reference'",
                 "claim 'a': key 'cells': metric 'time_ratio' needs a, b",
                 "claim 'b': key 'study': unknown value 'nope'",
                 "claim 'b': key 'metric': unknown value 'speed'"]:
        assert part in msg, msg


# what a StudyData has besides its frames: one round in the params, no extra
# rounds, intervals at 95%, no results folder
STUDY_DATA = dict(rounds=1, more_rounds=0, confidence=0.95, dir=Path("/nonexistent"),
                  prior=None, spreads=None, params={})


def fake_study(cells, present=True, losses=None):
    """A StudyData stand-in: cells are (model, variant, device, batch, seq, status,
    samples or None, peak_mem)."""
    rows, by_cell = [], {}
    for i, (model, var, device, b, s, status, x, mem) in enumerate(cells):
        cid = f"c{i}"
        fw, mode = var.split("/")
        rows.append(dict(cell_id=cid, model=model, framework=fw, mode=mode, variant=var,
                         device=device, dtype="float32", batch_size=b, seq_len=s,
                         new_tokens=0, status=status, median_s=np.median(x) if x is not None else math.nan,
                         peak_mem_bytes=mem, task="inference"))
        if x is not None:
            by_cell[cid] = np.asarray(x)
    df = pd.DataFrame(rows)
    return SimpleNamespace(present=present, summary=df, results=df, by_cell=by_cell,
                           samples=pd.DataFrame(), losses=losses, manifest={}, **STUDY_DATA)


def noisy(center, n=30, seed=0):
    return center * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n))


def two_framework_study(ratio, device="cpu"):
    cells = []
    for j, (b, s) in enumerate([(1, 32), (2, 128)]):
        base = 0.01 * b * s / 32
        cells += [("m", "torch/eager", device, b, s, "ok", noisy(base * ratio, seed=j), 2e9),
                  ("m", "tensorflow/graph", device, b, s, "ok", noisy(base, seed=10 + j), 1e9)]
    return fake_study(cells)


@pytest.mark.parametrize("ratio, expected, verdict", [
    (1.2, 1.2, "supported"), (1.2, 1.5, "contradicted"), (1.2, 1.1, "inconclusive")])
def test_time_ratio_from_raw_samples(ratio, expected, verdict):
    data = two_framework_study(ratio)
    row, points = claims.evaluate(claim(expected=expected, tolerance=0.1), data)
    assert row["value"] == pytest.approx(ratio, rel=0.01)
    assert row["ci_low"] < row["value"] < row["ci_high"] and row["has_ci"]
    assert row["verdict"] == verdict, row
    assert row["n_cells"] == 2 and [p[0] for p in points] == ["m 1x32", "m 2x128"]
    medians = [np.median(data.by_cell[f"c{i}"]) / np.median(data.by_cell[f"c{i + 1}"])
               for i in (0, 2)]
    assert row["value"] == pytest.approx(np.sqrt(medians[0] * medians[1]), rel=1e-12)


def test_a_timed_claim_from_one_process_per_variant_is_not_decided():
    """Its interval holds one sampling window's noise, not the spread between
    processes (issue 48): inconclusive, and the note says why."""
    data = two_framework_study(1.2)
    data.summary["rounds"] = 1
    row, _ = claims.evaluate(claim(expected=1.2, tolerance=0.1), data)
    assert row["rounds"] == 1 and "one process" in row["note"]
    assert row["verdict"] == "inconclusive" and row["ci_low"] > 1.1 and row["ci_high"] < 1.3
    data.summary.loc[data.summary["variant"] == "torch/eager", "rounds"] = 2
    data.summary.loc[data.summary["variant"] == "tensorflow/graph", "rounds"] = 3
    row, _ = claims.evaluate(claim(expected=1.2, tolerance=0.1), data)
    assert row["rounds"] == 2 and "one process" not in row["note"]
    assert row["verdict"] == "supported"
    # a round of its cells that failed while others measured is left out, and said
    data.summary["lost_rounds"] = [1, 0, 0, 0]
    row, _ = claims.evaluate(claim(expected=1.2, tolerance=0.1), data)
    assert row["verdict"] == "supported" and "1 round(s) of its cells failed" in row["note"]
    # a figure that is no timing is per round: from one process it decides nothing either
    data.summary["rounds"] = 1
    row, _ = claims.evaluate(claim(metric="memory_ratio", expected=2.0, tolerance=0.1), data)
    assert row["verdict"] == "inconclusive" and "a figure from one process" in row["note"]


def test_gpu_claim_on_a_cpu_run_is_not_judged_but_shows_the_cpu_figure():
    row, _ = claims.evaluate(claim(hardware="gpu"), two_framework_study(1.2))
    assert row["verdict"] == "not measured here"
    assert row["value"] == pytest.approx(1.2, rel=0.01) and "GPU" in row["note"]
    judged, _ = claims.evaluate(claim(hardware="gpu"), two_framework_study(1.2, "gpu"))
    assert judged["verdict"] == "supported" and judged["measured_on"].startswith("gpu")


def test_failed_cells_leave_a_claim_unmeasured_and_say_why():
    data = fake_study([("m", "torch/eager", "cpu", 1, 32, "ok", noisy(0.01), 1e9),
                       ("m", "tensorflow/graph", "cpu", 1, 32, "error", None, math.nan)])
    row, _ = claims.evaluate(claim(), data)
    assert row["verdict"] == "not measured here"
    assert "tensorflow/graph: error 1" in row["note"]


def test_min_aggregate_picks_the_model_with_the_lowest_ratio():
    cells = []
    for j, (model, r) in enumerate([("fast", 1.3), ("slow", 0.8)]):
        cells += [(model, "torch/eager", "cpu", 8, 128, "ok", noisy(0.1 * r, seed=j), 1e9),
                  (model, "tensorflow/graph", "cpu", 8, 128, "ok", noisy(0.1, seed=5 + j), 1e9)]
    c = claim(shapes="largest", aggregate="min", direction="below", reference=1.0,
              tolerance=0.0)
    row, _ = claims.evaluate(c, fake_study(cells))
    assert row["value"] == pytest.approx(0.8, rel=0.01) and row["verdict"] == "supported"
    assert row["cells"] == "slow 8x128" and "slow" in row["note"]


def test_speedup_trend_compares_smallest_with_largest():
    cells = [("m", "tensorflow/graph", "cpu", 1, 16, "ok", noisy(0.02), 1e9),
             ("m", "tensorflow/xla", "cpu", 1, 16, "ok", noisy(0.01, seed=1), 1e9),
             ("m", "tensorflow/graph", "cpu", 8, 128, "ok", noisy(0.5, seed=2), 1e9),
             ("m", "tensorflow/xla", "cpu", 8, 128, "ok", noisy(0.4, seed=3), 1e9)]
    c = claim(metric="speedup_trend", cells={"a": "tensorflow/graph", "b": "tensorflow/xla"},
              direction="above", reference=1.0, tolerance=0.05)
    row, _ = claims.evaluate(c, fake_study(cells))
    assert row["value"] == pytest.approx(2.0 / 1.25, rel=0.02)   # 2x at small, 1.25x at large
    assert row["ci_low"] < row["value"] < row["ci_high"] and row["verdict"] == "supported"


def test_a_memory_ratio_from_one_process_decides_nothing():
    """A peak-memory figure from one process has no interval: shown, not decided."""
    c = claim(metric="memory_ratio", expected=2.0, tolerance=0.1)
    row, _ = claims.evaluate(c, two_framework_study(1.0))
    assert row["value"] == pytest.approx(2.0) and not row["has_ci"]
    assert row["verdict"] == "inconclusive" and "from one process" in row["note"]


def memory_rounds_study(peaks_a, peaks_b):
    """Two cells, torch/eager (a) and tensorflow/graph (b), with one peak
    memory per round: the summary keeps round 0's row, the results every round's."""
    summary = fake_study([("m", "torch/eager", "cpu", 1, 32, "ok", noisy(0.01), peaks_a[0]),
                          ("m", "tensorflow/graph", "cpu", 1, 32, "ok", noisy(0.01, seed=1),
                           peaks_b[0])])
    rows = [dict(cell_id=cid, round=r, status="ok", peak_mem_bytes=mem)
            for cid, peaks in (("c0", peaks_a), ("c1", peaks_b)) for r, mem in enumerate(peaks)]
    summary.results = pd.DataFrame(rows)
    return summary


def test_a_memory_ratio_over_rounds_has_students_t_interval():
    a, b = [2.00e9, 2.10e9, 1.96e9], [1.0e9, 1.0e9, 1.0e9]
    c = claim(metric="memory_ratio", expected=2.0, tolerance=0.3)
    row, _ = claims.evaluate(c, memory_rounds_study(a, b))
    logs = np.log(np.array(a) / np.array(b))
    half = 4.302653 * logs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 dof)
    assert row["value"] == pytest.approx(math.exp(logs.mean()))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert row["has_ci"] and row["confidence"] == 0.95 and row["verdict"] == "supported"
    assert "over 3 fresh processes" in row["note"]
    # a band edge inside the interval: not decided
    row, _ = claims.evaluate(claim(metric="memory_ratio", expected=2.0, tolerance=0.05),
                             memory_rounds_study(a, b))
    assert row["verdict"] == "inconclusive"


def test_the_same_figure_in_every_process_is_exact():
    c = claim(metric="memory_ratio", expected=2.0, tolerance=0.1)
    row, _ = claims.evaluate(c, memory_rounds_study([2e9] * 3, [1e9] * 3))
    assert row["value"] == row["ci_low"] == row["ci_high"] == pytest.approx(2.0)
    assert row["exact"] and row["has_ci"] and math.isnan(row["confidence"])
    assert row["verdict"] == "supported" and "exact: the same figure in each of its 3" in row["note"]
    assert claims.format_value(row) == "2.000 (exact)"
    assert claims.decided_without_interval([row]) == 0


@pytest.mark.parametrize("statuses, verdict, exact", [
    (["ok", "ok", "ok"], "supported", True),
    (["ok", "error", "ok"], "inconclusive", False),   # one process of three failed
    (["ok"], "inconclusive", False)])                 # one process: no interval
def test_a_path_works_from_every_round_it_ran(statuses, verdict, exact):
    """tf2onnx-bridges-frameworks: the share of the path's cells ok, per round
    (a fresh process each), then over the rounds."""
    c = claim(study="deployment", metric="path_works", cells={"a": "tensorflow/tf2onnx"},
              direction="above", reference=0.99, tolerance=0.0, expected=1.0)
    data = fake_study([("m", "tensorflow/tf2onnx", "cpu", 1, 128, "ok", noisy(0.01), 1e8)])
    data.summary = data.summary.assign(error="")
    data.results = pd.DataFrame([dict(cell_id="c0", round=r, status=st)
                                 for r, st in enumerate(statuses)])
    row, _ = claims.evaluate(c, data)
    assert row["verdict"] == verdict and bool(row["exact"]) == exact, row
    if len(statuses) == 1:
        assert "from one process" in row["note"]
    elif exact:
        assert row["value"] == 1.0 and "each of its 3 fresh processes" in row["note"]
    else:
        assert row["value"] == pytest.approx(2 / 3)
        assert row["ci_low"] < row["value"] < row["ci_high"]


def stability_losses(fp16_skips, bf16_skips, steps=10):
    rows = []
    for dtype, skips in [("float32", 0), ("float16", fp16_skips), ("bfloat16", bf16_skips)]:
        for step in range(steps):
            rows.append(dict(model="m", framework="torch", mode="eager", dtype=dtype, step=step,
                             loss=2.0 - 0.01 * step, reference_loss=2.0 - 0.01 * step,
                             skipped=step < skips, loss_scale=1.0))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("fp16, bf16, why", [
    (3, 0, "from one process"), (0, 2, "from one process"), (0, 0, "nothing separates them")])
def test_precision_stability_from_one_run_decides_nothing(fp16, bf16, why):
    """A count of unstable steps from one stability run per precision has no
    interval: it is shown, and the claim stays undecided."""
    c = claim(study="mixed_precision", metric="precision_stability",
              cells={"a": "float16", "b": "bfloat16"}, direction="above", reference=0.0,
              tolerance=0.0, expected=1)
    data = fake_study([], losses=stability_losses(fp16, bf16))
    row, _ = claims.evaluate(c, data)
    assert row["value"] == fp16 - bf16 and row["verdict"] == "inconclusive", row
    assert why in row["note"]


def test_scorecard_without_results_is_all_not_measured(tmp_path):
    card = claims.scorecard("smoke", results_dir=tmp_path, output_dir=tmp_path / "summary")
    assert set(card.table["verdict"]) == {"not measured here"}
    assert card.table["note"].str.contains("has no results for this profile").all()
    stored = claims.read(tmp_path / "summary")
    assert len(stored["claims"]) == len(card.table)
    assert stored["verdicts"]["not measured here"] == len(card.table)
    assert [c.id for c in claims.load_claims()] == [r["id"] for r in stored["claims"]]


def test_cell_names_no_study_could_measure_are_named(tmp_path):
    f = tmp_path / "claims.yaml"
    f.write_text("sources: {s: a source}\nclaims:\n" + CLAIM_X.replace(
        "tensorflow/graph", "tensorflow/grpah") + "    tolerance: 0.1\n")
    with pytest.raises(claims.ClaimsError, match="claim 'x': key 'cells': b 'tensorflow/grpah' "
                                                 "is neither framework/mode"):
        claims.load_claims(f)


def test_a_verdict_measured_on_a_busy_machine_says_so():
    data = two_framework_study(1.2)
    data.summary["host_load"] = 0.03
    row, _ = claims.evaluate(claim(expected=1.2, tolerance=0.1), data)
    assert row["host_load"] == pytest.approx(0.03) and "busy machine" not in row["note"]
    data.summary.loc[1, "host_load"] = 0.27  # one cell's busiest round
    row, _ = claims.evaluate(claim(expected=1.2, tolerance=0.1), data)
    assert row["verdict"] == "supported" and row["host_load"] == pytest.approx(0.27)
    assert "busy machine" in row["note"] and "27%" in row["note"], row["note"]


def _rounds_study(sds, seed=5, study="inference_sweep"):
    """A study's stand-in whose claim i (model m{i}) compares two variants over
    three rounds whose ratio moves ``sds[i]`` from process to process."""
    from fwcompare.core.stats import CellSamples

    rng = np.random.default_rng(seed)
    cells, by_cell = [], {}
    for i, sd in enumerate(sds):
        effect = sd * rng.standard_normal(3)
        for var, scale in (("torch/eager", 1.2), ("tensorflow/graph", 1.0)):
            cid = f"c{len(cells)}"
            own = effect if var == "torch/eager" else np.zeros(3)
            by_cell[cid] = CellSamples({r: 0.01 * scale * np.exp(own[r]) * (
                1 + 0.001 * rng.standard_normal(20)) for r in range(3)})
            cells.append(dict(cell_id=cid, model=f"m{i}", framework=var.split("/")[0],
                              mode=var.split("/")[1], variant=var, device="cpu",
                              dtype="float32", batch_size=1, seq_len=32, new_tokens=0,
                              status="ok", rounds=3, task="inference",
                              median_s=float(np.median(by_cell[cid].pooled)), peak_mem_bytes=1e9))
    df = pd.DataFrame(cells)
    return SimpleNamespace(present=True, summary=df, results=df, by_cell=by_cell,
                           samples=pd.DataFrame(), losses=None, manifest={},
                           **{**STUDY_DATA, "rounds": 3, "dir": Path("/nonexistent") / study,
                              "params": {"device": "cpu", "schedule": "interleaved"}})


def _width(r):
    return math.log(r["ci_high"]) - math.log(r["ci_low"])


def test_a_class_prior_narrows_timed_claims_and_spares_one_that_spreads_more():
    """Twelve claims, one model each, three rounds whose ratios move 1% from
    process to process, and a thirteenth whose rounds move 8%: the prior of
    their class (``claims.variance_priors``) narrows the twelve intervals
    and leaves the thirteenth its own t; each row keeps its own-t interval
    too."""
    data = _rounds_study([0.01] * 12 + [0.08])
    mine = [claim(id=f"k{i}", models=[f"m{i}"], expected=1.2, tolerance=0.1) for i in range(13)]
    own = [claims.evaluate(c, data)[0] for c in mine]
    priors = claims.variance_priors(mine, {"inference_sweep": data})
    assert list(priors) == [claims.prior_class(data)] == ["inference_sweep (cpu, interleaved)"]
    data.prior = priors[claims.prior_class(data)]
    assert data.prior.figures == 13 and data.prior.total_dof == 26
    pooled = [claims.evaluate(c, data)[0] for c in mine]
    narrower = [_width(p) / _width(o) for p, o in zip(pooled[:12], own[:12])]
    # a figure whose rounds agreed by chance widens towards the others
    assert np.median(narrower) < 0.85, narrower
    assert _width(pooled[12]) == pytest.approx(_width(own[12])), (pooled[12], own[12])
    assert not data.prior.typical(*_spread_of(data, mine[12]))
    for p, o in zip(pooled, own):  # the CSV's own-t interval is the one without the prior
        assert (p["own_ci_low"], p["own_ci_high"]) == pytest.approx((o["ci_low"], o["ci_high"]))
        assert p["confidence"] == 0.95 and p["prior_class"] == "inference_sweep (cpu, interleaved)"
    assert own[0]["prior_class"] == ""


def test_classes_borrow_only_from_their_own_study():
    """A quiet study (0.5% between rounds) and a noisy one (4%), eight claims
    each: each class's prior is its own, so the quiet claims' intervals stay
    narrow and the noisy ones' wide; one prior pooled over both (as reports
    made it before) would pull each towards the other."""
    quiet = _rounds_study([0.005] * 8, seed=1, study="inference_sweep")
    noisy = _rounds_study([0.04] * 8, seed=2, study="training")
    mine = [claim(id=f"q{i}", models=[f"m{i}"]) for i in range(8)]
    theirs = [claim(id=f"n{i}", models=[f"m{i}"], study="training") for i in range(8)]
    data = claims.variance_priors(mine + theirs, {"inference_sweep": quiet, "training": noisy})
    assert set(data) == {"inference_sweep (cpu, interleaved)", "training (cpu, interleaved)"}
    q, n = data["inference_sweep (cpu, interleaved)"], data["training (cpu, interleaved)"]
    assert n.var > 10 * q.var
    # one pooled prior of both classes: its spread between them
    from fwcompare.core.stats import variance_prior

    both = variance_prior([_spread_of(quiet, c) for c in mine]
                          + [_spread_of(noisy, c) for c in theirs])
    assert q.var < both.var < n.var or both.dof < min(q.dof, n.dof)


def test_a_prior_adds_at_most_what_the_other_figures_measured():
    """Smyth's d0 comes out infinite where the variances spread no more than
    sampling explains; what it adds to a figure's t is capped at the other
    figures' degrees of freedom, and the moderated variance is then the
    pooled one."""
    from fwcompare.core.stats import VariancePrior, variance_prior

    spreads = [(1e-4, 2)] * 5
    prior = variance_prior(spreads)
    assert math.isinf(prior.dof) and prior.total_dof == 10 and prior.weight(2) == 8
    var, dof = prior.moderate(1.5e-4, 2)
    assert dof == 10 and var == pytest.approx((8 * prior.var + 2 * 1.5e-4) / 10)
    assert VariancePrior(1e-4, 3.0, 5, 10.0).weight(2) == 3.0


def _spread_of(data, c):
    spreads: list = []
    d = SimpleNamespace(**{**vars(data), "prior": None, "spreads": spreads})
    claims.metrics()[c.metric].fn(d, c, claims._devices(c.hardware))
    return spreads[0]


def test_the_page_says_how_many_wrong_verdicts_to_expect_at_most(tmp_path):
    """A decided verdict from a 95% interval is wrong with a chance of at most
    2.5% (a contradicted one on a two-edged band 5%, an interval of a later
    look its own level's and each earlier look's); verdicts without an interval are counted apart,
    and the interval's level is printed beside it where it is not 95%."""
    import json

    from fwcompare.suite import report

    def row(verdict, direction="above", confidence=0.95, has_ci=True):
        return dict(id=f"c{len(rows)}", claim="x", source="s", source_text="", claimed="",
                    verdict=verdict, direction=direction, confidence=confidence,
                    has_ci=has_ci, value=1.1, ci_low=1.05, ci_high=1.15, unit="", n_cells=1,
                    cells="", measured_on="cpu", note="", band_low=1.02, band_high=math.inf,
                    metric="time_ratio")
    rows: list = []
    for args in [("supported",), ("contradicted", "about"), ("supported", "above", 0.9833),
                 ("inconclusive",), ("contradicted", "below", math.nan, False)]:
        rows.append(row(*args))
    assert claims.wrong_verdicts_bound(rows) == pytest.approx(0.025 + 0.05 + 0.0167 / 2)
    assert claims.decided_without_interval(rows) == 1
    # a verdict from a later look spent the error of every look the claim took (a
    # row without looks, from an older scorecard, counts its own interval's alone)
    later = {**rows[2], "look": 2, "looks": 4}
    assert claims.wrong_verdicts_bound([later]) == pytest.approx((0.05 + 0.05 / 3) / 2)
    third = {**rows[0], "look": 2, "looks": 2}  # quick's sure third round: 95% twice
    assert claims.wrong_verdicts_bound([third]) == pytest.approx(0.05)
    assert claims.format_value(rows[2]) == "1.100 [1.050, 1.150] at 98.3%"
    assert claims.format_value(rows[0]) == "1.100 [1.050, 1.150]"
    summary = tmp_path / report.SUMMARY
    summary.mkdir()
    (summary / "scorecard.json").write_text(json.dumps(
        {"profile": "quick", "verdicts": {"supported": 2}, "claims": rows}))
    page = report._scorecard_section(tmp_path, {})
    assert "Of the 4 decided verdicts, at most about 0.1 are expected to be wrong" in page, page
    assert "1 of them rest on a single figure without an interval" in page


def test_the_scorecard_page_says_what_the_prior_is(tmp_path):
    """The report's first page names the moderated t and its classes' priors
    (as scorecard.json stores them: an infinite d0 is "inf" in JSON, and what
    a prior is worth is capped at its figures' degrees of freedom)."""
    import json

    from fwcompare.suite import report

    summary = tmp_path / report.SUMMARY
    summary.mkdir()
    doc = {"profile": "quick", "verdicts": {"supported": 0}, "claims": [],
           "variance_priors": {"inference_sweep (cpu, interleaved)":
                               {"var": 1.44e-4, "dof": "inf", "figures": 14, "total_dof": 28}}}
    (summary / "scorecard.json").write_text(json.dumps(doc))
    page = report._scorecard_section(tmp_path, {})
    assert "moderated t" in page and "1.20%" in page and "worth 28 degrees" in page, page
    assert "1 class(es) here" in page
    assert "noisy" not in page  # 1.2%: about a quiet machine's spread
    doc["variance_priors"]["training (cpu, interleaved)"] = {
        "var": 0.0416 ** 2, "dof": 2.7, "figures": 5, "total_dof": 10}
    doc["variance_priors"]["memory (cpu, interleaved)"] = {
        "var": 0.05 ** 2, "dof": 4.0, "figures": 3, "total_dof": 6}
    (summary / "scorecard.json").write_text(json.dumps(doc))
    page = report._scorecard_section(tmp_path, {})
    assert "1.20% to 5.00%" in page and "worth 3 to 28 degrees" in page, page
    assert "noisy" not in page  # noisier classes, but the quietest is a quiet machine's
    doc["variance_priors"]["inference_sweep (cpu, interleaved)"]["var"] = 0.0416 ** 2
    (summary / "scorecard.json").write_text(json.dumps(doc))
    page = report._scorecard_section(tmp_path, {})
    assert "This machine was noisy:</b> even the quietest class's spread is 4 times" in page
    doc["variance_priors"] = {}
    (summary / "scorecard.json").write_text(json.dumps(doc))
    assert "moderated t" not in report._scorecard_section(tmp_path, {})


@pytest.mark.parametrize("study, claim_id, left_out", [
    ("acceleration", "jax-faster-than-pytorch", "jax/jit"),
    ("memory", "tensorflow-gpt2-xl-less-memory", "gpt2-xl on gpu")])
def test_a_claim_its_profile_leaves_out_names_what_and_where_it_is_measured(
        study, claim_id, left_out):
    """The gpu profile leaves gpt2-xl, and JAX outside distributed, to full:
    the scorecard's note names what the run's params leave out and the
    profiles that have it (not the tests' smoke), instead of "jax/jit did
    not run"; a run whose params have it keeps the metric's own reason (the
    variant planned, but not run)."""
    from fwcompare.suite import params

    (c,) = [x for x in claims.load_claims() if x.id == claim_id]
    cells = [("gpt2" if study == "memory" else "distilbert-base-uncased",
              c.cells["b"], "gpu", 8, 128, "ok", noisy(0.01), 1e9)]
    data = fake_study(cells)
    data.params = params.read_yaml(params.profile_file(study, "gpu"), "params")
    row, _ = claims.evaluate(c, data)
    assert row["verdict"] == "not measured here"
    assert row["note"].startswith(f"this run's params leave out {left_out}; the full"), row
    assert " profile measures it" in row["note"] or " profiles measure it" in row["note"]
    # neither the profile that left it out nor the tests' own is offered
    assert "gpu" not in row["note"].partition(";")[2] and "smoke" not in row["note"]
    assert row["unmeasured"] == claims.LEFT_OUT
    # the full profile plans it: the note is the metric's own
    data.params = params.read_yaml(params.profile_file(study, "full"), "params")
    row, _ = claims.evaluate(c, data)
    assert row["verdict"] == "not measured here" and "leave out" not in row["note"], row


def test_a_claim_of_several_models_is_not_left_out_while_one_of_them_is_planned():
    """tensorflow-less-training-memory names gpt2 and distilgpt2, either of
    which its figure reads: the gpu profile plans distilgpt2, so a run of it
    whose cells made no figure says why they did not (its failed cells), not
    that gpt2 was left out."""
    from fwcompare.suite import params

    (c,) = [x for x in claims.load_claims() if x.id == "tensorflow-less-training-memory"]
    assert set(c.models) == {"gpt2", "distilgpt2"}
    data = fake_study([("distilgpt2", "torch/eager", "gpu", 16, 128, "ok", noisy(0.01), 1e9),
                       ("distilgpt2", "tensorflow/graph", "gpu", 16, 128, "error", None,
                        math.nan)])
    data.params = gpu = params.read_yaml(params.profile_file("training", "gpu"), "params")
    row, _ = claims.evaluate(c, data)
    assert row["verdict"] == "not measured here" and row["unmeasured"] == claims.NO_FIGURE
    assert "leave out" not in row["note"] and "tensorflow/graph: error 1" in row["note"], row
    # params that plan neither model: both are named
    gpu["models"] = ["bert-base-cased"]
    row, _ = claims.evaluate(c, data)
    assert row["note"].startswith("this run's params leave out gpt2 and distilgpt2"), row
