"""The study contract: what a study module declares, as named hooks.

The runner, the worker process, params validation, the report and the claims
scorecard only call these hooks; a study is one module (or package) that subclasses
:class:`Study`, fills them in and holds an instance as ``STUDY`` (the registry,
``fwcompare.studies``, registers it). Parent-side hooks decide what to measure and
how cells share processes; worker-side hooks say what one cell is.

- ``schema``: the params keys (the shared ones from ``schema.grid_params`` and
  ``schema.TIMING``, plus the study's own)
- ``check``: problems between keys (each a message naming its key); the
  checked params arrive as one frozen, typed object (``params_type``)
- ``columns``: the result columns its rows add (``results.Columns``)
- ``axes``: the cell axes its cells add (``spec.Axis``: their columns too)
- ``cells``: the RunSpecs of a params set
- ``notebook``: its notebook (default ``<name>.ipynb``)
- ``model_problem``: why the study cannot run a model at all (its cells are
  then ``unsupported`` rows with that sentence, and nothing is prepared)
- ``machine_problem``: why this machine cannot run the study's cells at all
  (distributed: fewer GPUs than a launch's ranks); every cell says it
- ``head``: the model head a task runs (base, causal_lm, seq_cls, seq2seq_lm)
- ``model_key``: the name of a model's weights and gate files
- ``gate_shape``: the gate batch (rows must split as the study needs)
- ``fp64_shapes``: shapes that need float64 references (precision errors)
- ``groups``: how one framework's cells share worker processes, in order
- ``worker_threads``: threads of each worker, where not the run's (ranks)
- ``spawn``: the process(es) that run one group (default: one worker)
- ``run_group``: how the parent runs one group (default: the runner's)
  (these two are handed the run's ``RunContext``, not the runner:
  ``execution/context.py``)
- ``schedule``: a task's schedule (default: the ``schedule`` param)
- ``train_settings``: the training reference's optimizer and steps (training
  tasks)
- ``backend``: the framework backend of a worker
- ``prepare``: the prepare job: weights and gate references
- ``work``: a worker's main loop (default: serve the runner's requests)
- ``plan``: one cell: what to time and what is known before timing
- ``claimed_variants``: the variants a claim of this study compares
- ``repeats``: which cells of those take the rounds after the first
- ``processes``, ``whole_run``, ``times_model``: what a first run's estimate
  counts beyond a lane's build and first call (a search's tries; a whole run's
  process and its cold compiles or host traces in every round), or short of them
  (a cell that calls no model traces nothing)
- ``metrics``: claim metrics the study adds to ``params/claims.yaml``'s
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from ..core import env, models
from ..plan.job import CellRef, Job
from ..frameworks import MODES
from ..results.store import Columns
from ..core.spec import DTYPES, Axis, RunSpec

if TYPE_CHECKING:
    from ..measure.cell import CellPlan, WorkerContext
    from ..measure.gate import TrainSettings
    from ..plan.schema import Param, Params
    from .context import RunContext


def grid_cells(params: dict, study: str, task: str, *, models=None, modes=None, dtypes=None,
               batch_sizes=None, seq_lens=None) -> list[RunSpec]:
    """Every (model, framework, mode, precision, batch, sequence) cell of a grid;
    each axis defaults to the params key of the same name."""
    threads = params["threads"] or env.default_threads()
    modes = modes or params["modes"]
    return [RunSpec(study=study, model=model, framework=fw, mode=mode,
                    device=params["device"], dtype=dtype, batch_size=b,
                    seq_len=s, threads=threads, task=task)
            for model in (models or params["models"])
            for fw in params["frameworks"]
            for mode in modes[fw]
            for dtype in (dtypes or [params["dtype"]])
            for b in (batch_sizes or params["batch_sizes"])
            for s in (seq_lens or params["seq_lens"])]


def by_size(ref: CellRef) -> tuple:
    """Ascending batch x sequence, so a cell's peak RSS is not inflated by a
    larger cell's allocator caches; float32 first (every speed-up's baseline)."""
    s = ref.spec
    return (DTYPES.index(s.dtype), s.batch_size * s.seq_len, s.batch_size, *s.shape[2:],
            s.mode)


def smallest_shape(batch_sizes, seq_lens) -> tuple[int, int]:
    """The first cell a variant runs (ascending batch x sequence, as
    :func:`by_size`): the gate batch of the studies that gate on a cell, so
    that the gate's calls are that cell's first calls and a compiled mode or
    step is compiled once (``fwcompare.measure.gate``)."""
    return min(((b, s) for b in batch_sizes for s in seq_lens), key=lambda t: (t[0] * t[1], t[0]))


def per_mode(cells: list[CellRef]) -> list[list[CellRef]]:
    """One process per mode (sorted by mode), each in ascending size."""
    modes = sorted({c.spec.mode for c in cells})
    return [sorted((c for c in cells if c.spec.mode == m), key=by_size) for m in modes]


class Study:
    """A study: override the hooks its cells need (see the module doc)."""

    name: str = ""
    title: str = ""
    tasks: tuple[str, ...] = ("inference",)
    # Modes its cells may name, per framework: what a claim's cells may name
    # (its params' ``modes`` check takes the same table through grid_params).
    modes: Mapping[str, tuple[str, ...]] = MappingProxyType(MODES)
    # Result columns this study's rows add to the shared ones (fwcompare.results.store):
    # its own figures, those a failed row keeps, its provenance.
    columns: Columns = Columns()
    # Cell axes this study adds to the shared fields of a cell (spec.Axis: the
    # distributed study's workers and scaling), read as ``spec.<name>``.
    axes: tuple[Axis, ...] = ()
    # Claim metrics this study adds (name -> judging.Metric), judged by claims.py.
    metrics: Mapping[str, Any] = MappingProxyType({})
    # The time breakdown's phase of the steps a training cell takes on its own
    # batch after its first call (agreement steps: the gate's, and its warm-up).
    first_steps_phase: str = "warm-up and block size"
    # The time breakdown's phase of the prepare job (weights, gate references,
    # and whatever else the study's ``prepare`` measures), and the phases of
    # this study that produce figures (the report's share of time producing
    # figures counts them beside the timing samples).
    prepare_phase: str = "weights and gate references"
    figure_phases: tuple[str, ...] = ()
    # The phase of a worker's time that it ran on its own (``autonomous``) and
    # did not account for with ``spent`` events: for data-parallel launches,
    # the launcher's and ranks' start before they could say, rendezvous, exits.
    autonomous_phase: str = "data-parallel launches (launcher start, rendezvous, exits)"

    @property
    def notebook(self) -> str:
        return f"{self.name}.ipynb"

    # -- params ---------------------------------------------------------------------
    def schema(self) -> dict[str, "Param"]:
        raise NotImplementedError

    def check(self, params: dict) -> list[str]:
        return []

    def params_type(self) -> "type[Params]":
        """The frozen, typed class of this study's validated params (made once
        from ``schema``; ``schema.validate`` returns an instance)."""
        made = self.__dict__.get("_params_type")
        if made is None:
            from ..plan.schema import params_type

            made = self._params_type = params_type(self.name, self.schema())
        return made

    def validate(self, params, source: str = "params") -> "Params":
        """``params`` (a mapping) checked against the schema, as this study's
        typed params; typed params of this study pass through unchecked (they
        were checked where they were made: once, at the entry point)."""
        from ..plan.schema import Params, validate

        if type(params) is self.params_type():
            return params
        if isinstance(params, Params):  # typed elsewhere (another process's class)
            params = params.to_dict()
        return validate(self, params if params is not None else {}, source)

    # -- cells and processes (parent side) --------------------------------------------
    def cells(self, params: dict) -> list[RunSpec]:
        return grid_cells(params, self.name, self.tasks[0])

    def model_problem(self, model: str) -> str:
        """Default: a forward needs only token ids (an encoder-decoder is left
        to the generation study)."""
        return models.forward_problem(model)

    def shape_text(self, spec) -> str:
        """A cell's batch x sequence as a dry run lists it
        (``estimate.cell_lines``)."""
        return f"{spec.batch_size}x{spec.seq_len}"

    def machine_problem(self, params: "Params") -> str:
        """Why this machine cannot run any of the study's cells (each is then
        ``unsupported`` with it, and nothing starts); "" where it can."""
        return ""

    def processes(self, ref) -> int:
        """Fresh processes a cell (``ref``: a CellRef) starts beyond its lane's
        worker, as a run without an earlier one to learn from expects them
        (``estimate.fixed_costs``): none by default."""
        return 0

    def launch_key(self, ref):
        """For a study whose cells run in launches of fresh processes of their
        own (distributed: one per engine, worker count and round), what a
        launch shares (its cells have the same key), as a run without an
        earlier one to learn from expects them (``estimate.fixed_costs``:
        each launch starts its processes, builds its model and compiles cold);
        None (the default): the cell runs in its lane's worker."""
        return None

    def whole_run(self, ref) -> bool:
        """Whether a cell is a whole run in a fresh process of its own, cold in
        every round (``estimate.fixed_costs`` counts its start and its training
        and evaluation steps' compiles where its stack compiles, their host
        traces where it traces on the host): none by default."""
        return False

    def times_model(self, ref) -> bool:
        """Whether a cell's first call runs the model, so that a traced mode
        traces or compiles it there (``estimate.fixed_costs``): every cell by
        default."""
        return True

    def head(self, task: str, model: str) -> str:
        if task == "train":
            return models.train_head(model)
        return "base"

    def model_key(self, model: str, seed: int, head: str) -> str:
        return models.model_key(model, seed, head)

    def gate_shape(self, params: dict, task: str) -> tuple[int, int]:
        """Default: the smallest cell's batch, so the gate's call is that cell's
        first call and a compiled mode or step compiles once (``fwcompare.measure.gate``)."""
        return smallest_shape(params["batch_sizes"], params["seq_lens"])

    def fp64_shapes(self, task: str, cells: list[RunSpec]) -> list[tuple[int, int]]:
        return []

    def groups(self, task: str, cells: list[CellRef]) -> list[list[CellRef]]:
        """Default: one process for all of a framework's cells (one model per
        precision), in ascending size."""
        return [sorted(cells, key=by_size)] if cells else []

    def worker_threads(self, params: dict) -> int | None:
        """Threads of each worker process, where they are not the run's
        (None): a data-parallel rank's share of the cores."""
        return None

    def spawn(self, runner: "RunContext", job: Job, name: str):
        return runner.spawn_worker(job, name)

    def run_group(self, runner: "RunContext", model: str, group: list[CellRef]) -> None:
        runner.run_group(model, group)

    def schedule(self, params: "Params", task: str) -> str:
        """How a task's cells are timed: interleaved or sequential
        (``fwcompare.execution.runner``); a task whose groups the study runs itself
        (``run_group``) needs sequential. The one reader of the ``schedule``
        key: the runner, the timing of its blocks, the provenance of its rows
        and the shards all ask here."""
        return params["schedule"]

    def train_settings(self, params: dict) -> "TrainSettings | None":
        return None

    def claimed_variants(self, claim, metric) -> set[str]:
        """The framework/mode variants a claim of this study reads (its cells
        ``a`` and ``b`` that name one, where the claim's figure is a timing or
        another figure taken once per round, ``Metric.repeats``): what
        ``rounds_for: claims`` measures in every round, so that the figure
        has an interval over fresh processes. A figure exact by its nature (a
        file's size) needs no round after the first. ``metric``: the claim's
        ``judging.Metric``."""
        if not metric.repeats:
            return set()
        return set(claim.variants)

    def repeats(self, spec: RunSpec, params: "Params", claimed: set[str]) -> bool:
        """Whether a cell of a claimed variant takes the rounds after the first
        under ``rounds_for: claims`` (``claimed``: every claimed variant of the
        study, ``claimed_variants``): every one by default; a study whose
        claims read only some of a variant's cells (distributed: the most
        workers; memory: the plain step beside a technique it runs) leaves
        the others to round 0."""
        return True

    def rounds_of(self, spec: RunSpec, params: "Params") -> int:
        """How many of the params' ``rounds`` a cell takes (those ``repeats``
        and ``rounds_for`` leave it): all by default; a study may give a kind
        of cell fewer of its own (memory: ``fit_rounds``, its searches). The
        extra rounds for a doubtful claim come after every cell's."""
        return params["rounds"]

    def failure_figures(self, params: dict, ref) -> dict:
        """Figures of a row the parent writes for a cell no worker finished
        (crashed, stopped, timed out): what the study knows without the worker.
        None by default."""
        return {}

    # -- worker side -------------------------------------------------------------------
    def backend(self, framework: str):
        from ..frameworks import get_backend

        return get_backend(framework)

    def prepare(self, job: Job) -> None:
        from ..measure.gate import prepare

        prepare(job, self.train_settings(job.params) if job.task == "train" else None)

    def work(self, job: Job) -> None:
        from ..measure.cell import serve

        serve(self, job)

    def plan(self, ctx: "WorkerContext", spec: RunSpec) -> "CellPlan":
        raise NotImplementedError(f"{type(self).__name__} does not say how to measure a cell")


def with_axis(base: Study, axis: Axis, values, module: str, plan=None,
              figures: tuple[str, ...] = (), name: str = "") -> Study:
    """``base`` with one cell axis more, named ``name`` (``<base>_<axis>``): how
    a benchmark measures variants that a study does not have (``benchmarks/error_rates.py``'s
    twins, ``benchmarks/cpu/allocator.py``'s allocators). ``values(cell)``: the
    axis' values that ``base``'s cell takes (each a cell of its own; none
    leaves the cell out). ``plan(make, spec)``: a cell's plan in its value, where
    ``make()`` builds ``base``'s (default: ``base``'s as it is). ``figures``: the
    result columns those plans add. ``module``: the caller's ``__name__``,
    whose file a worker process imports to find the study (:func:`module_file`):
    hold the study at its top level there."""

    class WithAxis(type(base)):
        axes = (*base.axes, axis)
        columns = base.columns + Columns(figures=tuple(figures))

        def cells(self, params):
            return [dataclasses.replace(c, axes={**dict(c.axes), axis.name: v})
                    for c in super().cells(params) for v in values(c)]

        def plan(self, ctx, spec):
            def make():
                return super(WithAxis, self).plan(ctx, spec)
            return make() if plan is None else plan(make, spec)

    WithAxis.name = name or f"{base.name}_{axis.name}"
    WithAxis.__module__ = module
    WithAxis.__qualname__ = WithAxis.__name__ = f"{type(base).__name__}With{axis.name.title()}"
    return WithAxis()


def module_file(study: Study) -> str:
    """The file of the module that defines ``study``'s class (a worker process
    imports it to find a study registered outside fwcompare)."""
    import sys
    from pathlib import Path

    return str(Path(sys.modules[type(study).__module__].__file__).resolve())
