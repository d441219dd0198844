"""Generation: time to first token and per-token decode speed of text
generation, with token-exact agreement across frameworks.

A cell is one ``generate()`` call as a user makes it: greedy decoding, KV
cache on, the same prompt token ids (``seq_len`` tokens, seeded) and the same
``new_tokens`` in every framework, and no early stop (the end-of-sequence id
is set to one no logit has, so every call generates exactly ``new_tokens``).
For each prompt the study also times a one-token call: its time is the **time
to first token** (prefill and the first token). The decode time per output
token is (generation time - time to first token) / (new_tokens - 1), with an
interval from the two cells' intervals (:func:`generation_table`); both cells
of a variant run in its one worker process, the one-token call first.

Modes (:data:`GEN_MODES`; each framework's generation is its backend's
``make_generator``, in ``frameworks/<name>/generate.py``): PyTorch ``eager``
(the default dynamic cache) and ``static-compile`` (a static cache, the decode
steps' forward compiled by
``torch.compile``: transformers' own auto-compile); TensorFlow ``eager`` and
``xla`` (``tf.function(model.generate, jit_compile=True)`` with the prompt
left-padded to a fixed bucket, the recipe of Hugging Face's "Faster Text
Generation with TensorFlow and XLA", so a new prompt length within a bucket
does not retrace); JAX ``jit`` (``jax.jit`` of Flax's ``generate`` with the
parameters passed as arguments: closed over, they become XLA constants and the
compile took ten times as long; measurements.md, "comments quoted").

**Agreement before speed.** The prepare job runs PyTorch eager's greedy
generation of every prompt and keeps its tokens and, per step, the margin
between its two highest logits. Each cell's first output is compared with
them: ``tokens_agreed`` is the number of leading generated tokens that match
(the smallest over the batch); a cell that departs is ``not_equivalent``, its
message naming the position and PyTorch's margin there (a near tie of
random-init logits shows as a margin close to float32 rounding).
"""
from __future__ import annotations

import math

import numpy as np

from ...core import models
from ...measure.cell import CellFailure, CellPlan, WorkerContext, describe, failure_status
from ...frameworks import Generator, defaults, greedy_config
from ...results.judging import (Claim, Measurement, Metric, StudyData, check_cells, common,
                                from_rounds, round_figures, time_ratio)
from ...core.models import token_ids
from ...plan.schema import TIMING, Param, grid_params, positive, replace_param
from ...results.store import MEASURED, Columns
from ...core.spec import Axis
from ...results.tables import CELL_KEYS
from ...execution.study import Study
from .figures import compile_cost, latency, throughput  # noqa: F401
from .modes import GEN_MODES, uncompiled  # noqa: F401
from .tables import agreement_table, breakeven, generation_table  # noqa: F401

# What a generation cell shares with its one-token cell (the shared cell keys).
KEYS = CELL_KEYS


def tokens_key(batch: int, prompt: int) -> str:
    return f"tokens_{batch}x{prompt}"


def margins_key(batch: int, prompt: int) -> str:
    return f"margins_{batch}x{prompt}"


def reference_tokens(params: dict, prompt: int, max_positions: int) -> int:
    """How many tokens the reference generates for a prompt: the most any
    cell asks, within the model's positions."""
    n = max(params["new_tokens"])
    return min(n, max_positions - prompt) if max_positions else n


def kv_bytes_per_token(config) -> tuple[int, int]:
    """Float32 bytes the KV cache holds per sequence and token: keys and
    values of every decoder layer's self-attention (grouped-query attention:
    its key/value heads only), and of the cross-attention per encoder token
    (encoder-decoders; 0 otherwise)."""
    layers = getattr(config, "num_decoder_layers", None) or config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = (getattr(config, "head_dim", None) or getattr(config, "d_kv", None)
                or config.hidden_size // heads)
    self_attn = 2 * layers * kv_heads * head_dim * 4
    cross = 2 * layers * heads * head_dim * 4 if config.is_encoder_decoder else 0
    return self_attn, cross


# -- the prepare job (PyTorch): weights, the gate file, the reference tokens -----------
def prepare(job) -> None:
    """The shared weights with the generation head, and the gate file: the
    gate prompt, model facts, and PyTorch eager's greedy tokens and top-2
    logit margins for every (batch, prompt) of the params."""
    import torch

    from ...measure.gate import reference_model, write_gate

    _, net, info = reference_model(job)
    config = net.config
    vocab, maxpos = info["vocab_size"], info["max_positions"]
    gc = greedy_config(net, vocab)
    kv, cross = kv_bytes_per_token(config)
    info.update(kv_bytes_per_token=kv, cross_kv_bytes_per_token=cross,
                encoder_decoder=bool(config.is_encoder_decoder))
    p = job.params
    refs = {}
    for b in p["batch_sizes"]:
        for s in p["seq_lens"]:
            n = reference_tokens(p, s, maxpos)
            if n < 1:
                continue
            ids = torch.as_tensor(token_ids(job.seed, b, s, vocab))
            with torch.inference_mode():
                out = net.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc,
                                   max_new_tokens=n, output_scores=True,
                                   return_dict_in_generate=True)
            top2 = torch.stack(out.scores, 1).topk(2, dim=-1).values.double()
            refs[tokens_key(b, s)] = out.sequences[:, -n:].numpy()
            refs[margins_key(b, s)] = (top2[..., 0] - top2[..., 1]).numpy()
    gb, gs = job.gate_shape
    ids = token_ids(job.seed, gb, gs, vocab)
    reference = refs.get(tokens_key(gb, gs), np.zeros((gb, 0), np.int64))
    write_gate(job.gate_path, ids, ids, reference, info, refs)


def build_generator(ctx: WorkerContext, mode: str) -> Generator:
    """The model loaded with the shared weights and this mode's generation."""
    try:
        model, load_s = ctx.load("float32")
        g = ctx.backend.make_generator(model, mode, ctx.device, ctx.params,
                                       lambda a: ctx.backend.make_inputs(a, ctx.device))
    except Exception as exc:
        raise CellFailure(failure_status(ctx.backend, exc), describe(exc)) from exc
    g.load_s = load_s
    return g


def agreement(tokens: np.ndarray, ref: np.ndarray, margins: np.ndarray) -> tuple[dict, str]:
    """Generated tokens against PyTorch eager's: the leading tokens that
    match (fewest over the batch), PyTorch's smallest top-2 logit margin over
    the compared steps, and the not-equivalent reason ("" if none)."""
    n = ref.shape[1]
    same = tokens[:, :n] == ref
    agreed = int(min(np.argmin(row) if not row.all() else n for row in same))
    figures = {"tokens_agreed": float(agreed),
               "ref_min_margin": float(margins[:, :n].min()) if n else math.nan}
    if agreed == n:
        return figures, ""
    row = int(next(i for i, r in enumerate(same) if not r[agreed]))
    return figures, (f"greedy tokens depart from PyTorch eager's at generated token {agreed} "
                     f"(row {row}: {int(tokens[row, agreed])} vs {int(ref[row, agreed])}; "
                     f"PyTorch's top-2 logit margin there {margins[row, agreed]:.3g})")


def generation_flops(info: dict, batch: int, prompt: int, new: int) -> float:
    """FLOPs of one generation (decoders): the prompt's forward, then one
    token per step over a growing cache (``models.forward_flops``'s count).
    NaN for an encoder-decoder (encoder and decoder sizes differ)."""
    if info.get("encoder_decoder"):
        return math.nan
    n = info["n_params"] - info["n_embedding_params"]
    steps = sum(batch * (2 * n + 4 * info["n_layers"] * (prompt + t) * info["hidden_size"])
                for t in range(1, new))
    return models.forward_flops(info, batch, prompt) + float(steps)


def plan_generation(ctx: WorkerContext, spec) -> CellPlan:
    """One generation cell: the variant's generator, this prompt and length;
    the first call's tokens checked against PyTorch eager's."""
    g = ctx.variant(("generate", spec.mode), lambda: build_generator(ctx, spec.mode))
    info = ctx.info
    b, p, n = spec.batch_size, spec.seq_len, spec.new_tokens
    padded = g.padded(p)
    known = {"load_s": g.load_s, "padded_len": float(padded),
             "kv_cache_bytes": float(b * ((p + n) * info["kv_bytes_per_token"]
                                          + p * info["cross_kv_bytes_per_token"]))}
    maxpos = info["max_positions"]
    if maxpos and padded + n > maxpos:
        return CellPlan(lambda: None, known=known,
                        skip=f"prompt {padded} + {n} new tokens exceed the model's {maxpos} positions")
    ids = token_ids(ctx.job.seed, b, p, info["vocab_size"])
    ref = ctx.gate.array(tokens_key(b, p))
    margins = ctx.gate.array(margins_key(b, p))
    before = g.compiles()

    def first(out):
        after = g.compiles()
        figures = {"recompiles": math.nan if after is None else float(after - before)}
        problem = ""
        if ref is None:
            problem = "no PyTorch reference tokens for this prompt"
        else:
            checked, problem = agreement(g.tokens(out, n), ref[:, :n], margins)
            figures.update(checked)
        return figures, problem, []
    traffic = models.weight_traffic_bytes(info, "inference") * n  # a forward per token
    return CellPlan(lambda: g.call(ids, n), known=known,
                    flops=generation_flops(info, b, p, n), traffic=traffic, first=first,
                    provenance={"mode_setup": g.setup})


class Generation(Study):
    name = "generation"
    title = "Generation: time to first token, decode speed and token agreement"
    # greedy tokens that match PyTorch eager's, PyTorch's smallest top-2 logit
    # margin over them, the analytic KV cache, the padded prompt
    columns = Columns(figures=("recompiles", "tokens_agreed", "ref_min_margin", "kv_cache_bytes",
                               "padded_len"), analytic=("kv_cache_bytes", "padded_len"))
    # Tokens generated per call (a cell's seq_len is then its prompt's length):
    # part of the shape the variants share; a call's tokens are these.
    axes = (Axis("new_tokens", 0, shape=True, label=" new={new_tokens}", short="+{new_tokens}",
                 tokens=True),)
    modes = GEN_MODES

    def schema(self):
        grid = grid_params(["distilgpt2"], defaults(lambda f: f.generation_modes), GEN_MODES,
                           [1], [32], 1800.0, tf_autograph=None)
        grid = replace_param(grid, "seq_lens", help="prompt lengths in tokens (seeded token ids)")
        return {
            **grid,
            "new_tokens": Param("list[int]", [16], "tokens generated per call (greedy, KV cache, no early stop); each must be at least 2, and a one-token call of every prompt is timed too (time to first token)", lambda v: None if v and all(isinstance(x, int) and x >= 2 for x in v) else f"must be a non-empty list of integers >= 2, got {v!r}"),
            "prompt_buckets": Param("list[int]", [16, 32, 64, 128, 256, 512, 1024], "tensorflow/xla: the prompt is left-padded to the smallest of these lengths that holds it (the recipe of the TF-XLA post), so a new prompt length within a bucket does not retrace", positive),
            **TIMING,
        }

    def model_problem(self, model):
        if models.is_decoder(model) or models.is_encoder_decoder(model):
            return ""
        return (f"{models.model_type(model)} has no language-model head to generate text with "
                f"(a decoder or an encoder-decoder is needed)")

    def head(self, task, model):
        return "seq2seq_lm" if models.is_encoder_decoder(model) else "causal_lm"

    def cells(self, params):
        from dataclasses import replace

        from ...execution.study import grid_cells

        grid = grid_cells(params, self.name, "inference")
        return [replace(s, axes={"new_tokens": n}) for s in grid
                for n in sorted({1, *params["new_tokens"]})]

    def prepare(self, job):
        prepare(job)

    def plan(self, ctx, spec):
        return plan_generation(ctx, spec)


# -- claim metrics (params/claims.yaml names them) ------------------------------------
class _Cells:
    """A StudyData whose summary keeps only some generation cells."""

    def __init__(self, data: StudyData, keep):
        self.__dict__.update(vars(data))
        if data.present and not data.summary.empty:
            self.summary = data.summary[keep(data.summary)]


def generation_time_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """time_ratio over the cells that generate ``new_tokens`` > 1 tokens: the
    whole ``generate()`` call, prefill and decode, as a user waits for it."""
    m = time_ratio(_Cells(data, lambda s: s["new_tokens"] > 1), claim, devices)
    m.unit = f"{claim.cells['a']} generation time / {claim.cells['b']} generation time"
    return m


def first_token_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """time_ratio over the one-token cells: time to first token."""
    m = time_ratio(_Cells(data, lambda s: s["new_tokens"] == 1), claim, devices)
    m.unit = f"{claim.cells['a']} time to first token / {claim.cells['b']} time to first token"
    return m


def new_prompt_compiles(data: StudyData, claim: Claim, devices) -> Measurement:
    """Compilations that variant a's first call made for a prompt length it
    had not seen, after its first prompt of the same batch and new_tokens
    (the most over such cells), per round (a fresh process each), then over
    the rounds every such cell has (``judging.from_rounds``: exact where
    every round counted the same)."""
    a = claim.cells["a"]
    m = Measurement(unit=f"compilations of a {a} first call for a new prompt length")
    s = data.summary
    s = s[s["device"].isin(devices) & (s["variant"] == a) & s["status"].isin(MEASURED)]
    if claim.models:
        s = s[s["model"].isin(claim.models)]
    later = []
    for _, g in s.groupby(["model", "batch_size", "new_tokens"]):
        g = g.sort_values("seq_len")
        later += [r for _, r in g.iloc[1:].iterrows() if np.isfinite(r["recompiles"])]
    if not later:
        m.note = (f"no {a} cell with a second prompt length (params seq_lens needs two)"
                  if len(s) else f"{a} did not run")
        return m
    worst = max(later, key=lambda r: r["recompiles"])
    m.value = float(worst["recompiles"])
    m.cells = [f"{r['model']} {r['batch_size']}x{r['seq_len']}+{r['new_tokens']} "
               f"(padded to {r['padded_len']:.0f})" for r in later]
    m.points = [(c, float(r["recompiles"])) for c, r in zip(m.cells, later)]
    m.devices = {r["device"] for r in later}
    m.note = "a count of compilations the framework reports"
    per = [round_figures(data, r["cell_id"], "recompiles", positive=False) for r in later]
    from_rounds(m, [max(f[n] for f in per) for n in common(per)], data.confidence, log=False)
    return m


Generation.metrics = {
    "generation_time_ratio": Metric(generation_time_ratio, ("a", "b"), check_cells, timed=True),
    "first_token_ratio": Metric(first_token_ratio, ("a", "b"), check_cells, timed=True),
    "new_prompt_compiles": Metric(new_prompt_compiles, ("a",), check_cells, count=True,
                                  per_round=True),
}
STUDY = Generation()
