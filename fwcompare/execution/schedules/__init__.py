"""How a task's cells are timed: the two schedules, side by side, behind one
interface, ``run(schedule, runner, model, groups, rnd)``.

- ``sequential`` (:mod:`.sequential`): one cell after another, a worker
  process per group (``Study.groups``);
- ``interleaved`` (:mod:`.interleaved`): a process per variant, the variants
  of one model and shape prepared side by side, then sampled one block each
  per turn in a random order.

``Study.schedule`` says which a task takes; the runner (``fwcompare.execution.runner``)
keeps the cells' lifecycle (workers, restarts, rows, time limits) and hands a
model's groups of one round to the schedule.
"""
from __future__ import annotations

from ...core.spec import SCHEDULES as NAMES
from . import interleaved, sequential, shared_gpu

RUNS = {"interleaved": interleaved.run, "sequential": sequential.run}
assert set(RUNS) == set(NAMES), "every schedule a params file may name has a module here"


def run(schedule: str, runner, model: str, groups: list, rnd: int) -> None:
    """Time ``groups`` (a model's, in round ``rnd``) under ``schedule``."""
    RUNS[schedule](runner, model, groups, rnd)
