"""What a schedule and a study's hooks see of the run in progress.

The runner hands them a :class:`RunContext`, not itself: the members below
are all they may read or call, so the runner's own bookkeeping (its fork
servers, round passes, restarts, the rows it writes for a stopped worker)
stays its own. ``tests/test_imports.py`` checks that the schedules and the
studies use no other member.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.machine_load import HostMeter
    from ..core.spec import RunSpec
    from ..plan.job import CellRef, Job
    from ..results.store import ResultStore
    from .runner import Runner, Worker
    from .study import Study


class RunContext:
    """A narrow view of one task's run (a :class:`~.runner.Runner`)."""

    __slots__ = ("_runner",)

    def __init__(self, runner: Runner):
        self._runner = runner

    # -- what is run --------------------------------------------------------------------
    @property
    def study(self) -> Study:
        return self._runner.study

    @property
    def task(self) -> str:
        return self._runner.task

    @property
    def params(self):
        """The study's typed params."""
        return self._runner.params

    @property
    def timing(self):
        """The timing protocol's settings (``timing.TimingConfig``)."""
        return self._runner.timing

    @property
    def store(self) -> ResultStore:
        return self._runner.store

    @property
    def work_dir(self) -> Path:
        return self._runner.work_dir

    # -- progress, and where the time goes ------------------------------------------
    @property
    def bar(self):
        """The run's progress bar (tqdm)."""
        return self._runner.bar

    @property
    def total(self) -> int:
        """The (cell, round)s the progress counts; a largest-batch search adds its tries."""
        return self._runner.total

    @total.setter
    def total(self, n: int) -> None:
        self._runner.total = n

    @property
    def host(self) -> HostMeter:
        return self._runner.host

    @property
    def phases(self) -> dict[str, float]:
        """Seconds per phase of the task so far (read them; ``charge`` adds)."""
        return self._runner.phases

    def phase(self, name: str):
        """A context manager charging its time to phase ``name``."""
        return self._runner.phase(name)

    def charge(self, phase: str, seconds: float) -> None:
        self._runner.charge(phase, seconds)

    def recharge(self, phase: str, to: str, seconds: float) -> None:
        self._runner.recharge(phase, to, seconds)

    def say(self, message: str) -> None:
        self._runner.say(message)

    # -- rows ---------------------------------------------------------------------------
    def record(self, ref: CellRef, status: str, error: str = "", figures: dict | None = None,
               provenance: dict | None = None) -> None:
        self._runner.record(ref, status, error, figures, provenance)

    def cell_done(self, spec: RunSpec, status: str, median_s=None, ci=None, error="") -> None:
        self._runner.cell_done(spec, status, median_s, ci, error)

    # -- workers ------------------------------------------------------------------------
    def job(self, kind: str, model: str, framework: str = "", cells: list[CellRef] = (),
            fp64_shapes=()) -> Job:
        return self._runner.job(kind, model, framework, cells, fp64_shapes)

    def model_key(self, model: str) -> str:
        return self._runner.model_key(model)

    def worker_env(self, threads: int, framework: str) -> dict:
        return self._runner.worker_env(threads, framework)

    def server_for(self, env: dict):
        return self._runner.server_for(env)

    def compile_cache(self, job: Job) -> Path:
        return self._runner.compile_cache(job)

    def spawn_worker(self, job: Job, name: str) -> Worker:
        return self._runner.spawn_worker(job, name)

    def run_group(self, model: str, group: list[CellRef]) -> None:
        """The plain run of a group: a worker, restarted until each cell has a row."""
        self._runner.run_group(model, group)

    def after_stop(self, w, why: str, remaining: dict[str, CellRef], in_flight: str | None,
                   restarts: int) -> bool:
        return self._runner.after_stop(w, why, remaining, in_flight, restarts)
