"""The plan of one study's run: which cells it measures in which rounds.

A run's plan is built once where the run begins (``suite.api.run_plan``:
the study, its validated params and the variants its claims compare) and
handed on: the estimate, the shard split, the runner, the extra rounds of a
doubtful claim and the report all read the cells of that one object.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from ..core.env import params_hash
from .job import CellRef

if TYPE_CHECKING:
    from ..core.spec import RunSpec
    from ..execution.study import Study


def is_claimed(spec, variants: set[str]) -> bool:
    """Whether the cell ``spec`` (a RunSpec) is of one of the claimed
    variants (``claims.claimed_variants``): ``framework/mode`` (``*`` for every
    framework), of any task and precision, or ``framework/mode@task/dtype``
    (each part may be ``*``: mixed_precision's claims name a task and a
    precision of every framework's modes)."""
    full = f"{spec.framework}/{spec.mode}@{spec.task}/{spec.dtype}"
    return any(fnmatch.fnmatchcase(full, v if "@" in v else f"{v}@*/*") for v in variants)


@dataclass(frozen=True, eq=False)
class RunPlan:
    """Every (cell, round) a run of ``study`` with validated ``params``
    measures: all its cells in round 0, and in the rounds after it those
    ``rounds_for`` names (all, or ``claimed``: the variants a claim compares
    in this study, less the cells of them no claim reads, ``Study.repeats``).
    ``more``: that many extra rounds after the params' (a doubtful claim's).
    A cell takes the first ``Study.rounds_of`` of the params' rounds.
    ``memory``: the variants a memory claim compares, whose cells take a
    memory pass in every round they run (:meth:`memory_every_round`)."""

    study: Study
    params: object  # the study's typed params (``schema.Params``)
    claimed: frozenset[str] | None = None
    more: int = 0
    memory: frozenset[str] = frozenset()

    def __post_init__(self):
        if self.params["rounds_for"] != "all" and self.claimed is None:
            raise ValueError(f"{self.study.name}: rounds_for: {self.params['rounds_for']} "
                             "needs the claimed variants")

    @functools.cached_property
    def specs(self) -> tuple[RunSpec, ...]:
        """The study's cells, in its order."""
        return tuple(self.study.cells(self.params))

    @functools.cached_property
    def cells(self) -> tuple[CellRef, ...]:
        """Every planned (cell, round), round by round in the study's order."""
        again = self.specs
        if self.params["rounds_for"] != "all":
            again = [s for s in again if is_claimed(s, self.claimed)
                     and self.study.repeats(s, self.params, self.claimed)]
        return tuple(CellRef(s, r) for r in range(self.rounds)
                     for s in (self.specs if r == 0 else again)
                     if r >= self.params["rounds"] or r < self.study.rounds_of(s, self.params))

    @functools.cached_property
    def params_hash(self) -> str:
        return params_hash(self.params)

    @property
    def rounds(self) -> int:
        return self.params["rounds"] + self.more

    def of(self, specs: Iterable[RunSpec]) -> list[CellRef]:
        """The planned (cell, round)s of ``specs`` (a task's, a shard's, a
        doubtful claim's cells), round by round in the order of ``specs``."""
        specs = list(specs)
        planned = {(c.spec, c.round) for c in self.cells}
        return [CellRef(s, r) for r in range(self.rounds) for s in specs if (s, r) in planned]

    def memory_every_round(self, spec: RunSpec) -> bool:
        """Whether the cell ``spec`` takes a memory pass in every round, not
        only its first that measures: a memory claim's figure is per round
        (``judging.from_rounds``)."""
        return is_claimed(spec, self.memory)

    def with_more(self, more: int) -> RunPlan:
        """This plan with ``more`` extra rounds (its cells made again)."""
        return dataclasses.replace(self, more=more)
