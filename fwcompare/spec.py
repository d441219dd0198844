"""RunSpec: the description of one measurement cell."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

# The frameworks and their modes live in fwcompare.frameworks (one package each,
# read through its registry).
DEVICES = ("cpu", "gpu")
# How a run's cells are timed (fwcompare.runner): interleaved (the variants of one
# model and shape sampled in turns) or sequential (one cell after another).
SCHEDULES = ("interleaved", "sequential")
# Precisions: float32 (TF32 off on GPUs), tf32 (float32 with TF32 tensor-core
# matmuls: NVIDIA GPUs only), and bfloat16 / float16 as each framework's idiomatic
# mixed precision (fp32 weights, reduced-precision compute).
DTYPES = ("float32", "tf32", "bfloat16", "float16")


_LATER_FIELDS = ("workers", "scaling", "new_tokens")


@dataclass(frozen=True)
class RunSpec:
    """One cell of a study grid. Its ``cell_id`` is stable across processes and runs."""

    study: str
    model: str
    framework: str
    mode: str
    device: str
    dtype: str
    batch_size: int
    seq_len: int
    threads: int
    task: str = "inference"
    # Data-parallel cells: worker processes, and weak (per-worker batch fixed)
    # or strong (global batch fixed) scaling; batch_size is the global batch.
    workers: int = 1
    scaling: str = ""
    # Text generation: tokens generated per call (seq_len is then the prompt's
    # length); 0 for a forward or training step.
    new_tokens: int = 0

    @property
    def cell_id(self) -> str:
        # hash() of a str is salted per process; a resumable id must not be.
        # Fields at their defaults stay out, so ids of single-process cells did
        # not change when the data-parallel fields were added.
        d = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if f.name in _LATER_FIELDS and d[f.name] == f.default:
                del d[f.name]
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        precision = "" if self.dtype == "float32" else f" {self.dtype}"
        task = f" {self.task}" if self.task != "inference" else ""
        workers = f" {self.scaling} x{self.workers}" if self.scaling else ""
        new = f" new={self.new_tokens}" if self.new_tokens else ""
        return (f"{self.model}{task} {self.framework}/{self.mode}{precision}{workers} "
                f"b={self.batch_size} s={self.seq_len}{new}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """What the variants of one model share in a set of the interleaved
        schedule: batch, sequence (a prompt's length) and tokens generated."""
        return (self.batch_size, self.seq_len, self.new_tokens)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def tokens_per_call(batch_size: int, seq_len: int, new_tokens: int = 0) -> int:
    """Tokens one call handles: each sequence's tokens for a forward or a
    training step, the generated tokens for text generation."""
    return int(batch_size) * int(new_tokens or seq_len)


def shape_text(shape: tuple) -> str:
    """A set's shape in words: ``8x128``, or ``1x32+16`` (16 tokens generated)."""
    b, s, n = shape
    return f"{b}x{s}" + (f"+{n}" if n else "")
