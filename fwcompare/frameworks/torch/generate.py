"""PyTorch's text generation (the generation study): transformers'
``generate()``, greedy, eager with its dynamic KV cache or with a static cache
and the decode steps compiled by torch.compile (``static-compile``)."""
from __future__ import annotations

import copy

from ..base import Generator, Unsupported, greedy_config


def make_generator(model, mode: str, device: str, params: dict, inputs) -> Generator:
    import torch

    gc = greedy_config(model, model.config.vocab_size)
    extra: dict = {}
    setup = "generate(), greedy, dynamic KV cache"
    compiles = lambda: None  # noqa: E731
    if mode == "static-compile":
        import torch._dynamo.utils as dynamo_utils
        from transformers import CompileConfig

        cc = CompileConfig(fullgraph=True, dynamic=False,
                           mode="reduce-overhead" if device == "gpu" else "default")
        if device != "gpu":  # transformers auto-compiles on CUDA only unless told
            cc._compile_all_devices = True
        extra = dict(cache_implementation="static", compile_config=cc)
        setup = (f"generate(), greedy, static KV cache, the decode steps' forward compiled by "
                 f"torch.compile(fullgraph=True, dynamic=False, mode={cc.mode!r}) "
                 f"(transformers' auto-compile; the prefill runs uncompiled)")
        if getattr(model.config, "sliding_window", None):
            setup += ("; full static layers where the sliding window spans the prompt and the "
                      "new tokens (a sliding one recompiles at every decode step)")
        compiles = lambda: int(dynamo_utils.counters["stats"]["unique_graphs"])  # noqa: E731
    elif mode != "eager":
        raise Unsupported(f"torch generation mode {mode!r} is not implemented")

    def call(ids, n):
        x = inputs(ids)
        mask = torch.ones_like(x)
        # the slots generate() gives its own static cache: the last token is never fed back
        cache = full_static_cache(model, x.shape[1] + n - 1) if mode == "static-compile" else None
        kwargs = extra if cache is None else dict(extra, cache_implementation=None,
                                                  past_key_values=cache)

        def fn():
            with torch.inference_mode():
                if cache is not None:  # as generate() resets the static cache it keeps
                    cache.reset()
                return model.generate(x, attention_mask=mask, generation_config=gc,
                                      max_new_tokens=n, **kwargs)
        return fn
    return Generator(call, lambda out, n: out[:, -n:].cpu().numpy(), setup, compiles)


def full_static_cache(model, length: int):
    """A static cache of full layers for a decoder whose sliding window spans
    ``length`` tokens (None otherwise: generate() builds its own). Its keys are
    those a sliding layer would hold, but transformers' sliding layer keeps its
    fill count as a Python int that torch.compile guards on, so every decode
    step compiles again (transformers#44609; its cost: docs/measurements.md)."""
    from transformers import StaticCache

    config = model.config.get_text_config(decoder=True)
    window = getattr(config, "sliding_window", None)
    if config.is_encoder_decoder or not window or window < length:
        return None
    config = copy.deepcopy(config)
    kinds = getattr(config, "layer_types", None) or ["sliding_attention"] * config.num_hidden_layers
    config.layer_types = ["full_attention" if k == "sliding_attention" else k for k in kinds]
    return StaticCache(config=config, max_cache_len=length)
