"""JAX end to end: a Flax model trained by an optax loop under ``jax.jit``, as
the Flax examples train one (issue 50).

optax's AdamW (a constant learning rate, no gradient clipping, biases and
LayerNorm parameters out of the weight decay, as ``Trainer`` leaves them out)
and the mean softmax cross-entropy of the logits; the batches come from a JAX
pipeline (``pipeline.py``: ``grain`` unless the settings name another) in the
examples' shared order. Every ``eval_every`` steps a jitted evaluation runs
over the held-out split. The clock is ``training_run.FitLog``; the first steps'
losses are read back (a sync) only for those steps, the others run ahead as
a Flax loop's do until an evaluation reads the parameters."""
from __future__ import annotations

import time

import numpy as np

from ...core.training_run import FitLog, FitSettings
from ...core.pipeline import Examples
from . import FRAMEWORK

NO_DECAY = ("bias", "LayerNorm", "layer_norm")


def fit(load, train: Examples, held_out: Examples, weights_dir, device: str,
        settings: FitSettings, log: FitLog, place=None) -> list[dict]:
    """One run of the loop; ``load``: the backend's ``load``; ``place``: the
    jax.Device. Returns the evaluations (``log.evals``)."""
    kind = settings.pipeline_in(FRAMEWORK.fit_pipelines, "the Flax loop")
    settings.check_held_out(len(held_out))
    try:
        return _fit(load, train, held_out, weights_dir, device, settings, log, place, kind)
    finally:
        log.finished()


def _fit(load, train, held_out, weights_dir, device, settings, log, place, kind):
    import jax
    import jax.numpy as jnp
    import optax
    from flax.traverse_util import flatten_dict, unflatten_dict

    from .pipeline import Pipeline

    opt = settings.optimizer
    with log.phase("data"):
        pipe = Pipeline(kind, train, settings.batch_size, place)
        ids, mask = held_out.padded()
        n_eval = len(held_out)  # whole evaluation batches (check_held_out): one shape
        eval_batches = [tuple(jax.device_put(a[i:i + settings.eval_batch_size], place)
                              for a in (ids, mask, held_out.labels.astype(np.int32)))
                        for i in range(0, n_eval, settings.eval_batch_size)]
    with log.phase("setup"):
        model = load(weights_dir, device, "seq_cls")
        flat = flatten_dict(model.params)
        decay = unflatten_dict({k: not any(n in part for part in k for n in NO_DECAY)
                                for k in flat})
        tx = optax.adamw(opt["learning_rate"], b1=opt["beta1"], b2=opt["beta2"],
                         eps=opt["eps"], weight_decay=opt["weight_decay"], mask=decay)
        params = model.params
        state = tx.init(params)

        def loss_fn(p, ids, mask, labels):
            logits = model(input_ids=ids, attention_mask=mask, params=p, train=False).logits
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        @jax.jit
        def train_step(p, s, ids, mask, labels):
            loss, grads = jax.value_and_grad(loss_fn)(p, ids, mask, labels)
            updates, s = tx.update(grads, s, p)
            return optax.apply_updates(p, updates), s, loss

        @jax.jit
        def eval_step(p, ids, mask, labels):
            logits = model(input_ids=ids, attention_mask=mask, params=p, train=False).logits
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).sum()
            return loss, (jnp.argmax(logits, -1) == labels).sum()
    log.training_begins()
    try:
        for step in range(1, settings.max_steps + 1):
            ids_b, mask_b, labels_b = next(pipe)
            params, state, loss = train_step(params, state, ids_b, mask_b,
                                             labels_b.astype(jnp.int32))
            if len(log.losses) < settings.agreement_steps:
                log.losses.append(float(loss))  # a sync, the first steps only
            log.step_done()  # dispatched: the evaluations read the results back
            if step % settings.eval_every == 0:
                jax.block_until_ready(params)  # the steps' work is theirs, not the evaluation's
                t = time.perf_counter()
                total, right = 0.0, 0
                for b in eval_batches:
                    lsum, ok = eval_step(params, *b)
                    total, right = total + float(lsum), right + int(ok)
                log.evaluated(step, right / n_eval, total / n_eval, time.perf_counter() - t)
    finally:
        pipe.close()  # grain's threads
    return log.evals
