"""The job a parent hands a worker process: a typed, frozen object written as
JSON and checked when read back, never a dict read by string keys."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .schema import Params
from ..core.spec import RunSpec
from ..core.timing import TimingConfig

PREPARE, CELLS, PEAK = "prepare", "cells", "peak"


class JobError(ValueError):
    """A job file that does not describe a job."""


@dataclass(frozen=True)
class CellRef:
    """One cell of a job, in one round."""

    spec: RunSpec
    round: int = 0

    @property
    def key(self) -> str:
        return f"{self.spec.cell_id}-r{self.round}"


@dataclass(frozen=True)
class Job:
    """Everything a worker needs. ``kind`` PREPARE: make the shared weights and
    the gate's references of one model; CELLS: measure ``cells`` (one worker
    process, or one launch of data-parallel ranks); PEAK: the framework's
    matmul rate in ``peak_dtypes`` and its bandwidth (fwcompare.measure.peak)."""

    kind: str
    study: str
    study_file: str         # the module that defines the study: the worker imports it
    task: str
    model: str
    head: str
    model_key: str
    device: str
    threads: int
    gate_dir: str
    gate_shape: tuple[int, int]
    store_dir: str
    run_id: str
    profile: str
    timing: TimingConfig
    params: Params | Mapping[str, Any]  # the study's typed params (a mapping read from JSON)
    provenance: Mapping[str, Any]
    framework: str = ""
    cells: tuple[CellRef, ...] = ()
    fp64_shapes: tuple[tuple[int, int], ...] = ()
    peak_dtypes: tuple[str, ...] = ()
    # the cells (ids) that take a memory pass in every round, not only in
    # their first that measured (a memory claim's: RunPlan.memory_every_round)
    memory_rounds: tuple[str, ...] = ()
    # The file that declares ``framework`` where it is registered from outside
    # fwcompare (a test's): the worker imports it, as ``study_file``. Filled
    # from the frameworks registry when not given; "" for the built-in ones.
    framework_file: str = ""

    def __post_init__(self):
        if self.kind not in (PREPARE, CELLS, PEAK):
            raise JobError(f"unknown job kind {self.kind!r}")
        if not isinstance(self.params, Params):  # read back from JSON: the worker retypes it
            object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))
        object.__setattr__(self, "gate_shape", tuple(self.gate_shape))
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "fp64_shapes", tuple(tuple(s) for s in self.fp64_shapes))
        object.__setattr__(self, "peak_dtypes", tuple(self.peak_dtypes))
        if self.framework and not self.framework_file:
            from ..frameworks import source_file

            object.__setattr__(self, "framework_file", source_file(self.framework))

    @property
    def seed(self) -> int:
        return self.params["seed"]

    @property
    def gate_path(self) -> Path:
        return Path(self.gate_dir) / f"{self.model_key}-{self.task}.npz"

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        params = (self.params.to_dict() if isinstance(self.params, Params)
                  else dict(self.params))
        d.update(timing=dataclasses.asdict(self.timing), params=params,
                 provenance=dict(self.provenance), gate_shape=list(self.gate_shape),
                 cells=[{"spec": c.spec.to_dict(), "round": c.round} for c in self.cells],
                 fp64_shapes=[list(s) for s in self.fp64_shapes])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        unknown, missing = set(d) - names, required - set(d)
        if unknown or missing:
            raise JobError("not a job: " + "; ".join(
                p for p in (f"unknown keys {sorted(unknown)}" if unknown else "",
                            f"missing keys {sorted(missing)}" if missing else "") if p))
        return cls(**{**d, "timing": TimingConfig(**d["timing"]),
                      "cells": tuple(CellRef(RunSpec.from_dict(c["spec"], strict=True),
                                             c["round"])
                                     for c in d.get("cells", ())),
                      "memory_rounds": tuple(d.get("memory_rounds", ()))})

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Job":
        return cls.from_dict(json.loads(text))

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())
        return path

    @classmethod
    def read(cls, path: Path | str) -> "Job":
        return cls.from_json(Path(path).read_text())

    def replace(self, **changes) -> "Job":
        return dataclasses.replace(self, **changes)

