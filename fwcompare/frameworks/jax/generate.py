"""JAX's text generation (the generation study): Flax's ``generate()``,
greedy, in ``jax.jit`` with the parameters passed as arguments (``jit``)."""
from __future__ import annotations

import numpy as np

from ..base import Generator, Unsupported, greedy_config


def make_generator(model, mode: str, device: str, params: dict, inputs) -> Generator:
    import jax

    if mode != "jit":
        raise Unsupported(f"jax generation mode {mode!r} is not implemented")
    model.generation_config = greedy_config(model, model.config.vocab_size)

    def generate(weights, x, mask, n):
        return model.generate(x, attention_mask=mask, params=weights, max_new_tokens=n).sequences
    jitted = jax.jit(generate, static_argnames=("n",))

    def call(ids, n):
        x, mask = inputs(ids), inputs(np.ones_like(ids))
        return lambda: jitted(model.params, x, mask, n=n)
    return Generator(call, lambda out, n: np.asarray(out)[:, -n:],
                     "jax.jit(generate), greedy, the parameters passed as arguments (not "
                     "constants); one program per prompt shape and new_tokens",
                     getattr(jitted, "_cache_size", lambda: None))
