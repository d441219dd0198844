"""RunSpec: the description of one measurement cell, and the cell axes studies add.

Every cell has the shared fields of :class:`RunSpec` (study, model, framework,
mode, device, precision, batch, sequence, threads, task). A study whose cells
vary along something more declares it as an :class:`Axis` (``Study.axes``): the
distributed study its worker count and scaling, text generation the tokens
generated per call. The studies' registry hands each declared axis to
:func:`add_axes`; a cell holds the axes away from their defaults, and reads every
registered axis by name (``spec.workers``; its default where the cell does not
set it). Every row of the results store has a column per registered axis.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

# The frameworks and their modes live in fwcompare.frameworks (one package each,
# read through its registry).
DEVICES = ("cpu", "gpu")
# How a run's cells are timed (fwcompare.execution.runner): interleaved (the variants of one
# model and shape sampled in turns) or sequential (one cell after another).
SCHEDULES = ("interleaved", "sequential")
# Precisions: float32 (TF32 off on GPUs), tf32 (float32 with TF32 tensor-core
# matmuls: NVIDIA GPUs only), and bfloat16 / float16 as each framework's idiomatic
# mixed precision (fp32 weights, reduced-precision compute).
DTYPES = ("float32", "tf32", "bfloat16", "float16")


@dataclass(frozen=True)
class Axis:
    """A cell axis a study adds to the shared fields.

    ``default``: the value of every cell that does not set it (an int or a str:
    the results column's type); a cell at the default leaves the axis out of its
    id, so adding an axis changes no earlier cell's id. ``shape``: the axis is
    part of the shape the variants of one model share in a set of the
    interleaved schedule (the tokens generated), else part of the variant (the
    worker count: what a lane of that schedule holds). ``label``: its words in a
    cell's label, a format of every axis by name (shown where the cell is away
    from the default); ``short``: a shape axis's words in a set's shape
    (``1x32+16``). ``tokens``: a call handles this many tokens per sequence in
    place of the sequence's length (away from the default)."""

    name: str
    default: int | str
    shape: bool = False
    label: str = ""
    short: str = ""
    tokens: bool = False

    @property
    def dtype(self) -> str:
        """Its results column's type."""
        return "int64" if isinstance(self.default, int) else "string"


_AXES: dict[str, Axis] = {}


def add_axes(axes) -> None:
    """Register cell axes (``fwcompare.studies.register`` calls it for each
    study); an axis declared again must be the same one."""
    for axis in axes:
        if axis.name in _BASE:
            raise ValueError(f"cell axis {axis.name!r} is a field every cell has")
        known = _AXES.get(axis.name)
        if known is not None and known != axis:
            raise ValueError(f"cell axis {axis.name!r} declared twice, differently: "
                             f"{known} and {axis}")
        _AXES[axis.name] = axis


def remove_axes(names) -> None:
    """Unregister cell axes (a study unregistered: the axes no other declares)."""
    for name in names:
        _AXES.pop(name, None)


def axes(shape: bool | None = None) -> tuple[Axis, ...]:
    """The registered axes in the order registered (``shape``: only the shape's,
    or only the variant's)."""
    return tuple(a for a in _AXES.values() if shape is None or a.shape == shape)


@dataclass(frozen=True)
class RunSpec:
    """One cell of a study grid. Its ``cell_id`` is stable across processes and runs.

    ``axes``: the study's own axes (:class:`Axis`) where this cell is away from
    their defaults; given as a mapping or pairs, held as pairs sorted by name.
    Every registered axis reads as an attribute (``spec.new_tokens``)."""

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
    axes: tuple = ()

    def __post_init__(self):
        given = dict(self.axes)
        unknown = [k for k in given if k not in _AXES]
        if unknown:
            raise ValueError(f"cell axes {unknown} are declared by no registered study "
                             f"(known: {', '.join(_AXES) or 'none'})")
        kept = tuple(sorted((k, v) for k, v in given.items() if v != _AXES[k].default))
        object.__setattr__(self, "axes", kept)

    def __getattr__(self, name: str):
        # only called for names that are not fields: the registered axes
        axis = _AXES.get(name) if not name.startswith("_") else None
        if axis is None:
            raise AttributeError(f"{type(self).__name__} has no field or cell axis {name!r}")
        return dict(self.__dict__.get("axes", ())).get(name, axis.default)

    @property
    def cell_id(self) -> str:
        # hash() of a str is salted per process; a resumable id must not be.
        # An axis at its default stays out (Axis), so ids of the cells of other
        # studies did not change when a study added one.
        d = {f: getattr(self, f) for f in _BASE}
        d.update(self.axes)
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def _words(self, shape: bool) -> str:
        values = self.axis_values()
        return "".join(a.label.format(**values) for a in axes(shape)
                       if values[a.name] != a.default)

    @property
    def label(self) -> str:
        precision = "" if self.dtype == "float32" else f" {self.dtype}"
        task = f" {self.task}" if self.task != "inference" else ""
        return (f"{self.model}{task} {self.framework}/{self.mode}{precision}{self._words(False)} "
                f"b={self.batch_size} s={self.seq_len}{self._words(True)}")

    @property
    def shape(self) -> tuple:
        """What the variants of one model share in a set of the interleaved
        schedule: batch, sequence (a prompt's length) and the shape's axes."""
        return (self.batch_size, self.seq_len, *(getattr(self, a.name) for a in axes(True)))

    @property
    def variant_axes(self) -> tuple:
        """The values of the axes that are part of the variant (in order)."""
        return tuple(getattr(self, a.name) for a in axes(False))

    @property
    def tokens_per_call(self) -> int:
        return tokens_per_call(self.to_dict())

    def axis_values(self) -> dict:
        """Every registered axis by name: this cell's value or the default."""
        return {a.name: getattr(self, a.name) for a in axes()}

    def to_dict(self) -> dict:
        """The shared fields and every registered axis (a results row's spec)."""
        return {**{f: getattr(self, f) for f in _BASE}, **self.axis_values()}

    @classmethod
    def from_dict(cls, d: Mapping, strict: bool = False) -> "RunSpec":
        """From :meth:`to_dict`'s form, or a results row (other keys are left);
        ``strict``: every key is a field or a registered axis (a job's cells:
        an axis of a study not registered here is refused, never dropped)."""
        if strict and (unknown := sorted(set(d) - {*_BASE, *_AXES})):
            raise ValueError(f"{unknown} are neither fields of a cell nor axes a registered "
                             f"study declares")
        return cls(**{k: v for k, v in d.items() if k in _BASE},
                   axes={k: v for k, v in d.items() if k in _AXES})


_BASE = tuple(f.name for f in dataclasses.fields(RunSpec) if f.name != "axes")


def tokens_per_call(cell: Mapping) -> int:
    """Tokens one call of a cell (its spec's :meth:`RunSpec.to_dict` form, or a
    results row) handles: each sequence's tokens for a forward or a training
    step, a tokens axis's count where the cell sets one (text generation: the
    tokens generated)."""
    n = next((cell[a.name] for a in axes() if a.tokens and a.name in cell
              and cell[a.name] != a.default), None)
    return int(cell["batch_size"]) * int(n or cell["seq_len"])


def shape_text(shape: tuple) -> str:
    """A set's shape (:attr:`RunSpec.shape`) in words: ``8x128``, or ``1x32+16``
    (16 tokens generated)."""
    b, s, *rest = shape
    shaped = axes(True)
    values = dict(zip((a.name for a in shaped), rest))
    return f"{b}x{s}" + "".join(a.short.format(**values) for a in shaped
                                if values.get(a.name, a.default) != a.default)
