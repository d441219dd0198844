"""JAX's input pipelines (``fwcompare.core.pipeline``): the examples already on the
device (``memory``), a plain NumPy iterator that pads each batch and puts it on
the device (``numpy``: what many Flax loops do), or grain, the JAX ecosystem's
loader (``grain``: a ``MapDataset`` of each epoch's order, its examples padded
in a ``batch_fn``, read through ``to_iter_dataset`` without reader threads, as
grain advises for data already in memory)."""
from __future__ import annotations

import numpy as np

from ...core.pipeline import Batches, Examples, epoch_batches, pad_rows
from . import FRAMEWORK

KINDS = FRAMEWORK.pipelines


class _Pad:
    """grain's batch_fn: (tokens, label) items to padded NumPy arrays."""

    def __init__(self, seq_len: int, pad_id: int):
        self.seq_len, self.pad_id = seq_len, pad_id

    def __call__(self, items):
        ids, mask = pad_rows([r for r, _ in items], self.seq_len, self.pad_id)
        return ids, mask, np.array([y for _, y in items], dtype=np.int32)


class Pipeline(Batches):
    """An endless iterator of (ids, mask, labels) on ``device`` (a jax.Device)."""

    def __init__(self, kind: str, examples: Examples, batch_size: int, device):
        import jax

        if kind not in KINDS:
            raise ValueError(f"unknown JAX pipeline {kind!r}; known: {', '.join(KINDS)}")
        self.kind, self.examples, self.batch_size, self.device = kind, examples, batch_size, device
        examples.batches(batch_size)  # a batch larger than the data: refused here
        self.put = lambda arrays: tuple(jax.device_put(a, device) for a in arrays)
        self.pad = _Pad(examples.seq_len, examples.pad_id)
        if kind == "memory":
            ids, mask = examples.padded()
            self.arrays = self.put((ids, mask, examples.labels.astype(np.int32)))
            self.setup = "every example padded once and held on the device; a batch taken"
        elif kind == "numpy":
            self.setup = "a Python iterator: each batch padded in NumPy, then jax.device_put"
        else:
            self.setup = ("grain.MapDataset of the epoch's order, padded in its batch_fn, "
                          "to_iter_dataset (no reader threads: in-memory data), then "
                          "jax.device_put")
        self.start()

    def _items(self, idx):
        return [(self.examples.row(int(i)), int(self.examples.labels[i])) for i in idx]

    def _batches(self):
        import grain
        import jax.numpy as jnp

        epoch = 0
        while True:
            batches = epoch_batches(self.examples, self.batch_size, epoch)
            if self.kind == "memory":
                for idx in batches:
                    i = jnp.asarray(idx)
                    yield tuple(jnp.take(a, i, axis=0) for a in self.arrays)
            elif self.kind == "numpy":
                for idx in batches:
                    yield self.put(self.pad(self._items(idx)))
            else:
                order = np.concatenate(batches)
                rows = (grain.MapDataset.source(order)
                        .map(lambda i: (self.examples.row(int(i)), int(self.examples.labels[i])))
                        .batch(self.batch_size, drop_remainder=True, batch_fn=self.pad))
                # in-memory data: no reader threads (grain's ReadOptions advice: they
                # would contend for the GIL), a small buffer ahead
                read = grain.ReadOptions(num_threads=0, prefetch_buffer_size=2)
                for batch in rows.to_iter_dataset(read):
                    yield self.put(batch)
            epoch += 1
