"""A study is one module: a toy study registered from this file (a numpy
"framework", no transformers, no other file of the project touched) runs end
to end through the runner, its worker processes and the results store."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fwcompare.suite import params
from fwcompare import run_study, studies
from fwcompare.results import tables
from fwcompare.measure.cell import CellPlan
from fwcompare.suite.params import TIMING, Param, grid_params, one_of, positive, replace_param
from fwcompare.core.spec import Axis
from fwcompare.execution.study import Study, with_axis

pytestmark = pytest.mark.slow  # it starts worker processes


class NumpyBackend:
    """The few backend calls a study without a model needs."""

    def configure(self, threads, device, options=None):
        pass

    def sync(self, out):
        pass

    def is_oom(self, exc):
        return isinstance(exc, MemoryError)

    def runtime_info(self, device):
        return {"framework_version": np.__version__, "device_name": "cpu"}

    def gpu_memory(self, run):
        raise NotImplementedError("numpy toy: CPU only")

    def memory_plan_bytes(self):
        return None

    def set_precision(self, dtype, device):
        if dtype != "float32":
            raise ValueError(f"numpy toy: float32 only, not {dtype}")

    def make_peak_kernels(self, n, elements, dtype, device):
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        x = np.zeros(elements, dtype=np.float32)
        return (lambda: a @ a), (lambda: x + 1.0)


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


def _twin_plan(make, spec):
    plan = make()
    return dataclasses.replace(plan, provenance={"mode_setup": f"np.{spec.mode} ({spec.twin})"})


# The toy with a variant axis of its own: each cell twice, as twins a and b that
# differ in that axis only (as the error-rate benchmark's twins).
TWINS = with_axis(STUDY, Axis("twin", "a", label=" {twin}"), lambda c: ("a", "b"), __name__,
                  _twin_plan, name="toy_matmul_twins")
OTHER = ToyStudy()  # a second study, for the round passes of several studies
OTHER.name = "toy_matmul_other"


@pytest.fixture
def toy():
    studies.register(STUDY)
    yield STUDY
    studies.unregister(STUDY.name)


@pytest.fixture
def other_toy():
    studies.register(OTHER)
    yield OTHER
    studies.unregister(OTHER.name)


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
    # Started again: every cell is kept, nothing is measured again, and no file
    # the scorecard's stamp reads (the consolidated copies, env.json) is rewritten
    # (a report's scorecard runs beside the notebooks that do this).
    def stored():
        return {str(f.relative_to(tmp_path)): f.stat().st_mtime_ns for f in
                [*(tmp_path / "results" / "cells").iterdir(), *(tmp_path / "results").glob("*.*")]}
    kept = stored()
    assert {"results/results.parquet", "results/samples.parquet", "results/env.json"} <= set(kept)
    run_study(toy.name, p, output_dir=tmp_path, progress=False)
    assert kept == stored()


def _next(worker, event: str, cell: str, timeout_s: float = 60.0) -> dict:
    """The worker's next event about ``cell`` (its progress events skipped)."""
    import queue
    import time

    end = time.monotonic() + timeout_s
    while True:
        ev = worker.events.get(timeout=max(0.1, end - time.monotonic()))
        assert ev is not None, f"worker ended: {worker.stderr_tail()}"
        if f"{ev.get('cell')}-r{ev.get('round')}" == cell and ev["event"] != "start":
            assert ev["event"] == event, ev
            return ev
        if time.monotonic() > end:
            raise queue.Empty(event)


def test_a_served_worker_takes_sample_blocks_of_two_prepared_cells_in_turn(
        toy, tmp_path, smoke_timing, no_orphans):
    """The parent/worker protocol of an interleaved schedule: two cells
    prepared in one worker, then asked for one block each in turn; each keeps
    its own samples and is judged on them when it finishes."""
    from fwcompare.core import messages
    from fwcompare.plan.job import CELLS, CellRef
    from fwcompare.results.store import ResultStore
    from fwcompare.execution.runner import Runner
    from fwcompare.suite.api import run_plan

    p = params.validate(toy.name, {"seq_lens": [16], **smoke_timing})
    runner = Runner(run_plan(toy, p), tmp_path / "results", progress=False)
    refs = [CellRef(s) for s in toy.cells(p)]  # matmul and einsum at 64 x 64
    worker = runner.spawn_worker(runner.job(CELLS, "square", "numpy", refs), "numpy-served")
    try:
        keys = [r.key for r in refs]
        for k in keys:
            worker.send(messages.PREPARE, cell=k)
            assert _next(worker, messages.PREPARED, k)["calls_per_sample"] >= 1
        for _ in range(7):
            for k in keys:
                worker.send(messages.SAMPLE, cell=k, blocks=1)
                assert len(_next(worker, messages.SAMPLED, k)["seconds"]) == 1
        for k in keys:
            worker.send(messages.MEMORY, cell=k)
            _next(worker, messages.MEASURED, k)
            worker.send(messages.FINISH, cell=k)
            assert _next(worker, messages.DONE, k)["status"] == "ok"
        worker.send(messages.EXIT)
        assert worker.proc.wait(timeout=30) == 0
    finally:
        worker.kill()
    rows = ResultStore(tmp_path / "results").load().set_index("mode")
    assert list(rows["n_samples"]) == [7.0, 7.0]  # exactly the blocks asked for
    assert (rows["ci_low_s"] <= rows["median_s"]).all() and rows["rel_ci"].notna().all()
    samples = ResultStore(tmp_path / "results").load_samples()
    assert samples.groupby("cell_id").size().to_dict() == {c: 7 for c in rows["cell_id"]}


def test_interleaved_variants_take_turns_in_fresh_processes_per_round(toy, tmp_path,
                                                                       smoke_timing, no_orphans):
    """Under the interleaved schedule the two variants of each shape take the
    same number of blocks in each round (turn i of one is turn i of the
    other), every block lasts at least block_s, and the tables pair them and
    carry both rounds in their intervals."""
    from fwcompare.core import stats

    # One thread: numpy's OpenBLAS threads spin for up to ~0.1 s after a product, far
    # past settle_s (the three frameworks' pools stop within 2 ms: docs/methodology.md).
    p = {**smoke_timing, "rounds": 2, "block_s": 0.01, "settle_s": 0.001, "threads": 1}
    res = run_study(toy.name, p, output_dir=tmp_path, progress=False)
    df, s = res.results, res.samples
    assert len(df) == 8 and set(df["status"]) == {"ok"}, df[["mode", "error"]]
    assert set(df["schedule"]) == {"interleaved"} and set(s["schedule"]) == {"interleaved"}
    counts = s.groupby(["cell_id", "round"]).size().rename("n").reset_index().merge(
        df[["cell_id", "round", "mode", "seq_len"]], on=["cell_id", "round"])
    per_set = counts.groupby(["round", "seq_len"])["n"].agg(["min", "max", "size"])
    assert (per_set["min"] == per_set["max"]).all() and (per_set["size"] == 2).all(), per_set
    assert (per_set["min"] >= p["min_iters"]).all()
    # Blocks sized to last block_s at prepare (the timer's rule alone would give ~50 us).
    block = (s["seconds"] * s["calls_per_sample"]).groupby(s["cell_id"]).median()
    assert (block >= 0.5 * 0.01).all(), block
    by_cell = tables.samples_by_cell(s)
    assert all(c.interleaved and sorted(c.rounds) == [0, 1] for c in by_cell.values())
    # Each set's turns have a key of their own (results.with_turns), which pairs its
    # cells block by block (stats.round_log_ratio) and no cell of another set.
    keys = s.merge(df[["cell_id", "round", "seq_len"]]).groupby(["round", "seq_len"])["turns"]
    assert (keys.nunique() == 1).all() and keys.first().nunique() == 4, keys.first()
    ids = df.drop_duplicates("cell_id").set_index(["seq_len", "mode"])["cell_id"]
    (short, long), (a, b) = sorted(df["seq_len"].unique()), sorted(df["mode"].unique())
    pa, pb = by_cell[ids[short, a]], by_cell[ids[short, b]]
    assert stats.round_log_ratio(pa, pb, 1) == pytest.approx(
        np.median(np.log(pa.rounds[1]) - np.log(pb.rounds[1])))
    other = by_cell[ids[long, b]]  # another shape: as many blocks, or not, never paired
    assert stats.round_log_ratio(pa, other, 1) == pytest.approx(
        np.log(np.median(pa.rounds[1]) / np.median(other.rounds[1])))
    # Where the pair's noise is (benchmarks/variance_levels.py): both rounds, every
    # turn, some variance from the blocks
    lv = stats.variance_levels([(pa, pb)])
    assert lv.rounds == 2
    assert lv.turns == np.median(per_set.xs(short, level="seq_len")["min"])
    assert lv.within > 0 and lv.total > 0
    summary = tables.summarize(df, s)
    for _, r in summary.iterrows():  # two rounds: the two-level interval of the median
        med, lo, hi = stats.rounds_median_ci(by_cell[r["cell_id"]])
        assert (r["median_s"], r["ci_low_s"], r["ci_high_s"]) == (med, lo, hi)
    ratios = tables.ratio_table(summary, s, baseline=("numpy", "matmul"))
    assert len(ratios) == 2 and (ratios["ci_low"] <= ratios["time_ratio"]).all()
    assert (ratios["time_ratio"] <= ratios["ci_high"]).all()
    # Where the time went, by phase, kept with the results.
    import json

    phases = json.loads((tmp_path / "results" / "time_breakdown_inference.json").read_text())
    assert phases["timing samples"] > 0 and phases["settle between blocks"] > 0
    assert sum(v for k, v in phases.items() if k != "total") <= phases["total"] * 1.01


@pytest.mark.parametrize("schedule", ["interleaved", "sequential"])
def test_rows_say_what_else_the_machine_did_while_cells_were_sampled(
        toy, tmp_path, smoke_timing, no_orphans, schedule):
    """A process outside the run spins one core during the whole run: every
    row's host_other_cpu sees it (host.HostMeter); the cells of one
    interleaved set share one window; the summary keeps the busiest round."""
    import subprocess
    import sys

    import psutil

    # Windows of 0.4 s and more: the CPU counters tick every 10 ms, and in
    # the smoke timing's 50-300 ms windows one row saw 0.19 of the 2
    # cores while the burner spun one (CI of 1f6a0b3, sequential)
    p = {**smoke_timing, "schedule": schedule, "rounds": 2, "threads": 1,
         "block_s": 0.01, "settle_s": 0.001, "min_time_s": 0.4, "max_time_s": 0.6}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        res = run_study(toy.name, p, output_dir=tmp_path, progress=False)
    finally:
        burner.kill()
        burner.wait()
    df = res.results
    assert set(df["status"]) == {"ok"}, df[["mode", "error"]]
    cores = psutil.cpu_count()
    # the burner's core, less what the tests running beside this one take from it
    # on a loaded 2-core machine (measurements.md, "2026-12-07 (night)")
    assert (df["host_other_cpu"] >= 0.4 / cores).all(), df[["mode", "host_other_cpu"]]
    assert ((df["host_steal"] >= 0) & (df["host_steal"] <= 1)).all()
    if schedule == "interleaved":  # one window per set: (round, shape)
        per_set = df.groupby(["round", "seq_len"])["host_other_cpu"].nunique()
        assert (per_set == 1).all(), df[["round", "seq_len", "mode", "host_other_cpu"]]
    else:  # a cell sampled on its own pairs with none (results.with_turns)
        assert (res.samples["turns"] == "").all() and len(res.samples)
    summary = tables.summarize(df, res.samples).set_index("cell_id")
    busiest = (df["host_other_cpu"] + df["host_steal"]).groupby(df["cell_id"]).max()
    assert np.allclose(summary.loc[busiest.index, "host_load"], busiest)


def test_a_set_sampled_while_the_machine_was_busy_is_sampled_again(toy, tmp_path, smoke_timing,
                                                                    no_orphans):
    """The machine busy throughout (a process outside the run spins a core):
    every set is sampled again ``busy_retakes`` times, the row counts it,
    keeps only the last window's samples, and the dropped time has a phase
    of its own. With retakes off (0) nothing is sampled again."""
    import json
    import subprocess
    import sys

    # max_time_s spent in the first turn: every window is min_iters turns.
    p = {**smoke_timing, "rounds": 1, "threads": 1, "block_s": 0.01, "settle_s": 0.001,
         "busy_retakes": 2, "seq_lens": [16], "min_time_s": 0.01, "max_time_s": 0.01}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        res = run_study(toy.name, p, output_dir=tmp_path / "on", progress=False)
        off = run_study(toy.name, {**p, "busy_retakes": 0}, output_dir=tmp_path / "off",
                        progress=False)
    finally:
        burner.kill()
        burner.wait()
    df = res.results
    assert set(df["status"]) == {"ok"} and len(df) == 2, df[["mode", "error"]]
    assert (df["host_retakes"] == 2).all(), df[["mode", "host_retakes", "host_other_cpu"]]
    assert (off.results["host_retakes"] == 0).all()
    # The worker's figures come from the kept window only (3 windows kept
    # would be 3 x min_iters samples).
    n = res.samples.groupby("cell_id").size()
    assert (n == p["min_iters"]).all() and (df["n_samples"] == p["min_iters"]).all(), n
    phases = json.loads((tmp_path / "on" / "results" / "time_breakdown_inference.json").read_text())
    assert phases["samples taken again (machine busy)"] > 0 and phases["timing samples"] > 0


def test_every_measured_row_has_its_share_of_the_machines_peak(toy, tmp_path, smoke_timing,
                                                               no_orphans, monkeypatch):
    """The run measures the machine's matmul ceiling with the study's own
    backend in a worker of its own (fwcompare.measure.peak), keeps it per machine,
    records it in env.json, and every ok row has pct_of_peak = 100 x achieved
    FLOP/s / that ceiling; a second run reads the kept figures."""
    import json

    from fwcompare.measure import peak

    monkeypatch.setattr(peak, "CACHE", tmp_path / "peak-cache")
    p = {**smoke_timing, "threads": 1, "seq_lens": [16]}
    res = run_study(toy.name, p, output_dir=tmp_path / "a", progress=False)
    env = json.loads((tmp_path / "a" / "results" / "env.json").read_text())
    ceiling = env["peak"]["flops_per_s"]["float32"]
    probe = env["peak"]["frameworks"]["numpy"]
    assert ceiling == probe["flops_per_s"]["float32"] > 1e8, env["peak"]  # numpy's own matmul
    assert probe["bandwidth_bytes_per_s"] > 1e8 and "matmul" in env["peak"]["method"]
    df = res.results
    assert set(df["status"]) == {"ok"} and (df["peak_flops_per_s"] == ceiling).all()
    assert np.allclose(df["pct_of_peak"], 100 * df["achieved_flops_per_s"] / ceiling)
    assert ((df["pct_of_peak"] > 0) & (df["pct_of_peak"] < 200)).all(), df["pct_of_peak"]
    summary = tables.summarize(df, res.samples)
    assert np.allclose(summary["pct_of_peak"],
                       100 * summary["flops_per_call"] / summary["median_s"] / ceiling)
    kept = list((tmp_path / "peak-cache").glob("numpy-cpu-*.json"))
    assert len(kept) == 1
    run_study(toy.name, p, output_dir=tmp_path / "b", progress=False)
    assert not (tmp_path / "b" / "results" / "work" / "peak-numpy.json").exists()  # kept
    env_b = json.loads((tmp_path / "b" / "results" / "env.json").read_text())
    assert env_b["peak"]["flops_per_s"]["float32"] == ceiling


def test_round_passes_measure_every_studys_round_before_anyones_next(
        toy, other_toy, tmp_path, smoke_timing, no_orphans):
    """``run_studies``: round 0 of both studies, then round 1 of both, then
    round 2 of the one with three; each study keeps one run id and one time
    breakdown over its passes, and no compile cache outlives the run."""
    import json

    from fwcompare import load_results, run_studies
    from fwcompare.execution.forkserver import ForkServers

    p = {"seq_lens": [16], **smoke_timing}
    runs = {toy.name: ({**p, "rounds": 2}, tmp_path / "a"),
            other_toy.name: ({**p, "rounds": 3}, tmp_path / "b")}
    seen, passes_s = [], {}

    def rounds_stored(out):
        return sorted({int(f.stem.rsplit("-r", 1)[1])
                       for f in (out / "results" / "cells").glob("*.parquet")})

    def log(line):
        if ": measuring" in line:  # what each study has stored when a pass starts
            seen.append((line.split("] ", 1)[1].split(":")[0],
                         *(rounds_stored(out) for _, out in runs.values())))
        if ": measured in" in line:
            name = line.split(":")[0]
            passes_s[name] = [*passes_s.get(name, []), float(line.split()[-2])]

    with ForkServers(tmp_path / "servers") as servers:
        times, failed = run_studies(runs, profile="adhoc", servers=servers, progress=False,
                                    log=log)
    assert not failed, failed
    a, b = toy.name, other_toy.name
    assert seen == [(a, [], []), (b, [0], []), (a, [0], [0]), (b, [0, 1], [0]),
                    (b, [0, 1], [0, 1])]
    for name, (q, out) in runs.items():
        df = load_results(out).results
        assert sorted(df["round"]) == sorted([0, 0, 1, 1, 2, 2][:2 * q["rounds"]])
        assert set(df["status"]) == {"ok"} and df["run_id"].nunique() == 1
        spent = json.loads((out / "results" / "time_breakdown_inference.json").read_text())
        # the passes' time summed (more than the longest pass alone), within the study's
        assert max(passes_s[name]) < spent["total"] <= times[name] + 1
        assert json.loads((out / "results" / "last_run_inference.json").read_text())[
            "cells"] == 2 * q["rounds"]
        assert not (out / "results" / "work" / "compile").exists()


def _doubtful_claim(toy, tmp_path, p, monkeypatch, **probe_fields):
    """Run the toy study with params ``p`` (no claim read, so no extra round),
    then make a claim of einsum against matmul whose band edge its interval
    holds, a quarter of the interval's width from the figure: more rounds can
    move it off. (the output folder, the claim, the figure before it)"""
    import math

    from fwcompare.suite import claims
    from fwcompare import run_studies
    from fwcompare.execution.forkserver import ForkServers
    from fwcompare.results.judging import Claim, StudyData

    out = tmp_path / "toy"
    monkeypatch.setattr(claims, "load_claims", lambda *a, **k: [])  # no claim: no extra round
    with ForkServers(tmp_path / "servers") as servers:
        _, failed = run_studies({toy.name: (p, out)}, profile="adhoc", servers=servers,
                                progress=False, log=lambda line: None)
    assert not failed, failed
    probe = Claim("toy-einsum-slower", "einsum is slower", "toy", "", "cpu", toy.name,
                  "time_ratio", {"a": "numpy/einsum", "b": "numpy/matmul"}, 1.0, "above",
                  0.0, reference=1.0, **probe_fields)
    m, _, _ = claims.measure(claims.metrics()["time_ratio"], StudyData(out), probe, ("cpu",))
    edge = math.exp(math.log(m.value) - (math.log(m.high) - math.log(m.low)) / 4)
    return out, Claim(**{**vars(probe), "reference": edge}), m


def test_a_doubtful_claim_gets_extra_rounds_of_its_own_cells_until_it_is_decided(
        toy, tmp_path, smoke_timing, no_orphans, monkeypatch):
    """``run_studies``' extra rounds (issue 48): a timed claim whose interval
    holds a band edge gets more rounds of the cells its figure used, and of
    no other; the scorecard then judges it at the look's confidence and says
    so. Where the report's budget cannot pay for a round, or its time
    budget has no room for one, the claim's note says that instead."""
    import json
    import time

    from fwcompare.suite import api, claims
    from fwcompare import load_results
    from fwcompare.execution.forkserver import ForkServers
    from fwcompare.results.judging import StudyData, look_of
    from fwcompare.execution.runner import Passes

    p = {"seq_lens": [16, 32], "rounds": 2, "more_rounds": 3, "more_rounds_s": 600.0,
         **smoke_timing}
    # a claim about the smallest shape
    out, claim, m = _doubtful_claim(toy, tmp_path, p, monkeypatch, shapes="smallest")

    def rounds_of(res):
        return res.results.groupby(["seq_len", "mode"])["round"].apply(sorted).to_dict()

    assert set(map(tuple, rounds_of(load_results(out)).values())) == {(0, 1)}
    assert (*look_of(m, StudyData(out)), m.rounds) == (1, 4, 2) and len(m.ids) == 2
    assert claims.evaluate(claim, StudyData(out))[0]["verdict"] == "inconclusive"
    monkeypatch.setattr(claims, "load_claims", lambda *a, **k: [claim])
    runs = {toy.name: (params.validate(toy.name, p), out)}
    lines = []
    with ForkServers(tmp_path / "servers2") as servers:
        # 1. no time left for a round: none is taken, and the scorecard says why
        api.more_rounds(runs, profile="adhoc", servers=servers, progress=False,
                        log=lines.append, passes={toy.name: Passes()},
                        per_cell={toy.name: 1e6}, times={toy.name: 0.0})
        record = json.loads((out / "results" / "more_rounds.json").read_text())
        assert record["skipped"] == [claim.id] and record["rounds"] == []
        row = claims.evaluate(claim, StudyData(out))[0]
        assert row["verdict"] == "inconclusive" and "time for extra rounds was spent" in row["note"]
        # 2. time in the pool but none left in the report's own budget (``until``): none
        # is taken either, and the note names the report's budget
        api.more_rounds(runs, profile="adhoc", servers=servers, progress=False,
                        log=lines.append, passes={toy.name: Passes()},
                        per_cell={toy.name: 1.0}, times={toy.name: 0.0},
                        until=time.monotonic() + 0.5)
        record = json.loads((out / "results" / "more_rounds.json").read_text())
        assert record["skipped"] == [claim.id] and record["rounds"] == []
        row = claims.evaluate(claim, StudyData(out))[0]
        assert row["verdict"] == "inconclusive" and "time budget had no room" in row["note"], (
            row["note"])
        # 3. the report's time budget already spent when its measuring ends: no claim
        # is judged for a round (5-10 s in a quick report), and the note names the budget
        judge = claims.doubtful

        def judged(outs):
            raise AssertionError("judged with no time left")
        monkeypatch.setattr(claims, "doubtful", judged)
        api.more_rounds(runs, profile="adhoc", servers=servers, progress=False,
                        log=lines.append, passes={toy.name: Passes()},
                        per_cell={toy.name: 1.0}, times={toy.name: 0.0},
                        until=time.monotonic() - 1)
        monkeypatch.setattr(claims, "doubtful", judge)
        record = json.loads((out / "results" / "more_rounds.json").read_text())
        assert record["budget_spent"] and record["skipped"] == record["rounds"] == []
        row = claims.evaluate(claim, StudyData(out))[0]
        assert row["verdict"] == "inconclusive" and (
            "time budget was spent before its extra rounds" in row["note"]), row["note"]
        # 4. time enough: extra rounds of the claim's two cells, looked at after each
        api.more_rounds(runs, profile="adhoc", servers=servers, progress=False,
                        log=lines.append, passes={toy.name: Passes()},
                        per_cell={toy.name: 1.0}, times={toy.name: 0.0})
    record = json.loads((out / "results" / "more_rounds.json").read_text())
    taken = len(record["rounds"])
    assert 1 <= taken <= 3 and all(r["cells"] == 2 and r["claims"] == [claim.id]
                                   for r in record["rounds"]), (record, lines)
    got = rounds_of(load_results(out))
    assert got[(16, "matmul")] == got[(16, "einsum")] == list(range(2 + taken))
    assert got[(32, "matmul")] == got[(32, "einsum")] == [0, 1]  # no claim: no extra round
    row = claims.evaluate(claim, StudyData(out))[0]
    assert row["rounds"] == 2 + taken
    assert f"after {taken} extra round(s)" in row["note"], row["note"]
    if row["verdict"] == "inconclusive":  # stopped for a reason it names
        assert taken == 3 or any(why in row["note"] for why in (
            "sits at the edge", "too wide for the rounds left")), row["note"]


def test_a_sure_extra_round_is_taken_with_the_budget_spent(toy, tmp_path, smoke_timing,
                                                           no_orphans, monkeypatch):
    """``more_rounds_sure``: a doubtful claim's first extra round is planned
    work, taken though neither the pool nor the report's time budget has room
    for it; the ones after it are not, and the scorecard names the budget."""
    import json
    import time

    from fwcompare.suite import api, claims
    from fwcompare import load_results
    from fwcompare.execution.forkserver import ForkServers
    from fwcompare.results import judging
    from fwcompare.results.judging import StudyData
    from fwcompare.execution.runner import Passes

    p = {"seq_lens": [16], "rounds": 2, "more_rounds": 2, "more_rounds_sure": 1,
         **smoke_timing}
    out, claim, m = _doubtful_claim(toy, tmp_path, p, monkeypatch)
    assert m.high / m.low > 1.02 and not judging.stop_reason(m, claim.band, 1, 3), m
    monkeypatch.setattr(claims, "load_claims", lambda *a, **k: [claim])
    runs = {toy.name: (params.validate(toy.name, p), out)}
    lines = []
    with ForkServers(tmp_path / "servers2") as servers:
        api.more_rounds(runs, profile="adhoc", servers=servers, progress=False,
                        log=lines.append, passes={toy.name: Passes()},
                        per_cell={toy.name: 1e6}, times={toy.name: 0.0},
                        until=time.monotonic() - 1)
    record = json.loads((out / "results" / "more_rounds.json").read_text())
    assert [r["round"] for r in record["rounds"]] == [1], (record, lines)
    rounds = load_results(out).results.groupby("mode")["round"].apply(sorted).to_dict()
    assert rounds == {"matmul": [0, 1, 2], "einsum": [0, 1, 2]}, rounds
    row = claims.evaluate(claim, StudyData(out))[0]
    assert (row["rounds"], row["look"], row["looks"]) == (3, 2, 3), row
    if row["verdict"] == "inconclusive":  # the second extra round was the budget's to give
        assert record["budget_spent"] and "time budget was spent" in row["note"], row["note"]


def test_variants_that_differ_in_an_axis_alone_are_lanes_of_their_own(tmp_path, smoke_timing,
                                                                      no_orphans):
    """Interleaved, each twin is a worker of its own in every round, with a job
    file of its own (twins once shared one and read each other's cells)."""
    studies.register(TWINS)
    try:
        p = {"seq_lens": [16], "rounds": 2, **smoke_timing}
        res = run_study(TWINS.name, p, output_dir=tmp_path, progress=False)
    finally:
        studies.unregister(TWINS.name)
    df = res.results
    assert len(df) == 2 * 2 * 2 and set(df["status"]) == {"ok"}, df[["mode", "twin", "error"]]
    assert sorted(df.groupby(["mode", "twin"])["round"].apply(sorted).tolist()) == [[0, 1]] * 4
    jobs = {f.name.split("-toy")[0] for f in (tmp_path / "results" / "work" / "jobs")
            .glob("numpy-*.json")}
    assert jobs == {"numpy-matmul", "numpy-matmul-b", "numpy-einsum", "numpy-einsum-b"}, jobs
    # each twin's plan came through the axis' own hook (execution.study.with_axis), in its worker
    assert set(df["mode_setup"]) == {f"np.{m} ({t})" for m in ("matmul", "einsum")
                                     for t in ("a", "b")}, df["mode_setup"]
