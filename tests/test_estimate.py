"""``fwcompare run --dry-run``: the cells a run would measure and how long it
may take, before anything is measured."""
import subprocess
import sys

import pytest

from fwcompare.studies import STUDIES
from fwcompare.execution.estimate import earlier_rate, estimate, record_run
from fwcompare.suite.api import run_plan
from fwcompare.suite.params import load_file
from fwcompare.core.paths import PARAMS, ROOT

SMOKE = PARAMS / "inference_sweep" / "smoke.yaml"


@pytest.mark.slow
def test_dry_run_counts_the_cells_and_measures_nothing(tmp_path):
    out = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "fwcompare", "run", "inference_sweep",
                        "--profile", "smoke", "--out", str(out), "--dry-run"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    # 2 models x (torch eager, tensorflow eager and graph, jax jit) x 2 batch x 2 seq
    assert "inference_sweep: 32 cells, 32 measurements over 1 round (torch 8, tensorflow 16, jax 8)" in r.stdout
    # warm-up 0.05 s plus 0.05 to 0.3 s of sampling per measurement, and the parts:
    # 8 variants (2 models x 4 modes), jax.jit compiles and tf.function traces on the
    # host at each of 4 shapes, each model's reference set prepared once
    assert ("estimate: 33 s to 41 s (no earlier run here: 0.1 to 0.35 s of warm-up and "
            "sampling per measurement, plus 29 s for the imports, 8 builds, 8 compiles, 0 "
            "cached, 8 traced and 16 eager first calls, 2 reference sets prepared"
            ) in r.stdout, r.stdout
    assert not out.exists()


@pytest.mark.frameworks("torch")
def test_the_estimate_uses_the_latest_run_of_the_same_device(tmp_path):
    params = load_file(SMOKE, "inference_sweep")
    first = estimate(run_plan("inference_sweep", params), tmp_path)
    assert first.seconds > 32 * 0.35 and first.low_seconds > 32 * 0.1  # and the parts
    record_run(tmp_path, "inference", "r1", cells=10, seconds=25.0, device="cpu",
               cpu_model="AMD EPYC")
    record_run(tmp_path, "other", "r2", cells=5, seconds=500.0, device="gpu",
               cpu_model="AMD EPYC")  # another device: not this run's rate
    rate, basis = earlier_rate(tmp_path, "cpu")
    assert rate == 2.5 and "10 measurements" in basis and "AMD EPYC" in basis
    est = estimate(run_plan("inference_sweep", params), tmp_path)
    assert (est.planned, est.todo, est.seconds) == (32, 32, 32 * 2.5)
    assert "estimate: 1 min 20 s (2.5 s per measurement" in est.text()


def test_a_resumed_run_counts_only_the_cells_left(tmp_path):
    """Cells measured by an earlier run of the same params are kept by a
    resume: the estimate leaves them out (and counts them all when the params
    changed, since the run then starts afresh)."""
    from fwcompare.core.env import params_hash
    from fwcompare.results.store import ResultStore, make_row
    from fwcompare.studies.inference_sweep import InferenceSweep

    params = load_file(SMOKE, "inference_sweep")
    store = ResultStore(tmp_path)
    store.begin(params_hash(params))
    for spec in InferenceSweep().cells(params)[:5]:
        store.append(make_row(spec, status="ok", run_id="r0", profile="smoke", round=0))
    est = estimate(run_plan("inference_sweep", params), tmp_path)
    assert (est.planned, est.todo) == (32, 27)
    assert "5 already measured, 27 to run" in est.text()
    est = estimate(run_plan("inference_sweep", dict(params, warmup_s=0.2)), tmp_path)
    assert est.todo == 32


def test_the_parts_of_a_first_run():
    """Without an earlier run: a build per variant and round, a compile for a
    compiling mode's first round at each shape, a cached first call in its later
    rounds, an eager first call otherwise; scaled by the model's depth
    (tiny-bert: 2 layers, a sixth of a base model's 12)."""
    from fwcompare.execution.estimate import FIXED_S, fixed_costs
    from fwcompare.plan.job import CellRef
    from fwcompare.core.spec import RunSpec

    def cell(model, fw, mode, rnd, batch=1):
        return CellRef(RunSpec(study="inference_sweep", model=model, framework=fw, mode=mode,
                               device="gpu", dtype="float32", batch_size=batch, seq_len=128,
                               threads=1), rnd)
    todo = [cell("bert-base-cased", "jax", "jit", r, b) for r in (0, 1) for b in (1, 8)]
    todo += [cell("bert-base-cased", "torch", "eager", r) for r in (0, 1)]
    cost = FIXED_S["gpu"]
    seconds, text = fixed_costs(todo, "gpu")
    # builds: jax r0, r1, torch r0, r1; compiles: jax at 2 shapes in round 0, cached in round 1
    assert seconds == pytest.approx(cost["start"] + 4 * cost["build"] + 2 * cost["compile"]
                                    + 2 * cost["cached"] + 2 * cost["eager"])
    assert "4 builds, 2 compiles, 2 cached, 0 traced and 2 eager first calls" in text
    tiny, _ = fixed_costs([cell("tiny-bert", "jax", "jit", 0)], "gpu")
    assert tiny == pytest.approx(cost["start"] + (cost["build"] + cost["compile"]) * 2 / 12)
    # torch's eager is no compile, its compile is; a mode of another framework's is not
    assert fixed_costs([cell("bert-base-cased", "torch", "compile", 0)], "gpu")[0] == \
        pytest.approx(cost["start"] + cost["build"] + cost["compile"])


def test_a_host_trace_costs_every_round_and_a_training_step_more():
    """tf.function without XLA and TorchScript trace on the host in every
    process (no compile cache keeps them), at the CPU's figure on either
    device; a training step's trace costs more than a forward's. TensorFlow's
    xla compiles device code: cached after its first round."""
    from fwcompare.execution.estimate import FIXED_S, fixed_costs
    from fwcompare.plan.job import CellRef
    from fwcompare.core.spec import RunSpec

    def cell(fw, mode, rnd, task="inference"):
        return CellRef(RunSpec(study="training", model="bert-base-cased", framework=fw,
                               mode=mode, device="gpu", dtype="float32", batch_size=8,
                               seq_len=128, threads=1, task=task), rnd)
    gpu = FIXED_S["gpu"]
    base = gpu["start"] + 3 * gpu["build"]
    graph, text = fixed_costs([cell("tensorflow", "graph", r) for r in range(3)], "gpu")
    assert graph == pytest.approx(base + 3 * gpu["trace"])
    assert "3 builds, 0 compiles, 0 cached, 3 traced and 0 eager first calls" in text
    train, _ = fixed_costs([cell("tensorflow", "graph", r, "train") for r in range(3)], "gpu")
    assert train == pytest.approx(base + 3 * gpu["trace_train"])
    script, _ = fixed_costs([cell("torch", "torchscript", r) for r in range(3)], "gpu")
    assert script == pytest.approx(graph)
    xla, _ = fixed_costs([cell("tensorflow", "xla", r) for r in range(3)], "gpu")
    assert xla == pytest.approx(base + gpu["compile"] + 2 * gpu["cached"])
    assert graph < train  # a training step's trace costs more than a forward's


def test_jax_eager_compiles_op_by_op_once_then_loads_them():
    """JAX's eager mode compiles each operation at its first shape: its own
    figure (a GPU's op compiles of a model cost far more than one jit of it) in
    the first round, the compile cache's in the later ones; PyTorch's eager
    costs its eager call in every round."""
    from fwcompare.execution.estimate import FIXED_S, fixed_costs
    from fwcompare.plan.job import CellRef
    from fwcompare.core.spec import RunSpec

    def cell(fw, mode, rnd, batch=8):
        return CellRef(RunSpec(study="acceleration", model="bert-base-cased", framework=fw,
                               mode=mode, device="gpu", dtype="float32", batch_size=batch,
                               seq_len=128, threads=1, task="inference"), rnd)
    gpu = FIXED_S["gpu"]
    base = gpu["start"] + 3 * gpu["build"]
    eager, text = fixed_costs([cell("jax", "eager", r) for r in range(3)], "gpu")
    assert eager == pytest.approx(base + gpu["op_compiles"] + 2 * gpu["cached"])
    assert "1 compiles (1 op by op), 2 cached, 0 traced and 0 eager" in text  # one shape
    two, text = fixed_costs([cell("jax", "eager", r, b) for r in range(3) for b in (1, 8)]
                            + [cell("jax", "jit", r, b) for r in range(3) for b in (1, 8)],
                            "gpu")
    assert "6 builds, 4 compiles (2 op by op), 8 cached" in text
    assert two == pytest.approx(gpu["start"] + 6 * gpu["build"] + 2 * gpu["op_compiles"]
                                + 2 * gpu["compile"] + 8 * gpu["cached"])
    torch, text = fixed_costs([cell("torch", "eager", r) for r in range(3)], "gpu")
    assert torch == pytest.approx(base + 3 * gpu["eager"])
    assert gpu["op_compiles"] > 5 * gpu["compile"]  # a GPU compiles each op apart


def test_which_modes_compile_device_code_and_which_trace_on_the_host():
    """Every built-in mode, stack and pipeline: XLA (JAX, TensorFlow's xla) and
    Inductor (torch.compile) compile, JAX's eager too (op by op); tf.function,
    Keras fit and TorchScript trace on the host; PyTorch's and TensorFlow's
    eager modes, Trainer and the DataLoaders do neither."""
    from fwcompare.frameworks import get
    from fwcompare.studies.generation import GEN_MODES

    def kind(fw, mode):
        return "compile" if fw.compiles(mode) else "trace" if fw.traces(mode) else "eager"
    torch, tf, jax = get("torch"), get("tensorflow"), get("jax")
    seen = {fw.name: {m: kind(fw, m) for m in (*fw.modes, *fw.train_modes, *fw.pipelines,
                                                   *GEN_MODES[fw.name], fw.fit_stack)}
            for fw in (torch, tf, jax)}
    assert seen["torch"] == {"eager": "eager", "torchscript": "trace", "compile": "compile",
                             "static-compile": "compile", "memory": "eager",
                             "dataloader-w0": "eager", "dataloader-w1": "eager",
                             "trainer": "eager"}
    assert {m: k for m, k in seen["tensorflow"].items() if k != "trace"} == {
        "eager": "eager", "xla": "compile"}  # graph, keras-fit and the tf.data steps trace
    assert {m: k for m, k in seen["jax"].items() if k != "compile"} == {}  # eager op by op


def test_the_parts_a_study_adds_references_and_tries():
    """With the study: each (model, task) prepares its references once, and a
    largest-batch search's cells cost their tries (7 fresh processes in its
    first round, 2 in a later one) instead of a lane's build and first call."""
    from fwcompare.suite import params
    from fwcompare.execution.estimate import FIXED_S, fixed_costs
    from fwcompare.plan.job import CellRef
    from fwcompare.studies import STUDIES, memory

    study = STUDIES["memory"]
    p = params.load_file(ROOT / "params" / "memory" / "gpu.yaml", "memory")
    specs = [s for s in study.cells(p) if s.framework == "torch"]
    search = next(s for s in specs if s.task == memory.SEARCH)
    train = [s for s in specs if s.task == "train"]
    todo = [CellRef(s, r) for s in train for r in range(3)]
    todo += [CellRef(search, r) for r in range(3)]
    cost = FIXED_S["gpu"]
    bare, _ = fixed_costs([c for c in todo if c.spec.task == "train"], "gpu")
    seconds, text = fixed_costs(todo, "gpu", study)
    # gpt2 is base-sized (12 layers): its tries and references at the base figures
    assert seconds == pytest.approx(bare + (7 + 2 + 2) * cost["process"]
                                    + 2 * cost["prepare"])
    assert "2 reference sets prepared, 11 tries" in text
    assert study.processes(CellRef(train[0], 0)) == 0
    # TensorFlow's tries trace its training step on the host, each in its own process
    tf_search = next(s for s in study.cells(p) if s.framework == "tensorflow"
                     and s.task == memory.SEARCH)
    one, _ = fixed_costs([CellRef(tf_search, 0)], "gpu", study)
    assert one == pytest.approx(cost["start"] + 7 * (cost["process"] + cost["trace_train"])
                                + cost["prepare"])


def test_a_whole_run_costs_its_process_and_cold_compiles_in_every_round(tmp_path):
    """An end-to-end fit is a whole run in a process of its own that compiles
    cold in every round: the estimate counts its process and, where its stack
    compiles (the Flax loop) its compiles, where it traces on the host (Keras
    fit) its traces, in each round (Trainer: neither); no lane's build or first
    call, and no sampling (the run is its own time)."""
    from fwcompare.execution.estimate import FIXED_S, _size, fixed_costs
    from fwcompare.plan.job import CellRef

    study = STUDIES["end_to_end"]
    p = load_file(PARAMS / "end_to_end" / "quick.yaml", "end_to_end")
    fits = [s for s in study.cells(p) if s.task == "fit"]
    assert sorted(s.mode for s in fits) == ["flax-loop", "keras-fit", "trainer"]
    todo = [CellRef(s, r) for s in fits for r in range(3)]
    cost, scale = FIXED_S["cpu"], _size(fits[0].model)
    seconds, text = fixed_costs(todo, "cpu", study)
    assert seconds == pytest.approx(cost["start"] + cost["prepare"] * scale
                                    + (9 * cost["process"] + 3 * cost["run_compiles"]
                                       + 3 * cost["run_traces"]) * scale)
    assert "0 builds, 0 compiles, 0 cached, 0 traced and 0 eager first calls" in text
    assert "9 whole runs (3 compiling cold, 3 tracing)" in text
    # the fits alone (no pipeline cells): their time is the parts', no sampling range
    est = estimate(run_plan(study, dict(p, loaders={}, fed={}, rounds_for="all")), tmp_path)
    assert est.planned == 9
    assert est.low_seconds == est.seconds == pytest.approx(seconds)
    # an input pipeline alone calls no model: its first call traces nothing
    loader = next(s for s in study.cells(p) if s.task == "loader" and s.framework == "tensorflow")
    assert study.times_model(CellRef(loader, 0)) is False
    assert "0 traced and 1 eager first calls" in fixed_costs([CellRef(loader, 0)], "cpu", study)[1]


def test_a_launch_costs_its_processes_build_and_cold_compile_in_every_round():
    """A distributed cell runs in a launch of fresh processes of its own (one
    per engine, worker count and round): the estimate counts each launch once,
    at its model's size, and no lane's build or first call for its cells;
    their sampling stays."""
    from fwcompare.execution.estimate import FIXED_S, _size, fixed_costs
    from fwcompare.plan.run import RunPlan

    study = STUDIES["distributed"]
    p = load_file(PARAMS / "distributed" / "quick.yaml", "distributed")
    plan = RunPlan(study, p, frozenset({"torch/eager", "torch/ddp-fp16",
                                        "tensorflow/graph", "tensorflow/ps"}))
    specs, todo = plan.specs, plan.cells
    keys = {study.launch_key(c) for c in todo}
    # 5 launches in round 0, 2 in round 1: PyTorch's two claimed engines (TensorFlow's
    # are one_launch in quick)
    assert len(todo) == len(keys) == 7
    assert {(c.spec.framework, c.round) for c in todo if c.round} == {("torch", 1)}
    cost, scale = FIXED_S["cpu"], _size(specs[0].model)
    seconds, text = fixed_costs(todo, "cpu", study)
    assert seconds == pytest.approx(cost["start"] + cost["prepare"] * scale
                                    + 7 * cost["launch"] * scale)
    assert "0 builds, 0 compiles, 0 cached, 0 traced and 0 eager first calls" in text
    assert text.count("7 launches") == 1
    # a study whose cells run in its lanes' workers has no launches
    assert STUDIES["training"].launch_key(todo[0]) is None
