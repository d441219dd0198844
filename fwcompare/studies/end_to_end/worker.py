"""The end-to-end study's worker side: a whole training run (task ``fit``: one
run a process, on its own), and the cells the runner times (``loader``: a
pipeline's next batch alone; ``fed``: the training step on the next batch a
pipeline gives).

Every process makes the same generated task from the run's seed and tokenizes
it with the model's tokenizer (``data``): the run's data preparation, counted
in its ``data`` phase.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core import messages, models
from ...measure.cell import CellPlan, CellResult, describe, failure_status
from ...core.training_run import OPTIMIZER_KEYS, FitLog, FitSettings
from ...core.stats import derived_figures
from . import data

if TYPE_CHECKING:
    from ...measure.cell import WorkerContext
    from ...plan.job import CellRef
    from ...core.spec import RunSpec

FIT, LOADER, FED = "fit", "loader", "fed"


def examples(ctx: "WorkerContext", spec: "RunSpec"):
    """(train, held_out) as ``pipeline.Examples``: the run's task at this
    cell's sequence length, tokenized by the model's tokenizer where it has
    one (else ``data``'s fixed word table)."""
    p = ctx.params
    task = data.make_task(ctx.job.seed, p["train_examples"], p["eval_examples"],
                          p["own_share"])
    model = ctx.job.model
    tokenizer = models.local_path(model)
    vocab = ctx.info["vocab_size"]
    return tuple(data.tokenize(*split, spec.seq_len, vocab, tokenizer, model, seed=ctx.job.seed)
                 for split in (task.train, task.eval))


def fit_settings(params, spec: "RunSpec", framework: str) -> FitSettings:
    return FitSettings(batch_size=spec.batch_size, max_steps=params["max_steps"],
                       eval_every=params["eval_every"],
                       target_accuracy=params["target_accuracy"],
                       optimizer={k: params[k] for k in OPTIMIZER_KEYS},
                       eval_batch_size=params["eval_batch_size"], seed=params["seed"],
                       agreement_steps=params["agreement_steps"],
                       pipeline=params["fit_pipeline"][framework][0])


# -- fit: one whole run -----------------------------------------------------------------
def fit_cell(ctx: "WorkerContext", ref: "CellRef") -> CellResult:
    """One run of the framework's stack (``Backend.fit``): its phases, steady
    step (the evaluation intervals' seconds per step are its samples), time
    to the target, accuracy, peak memory; the evaluations and first losses
    are written beside the rows (``curves/``)."""
    from ...core.memory import PeakRSS

    backend, p, spec = ctx.backend, ctx.params, ref.spec
    settings = fit_settings(p, spec, ctx.framework)
    log = FitLog()
    with log.phase("data"):
        train, held = examples(ctx, spec)
    weights = ctx.info["weights_dir"]

    def run():
        backend.fit(train, held, weights, ctx.device, settings, log)
    if ctx.device == "gpu":
        mem = backend.gpu_memory(run)
    else:
        with PeakRSS() as peak:
            run()
        mem = dict(peak_mem_bytes=peak.peak_bytes - ctx.baseline_rss,
                   mem_method=peak.method + "_whole_run_over_pre_run_baseline")
    figures = log.figures(settings)
    figures["train_steps"] = figures.pop("steps")
    figures.pop("examples_per_s")  # the samples' throughput_samples_per_s
    samples = log.step_times()
    figures.update(derived_figures(spec.batch_size, spec.seq_len, samples, ctx.config.confidence,
                                   3 * models.forward_flops(ctx.info, spec.batch_size,
                                                            spec.seq_len)) if samples else {})
    figures.update(mem, target_accuracy=settings.target_accuracy,
                   loss_step0=log.losses[0] if log.losses else math.nan,
                   first_call_s=figures["first_step_s"])
    ctx.provenance.update(ctx.backend.runtime_info(ctx.device))
    write_curve(ctx, ref, log)
    note = "" if math.isfinite(figures["time_to_target_s"]) else (
        f"did not reach the target accuracy {settings.target_accuracy:g} in "
        f"{settings.max_steps} steps (best {figures['best_accuracy']:.3f})")
    return CellResult("ok", note, figures, samples or None,
                      {"mode_setup": f"{spec.mode}, fed by {settings.pipeline}; "
                                     f"tokenized by {train.tokenizer}"})


def write_curve(ctx: "WorkerContext", ref: "CellRef", log: FitLog) -> None:
    """The run's evaluations (step, accuracy, loss, seconds since its start)
    and first losses, as ``curves/<cell>-r<round>.parquet`` beside the rows."""
    import pandas as pd

    from ...core.atomic import write_atomic

    spec = ref.spec
    rows = [dict(kind="eval", step=e["step"], accuracy=e["accuracy"], loss=e["eval_loss"],
                 at_s=e["at_s"]) for e in log.evals]
    rows += [dict(kind="train", step=i + 1, accuracy=math.nan, loss=x, at_s=math.nan)
             for i, x in enumerate(log.losses)]
    df = pd.DataFrame(rows, columns=["kind", "step", "accuracy", "loss", "at_s"]).assign(
        cell_id=spec.cell_id, framework=ctx.framework, mode=spec.mode, model=spec.model,
        round=ref.round)
    path = ctx.store.dir / "curves" / f"{spec.cell_id}-r{ref.round}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def run_fits(study, job) -> None:
    """A fit process: its cells one after another, each on its own (the
    parent only listens); a run that raises is that cell's failed row."""
    from ...measure.cell import WorkerContext
    from ...frameworks import backend_options

    backend = study.backend(job.framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    ctx = WorkerContext(job, backend)
    for ref in job.cells:
        messages.emit(messages.START, label=ref.spec.label, cell=ref.spec.cell_id,
                      round=ref.round)
        try:
            skip = ctx.skip_reason(ref.spec)
            result = CellResult("unsupported", skip) if skip else fit_cell(ctx, ref)
        except Exception as exc:
            result = CellResult(failure_status(backend, exc), describe(exc))
        ctx.finish(ref, result)


# -- loader and fed: timed by the runner -------------------------------------------------
def _closing(pipe):
    """A plan's ``after``: the pipeline closed once its cell is measured (its
    worker processes, if any, end now)."""
    def after(fn):
        pipe.close()
        return {}
    return after


def loader_plan(ctx: "WorkerContext", spec: "RunSpec") -> CellPlan:
    """A call is the pipeline's next batch, read to the device (no model)."""
    def build():
        return examples(ctx, spec)[0]

    train = ctx.variant(("examples", spec.seq_len), build)
    pipe = ctx.backend.make_pipeline(spec.mode, train, spec.batch_size, ctx.device)

    def call():
        return lambda: next(pipe)[0]
    return CellPlan(call=call, after=_closing(pipe),
                    provenance={"mode_setup": f"{pipe.setup}; tokenized by {train.tokenizer}"})


def fed_plan(ctx: "WorkerContext", spec: "RunSpec") -> CellPlan:
    """A call is the pipeline's next batch and one training step on it: the
    training study's step (``Backend.make_train_step``, the framework's
    ``train_modes``) on the model with its classification head, one step
    function for every pipeline of the process. That step reads token ids
    and labels; the batch's attention mask is made and moved as a user's
    batch is, not applied (every batch has one shape, so its cost is the
    same)."""
    p, backend = ctx.params, ctx.backend
    mode = p["train_modes"][ctx.framework][0]

    def build():
        train = examples(ctx, spec)[0]
        model, load_s = ctx.load(spec.dtype)
        step = backend.make_train_step(model, mode, ctx.device,
                                       {k: p[k] for k in OPTIMIZER_KEYS}, ctx.head)
        return train, model, step, load_s

    train, _, step, load_s = ctx.variant(("fed", spec.batch_size, spec.seq_len), build)
    pipe = backend.make_pipeline(spec.mode, train, spec.batch_size, ctx.device)

    def call():
        def fn():
            ids, _, labels = next(pipe)
            return step((ids, labels))
        return fn
    flops = 3 * models.forward_flops(ctx.info, spec.batch_size, spec.seq_len)
    return CellPlan(call=call, known=dict(load_s=load_s), flops=flops, after=_closing(pipe),
                    provenance={"mode_setup": f"{mode} training step fed by {pipe.setup}; "
                                              f"tokenized by {train.tokenizer}"})
