"""The distributed study: params, launch commands, scaling tables, and real
two-worker launches that crash, hang or diverge on purpose."""
import json
import math
from pathlib import Path
import os
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import psutil
import pytest

import fwcompare
from fwcompare.suite import claims
from fwcompare.execution import launch
from fwcompare.results import tables
from fwcompare.frameworks import Engine
from fwcompare.results.judging import StudyData
from fwcompare.suite.params import ParamsError, validate
from fwcompare.studies import STUDIES
from fwcompare.studies import distributed as study


def test_params_name_every_problem():
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {"frameworks": ["torch", "mxnet"], "workers": [1, 2, 3],
                                 "global_batch": 8})
    assert "unknown value 'mxnet'; allowed: torch, tensorflow, jax" in str(exc.value)
    assert validate("distributed", {"frameworks": ["jax"], "modes": {"jax": ["jit"]}})
    with pytest.raises(ParamsError, match="unknown mode 'eager' for jax"):
        validate("distributed", {"frameworks": ["jax"], "modes": {"jax": ["eager"]}})
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {"workers": [1, 2, 3], "global_batch": 8, "node_rank": 2,
                                 "hosts": ["a", "b"]})
    msg = str(exc.value)
    assert "4 problems" in msg
    assert "8 does not split evenly over 3 workers" in msg
    assert "1, 3 cannot be spread evenly over 2 hosts" in msg
    assert "'node_rank': 2 is not an index of hosts" in msg
    assert "several hosts need a fixed port" in msg
    with pytest.raises(ParamsError, match="unknown mode 'xla' for tensorflow"):
        validate("distributed", {"modes": {"torch": ["eager"], "tensorflow": ["xla"]}})
    # A launch's ranks use every core: launches are timed one after another.
    assert validate("distributed", {})["schedule"] == "sequential"
    with pytest.raises(ParamsError, match="never interleaved"):
        validate("distributed", {"schedule": "interleaved"})
    with pytest.raises(ParamsError, match="unknown key 'settle_s'"):
        validate("distributed", {"settle_s": 0.01})
    # The parameter server's cluster: one host, the CPU
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {"frameworks": ["tensorflow"], "modes": {"tensorflow": ["ps"]},
                                 "hosts": ["a", "b"],
                                 "master_port": 29500, "device": "gpu"})
    msg = str(exc.value)
    assert "tensorflow ps runs its cluster (chief, workers, parameter servers) on this host" in msg
    assert "tensorflow ps runs on the CPU only" in msg
    with pytest.raises(ParamsError, match="key 'ps_servers': must be positive"):
        validate("distributed", {"ps_servers": 0})


def test_cells_weak_and_strong():
    p = validate("distributed", {"workers": [1, 2, 4], "per_worker_batch": 3,
                                 "global_batch": 8, "threads": 1})
    cells = STUDIES["distributed"].cells(p)
    assert len(cells) == 3 * 3 * 2  # torch, tensorflow, jax x 3 counts x 2 scalings
    weak = {c.workers: c.batch_size for c in cells if c.scaling == "weak"}
    strong = {c.workers: c.batch_size for c in cells if c.scaling == "strong"}
    assert weak == {1: 3, 2: 6, 4: 12} and strong == {1: 8, 2: 8, 4: 8}
    assert len({c.cell_id for c in cells}) == len(cells)
    assert all(c.task == "train" and c.threads == 1 for c in cells)


def test_scaling_engines_launch_the_other_engines_at_the_most_workers_only():
    p = validate("distributed", {"frameworks": ["torch", "tensorflow"], "workers": [1, 2, 4],
                                 "scaling": ["strong"], "global_batch": 8,
                                 "modes": {"torch": ["eager", "ddp-fp16", "fsdp"],
                                           "tensorflow": ["graph", "ps"]},
                                 "scaling_engines": {"torch": ["eager"]}})
    counts = {}
    for c in STUDIES["distributed"].cells(p):
        counts.setdefault((c.framework, c.mode), []).append(c.workers)
    assert counts == {("torch", "eager"): [1, 2, 4], ("torch", "ddp-fp16"): [4],
                      ("torch", "fsdp"): [4],  # named for torch: torch's others at 4 only
                      ("tensorflow", "graph"): [1, 2, 4], ("tensorflow", "ps"): [1, 2, 4]}
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {"frameworks": ["torch", "tensorflow"],
                                 "modes": {"torch": ["eager"], "tensorflow": ["graph"]},
                                 "scaling_engines": {"torch": ["eager", "fsdp"], "jax": ["jit"]}})
    msg = str(exc.value)
    assert "key 'scaling_engines': torch fsdp not in modes (eager)" in msg
    assert "key 'scaling_engines': jax jit not in modes (none)" in msg


def test_one_launch_engines_take_the_first_round_only_and_name_the_key_when_unknown():
    """An engine of ``one_launch`` is launched in round 0 only, whether the
    rounds after it go to the claimed variants or to all; the others take
    every round (quick: TensorFlow's two engines once, PyTorch's claimed ones
    twice)."""
    from fwcompare.plan.run import RunPlan

    study = STUDIES["distributed"]
    claimed = frozenset({"torch/eager", "torch/ddp-fp16", "tensorflow/graph", "tensorflow/ps"})
    base = {"frameworks": ["torch", "tensorflow"], "workers": [2], "scaling": ["strong"],
            "global_batch": 4, "rounds": 3,
            "modes": {"torch": ["eager", "ddp-fp16"], "tensorflow": ["graph", "ps"]},
            "one_launch": {"tensorflow": ["graph", "ps"], "torch": ["ddp-fp16"]}}
    for rounds_for in ("claims", "all"):
        p = validate("distributed", {**base, "rounds_for": rounds_for})
        todo = RunPlan(study, p, claimed).cells
        rounds = {}
        for c in todo:
            rounds.setdefault(f"{c.spec.framework}/{c.spec.mode}", []).append(c.round)
        assert rounds == {"torch/eager": [0, 1, 2], "torch/ddp-fp16": [0],
                          "tensorflow/graph": [0], "tensorflow/ps": [0]}, rounds_for
        assert len({study.launch_key(c) for c in todo}) == len(todo) == 6
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {**base, "one_launch": {"torch": ["fsdp"]}})
    assert "key 'one_launch': torch fsdp not in modes (eager, ddp-fp16)" in str(exc.value)
    with pytest.raises(ParamsError) as exc:
        validate("distributed", {**base, "one_launch": {"tensorflow": ["xla"]}})
    assert "key 'one_launch': unknown mode 'xla' for tensorflow" in str(exc.value)


def test_launch_commands_for_two_hosts(tmp_path):
    torch_launch = launch.launcher("torch")  # frameworks/torch/launch.py
    cmd = torch_launch.torchrun_command(tmp_path / "job.json", 4, ["h0", "h1"], 1, 29500)
    joined = " ".join(cmd)
    assert "-m torch.distributed.run --nnodes 2 --node_rank 1 --nproc_per_node 2" in joined
    assert "--master_addr h0 --master_port 29500" in joined
    assert cmd[-3:] == ["-m", "fwcompare.commands.worker", str(tmp_path / "job.json")]
    ports = launch.choose_ports("tensorflow", 4, ["h0", "h1"], 29500)
    assert ports == [29501, 29502, 29503, 29504]
    configs = launch.launcher("tensorflow").tf_configs(4, ["h0", "h1"], 1, ports)
    assert [c["task"]["index"] for c in configs] == [2, 3]
    assert configs[0]["cluster"]["worker"] == ["h0:29501", "h0:29502", "h1:29503", "h1:29504"]
    envs = torch_launch.torch_rank_envs(4, ["h0", "h1"], 1, 29500)  # torchrun's, for forked ranks
    assert [(e["RANK"], e["LOCAL_RANK"]) for e in envs] == [("2", "0"), ("3", "1")]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"])
            for e in envs} == {("4", "2", "h0", "29500")}
    # JAX: one coordinator port (process 0's, on the first host), a process id each
    assert launch.choose_ports("jax", 4, ["h0", "h1"], 29500) == [29500]
    envs = launch.launcher("jax").jax_rank_envs(4, ["h0", "h1"], 1, 29500)
    assert [(e["FWCOMPARE_JAX_PROCESS_ID"], e["LOCAL_RANK"]) for e in envs] == [("2", "0"),
                                                                               ("3", "1")]
    assert {(e["FWCOMPARE_JAX_COORDINATOR"], e["FWCOMPARE_JAX_PROCESSES"])
            for e in envs} == {("h0:29500", "4")}
    with pytest.raises(ValueError, match="fixed master_port"):
        launch.choose_ports("torch", 2, ["h0", "h1"], 0)
    free = launch.choose_ports("tensorflow", 3, ["127.0.0.1"], 0)
    assert len(set(free)) == 3 and all(launch.port_is_free(p) for p in free)
    # ParameterServerStrategy: a chief, 2 workers and 2 parameter servers
    ports = launch.choose_ports("tensorflow", 2, ["127.0.0.1"], 0, 2)
    assert len(set(ports)) == 5
    tasks = launch.launcher("tensorflow").tf_ps_configs(2, 2, ports)
    assert [name for name, _ in tasks] == ["chief", "worker 0", "worker 1", "ps 0", "ps 1"]
    assert [c["task"] for _, c in tasks][2:4] == [{"type": "worker", "index": 1},
                                                  {"type": "ps", "index": 0}]
    assert tasks[0][1]["cluster"] == {"chief": [f"127.0.0.1:{ports[0]}"],
                                      "worker": [f"127.0.0.1:{q}" for q in ports[1:3]],
                                      "ps": [f"127.0.0.1:{q}" for q in ports[3:]]}


def _study_data(step_s: dict, framework: str = "torch"):
    """Summary and samples from constructed step times: {(scaling, workers): (batch, seconds)}."""
    rows, samples = [], []
    for (scaling, w), (batch, secs) in step_s.items():
        cid = f"{scaling}{w}"
        rows.append(dict(cell_id=cid, model="m", framework=framework,
                         mode=study.DIST_MODES[framework][0], device="cpu",
                         dtype="float32", seq_len=8, scaling=scaling, workers=w,
                         batch_size=batch, status="ok" if secs else "timeout", error="",
                         converged=True, round=0, allreduce_s=0.01, allreduce_share=0.1,
                         weight_max_abs_diff=0.0, equiv_max_abs_err=0.0, equiv_rel_err=0.0,
                         mode_setup="", first_call_s=1.0, peak_mem_bytes=math.nan,
                         n_samples=len(secs or [])))
        samples += [dict(cell_id=cid, round=0, sample=i, seconds=s, calls_per_sample=1)
                    for i, s in enumerate(secs or [])]
    results, samples = pd.DataFrame(rows), pd.DataFrame(samples)
    return tables.summarize(results, samples), samples


def _table(step_s: dict) -> pd.DataFrame:
    """A scaling table from constructed step times."""
    return study.scaling_table(*_study_data(step_s))


def test_scaling_table_efficiency():
    one = list(np.linspace(0.99, 1.01, 9))
    t = _table({("weak", 1): (4, one), ("weak", 2): (8, [x * 1.25 for x in one]),
                ("weak", 4): (16, None),
                ("strong", 1): (8, one), ("strong", 2): (8, [x * 0.8 for x in one])})
    t = t.set_index(["scaling", "workers"])
    # Weak: per-worker batch fixed; efficiency = T1 / T2 = 0.8.
    assert t.loc[("weak", 2), "per_worker_batch"] == 4
    assert t.loc[("weak", 2), "speedup"] == pytest.approx(1.6)
    assert t.loc[("weak", 2), "efficiency"] == pytest.approx(0.8)
    lo, hi = t.loc[("weak", 2), ["efficiency_low", "efficiency_high"]]
    assert lo < 0.8 < hi
    # Strong: global batch fixed; speed-up = T1 / T2 = 1.25 over 2 workers.
    assert t.loc[("strong", 2), "speedup"] == pytest.approx(1.25)
    assert t.loc[("strong", 2), "efficiency"] == pytest.approx(0.625)
    assert t.loc[("weak", 1), "efficiency"] == pytest.approx(1.0)
    # A failed cell stays in the table, marked, with no figures.
    assert t.loc[("weak", 4), "status"] == "timeout" and math.isnan(t.loc[("weak", 4),
                                                                           "efficiency"])



# what a StudyData has besides its frames: one round, no extra rounds, 95%, no folder or params
NO_RUN_DIR = dict(rounds=1, more_rounds=0, confidence=0.95, dir=Path("/nonexistent"),
                  params={}, prior=None, spreads=None)


def test_scaling_claim_from_claims_yaml_needs_every_framework():
    """claims.yaml's data-parallel claim (a study metric, found through the
    registry): the lowest efficiency of the frameworks it names, at their
    most workers; a GPU claim on CPU cells is shown, never judged."""
    (claim,) = [c for c in claims.load_claims() if c.id == "data-parallel-near-linear"]
    one = list(np.linspace(0.99, 1.01, 9))
    torch_summary, torch_samples = _study_data({("weak", 1): (4, one),
                                                ("weak", 2): (8, [x * 1.25 for x in one])})
    data = SimpleNamespace(present=True, summary=torch_summary, samples=torch_samples,
                           results=torch_summary, losses=None, manifest={}, **NO_RUN_DIR,
                           by_cell=tables.samples_by_cell(torch_samples))
    row, _ = claims.evaluate(claim, data)
    assert row["verdict"] == "not measured here" and math.isnan(row["value"])  # no TF cells
    tf_summary, tf_samples = _study_data({("weak", 1): (4, one),
                                          ("weak", 2): (8, [x * 1.6 for x in one])},
                                         "tensorflow")
    tf_summary["cell_id"] = "tf-" + tf_summary["cell_id"]
    tf_samples["cell_id"] = "tf-" + tf_samples["cell_id"]
    both = pd.concat([torch_summary, tf_summary], ignore_index=True)
    samples = pd.concat([torch_samples, tf_samples], ignore_index=True)
    data = SimpleNamespace(present=True, summary=both, samples=samples, results=both,
                           losses=None, manifest={}, **NO_RUN_DIR, by_cell=tables.samples_by_cell(samples))
    row, _ = claims.evaluate(claim, data)
    assert row["value"] == pytest.approx(1 / 1.6)  # TensorFlow's, the lower one
    assert row["verdict"] == "not measured here" and "GPU" in row["note"]


def _rank_pids(tmp_path) -> dict[str, list[tuple[int, int]]]:
    """(pid, parent) of every rank and job, per log, from the line each writes."""
    jobs = tmp_path / "results" / "work" / "jobs"
    return {log.stem: [tuple(map(int, m)) for m in re.findall(
        r"fwcompare worker: pid (\d+), parent (\d+)", log.read_text())]
        for log in jobs.glob("*.log") if not log.name.startswith("forkserver")}


def _ranks_alive(tmp_path) -> list[psutil.Process]:
    """Ranks or launchers of this test's jobs still running anywhere on the
    machine (they run in sessions of their own, so they are not found among
    this process's children once their parent is gone): a launcher's or a
    fresh rank's command names its job file; a forked rank is found by the
    pid its log names."""
    alive = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if str(tmp_path) in cmd and ("fwcompare.commands.worker" in cmd
                                     or "torch.distributed.run" in cmd):
            alive.append(proc)
    for pids in _rank_pids(tmp_path).values():
        for pid, _ in pids:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
    return alive


@pytest.fixture
def ports_used(monkeypatch):
    used: list[int] = []
    choose = launch.choose_ports

    def recording(*args):
        ports = choose(*args)
        used.extend(ports)
        return ports
    monkeypatch.setattr(launch, "choose_ports", recording)
    return used


def _final_losses(losses: pd.DataFrame) -> pd.Series:
    """Each engine's last agreement-step loss (its ``mode``, less `` xN``)."""
    engine = losses["mode"].str.split(" x").str[0]
    return losses.assign(engine=engine).sort_values("step").groupby("engine")["loss"].last()


def _smoke(frameworks, **over) -> dict:
    from fwcompare.suite.params import load_file
    from fwcompare.core.paths import PARAMS

    p = dict(load_file(PARAMS / "distributed" / "smoke.yaml"))  # typed params are frozen
    p.update(frameworks=frameworks, modes={fw: p["modes"][fw][:1] for fw in frameworks},
             workers=[2], agreement_steps=2, **over)
    return p


@pytest.mark.slow
def test_crashed_rank_and_diverged_weights(tmp_path, monkeypatch, ports_used):
    """Rank 1 dies in the weak cell: that cell is an error, the strong cell
    runs in a fresh launch; rank 1's weights are shifted in the strong cell:
    the cross-rank check catches it."""
    monkeypatch.setenv("FWCOMPARE_FAULT", "crash@1:torch/eager weak x2,"
                                          "desync@1:torch/eager strong x2")
    res = fwcompare.run_study("distributed", _smoke(["torch"]), output_dir=tmp_path,
                              progress=False)
    df = res.results.set_index("scaling")
    assert df.loc["weak", "status"] == "error"
    assert "exit code" in df.loc["weak", "error"]
    assert df.loc["strong", "status"] == "not_equivalent"
    assert df.loc["strong", "weight_max_abs_diff"] == pytest.approx(1e-3, rel=0.05)
    assert "weights differ across ranks" in df.loc["strong", "error"]
    assert df.loc["strong", "median_s"] > 0  # timed all the same, and marked
    # Each rank was forked (a log of its own) by the fork server that forked
    # the prepare job, not started by torchrun or as a child of this process.
    pids = _rank_pids(tmp_path)
    ranks = [p for name, ps in pids.items() if "-x2-" in name for p in ps]
    (prep,) = [ps[0] for name, ps in pids.items() if name.startswith("prepare")]
    assert len(ranks) == 4  # 2 ranks x 2 launches (the crashed one and the fresh one)
    assert {parent for _, parent in ranks} == {prep[1]} and prep[1] != os.getpid()
    assert not _ranks_alive(tmp_path)
    assert ports_used and all(launch.port_is_free(p) for p in ports_used)


@pytest.mark.slow
def test_hung_rank_times_out_without_orphans(tmp_path, monkeypatch, ports_used):
    """Rank 1 hangs in the weak cell: a timeout, and the strong cell runs in a
    fresh launch, where rank 1's weights are shifted: MultiWorkerMirrored's
    cross-rank check (its weights gathered in buckets) catches it."""
    monkeypatch.setenv("FWCOMPARE_FAULT", "hang@1:tensorflow/graph weak x2,"
                                          "desync@1:tensorflow/graph strong x2")
    res = fwcompare.run_study("distributed", _smoke(["tensorflow"], cell_timeout_s=15.0),
                              output_dir=tmp_path, progress=False)
    df = res.results.set_index("scaling")
    assert df.loc["weak", "status"] == "timeout"
    assert "cell_timeout_s" in df.loc["weak", "error"]
    assert df.loc["strong", "status"] == "not_equivalent"
    assert df.loc["strong", "weight_max_abs_diff"] == pytest.approx(1e-3, rel=0.05)
    assert "weights differ across ranks" in df.loc["strong", "error"]
    assert df.loc["strong", "median_s"] > 0
    # TensorFlow's ranks are forked too (by the TensorFlow fork server; a fresh
    # interpreter's parent would be this process), each with a log of its own.
    ranks = [p for name, ps in _rank_pids(tmp_path).items() if "-x2-" in name for p in ps]
    assert len(ranks) == 4 and len({parent for _, parent in ranks}) == 1
    assert ranks[0][1] != os.getpid()
    assert not _ranks_alive(tmp_path)
    assert len(ports_used) == 4 and all(launch.port_is_free(p) for p in ports_used)
    stored = json.loads((tmp_path / "results" / "params.json").read_text())
    assert stored["cell_timeout_s"] == 15.0


@pytest.mark.frameworks("jax", "tensorflow")
def test_the_spread_check_gathers_weights_in_bounded_buckets_in_order():
    from fwcompare.frameworks.tensorflow.parallel import _buckets

    class W:
        def __init__(self, *shape):
            self.shape = shape

    ws = [W(3, 2), W(4), W(20), W(1), W(5), W(2, 2)]
    got = _buckets(ws, 10)
    assert [[w.shape for w in b] for b in got] == [[(3, 2), (4,)], [(20,)],
                                                   [(1,), (5,), (2, 2)]]
    assert [w for b in got for w in b] == ws  # every weight once, in order
    assert _buckets([], 10) == []


def test_the_bf16_compression_hook_is_refused_on_the_cpu_before_anything_runs():
    """The bf16 hook requires CUDA and NCCL: on the CPU the params say so. (The
    fp16 hook's run: the smoke's distributed study, test_smoke_studies.py.)"""
    with pytest.raises(ParamsError, match="ddp-bf16 needs a GPU"):
        validate("distributed", {"frameworks": ["torch"], "modes": {"torch": ["ddp-bf16"]}})


def _wide_bert(path) -> str:
    """A local checkpoint (random weights, fixed seed) whose layers hold most
    of its 5M weights, so sharding them shows above the runtime's own memory."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=1000, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=64)).save_pretrained(path)
    return str(path)


@pytest.mark.slow
def test_fsdp_trains_as_ddp_with_less_memory_per_rank(tmp_path, ports_used):
    """FSDP2 (fully_shard) beside plain DDP, two ranks on gloo, strong scaling,
    on a model whose layers hold most of its weights: FSDP's losses follow
    the single-process run's and DDP's; its collectives (all-gathers and a
    reduce-scatter) are timed; each rank holds about half of DDP's weights,
    gradients and AdamW state, so the memory each rank holds is clearly lower;
    the engine table and both engine claims read the two launches."""
    p = _smoke(["torch"], scaling=["strong"], models=[_wide_bert(tmp_path / "wide-bert")])
    p["modes"] = {"torch": ["eager", "fsdp"]}
    res = fwcompare.run_study("distributed", p, output_dir=tmp_path / "out", progress=False)
    df = res.results.set_index("mode")
    assert (df["status"] == "ok").all(), df[["status", "error"]]
    assert "fully_shard" in df.loc["fsdp", "mode_setup"]
    assert df.loc["fsdp", "equiv_rel_err"] <= 1e-2  # losses: PyTorch single-process run
    final = _final_losses(res.losses)
    assert final["fsdp"] == pytest.approx(final["eager"], rel=1e-4)
    assert (df["allreduce_s"] > 0).all()
    ddp, fsdp = df.loc["eager", "rank_mem_bytes"], df.loc["fsdp", "rank_mem_bytes"]
    state = 4 * 4 * 5.0e6  # weights, DDP's buckets, two AdamW moments: float32, ~5M weights
    assert ddp > state * 0.9 and fsdp < ddp - state * 0.3, (ddp, fsdp)
    assert (df["rank_mem_min_bytes"] <= df["rank_mem_bytes"]).all()
    assert df["mem_method"].str.startswith("cpu_rss_held_after_a_step").all()
    _other_work_metered(df)
    summary = tables.summarize(res.results, res.samples)
    engines = study.engine_table(summary, res.samples).set_index("mode")
    assert engines.loc["fsdp", "mem_ratio"] == pytest.approx(fsdp / ddp)
    assert engines.loc["fsdp", "speedup"] > 0
    assert engines.loc["eager", ["speedup", "mem_ratio"]].tolist() == [1.0, 1.0]  # itself
    data = StudyData(tmp_path / "out")
    (memory,) = [c for c in claims.load_claims() if c.id == "fsdp-lowers-rank-memory"]
    row, _ = claims.evaluate(memory, data)
    # one launch each (rounds 1): the figure is shown, and from one process decides nothing
    assert row["value"] == pytest.approx(fsdp / ddp) and row["verdict"] == "inconclusive"
    assert "a figure from one process" in row["note"], row
    (compress,) = [c for c in claims.load_claims() if c.id == "ddp-fp16-compression-faster"]
    row, _ = claims.evaluate(compress, data)  # no ddp-fp16 launch here
    assert row["verdict"] == "not measured here" and "torch/ddp-fp16" in row["note"]
    assert not _ranks_alive(tmp_path)


def _other_work_metered(df) -> None:
    """Each launch's row says what else the machine did while rank 0 sampled
    (host.HostMeter, with the launcher's process and so every rank under it
    counted as its own: tests/test_machine_load.py shows a tree counted so, whatever
    else the machine does; here other tests may share the cores)."""
    host = df[["host_other_cpu", "host_steal"]]
    assert host.notna().all().all() and host.ge(0).all().all() and host.le(1).all().all(), host


@pytest.mark.slow
def test_a_crashed_parameter_server_and_a_hung_worker(tmp_path, monkeypatch, ports_used):
    """The parameter server dies in the weak cell (SIGSEGV from its chief):
    that cell is an error naming it, and the strong cell runs in a fresh
    launch, where worker 1 stops answering (SIGSTOP): a timeout. No process
    of either cluster is left running, stopped or not, and every port is free."""
    monkeypatch.setenv("FWCOMPARE_FAULT", "crash@ps-0:tensorflow/ps weak x2,"
                                          "hang@worker-1:tensorflow/ps strong x2")
    p = _smoke(["tensorflow"], cell_timeout_s=15.0)
    p["modes"] = {"tensorflow": ["ps"]}
    res = fwcompare.run_study("distributed", p, output_dir=tmp_path, progress=False)
    df = res.results.set_index("scaling")
    assert df.loc["weak", "status"] == "error"
    assert "ps 0: killed by signal SIGSEGV" in df.loc["weak", "error"]
    assert df.loc["strong", "status"] == "timeout"
    assert "cell_timeout_s" in df.loc["strong", "error"]
    # the chief, two workers and a ps, each with a log of its own; two launches
    assert [len(ps) for name, ps in _rank_pids(tmp_path).items() if "-x2-" in name] == [2] * 4
    assert not _ranks_alive(tmp_path)
    assert len(ports_used) == 2 * 4 and all(launch.port_is_free(q) for q in ports_used)


@pytest.mark.slow
def test_sigterm_ends_a_run_and_its_parameter_server_cluster(tmp_path):
    """``fwcompare run`` stopped by SIGTERM (``timeout``, a scheduler) while a
    parameter-server cluster trains: it exits as after Ctrl-C (130) and
    leaves none of the cluster's processes, nor its fork servers, running."""
    import signal
    import subprocess
    import sys
    import time

    import yaml

    p = _smoke(["tensorflow"], scaling=["strong"], max_time_s=60.0, min_time_s=60.0)
    p["modes"] = {"tensorflow": ["ps"]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(p))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwcompare", "run", "distributed", "--params",
         str(tmp_path / "p.yaml"), "--out", str(tmp_path)], cwd=launch.ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        end = time.monotonic() + 120
        while sum(len(ps) for name, ps in _rank_pids(tmp_path).items() if "-x2-" in name) < 4:
            assert proc.poll() is None and time.monotonic() < end, "the cluster did not start"
            time.sleep(0.2)
        time.sleep(5)  # into the steps
        servers = [c for c in psutil.Process(proc.pid).children() if "forkserver" in
                   " ".join(c.cmdline())]
        assert servers
        os.kill(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 130, out
        assert "interrupted" in out
        time.sleep(1)
        assert not _ranks_alive(tmp_path)
        assert not [s for s in servers if s.is_running() and s.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_jax_ranks_agree_and_a_shifted_weight_is_caught(tmp_path, monkeypatch, ports_used):
    """Two JAX processes (jax.distributed, gloo on loopback), forked from the
    JAX fork server: the weak cell agrees with the single-process run and its
    ranks' weights are equal; rank 1's copy of a weight shifted in the strong
    cell is caught by the cross-process check. Nothing is left running."""
    monkeypatch.setenv("FWCOMPARE_FAULT", "desync@1:jax/jit strong x2")
    res = fwcompare.run_study("distributed", _smoke(["jax"]), output_dir=tmp_path,
                              progress=False)
    df = res.results.set_index("scaling")
    assert df.loc["weak", "status"] == "ok", df.loc["weak", "error"]
    assert df.loc["weak", "weight_max_abs_diff"] == 0.0
    assert df.loc["weak", "equiv_rel_err"] <= 1e-2  # losses: PyTorch single-process run
    assert df.loc["weak", "allreduce_s"] > 0 and df.loc["weak", "median_s"] > 0
    assert "jax.distributed (gloo collectives)" in df.loc["weak", "mode_setup"]
    assert df.loc["strong", "status"] == "not_equivalent"
    assert df.loc["strong", "weight_max_abs_diff"] == pytest.approx(1e-3, rel=0.05)
    ranks = [p for name, ps in _rank_pids(tmp_path).items() if "-x2-" in name for p in ps]
    assert len(ranks) == 2 and ranks[0][1] != os.getpid()
    assert not _ranks_alive(tmp_path)
    assert len(ports_used) == 1 and launch.port_is_free(ports_used[0])


@pytest.mark.slow
def test_a_launch_whose_fork_server_is_gone_starts_fresh_processes(tmp_path):
    """Forking a rank fails (its server died): the ranks forked so far are
    ended and the launch starts every rank as a fresh process instead."""
    import subprocess

    from test_job_protocol import _job

    from fwcompare.execution.forkserver import ForkServerError

    class Gone:
        calls = 0

        def spawn(self, *args, **kwargs):
            Gone.calls += 1
            raise ForkServerError("fork server gone")
    w = launch.Launch(_job(framework="tensorflow"), tmp_path, "tf", dict(os.environ),
                      framework="tensorflow", workers=2, hosts=["127.0.0.1"], server=Gone())
    try:
        assert Gone.calls == 1 and len(w.procs) == 2
        assert all(isinstance(p, subprocess.Popen) for p in w.procs)
        assert "fork server failed (fork server gone)" in (tmp_path / "tf-0.log").read_text()
    finally:
        w.kill()
    assert all(p.poll() is not None for p in w.procs)


class Clock:
    """A clock that moves only when slept on: what a wait took, in its own seconds."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Ends:
    """A fake process of a launch that ends with ``code`` ``at`` seconds of
    ``clock`` after it is made (None: it runs on)."""

    def __init__(self, code, at, clock):
        self.code, self.at, self.clock, self.returncode = code, at, clock, None

    def poll(self):
        if self.at is not None and self.clock.now >= self.at:
            self.returncode = self.code
        return self.returncode


@pytest.mark.parametrize("ends, culprit, within", [
    # a worker killed first, then the parameter server's crash lands (the CI case)
    ([(-9, 0.0), (1, 0.3), (None, None), (-11, 1.6)], 3, (1.6, 3.0)),
    # a crash that lands at once: no wait past the first second
    ([(1, 0.0), (-11, 0.2), (None, None)], 1, (1.0, 1.5)),
    # out of memory: SIGKILL alone, the rest hang; it is the culprit after the longest wait
    ([(None, None), (-9, 0.0)], 1, (6.0, 7.0)),
    # error exits only, every process ended: the first in order, after a second
    ([(1, 0.0), (1, 0.1)], 0, (1.0, 1.5)),
])
def test_a_launch_names_the_crash_among_its_ends_even_when_it_lands_late(ends, culprit,
                                                                          within, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(launch, "time", clock)
    w = object.__new__(launch.Launch)
    w.procs = [Ends(code, at, clock) for code, at in ends]
    assert w._culprit() is w.procs[culprit]
    assert within[0] <= clock.now < within[1]
    none = object.__new__(launch.Launch)
    none.procs = [Ends(0, 0.0, clock), Ends(None, None, clock)]
    assert none._culprit() is None


def test_a_closing_barrier_that_a_peer_left_first_ends_the_rank_cleanly(capsys):
    """TensorFlow's ring pulls buffers from peers: a peer that has its sum may
    leave before this rank pulls its last one. Every cell was done by then, so
    the rank says so in its log and exits 0 instead of with a traceback."""
    from fwcompare.studies.distributed import _closing_barrier

    class PeerGone:
        def allreduce_sum(self, value):
            raise ConnectionError("Socket closed")

    _closing_barrier(PeerGone())
    assert "a peer left first (ConnectionError)" in capsys.readouterr().err


@pytest.mark.parametrize("mine, other, gathered", [
    (0xDEADBEEF, 0xDEADBEEF, False),  # the same bytes: 0.0, nothing gathered
    (0xDEADBEEF, 0xDEAFBEEF, True),  # the upper halves differ
    (0xDEADBEEF, 0xDEADBEEE, True),  # the lower halves differ
    (None, None, True),  # nothing replicated to digest: the engine's own answer
])
def test_the_weight_spread_is_zero_without_a_gather_where_the_ranks_digests_agree(
        mine, other, gathered):
    """Rank 0 of two: the other rank's parts of the three all-reduces are its
    CRC-32's halves and its own verdict (the same as this rank's: with two
    ranks, each half's sum is twice this rank's exactly when the halves match)."""
    from fwcompare.studies.distributed.worker import weight_spread

    class TwoRanks(Engine):
        rank, world = 0, 2

        def __init__(self):
            self.gathers = 0
            same = 1.0 if mine == other else 0.0
            self.theirs = iter([] if other is None else [other >> 16, other & 0xFFFF, same])

        def weights_crc(self):
            return mine

        def allreduce_sum(self, value):
            return value + next(self.theirs)

        def max_weight_diff(self):
            self.gathers += 1
            return 1e-3

    dp = TwoRanks()
    assert weight_spread(dp) == (1e-3 if gathered else 0.0)
    assert dp.gathers == int(gathered)
    assert next(dp.theirs, "all used") == "all used"


class OneRank(Engine):
    """A fake engine: one rank of one, counting its steps per batch shape and
    its all-reduces timed alone."""

    rank, world, setup = 0, 1, "one fake rank"

    def __init__(self, losses):
        self.loss, self.comm = iter(losses), 0
        self.steps: dict[tuple, int] = {}

    def batch(self, ids, labels):
        return ids

    def step(self, batch):
        self.steps[batch.shape] = self.steps.get(batch.shape, 0) + 1
        return next(self.loss, 0.5)

    def allreduce_sum(self, value):
        return value

    def max_weight_diff(self):
        return 0.0

    def allreduce_grads_s(self, repeats):
        self.comm += 1
        return [1e-4] * repeats


def _one_rank_study(tmp_path, max_time_s: float):
    """The distributed study's smoke cells for one PyTorch rank, timed briefly:
    its runner, with the gate prepared."""
    from fwcompare.measure import gate as gate_mod
    from fwcompare.plan.job import PREPARE
    from fwcompare.execution.runner import Runner
    from fwcompare.studies.distributed import STUDY
    from fwcompare.suite.api import run_plan

    params = validate("distributed", {**_smoke(["torch"], min_time_s=0.01,
                                               max_time_s=max_time_s, warmup_s=0.0,
                                               warmup_iters=1), "workers": [1]})
    runner = Runner(run_plan(STUDY, params), tmp_path / "results", task="train", progress=False)
    gate_mod.prepare(runner.job(PREPARE, "tiny-bert"), STUDY.train_settings(params))
    return runner


@pytest.mark.frameworks("torch")
def test_the_first_agreement_step_is_the_first_call_of_the_cell_with_the_gate_batch(
        tmp_path, monkeypatch, capsys):
    """The gate batch is strong scaling's global batch at the cells' length:
    a traced step (first step at a shape slow, as tf.function's trace) traces
    each cell's shape once and no other, the strong cell's first call is
    the agreement's first step, and its later agreement step is the strong
    cell's warm-up step (the weak cell makes its own)."""
    import time

    from fwcompare.measure import gate as gate_mod
    from fwcompare.plan.job import CELLS, CellRef
    from fwcompare.studies.distributed import STUDY, Rank

    runner = _one_rank_study(tmp_path, max_time_s=0.2)
    cells = [CellRef(spec, 0) for spec in STUDY.cells(runner.params)]
    assert {(c.spec.scaling, c.spec.batch_size) for c in cells} == {("weak", 2), ("strong", 4)}
    job = runner.job(CELLS, "tiny-bert", "torch", cells)

    class TracedDP(OneRank):  # whose step traces once per shape
        setup = "a step traced per shape"

        def __init__(self):
            super().__init__(gate_mod.Gate(job.gate_path).reference)
            self.traced = []

        def step(self, batch):
            if batch.shape not in self.traced:
                self.traced.append(batch.shape)
                time.sleep(0.3)
            return super().step(batch)

    dp = TracedDP()
    rank = Rank(job, dp, load_s=0.0)
    known, problems = rank.agreement()
    assert not problems
    strong = next(c for c in cells if c.spec.scaling == "strong")
    assert rank.first_call[0] == strong.key and rank.first_call[1] >= 0.3
    for ref in cells:
        rank.cell(ref, known, problems)
    assert sorted(dp.traced) == [(2, 16), (4, 16)]  # no shape that no cell has
    rows = rank.store.load().set_index("scaling")
    assert rows.loc["strong", "first_call_s"] == rank.first_call[1]
    assert rows.loc["weak", "first_call_s"] >= 0.3  # its own trace
    # Strong: 2 agreement steps, the samples (the last of them ends the loop:
    # no step after it) and the memory pass's step. Weak: its first step and
    # one warm-up step too.
    n = rows["n_samples"].astype(int)
    assert dp.steps[(4, 16)] == 2 + n["strong"] + 1
    assert dp.steps[(2, 16)] == 1 + 1 + n["weak"] + 1
    assert (rows["rank_mem_bytes"] > 0).all() and rows["mem_method"].str.endswith(
        "per rank").all()
    assert (rows["status"] == "ok").all()


@pytest.mark.slow
def test_a_later_round_of_a_measured_cell_times_no_all_reduce_and_no_memory_pass(
        tmp_path, monkeypatch):
    """The all-reduce timed alone and each rank's memory are one measurement
    per cell, as every study's memory pass is: a cell's later round (a
    second launch, issue 48) takes neither when an earlier round of it
    measured, and the report reads them from that round; a cell whose
    earlier round failed takes both."""
    from fwcompare.measure import gate as gate_mod
    from fwcompare.plan.job import CELLS, CellRef
    from fwcompare.studies.distributed import STUDY, Rank
    from fwcompare.results.tables import summarize

    runner = _one_rank_study(tmp_path, max_time_s=0.1)
    specs = STUDY.cells(runner.params)
    weak = next(s for s in specs if s.scaling == "weak")
    strong = next(s for s in specs if s.scaling == "strong")

    def launch(refs, memory_rounds=()):  # one launch (a Rank) over these cells
        # memory_rounds: a memory claim's cells (RunPlan.memory_every_round; the
        # plan's own would name torch/eager's, fsdp-lowers-rank-memory's a)
        job = runner.job(CELLS, "tiny-bert", "torch", refs).replace(
            memory_rounds=memory_rounds)
        dp = OneRank(gate_mod.Gate(job.gate_path).reference)
        rank = Rank(job, dp, load_s=0.0)
        known, problems = rank.agreement()
        comm, steps = [], []
        for ref in refs:
            before = (dp.comm, sum(dp.steps.values()))
            rank.cell(ref, known, problems)
            comm.append(dp.comm - before[0])
            steps.append(sum(dp.steps.values()) - before[1])
        return rank, comm, steps

    rank, comm, _ = launch([CellRef(strong, 0)])  # round 0 of the strong cell only
    assert comm == [1]
    # round 1: the strong cell measured in round 0, the weak one never did
    rank, comm, steps = launch([CellRef(strong, 1), CellRef(weak, 1)])
    assert comm == [0, 1]
    rows = rank.store.load().set_index(["scaling", "round"])
    assert rows.loc[("strong", 1), "status"] == "ok"
    assert math.isnan(rows.loc[("strong", 1), "rank_mem_bytes"])
    assert math.isnan(rows.loc[("strong", 1), "allreduce_s"])
    assert rows.loc[("strong", 1), "mem_method"].startswith("none")
    assert rows.loc[("strong", 0), "rank_mem_bytes"] > 0
    assert rows.loc[("weak", 1), "rank_mem_bytes"] > 0
    assert rows.loc[("weak", 1), "allreduce_s"] > 0
    # strong in round 1: the samples and no other step (no memory step)
    n = int(rows.loc[("strong", 1), "n_samples"])
    assert steps[0] == n
    # the report's figures of the strong cell are round 0's, its timing both rounds'
    summary = summarize(rank.store.load(), rank.store.load_samples()).set_index("scaling")
    assert summary.loc["strong", "rounds"] == 2
    assert summary.loc["strong", "rank_mem_bytes"] == rows.loc[("strong", 0), "rank_mem_bytes"]
    assert summary.loc["strong", "allreduce_s"] == rows.loc[("strong", 0), "allreduce_s"]
    # a memory claim's cell takes its memory pass in every round: its figure is per round
    rank, comm, _ = launch([CellRef(strong, 2)], memory_rounds=(strong.cell_id,))
    assert comm == [1]
    assert rank.store.load().set_index("round").loc[2, "rank_mem_bytes"] > 0


def test_a_launch_has_every_class_attribute_the_runner_reads_of_a_worker():
    """The runner watches a launch as it watches a served worker: a launch
    whose reported process ended by SIGKILL (a rank the teardown killed
    before its parameter server's SIGSEGV landed) made ``Runner.after_stop``
    read ``stop_note`` of it, and the missing attribute ended the whole study
    run (CI, 2026-11-29) instead of failing that cell."""
    from fwcompare.execution.launch import Launch
    from fwcompare.execution.runner import Worker

    shared = [k for k, v in vars(Worker).items()
              if not k.startswith("_") and not callable(v) and not isinstance(v, property)]
    assert "stop_note" in shared
    assert [k for k in shared if not hasattr(Launch, k)] == []
    assert Launch.stop_note == ""
