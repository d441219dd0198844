"""A study is one module: a toy study registered from this file (a numpy
"framework", no transformers, no other file of the project touched) runs end
to end through the runner, its worker processes and the results store."""
from pathlib import Path

import numpy as np
import pytest

from fwcompare import params, run_study, studies, tables
from fwcompare.cell import CellPlan
from fwcompare.params import TIMING, Param, grid_params, one_of, positive, replace_param
from fwcompare.studies.base import Study

pytestmark = pytest.mark.slow  # it starts worker processes


class NumpyBackend:
    """The few backend calls a study without a model needs."""

    PEAK_RESETTABLE = True

    def configure(self, threads, device):
        pass

    def sync(self, out):
        pass

    def is_oom(self, exc):
        return isinstance(exc, MemoryError)

    def runtime_info(self, device):
        return {"framework_version": np.__version__, "device_name": "cpu"}

    def reset_peak_memory(self, device):
        pass

    def peak_memory_bytes(self, device):
        return None


class ToyStudy(Study):
    """Square matrix products, ``batch_sizes`` x ``seq_lens`` as (n, n) with n
    their product, by ``np.matmul`` or ``np.einsum``."""

    name = "toy_matmul"
    title = "Toy: numpy matrix products"

    def schema(self):
        s = grid_params(["square"], {"numpy": ["matmul", "einsum"]}, {}, [4], [16, 32], 60.0)
        s = replace_param(s, "models", check=None)
        s = replace_param(s, "frameworks", default=["numpy"], check=one_of(["numpy"]))
        s = replace_param(s, "modes", check=lambda v: one_of(["matmul", "einsum"])(
            [m for modes in v.values() for m in modes]))
        return {**s, "scale": Param("float", 1.0, "entries of the matrices", positive),
                **TIMING}

    def model_key(self, model, seed, head):
        return f"toy-{model}-{seed}"

    def backend(self, framework):
        return NumpyBackend()

    def prepare(self, job):
        pass  # no weights, no gate: the plan makes its own inputs

    def plan(self, ctx, spec):
        n = spec.batch_size * spec.seq_len
        a = ctx.params["scale"] * np.random.default_rng([ctx.job.seed, n]).standard_normal((n, n))
        fn = (lambda: a @ a) if spec.mode == "matmul" else (lambda: np.einsum("ij,jk->ik", a, a))
        err = float(np.abs(fn() - a @ a).max())
        return CellPlan(lambda: fn, known={"equiv_max_abs_err": err}, flops=2.0 * n ** 3,
                        provenance={"mode_setup": f"np.{spec.mode}"})


STUDY = ToyStudy()  # what a worker process imports this file for


@pytest.fixture
def toy():
    studies.register(STUDY)
    yield STUDY
    studies.unregister(STUDY.name)


def test_a_study_registered_from_a_test_runs_end_to_end(toy, tmp_path, smoke_timing,
                                                          no_orphans):
    with pytest.raises(params.ParamsError, match="did you mean 'scale'"):
        params.validate(toy.name, {"scael": 2.0})
    p = {"scale": 0.5, **smoke_timing}
    res = run_study(toy.name, p, output_dir=tmp_path, progress=False)
    df = res.results
    assert len(df) == 4 and set(df["status"]) == {"ok"}, df[["mode", "error"]]
    assert set(df["mode"]) == {"matmul", "einsum"} and set(df["study"]) == {toy.name}
    assert (df["median_s"] > 0).all() and (df["n_samples"] >= p["min_iters"]).all()
    assert (df["ci_low_s"] <= df["median_s"]).all() and (df["median_s"] <= df["ci_high_s"]).all()
    n = df["batch_size"] * df["seq_len"]
    assert np.allclose(df["achieved_flops_per_s"], 2.0 * n ** 3 / df["median_s"])
    assert (df["equiv_max_abs_err"] < 1e-9).all() and (df["mode_setup"] == "np." + df["mode"]).all()
    assert (df["mem_method"].str.startswith("cpu_rss")).all()
    # Raw samples kept; the median derives from them.
    med = res.samples.groupby("cell_id")["seconds"].median()
    assert np.allclose(med.loc[df["cell_id"]].to_numpy(), df["median_s"].to_numpy())
    # The generic tables read it like any study's.
    summary = tables.summarize(df, res.samples)
    ratios = tables.ratio_table(summary, res.samples, baseline=("numpy", "matmul"))
    assert len(ratios) == 2 and (ratios["time_ratio"] > 0).all()
    assert (ratios["ci_low"] <= ratios["time_ratio"]).all()
    # Each worker process was handed a typed job naming this file.
    jobs = sorted((tmp_path / "results" / "work" / "jobs").glob("numpy-*.json"))
    assert jobs and str(Path(__file__).resolve()) in jobs[0].read_text()
    # Started again: every cell is kept, nothing is measured again.
    kept = {f.name: f.stat().st_mtime_ns for f in (tmp_path / "results" / "cells").iterdir()}
    run_study(toy.name, p, output_dir=tmp_path, progress=False)
    assert kept == {f.name: f.stat().st_mtime_ns
                    for f in (tmp_path / "results" / "cells").iterdir()}
