"""TensorFlow's text generation (the generation study): transformers'
``generate()``, greedy, eager or in ``tf.function(jit_compile=True)`` with the
prompt left-padded to a bucket (``xla``)."""
from __future__ import annotations

import numpy as np

from ..base import Generator, Unsupported, bucket, greedy_config


def make_generator(model, mode: str, device: str, params: dict, inputs) -> Generator:
    import tensorflow as tf

    model.generation_config = greedy_config(model, model.config.vocab_size)
    pad = model.generation_config.pad_token_id

    def tokens(out, n):
        return out[:, -n:].numpy()
    if mode == "eager":
        def call(ids, n):
            x = inputs(ids.astype(np.int32))
            mask = inputs(np.ones_like(ids, dtype=np.int32))
            return lambda: model.generate(x, attention_mask=mask, max_new_tokens=n)
        return Generator(call, tokens, "generate() eager, greedy")
    if mode == "xla":
        xla = tf.function(model.generate, jit_compile=True)
        first = tf.function(lambda x, mask: first_token_tf(model, x, mask), jit_compile=True)
        buckets = params["prompt_buckets"]

        def call(ids, n):
            b, p = ids.shape
            length = bucket(p, buckets)
            x = np.full((b, length), pad, np.int32)
            x[:, length - p:] = ids
            mask = np.zeros((b, length), np.int32)
            mask[:, length - p:] = 1
            x, mask = inputs(x), inputs(mask)
            if n == 1:
                return lambda: first(x, mask)
            return lambda: xla(x, attention_mask=mask, max_new_tokens=n)
        return Generator(call, tokens,
                         f"tf.function(generate, jit_compile=True), greedy, the prompt left-padded "
                         f"to the smallest of {buckets} tokens that holds it; one token: the "
                         f"prefill forward and argmax in tf.function(jit_compile=True) "
                         f"(generate with XLA fails for max_new_tokens=1)",
                         lambda: (xla.experimental_get_tracing_count()
                                  + first.experimental_get_tracing_count()),
                         lambda p: bucket(p, buckets))
    raise Unsupported(f"tensorflow generation mode {mode!r} is not implemented")


def first_token_tf(model, x, mask):
    """The first generated token as TensorFlow's generate computes it: the
    prompt's forward with generate's own inputs (positions from the attention
    mask, a cache), then the argmax of the last position's logits; an
    encoder-decoder's first decoder step from its start id. transformers
    4.57's XLA generate cannot make a single token (a negative padding size
    in ``_initialize_attention``)."""
    import tensorflow as tf

    if model.config.is_encoder_decoder:
        start = tf.fill((tf.shape(x)[0], 1), model.generation_config.decoder_start_token_id)
        out = model(input_ids=x, attention_mask=mask, decoder_input_ids=start, use_cache=True)
    else:
        out = model(**model.prepare_inputs_for_generation(x, attention_mask=mask,
                                                          use_cache=True))
    return tf.argmax(out.logits[:, -1], axis=-1, output_type=tf.int32)[:, None]
