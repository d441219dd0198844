"""Sharded sweeps (fwcompare.suite.shard): which cells a shard runs, the merge and
its refusals, and a study run as two shard jobs through submitit's local
executor, merged, against one unsharded run."""
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import psutil
import pytest
import yaml

from fwcompare.commands import cli
from fwcompare.core import env
from fwcompare import load_results, run_study, studies
from fwcompare.suite import params, shard, submit
from fwcompare.results import tables
from fwcompare.core.atomic import write_json
from fwcompare.plan.job import CellRef
from fwcompare.core.paths import PARAMS, ROOT
from fwcompare.results.store import ResultStore, make_row
from fwcompare.suite.api import run_plan
from fwcompare.suite.shard import Shard, ShardError, Unit
from test_toy_study import STUDY as TOY

BUILT_IN = [("inference_sweep", "quick"), ("training", "quick"), ("acceleration", "quick"),
            ("mixed_precision", "quick"), ("generation", "quick"), ("deployment", "quick"),
            ("distributed", "quick")]


@pytest.fixture
def toy():
    studies.register(TOY)
    yield TOY
    studies.unregister(TOY.name)


def toy_params(models=("a", "b", "c", "d"), **more) -> dict:
    return params.validate(TOY.name, {"models": list(models), **more})


def built_in(study: str, profile: str, **more) -> dict:
    raw = params.read_yaml(PARAMS / study / f"{profile}.yaml", "params")
    return params.validate(study, {**raw, **more})


def shares(study, p, count) -> list[list]:
    return [list(shard.plan_shard(run_plan(study, p), Shard(i, count)).specs)
            for i in range(1, count + 1)]


# -- which cells a shard runs ------------------------------------------------------------
@pytest.mark.parametrize("text, problem", [
    ("3/2", "--shard 3/2: I must be between 1 and N (2)"),
    ("0/2", "--shard 0/2: I must be between 1 and N (2); shards are numbered from 1"),
    ("1/0", "--shard 1/0: N must be at least 1"),
    ("2", "--shard 2: expected I/N"),
    ("a/b", "--shard a/b: expected I/N")])
def test_a_bad_shard_is_refused_before_anything_runs(text, problem, capsys):
    with pytest.raises(ShardError) as exc:
        Shard.parse(text)
    assert str(exc.value).startswith(problem)
    with pytest.raises(SystemExit) as stop:  # argparse: before params are even read
        cli.main(["run", "inference_sweep", "--profile", "smoke", "--shard", text])
    assert stop.value.code == 2
    assert problem in capsys.readouterr().err
    assert Shard.parse(" 2 / 3 ") == Shard(2, 3) and Shard(2, 3).name == "shard-2-of-3"


@pytest.mark.parametrize("study, profile, schedule", [
    (study, profile, schedule) for study, profile in BUILT_IN
    for schedule in ("sequential", "interleaved")
    if not (study == "distributed" and schedule == "interleaved")])  # ranks never interleave
def test_every_cell_runs_in_one_shard_and_no_process_or_set_is_split(study, profile, schedule):
    st = params.study_named(study)
    p = built_in(study, profile, schedule=schedule)
    cells = st.cells(p)
    n_units = len(shard.units(run_plan(st, p)))
    assert n_units >= 1
    for count in sorted({1, 2, 3, n_units}):
        if count > n_units:
            continue
        parts = shares(st, p, count)
        where = {}
        for i, part in enumerate(parts):
            for s in part:
                assert s not in where, f"{s.label} in shards {where[s]} and {i}"
                where[s] = i
        assert set(where) == set(cells)  # every cell, each once
        # A worker group (the runner's: Study.groups per task, model, framework) whole.
        for s in cells:
            mine = [c for c in cells if (c.task, c.model, c.framework) ==
                    (s.task, s.model, s.framework)]
            for group in st.groups(s.task, [CellRef(c) for c in mine]):
                assert len({where[c.spec] for c in group}) == 1, [c.spec.label for c in group]
        if schedule == "interleaved":  # a set and a lane stay on one machine too
            for s in cells:
                same_set = [c for c in cells if (c.task, c.model, c.shape) ==
                            (s.task, s.model, s.shape)]
                assert len({where[c] for c in same_set}) == 1
                same_lane = [c for c in cells if (c.task, c.model, c.framework, c.mode,
                                                  c.dtype, c.workers, c.scaling) ==
                             (s.task, s.model, s.framework, s.mode, s.dtype, s.workers,
                              s.scaling)]
                assert len({where[c] for c in same_lane}) == 1


def test_the_split_is_the_same_on_every_machine(monkeypatch):
    """threads: 0 follows each machine's cores and the cell ids with it; the
    split does not (it keys units by what their cells measure)."""
    st = params.study_named("training")
    splits = []
    for cores in (2, 64):
        monkeypatch.setattr(env, "default_threads", lambda cores=cores: cores)
        p = built_in("training", "quick", threads=0, schedule="sequential")
        assert {s.threads for s in st.cells(p)} == {cores}
        splits.append([sorted(map(shard.measure_key, part)) for part in shares(st, p, 3)])
    assert splits[0] == splits[1] and all(splits[0])
    assert shares(st, p, 3) == shares(st, p, 3)


@pytest.mark.slow  # starts Python processes
def test_the_split_does_not_depend_on_the_process_hash_seed(toy):
    """Six units of one size into four shards: only the keys break the ties."""
    code = ("import sys\n"
            "from fwcompare import studies\nfrom fwcompare.suite import params, shard\n"
            "from fwcompare.suite.api import run_plan\n"
            "st = studies.load('toy_matmul', sys.argv[1])\n"
            "p = params.validate('toy_matmul', {'models': list('abcdef'), 'threads': 1})\n"
            "print([[u.key for u in part] for part in shard.assign(shard.units(run_plan(st, p)), 4)])\n")
    got = {subprocess.run([sys.executable, "-c", code, str(ROOT / "tests" / "test_toy_study.py")],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
           for seed in ("1", "2", "3", "4")}
    p = toy_params(models=list("abcdef"), threads=1)
    here = [[u.key for u in part] for part in shard.assign(shard.units(run_plan(toy, p)), 4)]
    assert got == {f"{here}\n"}


def test_shards_are_balanced_on_measurements():
    units = [Unit(f"k{i}", (), m) for i, m in enumerate([5, 4, 3, 3, 2, 1])]
    parts = shard.assign(units, 2)
    assert [sum(u.measurements for u in part) for part in parts] == [9, 9]
    assert shard.assign(list(reversed(units)), 2) == parts  # not the order given
    for study, profile in BUILT_IN:
        st = params.study_named(study)
        p = built_in(study, profile, schedule="sequential")
        all_units = shard.units(run_plan(st, p))
        biggest = max(u.measurements for u in all_units)
        for count in range(2, min(4, len(all_units)) + 1):
            loads = [sum(u.measurements for u in part)
                     for part in shard.assign(all_units, count)]
            assert sum(loads) == sum(u.measurements for u in all_units)
            assert max(loads) - min(loads) <= biggest, (study, loads)


def test_the_shard_split_the_estimate_and_the_runner_read_one_plan(toy, tmp_path, monkeypatch):
    """A run's plan is made once (``api.run_plan``) and handed on: a shard's
    split and its runner, a whole run's estimate and its runner, each read
    the very plan object their run made (nothing is measured here)."""
    from fwcompare.execution import estimate as estimate_module
    from fwcompare.execution.runner import Runner
    from fwcompare.suite import api

    class Said(str):
        def text(self):
            return self

    made, read = [], []
    make, units = api.run_plan, shard.units
    monkeypatch.setattr(api, "run_plan", lambda *a: made.append(make(*a)) or made[-1])
    monkeypatch.setattr(estimate_module, "estimate",  # (the real one reads model configs)
                        lambda plan, *a, **k: read.append(("estimate", plan)) or Said(""))
    monkeypatch.setattr(shard, "units", lambda plan: read.append(("split", plan)) or units(plan))
    monkeypatch.setattr(Runner, "run", lambda self, specs: read.append(("runner", self.plan)))
    p = toy_params(rounds=2)
    shard.run_shard(TOY.name, p, Shard(1, 2), output_dir=tmp_path / "shard", progress=False)
    assert len(made) == 1 and [r for r, _ in read] == ["split", "runner"]
    assert all(plan is made[0] for _, plan in read)
    read.clear()
    api.run_study(TOY.name, p, output_dir=tmp_path / "whole")
    assert len(made) == 2 and [r for r, _ in read] == ["estimate", "runner"]
    assert all(plan is made[1] for _, plan in read)
    # the runner measures the shard's cells of its plan, in the plan's rounds
    assert made[0].of(made[0].specs[:1]) == [CellRef(made[0].specs[0], r) for r in (0, 1)]


def test_rounds_count_and_stay_with_their_cell(toy):
    p = toy_params(rounds=3)
    for part in shares(toy, p, 2):
        refs = run_plan(toy, p).of(part)
        assert len(refs) == 3 * len(part)
    assert sum(u.measurements for u in shard.units(run_plan(toy, p))) == 3 * len(toy.cells(p))


def test_more_shards_than_units(toy, tmp_path):
    p = toy_params(models=["a", "b"])
    assert len(shard.units(run_plan(toy, p))) == 2  # interleaved: one model, one unit
    plan = shard.plan_shard(run_plan(toy, p), Shard(3, 3))
    assert plan.specs == () and "nothing to run" in plan.text()
    with pytest.raises(ShardError, match="2 units .* at most 2 shards .schedule: sequential"):
        submit.submit(toy.name, p, 3, out=tmp_path, executor="local")
    assert not tmp_path.joinpath("shards").exists()


def test_a_shard_refuses_a_folder_of_another_shard_or_run(toy, tmp_path):
    p = toy_params()
    store = tmp_path / "results"
    store.mkdir()
    write_json(store / "shard.json", {"study": toy.name, "shard": 1, "count": 3})
    with pytest.raises(ShardError, match="holds shard 1/3 of toy_matmul, not shard 1/2"):
        shard.run_shard(toy.name, p, Shard(1, 2), output_dir=tmp_path, progress=False)
    # An unsharded run's results of these params: cells that are not this shard's.
    (store / "shard.json").unlink()
    rows = ResultStore(store)
    rows.begin(env.params_hash(p))
    for s in toy.cells(p):
        rows.append(make_row(s, status="ok"))
    with pytest.raises(ShardError, match="not shard 2/2's"):
        shard.run_shard(toy.name, p, Shard(2, 2), output_dir=tmp_path, progress=False)
    assert not (store / "work").exists()  # refused before any process


# -- merge ---------------------------------------------------------------------------------
def fake_shards(root, p, count=2, commit="c0ffee", dirty=False, versions=None):
    """Shard folders as `run --shard` leaves them, with made-up figures."""
    dirs = []
    h = env.params_hash(p)
    for i in range(1, count + 1):
        run = run_plan(TOY, p)
        plan = shard.plan_shard(run, Shard(i, count))
        d = root / "shards" / plan.shard.name
        store = ResultStore(d / "results")
        store.begin(h)
        write_json(store.dir / "env.json", {
            "git_commit": commit, "git_dirty": dirty, "hostname": f"node{i}",
            "cpu_model": "Xeon", "versions": versions or {"numpy": "2.0"}, "params_hash": h})
        write_json(store.dir / "params.json", p)
        write_json(store.dir / "time_breakdown_inference.json", {"total": 10.0 * i})
        refs = run.of(plan.specs)
        for ref in refs:
            store.append(make_row(ref.spec, status="ok", round=ref.round, run_id=f"run{i}",
                                  figures={"median_s": 0.01, "n_samples": 3},
                                  provenance={"git_commit": commit, "git_dirty": dirty,
                                              "params_hash": h, "hostname": f"node{i}"}),
                         [0.009, 0.01, 0.011])
        shard.write_info(store.dir, plan, h, [r.key for r in refs])
        dirs.append(d)
    return dirs


def refused(out, dirs, capsys, *needles):
    """merge refuses through the CLI: exit 2, each problem named, nothing written."""
    assert cli.main(["merge", str(out), *map(str, dirs)]) == 2
    err = capsys.readouterr().err
    assert "merge refused, nothing written" in err
    for needle in needles:
        assert needle in err, err
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())


def test_merged_shards_read_as_one_run(toy, tmp_path, capsys):
    p = toy_params(rounds=2)
    dirs = fake_shards(tmp_path, p)
    out = tmp_path / "merged"
    assert cli.main(["merge", str(out), *map(str, dirs)]) == 0
    assert "merged 2 shards (32 rows)" in capsys.readouterr().out
    res = load_results(out)
    df = res.results
    refs = run_plan(toy, p).cells
    assert sorted(zip(df["cell_id"], df["round"])) == sorted((r.spec.cell_id, r.round)
                                                             for r in refs)
    assert set(df["status"]) == {"ok"} and set(df["run_id"]) == {"run1", "run2"}
    assert set(res.samples["hostname"]) == {"node1", "node2"}  # each row keeps its own
    assert len(res.samples) == 3 * len(df)
    assert res.manifest["hostname"] == "node1 / node2"
    assert [s["shard"] for s in res.manifest["shards"]] == ["1/2", "2/2"]
    store = out / "results"
    assert (store / "params_hash").read_text() == env.params_hash(p)
    assert len(json.loads((store / "shards.json").read_text())) == 2
    assert json.loads((store / "time_breakdown_inference.json").read_text()) == {"total": 30.0}
    assert len(tables.summarize(df, res.samples)) == len(toy.cells(p))
    assert sorted(p.name for p in out.iterdir()) == ["results"]  # no temporary left
    # Merged again: the first merge is kept in previous/, never overwritten.
    assert cli.main(["merge", str(out), *map(str, dirs)]) == 0
    assert len(list((store / "previous").iterdir())) == 1
    assert len(load_results(out).results) == len(df)


def test_merge_refuses_shards_of_different_params(toy, tmp_path, capsys):
    a = fake_shards(tmp_path / "a", toy_params())
    b = fake_shards(tmp_path / "b", toy_params(scale=2.0))
    refused(tmp_path / "merged", [a[0], b[1]], capsys, "params differ between shards")


def test_merge_refuses_a_missing_or_doubled_shard(toy, tmp_path, capsys):
    dirs = fake_shards(tmp_path, toy_params(), count=3)
    refused(tmp_path / "merged", dirs[:2], capsys, "shard 3/3 missing")
    twin = tmp_path / "twin"
    shutil.copytree(dirs[0], twin)
    refused(tmp_path / "merged", [*dirs, twin], capsys, "shard 1/3 given twice",
            "cells are in more than one shard")
    (dirs[2] / "results" / "shard.json").unlink()  # an unfinished shard
    refused(tmp_path / "merged", dirs, capsys, "no shard.json", "shard 3/3 missing")


def test_merge_refuses_a_cell_in_two_shards(toy, tmp_path, capsys):
    p = toy_params()
    dirs = fake_shards(tmp_path, p)
    # Shard 2 also measured one of shard 1's cells, and says it was its share.
    spec = shard.plan_shard(run_plan(toy, p), Shard(1, 2)).specs[0]
    store = ResultStore(dirs[1] / "results")
    store.append(make_row(spec, status="ok", run_id="run2",
                          provenance={"git_commit": "c0ffee", "hostname": "node2"}))
    info = json.loads((store.dir / "shard.json").read_text())
    write_json(store.dir / "shard.json", {**info, "cells": info["cells"] + [f"{spec.cell_id}-r0"]})
    refused(tmp_path / "merged", dirs, capsys, "1 cell is in more than one shard",
            spec.label)


def test_merge_refuses_a_shard_with_cells_missing(toy, tmp_path, capsys):
    dirs = fake_shards(tmp_path, toy_params())
    next((dirs[1] / "results" / "cells").iterdir()).unlink()
    refused(tmp_path / "merged", dirs, capsys, "shard 2/2", "1 of its 8 cells have no row")


def test_merge_refuses_other_code_and_warns_of_a_dirty_tree(toy, tmp_path, capsys):
    p = toy_params()
    a = fake_shards(tmp_path / "a", p, commit="aaaa")
    b = fake_shards(tmp_path / "b", p, commit="bbbb")
    refused(tmp_path / "merged", [a[0], b[1]], capsys, "fwcompare's git commit differs",
            "aaaa", "bbbb")
    c = fake_shards(tmp_path / "c", p, commit="aaaa", versions={"numpy": "9.9"})
    refused(tmp_path / "merged", [a[0], c[1]], capsys, "library versions differ",
            "numpy 2.0 vs 9.9")
    d = fake_shards(tmp_path / "d", p, commit="aaaa", dirty=True)
    assert cli.main(["merge", str(tmp_path / "merged"), str(a[0]), str(d[1])]) == 0
    assert "uncommitted changes" in capsys.readouterr().err


# -- jobs: submitit's local executor ---------------------------------------------------------
def mark_processes(monkeypatch) -> str:
    """A variable every process the test starts inherits (local jobs, fork
    servers, workers): what :func:`left_running` looks for."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("FWCOMPARE_TEST_MARK", mark)
    return mark


def left_running(mark: str) -> list[str]:
    """The marked processes still running, but the fork servers this test
    process keeps on purpose (tests/servers.py)."""
    from servers import kept_pids

    found, kept = [], kept_pids()
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.pid in {os.getpid(), *kept} or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get("FWCOMPARE_TEST_MARK") == mark:
                found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:200]}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


def submit_args(toy_name, pfile, out, count=2) -> list[str]:
    return ["submit", toy_name, "--shards", str(count), "--executor", "local", "--params",
            str(pfile), "--out", str(out), "--profile", "smoke", "--poll-s", "0.5",
            "--timeout-min", "10"]


def test_slurm_jobs_get_the_partition_gpus_cores_and_time_asked_for(tmp_path, monkeypatch):
    import submitit.slurm.slurm as slurm

    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # "srun"
    ex = submit.make_executor(tmp_path, "slurm", name="fwcompare-toy", partition="gpu",
                             gpus_per_node=2, cpus_per_task=16, exclusive=True, timeout_min=30)
    script = ex._executor._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=2", "--cpus-per-task=16", "--exclusive",
                 "--time=30", "--job-name=fwcompare-toy"):
        assert f"#SBATCH {line}\n" in script, script
    local = submit.make_executor(tmp_path, "local", name="x", partition="gpu", timeout_min=5)
    assert local._executor.parameters["timeout_min"] == 5


@pytest.mark.serial
@pytest.mark.slow
def test_two_local_shard_jobs_merge_into_the_cells_of_one_run(toy, tmp_path, smoke_timing,
                                                               monkeypatch, capsys):
    mark = mark_processes(monkeypatch)
    p = {**smoke_timing, "models": ["square", "cube"], "seq_lens": [16], "threads": 1}
    pfile = tmp_path / "toy.yaml"
    pfile.write_text(yaml.safe_dump(p))
    out = tmp_path / "sharded"
    assert cli.main(submit_args(toy.name, pfile, out)) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "shard 1/2 finished" in said and "shard 2/2 finished" in said, said
    merged = load_results(out)
    one = run_study(toy.name, p, output_dir=tmp_path / "one", progress=False)

    def cells(df):
        return sorted(zip(df["cell_id"], df["round"], df["status"]))
    assert cells(merged.results) == cells(one.results) and len(one.results) == 4
    assert set(merged.results["status"]) == {"ok"}
    assert set(merged.samples["cell_id"]) == set(one.samples["cell_id"])
    # Two runs, one per shard, each one model's cells, in a folder of its own.
    assert merged.results["run_id"].nunique() == 2
    for i in (1, 2):
        part = load_results(out / "shards" / f"shard-{i}-of-2").results
        assert part["model"].nunique() == 1 and len(part) == 2
    assert len(tables.summarize(merged.results, merged.samples)) == 4
    assert not left_running(mark)


def finished_cells(out) -> list[str]:
    """The cells any shard measured to their end (each takes 300 s of samples
    in the tests that stop the shards: a stopped shard has none)."""
    done = []
    for results in (out / "shards").glob("shard-*/results"):
        df = ResultStore(results).load()
        done += list(df.loc[df["status"] == "ok", "cell_id"]) if len(df) else []
    return done


def wait_for_workers(out, deadline_s=180.0):
    """A fake wait between polls: Ctrl-C once both shards have worker jobs."""
    end = time.monotonic() + deadline_s
    state = {"seen": False}

    def pause(seconds):
        time.sleep(seconds)
        jobs = [list((out / "shards" / f"shard-{i}-of-2" / "results" / "work" / "jobs")
                     .glob("numpy-*.json")) for i in (1, 2)]
        if all(jobs) or time.monotonic() > end:
            state["seen"] = all(jobs)
            raise KeyboardInterrupt
    return pause, state


@pytest.mark.serial
@pytest.mark.slow
def test_ctrl_c_cancels_every_shard_job_and_leaves_nothing_running(toy, tmp_path, smoke_timing,
                                                                    monkeypatch, capsys):
    mark = mark_processes(monkeypatch)
    p = {**smoke_timing, "models": ["square", "cube"], "seq_lens": [16], "threads": 1,
         "min_time_s": 300.0, "max_time_s": 600.0, "target_rel_ci": 1e-9}
    pfile = tmp_path / "toy.yaml"
    pfile.write_text(yaml.safe_dump(p))
    out = tmp_path / "sharded"
    pause, state = wait_for_workers(out)
    monkeypatch.setattr(submit, "_pause", pause)
    assert cli.main(submit_args(toy.name, pfile, out)) == 130  # the CLI's interrupt
    assert state["seen"], "the shards never started their workers"
    assert "cancelling 2 shard job(s)" in capsys.readouterr().out
    assert not finished_cells(out), "a shard measured on after it was stopped"
    assert not left_running(mark)
    assert not (out / "results").exists()


@pytest.mark.serial
@pytest.mark.slow
def test_a_failing_shard_cancels_the_others(toy, tmp_path, smoke_timing, monkeypatch, capsys):
    mark = mark_processes(monkeypatch)
    p = {**smoke_timing, "models": ["square", "cube"], "seq_lens": [16], "threads": 1,
         "min_time_s": 300.0, "max_time_s": 600.0, "target_rel_ci": 1e-9}
    pfile = tmp_path / "toy.yaml"
    pfile.write_text(yaml.safe_dump(p))
    out = tmp_path / "sharded"
    bad = out / "shards" / "shard-1-of-2" / "results"  # shard 1 fails before it measures
    bad.mkdir(parents=True)
    write_json(bad / "shard.json", {"study": toy.name, "shard": 1, "count": 3})
    assert cli.main(submit_args(toy.name, pfile, out)) == 2
    io = capsys.readouterr()
    assert "shard 1/2 failed" in io.err and "holds shard 1/3" in io.err, io.err
    assert "cancelling 1 shard job(s): 2/2" in io.out, io.out
    assert not finished_cells(out), "a shard measured on after it was stopped"
    assert not left_running(mark)
    assert not (out / "results").exists()


@pytest.mark.serial
@pytest.mark.slow
def test_shard_jobs_past_their_time_limit_stop_and_leave_nothing_running(
        toy, tmp_path, smoke_timing, monkeypatch, capsys):
    """A local job gets submitit's time-out signal 30 s before its limit (1
    min): the shard stops through the runner's clean-up, the job fails, the
    other is stopped, nothing is merged."""
    mark = mark_processes(monkeypatch)
    p = {**smoke_timing, "models": ["square", "cube"], "seq_lens": [16], "threads": 1,
         "min_time_s": 300.0, "max_time_s": 600.0, "target_rel_ci": 1e-9}
    pfile = tmp_path / "toy.yaml"
    pfile.write_text(yaml.safe_dump(p))
    out = tmp_path / "sharded"
    args = submit_args(toy.name, pfile, out)
    args[args.index("--timeout-min") + 1] = "1"
    assert cli.main(args) == 2
    io = capsys.readouterr()
    assert "failed" in io.err and "timed-out" in io.err, io.err
    assert not finished_cells(out), "the shard measured on past its time-out signal"
    assert not left_running(mark)
    assert not (out / "results").exists()
