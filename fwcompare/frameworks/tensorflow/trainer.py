"""TensorFlow end to end: Keras ``fit`` on the Hugging Face TF model with
``tf.data``, as its users run it (issue 50).

The model is compiled with Keras' AdamW (a constant learning rate, no gradient
clipping, biases and LayerNorm weights out of the weight decay, as
``Trainer`` leaves them out) and sparse categorical cross-entropy on the
logits; ``fit`` reads the examples' shared order through a ``tf.data``
pipeline (``pipeline.py``: ``tfdata-prefetch`` unless the settings name
another), runs ``eval_every`` steps per Keras epoch and evaluates the held-out
split after each. A callback keeps the run's clock (``training_run.FitLog``); a
step's loss is recovered from Keras' running mean of the epoch (the first
steps' only, within the first Keras epoch: ``agreement_steps`` at most
``eval_every``). Keras' Adam adds its epsilon to the bias-uncorrected
denominator ("epsilon hat"), PyTorch's and optax's to the corrected one: the
losses of the first steps differ slightly (docs/measurements.md), a difference of
the frameworks, kept."""
from __future__ import annotations

import time

import tensorflow as tf

from ...core.training_run import FitLog, FitSettings
from ...core.pipeline import Examples
from . import FRAMEWORK
from .pipeline import Pipeline

NO_DECAY = ["bias", "LayerNorm", "layer_norm"]


def fit(load, train: Examples, held_out: Examples, weights_dir, device: str,
        settings: FitSettings, log: FitLog, place: str = "/CPU:0") -> list[dict]:
    """One run of Keras ``fit``; ``load``: the backend's ``load``; ``place``:
    the device's name ("/GPU:0"). Returns the evaluations (``log.evals``)."""
    import tf_keras as keras

    opt = settings.optimizer
    kind = settings.pipeline_in(FRAMEWORK.fit_pipelines,  # tf.data, in the shared order
                                "Keras fit, a tf.data pipeline in the shared order,")
    settings.check_held_out(len(held_out))
    try:
        _fit(load, train, held_out, weights_dir, device, settings, log, place, kind, keras,
             opt)
    finally:
        log.finished()
    return log.evals


def _fit(load, train, held_out, weights_dir, device, settings, log, place, kind, keras, opt):
    with log.phase("data"):
        pipe = Pipeline(kind, train, settings.batch_size, place)
        train_ds = pipe.dataset.map(
            lambda ids, mask, y: ({"input_ids": ids, "attention_mask": mask}, y))
        ids, mask = held_out.padded()
        eval_ds = tf.data.Dataset.from_tensor_slices(
            ({"input_ids": ids, "attention_mask": mask}, held_out.labels)
        ).batch(settings.eval_batch_size)
    with log.phase("setup"):
        model = load(weights_dir, device, "seq_cls")
        optimizer = keras.optimizers.AdamW(
            learning_rate=opt["learning_rate"], weight_decay=opt["weight_decay"],
            beta_1=opt["beta1"], beta_2=opt["beta2"], epsilon=opt["eps"])
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    log.training_begins()
    with tf.device(place):
        model.fit(train_ds, steps_per_epoch=settings.eval_every,
                  epochs=settings.max_steps // settings.eval_every, validation_data=eval_ds,
                  callbacks=[_Clock(log, settings)], verbose=0)


class _Clock:  # a Keras callback, made on first use
    def __new__(cls, log: FitLog, settings: FitSettings):
        import tf_keras as keras

        class Clock(keras.callbacks.Callback):
            # Its logs stay tensors: Keras reads them back (a sync) only where a
            # callback needs NumPy, and this one reads them in the first steps only.
            _supports_tf_logs = True
            mean, steps = 0.0, 0

            def on_epoch_begin(self, epoch, logs=None):
                self.mean, self.in_epoch = 0.0, 0

            def on_train_batch_end(self, batch, logs=None):
                log.step_done()
                self.steps += 1
                self.in_epoch += 1
                if len(log.losses) < settings.agreement_steps:  # the step's own loss
                    k, mean = self.in_epoch, float(logs["loss"])  # a sync, these steps only
                    log.losses.append(k * mean - (k - 1) * self.mean)
                    self.mean = mean

            def on_test_begin(self, logs=None):
                self.t_eval = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                log.evaluated(self.steps, logs["val_accuracy"], logs["val_loss"],
                              time.perf_counter() - self.t_eval)

        return Clock()
