"""Training end to end, as each framework's users run it (Hugging Face
``Trainer``, Keras ``fit``, a Flax/optax loop): the settings every framework
shares and the clock every run keeps.

A run's wall time is split into phases (``FitLog.phase``): the data (its
pipeline built), the model's set-up (weights loaded, optimizer, trainer or
compile set up), the first step (its trace or compile included), the steps
after it, the evaluations, and its end (the last evaluation to the stack's
return); its figures (``FitLog.figures``) are those
phases, the steady examples per second, the accuracy at every evaluation and
the time to the target accuracy: the wall time from the run's start to the
end of the first evaluation at or above it (MLPerf Training's measure: a fast
step that needs more steps, or a pipeline that starves it, loses), NaN where
the run never reached it, with the best accuracy it did reach.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np


OPTIMIZER_KEYS = ("learning_rate", "weight_decay", "beta1", "beta2", "eps")


@dataclass(frozen=True)
class FitSettings:
    """What every framework's run shares: batches, steps, evaluation every
    ``eval_every`` steps on the held-out split, AdamW's settings
    (``optimizer``: learning_rate, weight_decay, beta1, beta2, eps; a constant
    learning rate, no gradient clipping), the seed, and the losses of the first
    ``agreement_steps`` steps kept (the runs' start is compared across
    frameworks: same weights, same first batches)."""

    batch_size: int
    max_steps: int
    eval_every: int
    target_accuracy: float
    optimizer: dict
    eval_batch_size: int = 64
    seed: int = 0
    agreement_steps: int = 3
    pipeline: str = ""  # the framework's input pipeline kind ("": its users' usual one)

    def __post_init__(self):
        for key in ("batch_size", "max_steps", "eval_every", "eval_batch_size"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)!r}")
        if self.max_steps % self.eval_every:
            raise ValueError(f"max_steps {self.max_steps} is no multiple of eval_every "
                             f"{self.eval_every}: every step is followed by an evaluation")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy!r}")
        missing = [k for k in OPTIMIZER_KEYS if k not in self.optimizer]
        if missing:
            raise ValueError(f"optimizer lacks {', '.join(missing)}")

    def pipeline_in(self, kinds: tuple[str, ...], stack: str) -> str:
        """The pipeline this run reads: ``pipeline``, or the stack's default
        (the first of ``kinds``, ``Framework.fit_pipelines``); one the stack
        cannot read is refused."""
        kind = self.pipeline or kinds[0]
        if kind not in kinds:
            raise ValueError(f"{stack} reads {', '.join(kinds)}, not {kind!r}")
        return kind

    def check_held_out(self, n: int) -> None:
        """Every framework scores the same examples: whole evaluation batches."""
        if n < self.eval_batch_size or n % self.eval_batch_size:
            raise ValueError(f"the held-out split ({n} examples) must be a whole number of "
                             f"evaluation batches of {self.eval_batch_size}")


@dataclass
class FitLog:
    """The clock of one run: seconds per phase, each step's end, each
    evaluation (step, accuracy, loss, seconds), the first steps' losses."""

    t0: float = field(default_factory=time.perf_counter)
    phases: dict = field(default_factory=dict)
    step_ends: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    train_start: float = math.nan
    end: float = math.nan  # the run's end (``finished``)

    @contextlib.contextmanager
    def phase(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t

    def training_begins(self) -> None:
        self.train_start = time.perf_counter()

    def finished(self) -> None:
        self.end = time.perf_counter()

    def step_done(self, loss: float | None = None) -> None:
        self.step_ends.append(time.perf_counter())
        if loss is not None:
            self.losses.append(float(loss))

    def evaluated(self, step: int, accuracy: float, loss: float, seconds: float) -> None:
        self.evals.append({"step": step, "accuracy": float(accuracy), "eval_loss": float(loss),
                           "eval_s": float(seconds), "at_s": time.perf_counter() - self.t0})

    def step_times(self) -> list[float]:
        """Seconds per step in each evaluation interval after the first (its
        time less its evaluation, over its steps): the steady steps' samples
        (see :meth:`figures`). With one evaluation, its interval after the
        first step."""
        per_step = []
        for before, e in zip(self.evals, self.evals[1:]):
            took = e["at_s"] - e["eval_s"] - before["at_s"]
            per_step.append(took / max(1, e["step"] - before["step"]))
        if not per_step and self.evals and len(self.step_ends) > 1:
            e = self.evals[0]
            per_step.append((e["at_s"] - e["eval_s"] - (self.step_ends[0] - self.t0))
                            / max(1, e["step"] - 1))
        return per_step

    def figures(self, settings: FitSettings) -> dict:
        """The run's figures: its phases, the first and the steady step,
        examples per second, the time and steps to the target, the best and
        the last accuracy.

        A step's time is read between evaluations, not from the steps' own
        stamps: a step may return before its work is done (JAX and CUDA
        dispatch ahead), while an evaluation reads its results back. The
        steady step is the median over the evaluation intervals after the
        first (which holds the first step: its trace or compile) of the
        interval's time, less its evaluation, per step."""
        ends = np.array(self.step_ends)
        first = float(ends[0] - self.train_start) if len(ends) else math.nan
        eval_s = sum(e["eval_s"] for e in self.evals)
        start = self.train_start - self.t0  # the evaluations' at_s count from t0
        per_step = self.step_times()
        last = self.evals[-1]["at_s"] if self.evals else (ends[-1] - self.t0 if len(ends)
                                                          else math.nan)
        reached = [e for e in self.evals if e["accuracy"] >= settings.target_accuracy]
        steady_s = float(np.median(per_step)) if per_step else math.nan
        total = (self.end if math.isfinite(self.end) else time.perf_counter()) - self.t0
        return {
            "data_s": self.phases.get("data", math.nan),
            "setup_s": self.phases.get("setup", math.nan),
            "first_step_s": first,
            "steps_s": float(last - start - first - eval_s),
            "eval_s": eval_s,
            # after the last evaluation (or step) until the stack returned: its
            # teardown (seconds for Keras' fit: docs/measurements.md)
            "end_s": float(total - last),
            "total_s": total,
            "steps": len(ends),
            "steady_step_s": steady_s,
            "examples_per_s": settings.batch_size / steady_s if per_step else math.nan,
            "time_to_target_s": reached[0]["at_s"] if reached else math.nan,
            "steps_to_target": float(reached[0]["step"]) if reached else math.nan,
            "best_accuracy": max((e["accuracy"] for e in self.evals), default=math.nan),
            "final_accuracy": self.evals[-1]["accuracy"] if self.evals else math.nan,
        }
