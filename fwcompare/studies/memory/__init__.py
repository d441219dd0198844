"""Memory: what gradient checkpointing and gradient accumulation buy in peak
memory and cost in step time, against the same framework's plain training
step, and the largest batch each framework fits in a memory budget.

Two tasks:

- ``train``: each technique (a ``mode`` of this study: ``plain``,
  ``checkpointing``, ``accumulate-2``, ``accumulate-4``) is the training
  study's step (same weights, batch, AdamW; ``train_modes`` says how each
  framework runs it) made another way. Its losses must follow PyTorch's
  plain step (checkpointing and accumulation compute the same function); its
  peak memory is split into fp32 parameters, gradients and AdamW state
  (analytic) and the rest (activations, workspace, runtime); its step time is
  interleaved with the plain step's, so the trade (memory saved per unit of
  time lost) has an interval.
- ``largest_batch``: per framework and technique (or ``forward``: a forward
  pass without gradients), a search for the largest batch whose try fits the
  budget (``fit_budget_gib``; on a GPU, the device). Every try is a fresh
  process (:func:`run_try`) that loads the model, makes the step and runs it
  ``1 + fit_steps`` times; on a CPU a thread stops it as soon as its resident
  memory over its level before the model passes the budget (an ``oom`` row,
  never the kernel's OOM killer), and a try whose whole peak (loading and
  compiling included) is over the budget is ``oom`` too. The search
  (:func:`next_batch`) brackets the limit from a line through its first two
  tries, then bisects; the search's own row carries the largest batch that
  fit, its peak, and the smallest batch that did not. A limit moves between
  fresh processes by a few batches, so a search a claim compares searches
  again in the rounds after the first (the first ``fit_rounds`` of them),
  its first tries the previous search's bracket (two tries where the limit
  holds).

The study's parts: ``techniques`` (the techniques, the tasks and units every
part shares), ``worker`` (a try's process and its budget guard), ``largest_batch``
(the largest-batch search, parent side, and its guard from outside),
``tables`` (tables and claim metrics) and ``figures``; this module holds the
study and registers it.
"""
from __future__ import annotations

import dataclasses
import math
import shutil

from ...core import env, models
from ...plan.run import is_claimed
from ...results.judging import Metric, check_cells
from ...plan.schema import TIMING, Param, check_models, grid_params, modes_in, positive
from ...frameworks import FRAMEWORKS, TRAIN_MODES, declared, defaults
from ...results.store import Columns
from ...core.spec import RunSpec
from ...measure.workloads import (AGREEMENT, OPTIMIZER, TRAINING_COLUMNS, plan_training,
                                  train_settings)
from ...execution.study import Study, grid_cells, per_mode

# The study's parts; every name of each is reachable from the package, as
# from the one module it was (``study.technique_table``, ``study.TECHNIQUES``).
from .figures import breakdown_figure, largest_batch_figure, trade_figure  # noqa: F401
from .largest_batch import GROWTH, OutsideGuard, next_batch, previous_bracket, search  # noqa: F401
from .tables import (ARTICLE_FIGURES, _technique_cells, largest_batch_ratio,  # noqa: F401
                     largest_batch_table, memory_ratio_largest_model, technique_memory_ratio,
                     technique_table, technique_time_ratio, tries_table)
from .techniques import (FORWARD, GIB, MIB, PARTS, PLAIN, SEARCH, TECHNIQUES, TRY,  # noqa: F401
                         micro_batches)
from .worker import BudgetGuard, fit_call, fit_try, run_try  # noqa: F401


def _techniques_in(allowed):
    table = {fw: tuple(allowed) for fw in FRAMEWORKS}
    return modes_in(table)


def _one_each(v):
    many = [fw for fw, modes in v.items() if len(modes) != 1]
    return (f"give one training mode per framework (the step each technique changes); "
            f"{', '.join(many)} has {len(v[many[0]])}") if many else None


class Memory(Study):
    name = "memory"
    title = "Memory: checkpointing, accumulation and the largest batch that fits"
    # a largest-batch search's result, its budget and its tries
    columns = TRAINING_COLUMNS + Columns(figures=("largest_batch", "oom_batch", "fit_tries",
                                                  "budget_bytes"), analytic=("budget_bytes",))
    tasks = ("train", SEARCH)
    modes = declared(lambda fw: (*TECHNIQUES, FORWARD))  # every registered framework
    first_steps_phase = "agreement steps (losses against PyTorch's plain step)"
    # A try is one measurement from its start (its peak spans loading and
    # compiling too): its whole process is the figure.
    autonomous_phase = "largest-batch tries (a fresh process each: its peak)"
    figure_phases = (autonomous_phase,)

    def schema(self):
        techniques = {fw: list(TECHNIQUES) for fw in FRAMEWORKS}
        return {
            **grid_params(["all-minilm-l6-v2"], techniques, {fw: tuple(TECHNIQUES)
                                                             for fw in FRAMEWORKS},
                          [8], [128], 1800.0, torch_malloc=None),  # its own: work()
            "train_modes": Param("dict[str, list[str]]", defaults(lambda f: f.train_modes[:1]),
                                 "how each framework runs the step every technique changes (one mode each)",
                                 lambda v: modes_in(TRAIN_MODES)(v) or _one_each(v)),
            **OPTIMIZER,
            **AGREEMENT,
            "fit_models": Param("list[str]", ["all-minilm-l6-v2"],
                                "models whose largest batch is searched; [] for none",
                                lambda v: check_models(v) if v else None),
            "fit_modes": Param("dict[str, list[str]]",
                               {fw: [FORWARD, PLAIN] for fw in FRAMEWORKS},
                               "per framework, what the search fits: forward (inference) or a training technique",
                               _techniques_in((*TECHNIQUES, FORWARD))),
            "fit_seq_len": Param("int", 128, "sequence length of the largest-batch search", positive),
            "fit_budget_gib": Param("float", 2.0, "memory a try may use, in GiB: on a CPU its resident memory over the process's before the model was loaded (below the machine's memory); on a GPU 0, the device's memory", lambda v: None if v >= 0 else f"must be >= 0, got {v!r}"),
            "fit_max_batch": Param("int", 256, "the largest batch a search tries (a search whose every try fits says so)", positive),
            "fit_steps": Param("int", 2, "calls of a try after its first (the first compiles)", positive),
            "fit_rounds": Param("int", 0, "how many of the rounds a largest-batch search takes (0: every one; at least 2 for an interval between processes)", lambda v: None if v >= 0 else f"must be >= 0, got {v!r}"),
            "fit_precision": Param("float", 0.0, "how close a search brackets the limit: it stops once the smallest failing batch is at most this fraction above the largest fitting one (0: exact, to the step)", lambda v: None if 0 <= v < 1 else f"must be in [0, 1), got {v!r}"),
            **TIMING,
        }

    def check(self, params):
        problems = []
        for key, sizes in (("modes", params["batch_sizes"]),
                           ("fit_modes", [params["fit_max_batch"]])):
            for fw, modes in params[key].items():
                for m in modes:
                    k = micro_batches(m)
                    bad = [b for b in sizes if b < k or (key == "modes" and b % k)]
                    if bad:
                        what = "batch size(s)" if key == "modes" else "fit_max_batch"
                        problems.append(f"key {key!r}: {fw} {m} splits a batch into {k} "
                                        f"micro-batches; {what} {', '.join(map(str, bad))} "
                                        f"do not split")
        if params["fit_rounds"] > params["rounds"]:
            problems.append(f"key 'fit_rounds': at most rounds ({params['rounds']}), got "
                            f"{params['fit_rounds']}")
        budget = params["fit_budget_gib"]
        if params["device"] == "gpu" and budget:
            problems.append("key 'fit_budget_gib': on a GPU the budget is the device's "
                            "memory: give 0")
        elif params["device"] == "cpu" and params["fit_models"]:
            import psutil

            total = psutil.virtual_memory().total / GIB
            if not 0 < budget < total:
                problems.append(f"key 'fit_budget_gib': on a CPU give a budget above 0 and "
                                f"below this machine's {total:.1f} GiB (a try over it is "
                                f"stopped; the kernel's OOM killer would take the machine)")
        return problems

    # -- cells and processes (parent side) ---------------------------------------------
    def cells(self, params):
        train = grid_cells(params, self.name, "train")
        threads = params["threads"] or env.default_threads()
        search = [RunSpec(study=self.name, model=model, framework=fw, mode=mode,
                          device=params["device"], dtype=params["dtype"],
                          batch_size=params["fit_max_batch"], seq_len=params["fit_seq_len"],
                          threads=threads, task=SEARCH)
                  for model in params["fit_models"]
                  for fw in params["frameworks"]
                  for mode in params["fit_modes"][fw]]
        return train + search

    def shape_text(self, spec) -> str:
        """A search's batch is the most it tries (``fit_max_batch``)."""
        shape = super().shape_text(spec)
        return f"up to {shape}" if spec.task == SEARCH else shape

    def processes(self, ref) -> int:
        """A largest-batch search's tries, each a fresh process: about 7 in
        its first round (1, 4, growth, the line's batch, a bisection), 2 in a
        later one where the limit holds (``next_batch``'s seeds; as counted in
        quick and gpu runs: docs/measurements.md)."""
        return (7 if ref.round == 0 else 2) if ref.spec.task == SEARCH else 0

    def head(self, task, model):
        return models.train_head(model)  # a search's forward runs the training model

    def gate_shape(self, params, task):
        if task == SEARCH:
            return (1, params["fit_seq_len"])
        return super().gate_shape(params, task)

    def groups(self, task, cells):
        if task == SEARCH:  # one search at a time, each try a process of its own
            return [[c] for c in sorted(cells, key=lambda c: c.spec.mode)]
        return per_mode(cells)  # one technique per process

    def claimed_variants(self, claim, metric) -> set[str]:
        """A technique claim whose figure is a timing compares the technique
        with the plain step in every framework: "*/checkpointing", "*/plain".
        A largest-batch claim is no timing, yet its two searches (cells ``a``
        and ``b``, "torch/plain@largest_batch/*") take every round: their
        limits move between processes, and its interval needs that spread
        (``largest_batch_ratio``)."""
        out = super().claimed_variants(claim, metric)
        if "technique" in claim.cells and metric.repeats:
            out |= {f"*/{claim.cells['technique']}", f"*/{PLAIN}"}
        if metric.fn is largest_batch_ratio:
            searches = {claim.cells["a"], claim.cells["b"]}
            out = (out - searches) | {f"{v}@{SEARCH}/*" for v in searches}
        return out

    def repeats(self, spec, params, claimed):
        """A framework's plain training step repeats where a claim names it
        ("tensorflow/plain") or a claimed technique of that framework repeats
        ("*/checkpointing" beside "*/plain": a technique's time is compared
        with the plain step of its own framework), so beside no technique
        (TensorFlow: transformers has no checkpointing for its models) and
        named by no claim its later rounds compare nothing."""
        if spec.task == SEARCH or spec.mode != PLAIN:
            return True
        named = {v for v in claimed if not v.startswith("*/")}
        return is_claimed(spec, named) or any(
            is_claimed(dataclasses.replace(spec, mode=m), claimed)
            for m in params["modes"].get(spec.framework, ()) if m != PLAIN)

    def rounds_of(self, spec, params):
        if spec.task == SEARCH and params["fit_rounds"]:
            return params["fit_rounds"]
        return super().rounds_of(spec, params)

    def schedule(self, params, task):
        return "sequential" if task == SEARCH else super().schedule(params, task)

    def spawn(self, runner, job, name):
        if job.task == SEARCH:
            # A try's peak spans its compile: it compiles cold in every round
            # (the runner keeps a variant's compile caches for its later
            # rounds: JAX's would hand a try the program that an earlier try
            # at its batch compiled).
            shutil.rmtree(runner.compile_cache(job), ignore_errors=True)
        w = runner.spawn_worker(job, name)
        if job.task == SEARCH:  # a try runs on its own and says when it is done
            w.autonomous = True
            if job.device == "cpu" and job.params["fit_budget_gib"]:
                OutsideGuard(w, job.params["fit_budget_gib"] * GIB)
        return w

    def run_group(self, runner, model, group):
        if runner.task == SEARCH:
            search(runner, model, group[0])
        else:
            runner.run_group(model, group)

    def train_settings(self, params):
        return train_settings(params)  # PyTorch's plain step is the reference

    def failure_figures(self, params, ref):
        """A try's budget, on the row of a try stopped from outside
        (``OutsideGuard``) as on the rows the try writes itself."""
        if ref.spec.task != TRY:
            return {}
        return {"budget_bytes": params["fit_budget_gib"] * GIB or math.nan}

    # -- worker side -------------------------------------------------------------------
    def settings(self, params, framework: str, mode: str):
        acc, ckpt = TECHNIQUES[mode]
        return dataclasses.replace(self.train_settings(params), accumulation_steps=acc,
                                   checkpointing=ckpt,
                                   exec_mode=params["train_modes"][framework][0])

    def plan(self, ctx, spec):
        return plan_training(ctx, spec, self.settings(ctx.params, ctx.framework, spec.mode))

    def work(self, job):
        """Every process of this study returns large blocks to the OS when it
        frees them (``memory.fix_mmap_threshold``), from its start: its peak
        RSS then follows the bytes in use, which is what a technique changes.
        Set only after timing, the heap kept what the timed steps had freed
        (tiny-bert-deep 16 x 256, PyTorch: checkpointing 204-210 MB against
        124 MB set from the start). Its step times include the page faults of
        those fresh mappings: compare them within this study."""
        from ...core.memory import fix_mmap_threshold

        fix_mmap_threshold()
        if job.task == SEARCH:
            run_try(self, job)
        else:
            super().work(job)


STUDY = Memory()


Memory.metrics = {
    "technique_memory_ratio": Metric(technique_memory_ratio, ("technique",), _technique_cells,
                                     per_round=True, memory=True),
    "technique_time_ratio": Metric(technique_time_ratio, ("technique",), _technique_cells,
                                   timed=True),
    "largest_batch_ratio": Metric(largest_batch_ratio, ("a", "b"), check_cells),
    "memory_ratio_largest_model": Metric(memory_ratio_largest_model, ("a", "b"), check_cells,
                                         per_round=True, memory=True),
}
