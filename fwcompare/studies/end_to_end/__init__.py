"""End to end: training as each framework's users run it, their input
pipelines, and the time to a target accuracy.

Three tasks, on one model (its classification head, the shared weights) and
one generated sentence task (``data``), tokenized once per process by the
model's own tokenizer:

- ``fit``: a whole training run per framework, the way its users run it
  (its ``mode``: Hugging Face ``trainer`` for PyTorch, Keras ``keras-fit`` on
  ``tf.data`` for TensorFlow, a Flax/optax ``flax-loop`` under ``jax.jit``
  on grain for JAX; ``training_run``): same weights, batches in the same order,
  AdamW at the same settings, an evaluation on the held-out split every
  ``eval_every`` steps. Its row splits the run's wall time into data
  preparation, model set-up, first step, the steps after it and the
  evaluations; its samples are the seconds per step of each evaluation
  interval after the first (its median is the steady step); it has the
  accuracy at each evaluation and the time to ``target_accuracy`` (MLPerf
  Training's measure: the run's start to the end of the first evaluation at
  or above it; NaN, with the best accuracy reached, where it never got
  there). One run is one process, on its own; every round is a fresh one.
- ``loader``: a pipeline alone (its ``mode``: one of the framework's
  ``pipelines``): a call is its next batch, on the device, no model.
- ``fed``: the training step (the training study's, in the framework's
  ``train_modes``) on the next batch a pipeline gives: whether the input
  starves the step.

Parts: ``data`` (the task and its tokenization), ``worker`` (the runs and
plans), ``tables`` (tables and claim metrics), ``figures``; this module holds
the study (the registry registers it), and every part's public name is
reachable from it (``study.fit_table``).
"""
from __future__ import annotations

import shutil

from ...core import models
from ...frameworks import FRAMEWORKS, TRAIN_MODES, defaults, get
from ...results.judging import Metric, check_cells
from ...results.store import Columns
from ...plan.schema import TIMING, Param, grid_params, modes_in, positive, replace_param
from ...measure.workloads import OPTIMIZER
from ...execution.study import Study, grid_cells
from .figures import curve_figure, phases_figure, pipelines_figure  # noqa: F401
from .tables import (FIT_FIGURES, check_fit_figure, curves, first_losses, fit_ratio,  # noqa: F401
                     fit_table, pipeline_table, task_time_ratio)
from . import data
from .worker import FED, FIT, LOADER, fed_plan, loader_plan, run_fits


def _declared(field: str) -> dict[str, tuple[str, ...]]:
    """Each registered framework's ``field`` (``Framework.pipelines``,
    ``fit_pipelines``; ``fit_stack`` as a tuple), where it declares one."""
    out = {}
    for name in FRAMEWORKS:
        value = getattr(get(name), field)
        if value:
            out[name] = (value,) if isinstance(value, str) else tuple(value)
    return out


def _one_each(v):
    many = [fw for fw, modes in v.items() if len(modes) != 1]
    return f"give one per framework; {many[0]} has {len(v[many[0]])}" if many else None


class EndToEnd(Study):
    name = "end_to_end"
    title = "End to end: Trainer, Keras fit and a Flax loop, their input pipelines, time to accuracy"
    tasks = (FIT, LOADER, FED)
    columns = Columns(figures=FIT_FIGURES, analytic=("target_accuracy",))
    first_steps_phase = "first batches and steps (warm-up and block size)"
    autonomous_phase = "training runs end to end (a fresh process each)"
    figure_phases = (autonomous_phase,)

    @property
    def modes(self):
        """What a claim's cells may name: the stacks and the pipelines."""
        pipes, stacks = _declared("pipelines"), _declared("fit_stack")
        return {fw: (*stacks.get(fw, ()), *pipes.get(fw, ())) for fw in FRAMEWORKS}

    def schema(self):
        pipes, stacks = _declared("pipelines"), _declared("fit_stack")
        fit_pipes = _declared("fit_pipelines")
        grid = grid_params(["all-minilm-l6-v2"], {fw: list(m) for fw, m in stacks.items()},
                           stacks, [32], [32], 1200.0)
        grid = replace_param(grid, "modes", help="per framework, its end-to-end stack for the "
                             "fit task (trainer, keras-fit, flax-loop); [] for none")
        grid = replace_param(grid, "tf_autograph", help=grid["tf_autograph"].help + (
            "; here the fed task's step only: Keras fit traces its own as its users get it"))
        return {
            **grid,
            "fit_pipeline": Param("dict[str, list[str]]",
                                  {fw: [k[0]] for fw, k in fit_pipes.items()},
                                  "per framework, the pipeline that feeds its whole run, one "
                                  "each (Trainer reads a DataLoader, Keras fit a tf.data kind)",
                                  lambda v: modes_in(fit_pipes)(v) or _one_each(v)),
            "loaders": Param("dict[str, list[str]]", {fw: list(k) for fw, k in pipes.items()},
                             "per framework, the pipelines timed alone (no model)",
                             modes_in(pipes)),
            "fed": Param("dict[str, list[str]]", {fw: list(k) for fw, k in pipes.items()},
                         "per framework, the pipelines timed feeding the training step",
                         modes_in(pipes)),
            "train_modes": Param("dict[str, list[str]]", defaults(lambda f: f.train_modes[:1]),
                                 "how each framework runs the step the fed pipelines feed (one each)",
                                 lambda v: modes_in(TRAIN_MODES)(v) or _one_each(v)),
            "train_examples": Param("int", 2048, "examples of the training split", positive),
            "eval_examples": Param("int", 256, "examples of the held-out split (whole evaluation batches)", positive),
            "eval_batch_size": Param("int", 64, "batch of an evaluation", positive),
            "own_share": Param("float", 0.7, "share of a sentence's content words from its own topic (the task's difficulty: 1.0 every word agrees)", lambda v: None if 0.5 < v <= 1 else f"must be in (0.5, 1], got {v!r}"),
            "max_steps": Param("int", 60, "training steps of a run", positive),
            "eval_every": Param("int", 10, "steps between evaluations (max_steps a multiple of it)", positive),
            "target_accuracy": Param("float", 0.95, "held-out accuracy whose first reaching is the time to accuracy", lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v!r}"),
            **OPTIMIZER,
            "agreement_steps": Param("int", 3, "first training steps of a whole run whose losses are kept, to compare the frameworks' start (same weights, same batches)", positive),
            **TIMING,
        }

    def check(self, params):
        problems = []
        n_train, n_eval = params["train_examples"], params["eval_examples"]
        big = [b for b in params["batch_sizes"] if b > n_train]
        if big:
            problems.append(f"key 'batch_sizes': batch {big[0]} is larger than the training "
                            f"split (train_examples {n_train})")
        if n_eval % params["eval_batch_size"]:
            problems.append(f"key 'eval_examples': {n_eval} is no whole number of evaluation "
                            f"batches of {params['eval_batch_size']} (eval_batch_size): every "
                            f"framework must score the same examples")
        if params["max_steps"] % params["eval_every"]:
            problems.append(f"key 'max_steps': {params['max_steps']} is no multiple of "
                            f"eval_every {params['eval_every']}")
        short = [s for s in params["seq_lens"] if s < data.TABLE_TOKENS]
        if short:
            problems.append(f"key 'seq_lens': {short[0]} is shorter than a sentence of the task "
                            f"({data.TABLE_TOKENS} tokens in the fixed word table, more with a "
                            f"real tokenizer)")
        return problems

    # -- cells and processes (parent side) ---------------------------------------------
    def cells(self, params):
        def each(key):  # every framework's entry ([] where it names none)
            return {fw: params[key].get(fw, []) for fw in params["frameworks"]}
        return (grid_cells(params, self.name, FIT, modes=each("modes"))
                + grid_cells(params, self.name, LOADER, modes=each("loaders"))
                + grid_cells(params, self.name, FED, modes=each("fed")))

    def head(self, task, model):
        return "seq_cls"  # a sentence's topic

    def model_problem(self, model):
        why = super().model_problem(model)
        if why:
            return why
        if models.train_head(model) != "seq_cls":
            return (f"{model} is a decoder; this study trains a sequence classifier "
                    f"(an encoder: BERT-like)")
        return ""

    def groups(self, task, cells):
        if task == FIT:  # one whole run a process
            return [[c] for c in sorted(cells, key=lambda c: (c.spec.mode, c.spec.batch_size))]
        return super().groups(task, cells)

    def whole_run(self, ref) -> bool:
        return ref.spec.task == FIT

    def times_model(self, ref) -> bool:
        return ref.spec.task != LOADER  # an input pipeline alone

    def schedule(self, params, task):
        # A fit runs on its own; the loader and fed cells of a framework share
        # one process (its tokenized data, and for fed its model and compiled
        # step, made once), one cell after another.
        return "sequential"

    def claimed_variants(self, claim, metric) -> set[str]:
        """A claim's two variants in the task it reads only (``is_claimed``'s
        ``framework/mode@task/dtype``): a pipeline a fed claim compares takes
        the later rounds feeding the step, not alone as well."""
        task = FIT if metric.fn is fit_ratio else claim.cells.get("task", "*")
        return {f"{v}@{task}/*" for v in super().claimed_variants(claim, metric)}

    def spawn(self, runner, job, name):
        if job.task == FIT:
            # A whole run compiles cold in every round, as a user's run does (the
            # runner keeps a variant's compile caches for its later rounds, where
            # JAX's first step would read round 0's program).
            shutil.rmtree(runner.compile_cache(job), ignore_errors=True)
        w = runner.spawn_worker(job, name)
        if job.task == FIT:  # the run says when it is done
            w.autonomous = True
        return w

    # -- worker side -------------------------------------------------------------------
    def work(self, job):
        if job.task == FIT:
            run_fits(self, job)
        else:
            super().work(job)

    def plan(self, ctx, spec):
        return loader_plan(ctx, spec) if spec.task == LOADER else fed_plan(ctx, spec)


STUDY = EndToEnd()

EndToEnd.metrics = {
    "fit_ratio": Metric(fit_ratio, ("a", "b", "figure"),
                        lambda cells, known: check_cells(cells, known)
                        + check_fit_figure(cells), timed=True),
    "task_time_ratio": Metric(task_time_ratio, ("a", "b", "task"), check_cells, timed=True),
}
