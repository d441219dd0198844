"""A framework is one package: a toy framework declared and registered from
this file alone (NumPy, no other file of the project touched) runs the
inference and the generation studies end to end through the runner, its
worker processes, the equivalence gate and the results store.

The toy computes BERT's encoder, and GPT-2's greedy generation, in float64
NumPy from the shared safetensors weights, the same functions as PyTorch's
reference, so it passes the real gates (max abs error against PyTorch eager
float32 within ``equiv_tol``; the greedy tokens PyTorch generates) rather
than checks of its own. Worker processes find it as they find a test's study:
the job carries this file (``Job.framework_file``) and the worker imports it.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from fwcompare import frameworks, run_study
from fwcompare.suite import params
from fwcompare.frameworks import (Backend, Framework, Generator, Unsupported, contract_gaps,
                                  forward_fn)

pytestmark = pytest.mark.slow  # it starts worker processes


class Weights:
    """A checkpoint's config and weights, as float64 arrays: BERT's encoder, or
    GPT-2 with its language-model head (``causal_lm``)."""

    def __init__(self, weights_dir, head):
        from safetensors.numpy import load_file

        from fwcompare.core.models import WEIGHTS_FILE

        self.config = json.loads((Path(weights_dir) / "config.json").read_text())
        kind = (self.config.get("model_type"), head)
        if kind not in (("bert", "base"), ("gpt2", "causal_lm")):
            raise Unsupported(f"numpy toy: BERT's encoder or GPT-2's LM only, not {kind}")
        self.w = {k: v.astype(np.float64)
                  for k, v in load_file(str(Path(weights_dir) / WEIGHTS_FILE)).items()}


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _linear(x, w, name):
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _softmax(scores):
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bert_forward(model: Weights, ids: np.ndarray) -> np.ndarray:
    """transformers' BertModel (eval, no padding): the last hidden state."""
    from scipy.special import erf

    c, w = model.config, model.w
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]
    b, s = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:s]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    d = x.shape[-1] // heads
    for i in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def split(t):
            return t.reshape(b, s, heads, d).transpose(0, 2, 1, 3)
        q, k, v = (split(_linear(x, w, f"{p}.attention.self.{n}"))
                   for n in ("query", "key", "value"))
        probs = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d))
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, heads * d)
        x = _layer_norm(_linear(context, w, f"{p}.attention.output.dense") + x,
                        w[f"{p}.attention.output.LayerNorm.weight"],
                        w[f"{p}.attention.output.LayerNorm.bias"], eps)
        h = _linear(x, w, f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))  # "gelu": the exact one
        x = _layer_norm(_linear(h, w, f"{p}.output.dense") + x,
                        w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"], eps)
    return x


def gpt2_logits(model: Weights, ids: np.ndarray) -> np.ndarray:
    """transformers' GPT2LMHeadModel (eval, no padding): the next-token logits
    at every position (the head is the token embedding, tied)."""
    c, w = model.config, model.w
    eps, heads = c["layer_norm_epsilon"], c["n_head"]
    b, s = ids.shape
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:s]
    d = x.shape[-1] // heads
    future = np.triu(np.ones((s, s), dtype=bool), 1)
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}"
        h = _layer_norm(x, w[f"{p}.ln_1.weight"], w[f"{p}.ln_1.bias"], eps)
        qkv = h @ w[f"{p}.attn.c_attn.weight"] + w[f"{p}.attn.c_attn.bias"]  # Conv1D: x @ W
        q, k, v = (t.reshape(b, s, heads, d).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1))
        probs = _softmax(np.where(future, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)))
        a = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, heads * d)
        x = x + a @ w[f"{p}.attn.c_proj.weight"] + w[f"{p}.attn.c_proj.bias"]
        h = _layer_norm(x, w[f"{p}.ln_2.weight"], w[f"{p}.ln_2.bias"], eps)
        h = h @ w[f"{p}.mlp.c_fc.weight"] + w[f"{p}.mlp.c_fc.bias"]
        h = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
        x = x + h @ w[f"{p}.mlp.c_proj.weight"] + w[f"{p}.mlp.c_proj.bias"]
    x = _layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].T


def gpt2_greedy(model: Weights, ids: np.ndarray, n: int) -> np.ndarray:
    """``n`` greedy tokens after the prompt ``ids`` (each step runs the whole
    sequence again: no cache), the prompt and them."""
    seq = np.asarray(ids, dtype=np.int64)
    for _ in range(n):
        seq = np.concatenate([seq, gpt2_logits(model, seq)[:, -1].argmax(-1)[:, None]], axis=1)
    return seq


class NumpyBackend(Backend):
    """The toy's backend: the contract's abstract calls; its defaults say what
    it has not (training, GPU memory, data parallel)."""

    def configure(self, threads, device, options=None):
        if device != "cpu":
            raise Unsupported("numpy toy: CPU only")

    def load(self, weights_dir, device, head="base", dtype="float32"):
        return Weights(weights_dir, head)

    def n_params(self, model):
        return int(sum(v.size for k, v in model.w.items() if not k.startswith("pooler.")))

    def make_generator(self, model, mode, device, params, inputs):
        if mode != "float64" or model.config["model_type"] != "gpt2":
            raise Unsupported(f"numpy toy: GPT-2's float64 generation only, not {mode}")
        return Generator(lambda ids, n: (lambda: gpt2_greedy(model, inputs(ids), n)),
                         lambda out, n: np.asarray(out)[:, -n:],
                         "NumPy GPT-2 in float64, greedy, the whole sequence each step")

    def make_forward(self, model, mode, device, head="base", dtype="float32", options=None):
        if mode != "float64":
            raise Unsupported(f"numpy toy: no mode {mode!r}")
        self.set_precision(dtype, device)
        return forward_fn(lambda ids: bert_forward(model, ids),
                          "NumPy BERT encoder in float64 (matmul, erf GELU)")

    def precision_setup(self, dtype, device):
        return "float64 NumPy throughout"

    def set_precision(self, dtype, device):
        if dtype != "float32":
            raise Unsupported(f"numpy toy: float32 cells only, not {dtype}")

    def make_inputs(self, ids, device):
        return np.asarray(ids, dtype=np.int64)

    def sync(self, out):
        pass

    def to_numpy(self, out):
        return np.asarray(out, dtype=np.float64)

    def runtime_info(self, device):
        return {"framework_version": np.__version__, "device_name": "cpu"}

    def make_peak_kernels(self, n, elements, dtype, device):
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        x = np.zeros(elements, dtype=np.float32)
        return (lambda: a @ a), (lambda: x + 1.0)


# What a worker process imports this file for (frameworks.load).
FRAMEWORK = Framework(name="toy", modes=("float64",), generation_modes=("float64",),
                      backend=NumpyBackend,
                      worker_env={"USE_TF": "0", "USE_FLAX": "0"}, packages=("numpy",),
                      source_file=__file__)


@pytest.fixture
def toy():
    frameworks.register(FRAMEWORK)
    yield FRAMEWORK
    frameworks.unregister(FRAMEWORK.name)


def test_the_toy_fulfils_the_contract_and_is_known_only_while_registered(toy):
    assert contract_gaps(frameworks.get_backend("toy")) == []
    assert "toy" in frameworks.FRAMEWORKS and frameworks.MODES["toy"] == ("float64",)
    p = params.validate("inference_sweep", {"frameworks": ["toy"], "modes": {"toy": ["float64"]}})
    assert p["frameworks"] == ["toy"]
    with pytest.raises(params.ParamsError, match="unknown mode 'jit' for toy"):
        params.validate("inference_sweep", {"frameworks": ["toy"], "modes": {"toy": ["jit"]}})
    frameworks.unregister("toy")
    with pytest.raises(params.ParamsError, match="unknown framework 'toy'"):
        params.validate("inference_sweep", {"frameworks": ["toy"], "modes": {"toy": ["float64"]}})


def test_a_framework_registered_from_a_test_runs_the_inference_study(toy, tmp_path,
                                                                    smoke_timing, no_orphans):
    p = {"models": ["tiny-bert"], "frameworks": ["torch", "toy"],
         "modes": {"torch": ["eager"], "toy": ["float64"]},
         "batch_sizes": [1, 2], "seq_lens": [16], **smoke_timing}
    res = run_study("inference_sweep", p, output_dir=tmp_path, progress=False)
    df = res.results
    toy_rows = df[df["framework"] == "toy"]
    assert len(df) == 4 and len(toy_rows) == 2, df[["framework", "mode", "status", "error"]]
    assert set(df["status"]) == {"ok"}, df[["framework", "mode", "error"]]
    assert set(toy_rows["mode"]) == {"float64"}
    assert (toy_rows["median_s"] > 0).all() and (toy_rows["n_samples"] >= p["min_iters"]).all()
    # The equivalence gate ran against PyTorch's reference, and it agrees.
    err = toy_rows["equiv_max_abs_err"]
    assert err.notna().all() and (err < 1e-5).all() and (err > 0).all(), err
    assert (toy_rows["mode_setup"] == "NumPy BERT encoder in float64 (matmul, erf GELU)").all()
    assert (toy_rows["framework_version"] == np.__version__).all()
    assert (toy_rows["precision_setup"] == "float64 NumPy throughout").all()
    # Raw samples kept for the toy's cells, as for any framework's.
    assert set(toy_rows["cell_id"]) <= set(res.samples["cell_id"])


def test_a_framework_registered_from_a_test_runs_the_generation_study(toy, tmp_path,
                                                                     smoke_timing, no_orphans):
    p = {"models": ["tiny-gpt2"], "frameworks": ["torch", "toy"],
         "modes": {"torch": ["eager"], "toy": ["float64"]},
         "batch_sizes": [2], "seq_lens": [8], "new_tokens": [4], **smoke_timing}
    res = run_study("generation", p, output_dir=tmp_path, progress=False)
    df = res.results
    toy_rows = df[df["framework"] == "toy"]
    assert set(df["status"]) == {"ok"}, df[["framework", "mode", "status", "error"]]
    # four new tokens, and the one-token call of the same prompt (time to first token)
    assert sorted(toy_rows["new_tokens"]) == [1, 4], toy_rows[["new_tokens", "status"]]
    # its greedy tokens are PyTorch eager's, every one (the generation study's gate)
    assert (toy_rows["tokens_agreed"] == toy_rows["new_tokens"]).all(), toy_rows["tokens_agreed"]
    assert (toy_rows["mode_setup"]
            == "NumPy GPT-2 in float64, greedy, the whole sequence each step").all()
    assert (toy_rows["median_s"] > 0).all() and set(toy_rows["cell_id"]) <= set(
        res.samples["cell_id"])
