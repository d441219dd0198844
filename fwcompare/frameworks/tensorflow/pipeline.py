"""TensorFlow's input pipelines (``fwcompare.core.pipeline``): the examples already on
the device (``memory``), or ``tf.data`` as its guide builds one: each epoch's
order as a data set of indices, a ``map`` that slices an example's tokens and
pads them with TensorFlow ops, ``batch``, and then nothing more (``tfdata``),
``prefetch(AUTOTUNE)`` (``tfdata-prefetch``), or the padded examples
``cache()``d after their first pass (``tfdata-cache``: later epochs read the
cache; its order is ``shuffle``'s own, seeded, since a cached data set has no
random access). ``tfdata-pyfunc`` is ``tfdata`` with the padding written as a
``tf.py_function`` (the same NumPy step the other frameworks' loaders run),
the cost of Python inside a graph."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ...core.pipeline import Batches, Examples, epoch_batches, pad_rows
from . import FRAMEWORK

KINDS = FRAMEWORK.pipelines
AUTOTUNE = tf.data.AUTOTUNE


class Pipeline(Batches):
    """An endless iterator of (ids, mask, labels) on ``device`` ("/CPU:0",
    "/GPU:0")."""

    def __init__(self, kind: str, examples: Examples, batch_size: int, device: str):
        if kind not in KINDS:
            raise ValueError(f"unknown TensorFlow pipeline {kind!r}; known: {', '.join(KINDS)}")
        self.kind, self.examples, self.batch_size, self.device = kind, examples, batch_size, device
        examples.batches(batch_size)  # a batch larger than the data: refused here
        n, seq_len, pad = len(examples), examples.seq_len, examples.pad_id
        if kind == "memory":
            ids, mask = examples.padded()
            with tf.device(device):
                self.tensors = [tf.constant(ids), tf.constant(mask),
                                tf.constant(examples.labels)]
            self.setup = "every example padded once and held on the device; a batch gathered"
        else:
            tokens = tf.constant(examples.tokens)
            offsets = tf.constant(examples.offsets)
            labels = tf.constant(examples.labels)

            def example(i):
                row = tokens[offsets[i]:offsets[i + 1]]
                return row, labels[i]

            def pad_ops(row, label):
                extra = [[0, seq_len - tf.shape(row)[0]]]
                ids = tf.ensure_shape(tf.pad(row, extra, constant_values=pad), [seq_len])
                mask = tf.ensure_shape(tf.pad(tf.ones_like(row), extra), [seq_len])
                return ids, mask, label

            def pad_numpy(row):
                ids, mask = pad_rows([row.numpy()], seq_len, pad)
                return ids[0], mask[0]

            def pad_py(row, label):
                ids, mask = tf.py_function(pad_numpy, [row], [tf.int32, tf.int32])
                return tf.ensure_shape(ids, [seq_len]), tf.ensure_shape(mask, [seq_len]), label

            def epoch_order(epoch):
                return np.concatenate(epoch_batches(examples, batch_size, int(epoch)))

            def order(epoch):  # once per epoch: the epoch's indices, whole batches
                return tf.data.Dataset.from_tensor_slices(
                    tf.numpy_function(epoch_order, [epoch], tf.int64, stateful=False))

            pad_fn = pad_py if kind == "tfdata-pyfunc" else pad_ops
            if kind == "tfdata-cache":
                ds = (tf.data.Dataset.range(n).map(example).map(pad_fn).cache()
                      .shuffle(n, seed=examples.seed, reshuffle_each_iteration=True)
                      .batch(batch_size, drop_remainder=True).repeat())
            else:  # one data set for every epoch (its functions traced once)
                ds = (tf.data.Dataset.counter().flat_map(order).map(example).map(pad_fn)
                      .batch(batch_size, drop_remainder=True))
                if kind == "tfdata-prefetch":
                    ds = ds.prefetch(AUTOTUNE)
            self.dataset = ds
            how = {"tfdata": "", "tfdata-prefetch": ", prefetch(AUTOTUNE)",
                   "tfdata-cache": ", cache() before shuffle (its own order)",
                   "tfdata-pyfunc": ""}[kind]
            step = "tf.py_function (NumPy)" if kind == "tfdata-pyfunc" else "TensorFlow ops"
            self.setup = f"tf.data: map(padding in {step}), batch{how}"
        self.start()

    def _batches(self):
        if self.kind != "memory":  # an endless data set
            for batch in self.dataset:
                with tf.device(self.device):  # the copy to the device
                    yield tuple(tf.identity(t) for t in batch)
            return
        epoch = 0
        while True:
            for idx in epoch_batches(self.examples, self.batch_size, epoch):
                with tf.device(self.device):
                    i = tf.constant(idx)
                    yield tuple(tf.gather(t, i) for t in self.tensors)
            epoch += 1
