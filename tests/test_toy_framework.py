"""A framework is one package: a toy framework declared and registered from
this file alone (NumPy, no other file of the project touched) runs the
inference, training, generation and memory studies end to end through the
runner, its worker processes, the equivalence gate and the results store.

The toy computes BERT's encoder, GPT-2's greedy generation, and GPT-2's
causal-LM training step (its backward pass written out, then PyTorch's AdamW)
in float64 NumPy from the shared safetensors weights, the same functions as
PyTorch's reference, so it passes the real gates (max abs error against
PyTorch eager float32 within ``equiv_tol``; the greedy tokens PyTorch
generates; the losses of PyTorch's steps) rather than checks of its own.
Worker processes find it as they find a test's study: the job carries this
file (``Job.framework_file``) and the worker imports it.
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


def _ln(x, w, b, eps):
    """LayerNorm, and what its backward pass reads (the normalised input, 1/std)."""
    mu = x.mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mu) * inv
    return xhat * w + b, (xhat, inv)


def _layer_norm(x, w, b, eps):
    return _ln(x, w, b, eps)[0]


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


_GELU_C = np.sqrt(2.0 / np.pi)


def _block(w, p: str, x, heads: int, eps: float):
    """One GPT-2 block (transformers' GPT2Block, eval, no padding): its output,
    and what its backward pass reads."""
    b, s, e = x.shape
    d = e // heads
    future = np.triu(np.ones((s, s), dtype=bool), 1)
    h1, ln1 = _ln(x, w[f"{p}.ln_1.weight"], w[f"{p}.ln_1.bias"], eps)
    qkv = h1 @ w[f"{p}.attn.c_attn.weight"] + w[f"{p}.attn.c_attn.bias"]  # Conv1D: x @ W
    q, k, v = (t.reshape(b, s, heads, d).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1))
    probs = _softmax(np.where(future, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)))
    a = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, e)
    x2 = x + a @ w[f"{p}.attn.c_proj.weight"] + w[f"{p}.attn.c_proj.bias"]
    h2, ln2 = _ln(x2, w[f"{p}.ln_2.weight"], w[f"{p}.ln_2.bias"], eps)
    f = h2 @ w[f"{p}.mlp.c_fc.weight"] + w[f"{p}.mlp.c_fc.bias"]
    t = np.tanh(_GELU_C * (f + 0.044715 * f ** 3))
    g = 0.5 * f * (1.0 + t)  # gelu_new
    out = x2 + g @ w[f"{p}.mlp.c_proj.weight"] + w[f"{p}.mlp.c_proj.bias"]
    return out, dict(ln1=ln1, h1=h1, q=q, k=k, v=v, probs=probs, a=a, ln2=ln2, h2=h2, f=f,
                     t=t, g=g)


def gpt2_logits(model: Weights, ids: np.ndarray) -> np.ndarray:
    """transformers' GPT2LMHeadModel (eval, no padding): the next-token logits
    at every position (the head is the token embedding, tied)."""
    return _gpt2(model, ids, keep=False)[0]  # no backward pass: keep no activations


def _gpt2(model: Weights, ids: np.ndarray, keep: bool = True):
    """The logits, the final LayerNorm's input, each block's input, and each
    block's saved activations (``keep``; None each where not kept)."""
    c, w = model.config, model.w
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:ids.shape[1]]
    inputs, saved = [], []
    for i in range(c["n_layer"]):
        inputs.append(x)
        x, cache = _block(w, f"transformer.h.{i}", x, c["n_head"], c["layer_norm_epsilon"])
        saved.append(cache if keep else None)
    xf, lnf = _ln(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"],
                  c["layer_norm_epsilon"])
    return xf @ w["transformer.wte.weight"].T, xf, lnf, inputs, saved


def gpt2_greedy(model: Weights, ids: np.ndarray, n: int) -> np.ndarray:
    """``n`` greedy tokens after the prompt ``ids`` (each step runs the whole
    sequence again: no cache), the prompt and them."""
    seq = np.asarray(ids, dtype=np.int64)
    for _ in range(n):
        seq = np.concatenate([seq, gpt2_logits(model, seq)[:, -1].argmax(-1)[:, None]], axis=1)
    return seq


# -- training: GPT-2's causal LM loss, its backward pass by hand, PyTorch's AdamW ------
def _rows(t):
    return t.reshape(-1, t.shape[-1])


def _ln_backward(dy, saved, w, grads, name):
    """LayerNorm's input gradient; its weight's and bias's added to ``grads``."""
    xhat, inv = saved
    grads[f"{name}.weight"] += _rows(dy * xhat).sum(0)
    grads[f"{name}.bias"] += _rows(dy).sum(0)
    dxhat = dy * w[f"{name}.weight"]
    return inv * (dxhat - dxhat.mean(-1, keepdims=True)
                  - xhat * (dxhat * xhat).mean(-1, keepdims=True))


def _linear_backward(dy, x, w, grads, name):
    """``y = x @ W + b`` (GPT-2's Conv1D): dx; dW and db added to ``grads``."""
    grads[f"{name}.weight"] += _rows(x).T @ _rows(dy)
    grads[f"{name}.bias"] += _rows(dy).sum(0)
    return dy @ w[f"{name}.weight"].T


def _block_backward(w, p: str, dout, c: dict, grads):
    """The input gradient of one block, from its output's and its activations."""
    b, heads, s, d = c["q"].shape
    f, t = c["f"], c["t"]
    dg = _linear_backward(dout, c["g"], w, grads, f"{p}.mlp.c_proj")
    df = dg * (0.5 * (1.0 + t) + 0.5 * f * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * f * f))
    dh2 = _linear_backward(df, c["h2"], w, grads, f"{p}.mlp.c_fc")
    dx2 = dout + _ln_backward(dh2, c["ln2"], w, grads, f"{p}.ln_2")
    da = _linear_backward(dx2, c["a"], w, grads, f"{p}.attn.c_proj")
    da = da.reshape(b, s, heads, d).transpose(0, 2, 1, 3)
    probs = c["probs"]
    dprobs = da @ c["v"].transpose(0, 1, 3, 2)
    dscores = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True)) / np.sqrt(d)
    dq, dk, dv = dscores @ c["k"], dscores.transpose(0, 1, 3, 2) @ c["q"], probs.transpose(
        0, 1, 3, 2) @ da
    dqkv = np.concatenate([t.transpose(0, 2, 1, 3).reshape(b, s, heads * d)
                           for t in (dq, dk, dv)], -1)
    dh1 = _linear_backward(dqkv, c["h1"], w, grads, f"{p}.attn.c_attn")
    return dx2 + _ln_backward(dh1, c["ln1"], w, grads, f"{p}.ln_1")


def gpt2_loss_and_grads(model: Weights, ids: np.ndarray, checkpointing: bool = False):
    """The causal LM's loss (token t+1 from tokens <= t, the mean cross-entropy,
    as the PyTorch step's) and every weight's gradient. ``checkpointing``:
    keep each block's input only, and compute its activations again in the
    backward pass."""
    c, w = model.config, model.w
    logits, xf, lnf, inputs, saved = _gpt2(model, ids, keep=not checkpointing)
    z = logits[:, :-1]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    target = ids[:, 1:, None]
    loss = -np.take_along_axis(logp, target, -1).mean()
    dz = np.exp(logp)
    np.put_along_axis(dz, target, np.take_along_axis(dz, target, -1) - 1.0, -1)
    dlogits = np.zeros_like(logits)
    dlogits[:, :-1] = dz / target.size
    grads = {k: np.zeros_like(v) for k, v in w.items()}
    wte = w["transformer.wte.weight"]
    grads["transformer.wte.weight"] += _rows(dlogits).T @ _rows(xf)  # the tied head
    dx = _ln_backward(dlogits @ wte, lnf, w, grads, "transformer.ln_f")
    for i in reversed(range(c["n_layer"])):
        p = f"transformer.h.{i}"
        cache = saved[i] or _block(w, p, inputs[i], c["n_head"], c["layer_norm_epsilon"])[1]
        dx = _block_backward(w, p, dx, cache, grads)
    np.add.at(grads["transformer.wte.weight"], ids, dx)
    grads["transformer.wpe.weight"][:ids.shape[1]] += dx.sum(0)
    return loss, grads


class AdamW:
    """torch.optim.AdamW's update, on every weight of the checkpoint (decoupled
    weight decay first, then Adam's bias-corrected step)."""

    def __init__(self, weights: dict, opt: dict):
        self.w, self.t = weights, 0
        self.lr, self.wd, self.eps = opt["learning_rate"], opt["weight_decay"], opt["eps"]
        self.b1, self.b2 = opt["beta1"], opt["beta2"]
        self.m = {k: np.zeros_like(v) for k, v in weights.items()}
        self.v = {k: np.zeros_like(v) for k, v in weights.items()}

    def update(self, grads: dict) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k, p in self.w.items():
            g = grads[k]
            p *= 1 - self.lr * self.wd
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            p -= self.lr / c1 * self.m[k] / (np.sqrt(self.v[k]) / np.sqrt(c2) + self.eps)


def gpt2_train_step(model: Weights, opt: dict, accumulation_steps: int, checkpointing: bool):
    """``step((ids, labels)) -> loss``: the gradients of equal micro-batches
    averaged, then one AdamW update of the model's weights in place."""
    adam = AdamW(model.w, opt)

    def step(batch):
        ids, _ = batch  # a causal LM's labels are its ids
        total, grads = 0.0, None
        for part in np.split(ids, accumulation_steps):
            loss, g = gpt2_loss_and_grads(model, part, checkpointing)
            total += loss / accumulation_steps
            grads = g if grads is None else {k: grads[k] + g[k] for k in grads}
        adam.update({k: v / accumulation_steps for k, v in grads.items()})
        return total
    step.loss_scale = lambda: float("nan")  # no loss scaling in float64
    return step


class NumpyBackend(Backend):
    """The toy's backend: the contract's abstract calls and a training step;
    the base's defaults say what it has not (GPU memory, data parallel, input
    pipelines, end-to-end training)."""

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
        if model.config["model_type"] == "gpt2":
            return forward_fn(lambda ids: gpt2_logits(model, ids),
                              "NumPy GPT-2 LM in float64 (tanh GELU)")
        return forward_fn(lambda ids: bert_forward(model, ids),
                          "NumPy BERT encoder in float64 (matmul, erf GELU)")

    def make_train_step(self, model, mode, device, opt, head, accumulation_steps=1,
                        dtype="float32", checkpointing=False):
        if mode != "float64" or head != "causal_lm":
            raise Unsupported(f"numpy toy: GPT-2's float64 causal LM training only, not "
                              f"{mode} {head}")
        self.set_precision(dtype, device)
        return gpt2_train_step(model, opt, accumulation_steps, checkpointing)

    def make_batch(self, ids, labels, device):
        return np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)

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
FRAMEWORK = Framework(name="toy", modes=("float64",), train_modes=("float64",),
                      generation_modes=("float64",),
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


def test_the_toys_gradients_and_adamw_are_pytorchs():
    """The hand-written backward pass and AdamW against PyTorch's autograd and
    torch.optim.AdamW on the same weights and batch (float64 against float32)."""
    import torch

    from fwcompare.core import models

    d = models.weights_dir("tiny-gpt2", 0, head="causal_lm")
    ids = models.token_ids(0, 4, 16, 1000)
    net = frameworks.get_backend("torch").load(d, "cpu", head="causal_lm")
    logits = net(input_ids=torch.as_tensor(ids)).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                      torch.as_tensor(ids)[:, 1:].reshape(-1)).backward()
    for checkpointing in (False, True):
        _, grads = gpt2_loss_and_grads(Weights(d, "causal_lm"), ids, checkpointing)
        assert set(grads) == {k for k, _ in net.named_parameters()}
        for k, p in net.named_parameters():
            ref = p.grad.double().numpy()
            assert np.abs(grads[k] - ref).max() <= 1e-5 * np.abs(ref).max(), k
    opt = dict(learning_rate=1e-3, weight_decay=0.01, beta1=0.9, beta2=0.999, eps=1e-8)
    torch_step = frameworks.get_backend("torch").make_train_step(
        frameworks.get_backend("torch").load(d, "cpu", head="causal_lm"), "eager", "cpu", opt,
        "causal_lm")
    batch = frameworks.get_backend("torch").make_batch(ids, ids, "cpu")
    ref = [float(torch_step(batch)) for _ in range(4)]
    assert ref[-1] < ref[0] - 0.1  # it learns
    for accumulation in (1, 2):  # two micro-batches of equal size: the same mean gradient
        step = gpt2_train_step(Weights(d, "causal_lm"), opt, accumulation, False)
        losses = [step((ids, ids)) for _ in range(4)]
        np.testing.assert_allclose(losses, ref, rtol=1e-5)


def test_a_framework_registered_from_a_test_runs_the_training_study(toy, tmp_path,
                                                                   smoke_timing, no_orphans):
    p = {"models": ["tiny-gpt2"], "frameworks": ["torch", "toy"],
         "modes": {"torch": ["eager"], "toy": ["float64"]},
         "batch_sizes": [2], "seq_lens": [16], "agreement_steps": 3, "learning_rate": 1e-3,
         **smoke_timing}
    res = run_study("training", p, output_dir=tmp_path, progress=False)
    df = res.results
    toy_rows = df[df["framework"] == "toy"]
    assert set(df["status"]) == {"ok"} and len(toy_rows) == 1, df[["framework", "error"]]
    # its losses follow PyTorch's over the agreement steps, and they fell
    assert (toy_rows["equiv_rel_err"] < 1e-5).all(), toy_rows["equiv_rel_err"]
    losses = res.losses[res.losses["framework"] == "toy"].sort_values("step")
    assert len(losses) == 3 and losses["loss"].iloc[-1] < losses["loss"].iloc[0]
    np.testing.assert_allclose(losses["loss"], losses["reference_loss"], rtol=1e-5)
    assert (toy_rows["median_s"] > 0).all() and (toy_rows["peak_mem_bytes"] > 0).all()


def test_a_framework_registered_from_a_test_runs_the_memory_study(toy, tmp_path,
                                                                 smoke_timing, no_orphans):
    """Each technique is the toy's own step made another way (checkpointing
    computes each block again in the backward pass), gated against PyTorch's
    plain step; a largest-batch search runs its tries in fresh processes."""
    p = {"models": ["tiny-gpt2"], "frameworks": ["torch", "toy"],
         "modes": {"torch": ["plain"], "toy": ["plain", "checkpointing", "accumulate-2"]},
         "train_modes": {"torch": ["eager"], "toy": ["float64"]},
         "batch_sizes": [4], "seq_lens": [32], "agreement_steps": 3, "learning_rate": 1e-3,
         "fit_models": ["tiny-gpt2"], "fit_modes": {"torch": [], "toy": ["forward"]},
         "fit_seq_len": 32,
         "fit_budget_gib": 0.1, "fit_max_batch": 512, "fit_steps": 1, **smoke_timing}
    res = run_study("memory", p, output_dir=tmp_path, progress=False)
    df = res.results
    train = df[df["task"] == "train"]
    assert set(train["status"]) == {"ok"}, train[["framework", "mode", "status", "error"]]
    toy_train = train[train["framework"] == "toy"]
    assert sorted(toy_train["mode"]) == ["accumulate-2", "checkpointing", "plain"]
    # every technique's losses follow PyTorch's plain step
    assert (toy_train["equiv_rel_err"] < 1e-5).all(), toy_train[["mode", "equiv_rel_err"]]
    assert (toy_train["peak_mem_bytes"] > 0).all() and (toy_train["median_s"] > 0).all()
    # the search's row, and its tries: each a fresh process, the last over the budget
    search = df[df["task"] == "largest_batch"]
    assert list(search["framework"]) == ["toy"] and list(search["status"]) == ["ok"], search
    largest, oom = search["largest_batch"].iloc[0], search["oom_batch"].iloc[0]
    assert 1 <= largest < oom <= p["fit_max_batch"], (largest, oom)
    tries = df[df["task"] == "fit"].set_index("batch_size")
    assert tries.loc[oom, "status"] == "oom" and tries.loc[largest, "status"] == "ok", tries
    assert tries.loc[largest, "peak_mem_bytes"] <= p["fit_budget_gib"] * 2 ** 30
