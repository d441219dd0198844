"""Whether the variants of an interleaved set fit on one GPU together.

The interleaved schedule keeps a worker process per variant alive while the
set is sampled; on a GPU their memory adds up on one device. Before a task
runs, the runner (``Runner.__init__``) asks :func:`resolve` whether every
model's set fits in the device's free memory (NVML, ``env.gpu_free_bytes``);
where one does not, the task runs ``sequential`` and every row says why
(``schedule_note``) instead of the params being refused.

The estimate of a lane (a variant's process) is an upper bound from the
model's config, nothing built or loaded:

- weights: the parameter count (``param_count``) in float32;
- training: gradients and Adam's two moments (three more copies), and the
  activations every layer keeps for the backward pass, ``s*b*h*(34 + 5*a*s/h)``
  bytes per layer at 16 bits (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", eq. 1), doubled for float32;
- inference: one layer's activations (a layer's are freed before the next);
- the logits, ``b*s*vocab`` floats (twice in training: their gradient);
- the runtime's own reserve per process (CUDA context, cuBLAS/cuDNN
  workspaces, allocator slack): ``reserve_gib``, its framework's declaration's.

A lane's figure is its largest cell's (shapes run one after another within a
lane); a set's is the sum of its lanes'. It must stay within ``HEADROOM`` of
the free memory: allocators round up and fragment.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

GIB = 2 ** 30
HEADROOM = 0.85  # the share of the free memory a set may plan to use
FLOAT_BYTES = 4  # every estimate at float32: an upper bound for the other precisions


def _dims(config) -> tuple[int, int, int, int, int, int]:
    """Layers, hidden size, heads, feed-forward size, vocabulary, positions."""
    h = int(getattr(config, "hidden_size", 0) or getattr(config, "d_model", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "num_layers", 0)
                 or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "num_heads", 0)
                or 1)
    ffn = int(getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", 0)
              or getattr(config, "d_ff", 0) or 4 * h)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    positions = int(getattr(config, "max_position_embeddings", 0)
                    or getattr(config, "n_positions", 0) or 0)
    return layers, h, heads, ffn, vocab, positions


def param_count(config) -> int:
    """Parameters of a transformer from its config: per layer the attention's
    four h x h projections and the feed-forward's two h x ffn matrices, plus
    the token and position embeddings."""
    layers, h, _, ffn, vocab, positions = _dims(config)
    return layers * (4 * h * h + 2 * h * ffn) + (vocab + positions) * h


def lane_bytes(config, framework: str, batch: int, seq: int, training: bool) -> float:
    """The most one variant's process may hold on the device for a cell of
    ``batch`` x ``seq`` (see the module's text)."""
    layers, h, heads, _, vocab, _ = _dims(config)
    weights = param_count(config) * FLOAT_BYTES
    per_layer = seq * batch * h * (34 + 5 * heads * seq / max(h, 1)) * FLOAT_BYTES / 2
    logits = batch * seq * vocab * FLOAT_BYTES
    if training:
        tensors = 4 * weights + layers * per_layer + 2 * logits
    else:
        tensors = weights + per_layer + logits
    return tensors + reserve_gib(framework) * GIB


def reserve_gib(framework: str) -> float:
    """A process's memory on the device beyond its tensors (the CUDA context,
    workspaces, XLA's autotuning), as its framework declares it. Not measured
    here yet (the allocators' peaks in the rows leave the context out): chosen
    generously, since an estimate that errs high makes the set run sequential,
    which costs time, never a lost cell."""
    from ...frameworks import Framework, find

    declared = find(framework)
    return declared.gpu_reserve_gib if declared else Framework.gpu_reserve_gib


@dataclass
class GpuSchedule:
    schedule: str  # what the task runs: the params' or sequential
    note: str  # why it fell back (every row carries it); "" where it did not
    need_bytes: float = 0.0  # the largest set's estimate
    free_bytes: float | None = None


def set_bytes(cells, config_of, variant_of) -> dict[str, float]:
    """Per model: the sum over its variants (``variant_of(spec)``: a lane's
    key) of each variant's largest cell (``lane_bytes``); ``cells`` are
    RunSpecs, ``config_of(model)`` a transformers config."""
    lanes: dict[str, dict[tuple, float]] = defaultdict(dict)
    configs = {}
    for s in cells:
        if s.model not in configs:
            configs[s.model] = config_of(s.model)
        # a generated token's cache grows the sequence: count the tokens it makes
        seq = s.seq_len + int(getattr(s, "new_tokens", 0) or 0)
        need = lane_bytes(configs[s.model], s.framework, s.batch_size, seq,
                          training=s.task != "inference")
        key = variant_of(s)
        lanes[s.model][key] = max(lanes[s.model].get(key, 0.0), need)
    return {model: sum(v.values()) for model, v in lanes.items()}


def resolve(schedule: str, device: str, needs: dict[str, float],
            free_bytes: float | None) -> GpuSchedule:
    """The schedule a task runs: ``schedule`` unless it interleaves on a GPU
    and a model's set (``needs``: bytes per model, :func:`set_bytes`) does not
    fit in ``HEADROOM`` of ``free_bytes`` (None: unknown, which does not fit)."""
    if schedule != "interleaved" or device != "gpu" or not needs:
        return GpuSchedule(schedule, "")
    model, need = max(needs.items(), key=lambda kv: kv[1])
    if free_bytes is None:
        return GpuSchedule("sequential", "interleaved on the GPU needs its free memory, which NVML "
                                 "did not tell: ran sequential", need, None)
    if need <= HEADROOM * free_bytes:
        return GpuSchedule(schedule, "", need, free_bytes)
    return GpuSchedule("sequential",
               f"interleaved: {model}'s variants need about {need / GIB:.1f} GiB on the GPU "
               f"together, more than {HEADROOM:.0%} of its {free_bytes / GIB:.1f} GiB free: "
               "ran sequential", need, free_bytes)
