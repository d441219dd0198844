"""PyTorch's input pipelines (``fwcompare.core.pipeline``): the examples already on
the device (``memory``), or ``torch.utils.data.DataLoader`` with 0 or 1 worker
processes (``dataloader-w0``, ``dataloader-w1``), its collate function padding
each batch in NumPy, its memory pinned where the device is a GPU (so the copy
to the device can overlap the step: ``non_blocking``)."""
from __future__ import annotations

import torch

from ...core.pipeline import Batches, Examples, epoch_batches, pad_rows
from . import FRAMEWORK

KINDS = FRAMEWORK.pipelines


def workers(kind: str) -> int:
    """The worker processes of a ``dataloader-wN`` pipeline: N."""
    return int(kind.rsplit("-w", 1)[1])


class Rows(torch.utils.data.Dataset):
    """The examples as a map-style data set: (tokens, label) of one example."""

    def __init__(self, examples: Examples):
        self.examples = examples

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples.row(int(i)), int(self.examples.labels[i])


class Collate:
    """Pads a batch of (tokens, label) (a class, not a closure: a worker
    process receives it pickled)."""

    def __init__(self, seq_len: int, pad_id: int):
        self.seq_len, self.pad_id = seq_len, pad_id

    def __call__(self, items):  # int64 here, so the tensors the loader pins are the ones moved
        ids, mask = pad_rows([r for r, _ in items], self.seq_len, self.pad_id)
        return (torch.from_numpy(ids.astype("int64")), torch.from_numpy(mask.astype("int64")),
                torch.tensor([y for _, y in items], dtype=torch.long))


class _EpochBatches(torch.utils.data.Sampler):
    """The examples' order in epoch ``epoch`` (set before each epoch: a
    DataLoader may ask for its iterator more than once per epoch), a batch of
    indices at a time."""

    def __init__(self, examples: Examples, batch_size: int):
        self.examples, self.batch_size, self.epoch = examples, batch_size, 0

    def __len__(self):
        return self.examples.batches(self.batch_size)

    def __iter__(self):
        return iter([b.tolist() for b in epoch_batches(self.examples, self.batch_size,
                                                       self.epoch)])


class Pipeline(Batches):
    """An endless iterator of (ids, mask, labels) on ``device``."""

    def __init__(self, kind: str, examples: Examples, batch_size: int, device: torch.device):
        if kind not in KINDS:
            raise ValueError(f"unknown PyTorch pipeline {kind!r}; known: {', '.join(KINDS)}")
        self.kind, self.examples, self.batch_size, self.device = kind, examples, batch_size, device
        examples.batches(batch_size)  # a batch larger than the data: refused here
        self.loader = None
        if kind == "memory":
            ids, mask = examples.padded()
            self.tensors = [torch.as_tensor(a, device=device) for a in
                            (ids.astype("int64"), mask.astype("int64"), examples.labels)]
            self.setup = "every example padded once and held on the device; a batch indexed"
        else:
            n = workers(kind)
            self.pin = device.type == "cuda"
            self.sampler = _EpochBatches(examples, batch_size)
            self.loader = torch.utils.data.DataLoader(
                Rows(examples), batch_sampler=self.sampler,
                collate_fn=Collate(examples.seq_len, examples.pad_id), num_workers=n,
                pin_memory=self.pin, persistent_workers=n > 0)
            # Its workers are forked, Linux's default that PyTorch's users get (a
            # fork server would outlive the pipeline as multiprocessing's own
            # helper); the study's worker process holds one framework, so no
            # other runtime's threads are forked with it.
            self.setup = (f"torch.utils.data.DataLoader, num_workers={n}, "
                          f"pin_memory={self.pin}, padding in its collate_fn (NumPy)")
        self.start()

    def _batches(self):
        epoch = 0
        while True:
            if self.loader is None:
                for idx in epoch_batches(self.examples, self.batch_size, epoch):
                    i = torch.as_tensor(idx, device=self.device)
                    yield tuple(t.index_select(0, i) for t in self.tensors)
            else:
                self.sampler.epoch = epoch
                for batch in self.loader:
                    yield tuple(t.to(self.device, non_blocking=self.pin) for t in batch)
            epoch += 1

    def close(self) -> None:
        """Ends the DataLoader's worker processes (persistent ones stay until
        their iterator is gone)."""
        super().close()
        if self.loader is not None:
            # The persistent workers' iterator: its shutdown joins them now
            # rather than whenever the loader is collected.
            it = getattr(self.loader, "_iterator", None)
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()
            self.loader = None
