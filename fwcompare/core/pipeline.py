"""Input pipelines: what every framework's loader reads, and the order it reads it in.

A data set of token sequences (``Examples``) is held once, framework-free: each
example's tokens unpadded (one flat array and its row offsets, as a ragged
tensor is), its label, the length every batch is padded to. A framework's
pipeline (``Backend.make_pipeline``, its kinds declared as
``Framework.pipelines``) takes the examples in the order ``Examples.order``
gives for each epoch (a permutation from the seed: the same batches in every
framework and pipeline, so the end-to-end runs' first losses can be compared),
pads each example to ``seq_len`` with its attention mask (``pad_rows``: the
preprocessing step, in NumPy, or in the framework's own ops where the
pipeline says so), batches and moves the batch to the device. A pipeline is an
endless iterator of batches, epoch after epoch; ``close()`` ends its worker
processes, if it has any.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Examples:
    """``tokens`` (int32, every example's tokens one after another),
    ``offsets`` (int64, n + 1: example i is ``tokens[offsets[i]:offsets[i + 1]]``),
    ``labels`` (int64, n), the padded length ``seq_len``, the padding id, the
    seed of the epochs' order, and how the text was tokenized."""

    tokens: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    seq_len: int
    pad_id: int = 0
    seed: int = 0
    tokenizer: str = ""

    def __post_init__(self):
        if len(self.offsets) != len(self.labels) + 1:
            raise ValueError(f"{len(self.offsets)} offsets for {len(self.labels)} labels")
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens) or (
                np.diff(self.offsets) < 0).any():
            raise ValueError(f"offsets must rise from 0 to the {len(self.tokens)} tokens")
        longest = int(np.diff(self.offsets).max()) if len(self.labels) else 0
        if longest > self.seq_len:
            raise ValueError(f"an example of {longest} tokens is longer than seq_len "
                             f"{self.seq_len}")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets).astype(np.int32)

    def row(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def order(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s order of the examples (a permutation, int64)."""
        return np.random.default_rng([self.seed, epoch]).permutation(len(self))

    def batches(self, batch_size: int) -> int:
        """Full batches an epoch holds (a last, partial one is dropped: every
        batch has one shape, so a compiled step compiles once)."""
        if not 0 < batch_size <= len(self):
            raise ValueError(f"batch size {batch_size} does not fit {len(self)} examples")
        return len(self) // batch_size

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """Every example padded: (ids int32 [n, seq_len], mask int32)."""
        return pad_rows([self.row(i) for i in range(len(self))], self.seq_len, self.pad_id)

    @classmethod
    def from_padded(cls, ids: np.ndarray, mask: np.ndarray, labels, **kw) -> "Examples":
        """From rows padded on the right (mask 1 on tokens): their tokens."""
        lengths = mask.sum(axis=1).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        tokens = ids[mask.astype(bool)].astype(np.int32)
        return cls(tokens, offsets, np.asarray(labels, dtype=np.int64), ids.shape[1], **kw)


class Batches:
    """What every framework's pipeline shares: an endless iterator over its
    ``_batches()`` generator (started by ``start``), and ``close()``, which
    ends that generator (a pipeline with more to end extends it)."""

    def start(self) -> None:
        self._it = self._batches()

    def _batches(self):
        raise NotImplementedError

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def close(self) -> None:
        self._it.close()


def pad_rows(rows, seq_len: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The preprocessing step: rows of tokens padded on the right to
    ``seq_len`` with ``pad_id``, and their attention masks (int32)."""
    ids = np.full((len(rows), seq_len), pad_id, dtype=np.int32)
    mask = np.zeros((len(rows), seq_len), dtype=np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


def epoch_batches(examples: Examples, batch_size: int, epoch: int):
    """The indices of each batch of ``epoch``, in order."""
    order = examples.order(epoch)
    n = examples.batches(batch_size)
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(n)]
