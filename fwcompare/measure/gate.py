"""The equivalence gate: identical inputs, a reference, and the check every
framework passes before it is timed.

A prepare job (one process per model and task, PyTorch only) makes the shared
weights and writes the gate file: fixed token ids of the study's gate shape
and PyTorch eager float32's answer on them: the output (inference) or the
losses of the first training steps on that batch (training). Workers then
check each forward or training step against it.

The gate's trace or compile must never pre-pay a cell's first call. The
inference sweep, mixed precision and training gate on their smallest cell's
batch: its first call is the gate's call (timed as the first call, checked
right after it), so a compiled mode traces once, not at the gate's shape and
again at the cell's. Acceleration gates eager only, on an odd shape that no
grid uses (``GATE_SHAPE``). Distributed gates on one global batch for every
worker count, at the cells' length; the cell with that batch takes the first
agreement step as its first call (``studies.distributed``). With
``fp64_shapes`` the prepare job also writes float64 outputs, for studies that
measure precision errors.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic import write_atomic
from ..plan.job import Job
from ..core.models import token_ids, train_labels
from ..core.messages import GATE, emit

# The gate's batch where it is no cell's (acceleration): an odd shape no sensible grid uses.
GATE_SHAPE = (3, 17)
# Precision errors are computed over the first REF_ROWS sequences of a cell's
# batch (sequences are independent), so float64 references of large decoder
# logits (batch x seq x vocab) stay small.
REF_ROWS = 2


@dataclass(frozen=True)
class TrainSettings:
    """What a training reference (and every framework's step) is made with."""

    optimizer: dict          # AdamW: learning_rate, weight_decay, beta1, beta2, eps
    accumulation_steps: int
    agreement_steps: int     # steps on the gate batch whose losses are compared
    # How a step that computes the same function is made another way (the
    # memory study's techniques): the backend's training mode where the
    # cell's mode names a technique, and gradient checkpointing.
    exec_mode: str = ""
    checkpointing: bool = False


def fp64_key(batch: int, seq: int) -> str:
    return f"ref64_{batch}x{seq}"


def reference_model(job: Job):
    """The prepare job's PyTorch model with the shared weights of
    ``job.model`` and ``job.head`` (made on first use), the torch backend, and
    the model facts every worker reads from the gate file (``Gate.info``)."""
    from ..core import models
    from ..frameworks import REFERENCE, get_backend

    wdir = models.weights_dir(job.model, job.seed, head=job.head)
    ref_backend = get_backend(REFERENCE)
    ref_backend.configure(job.threads, "cpu")
    net = ref_backend.load(wdir, "cpu", job.head)
    config = net.config
    info = models.param_counts(config, ref_backend.n_params(net),
                               models.embedding_params(net))
    info.update(vocab_size=config.vocab_size, max_positions=models.max_positions(config) or 0,
                weights_dir=str(wdir))
    return ref_backend, net, info


def write_gate(path: Path, ids, labels, reference, info: dict, arrays: dict) -> Path:
    """The gate file, written atomically: the gate batch, its reference, the
    model facts and the study's other reference arrays (by name)."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, ids=ids, labels=labels, reference=reference, info=json.dumps(info),
                     **arrays)
    return write_atomic(path, write)


def prepare(job: Job, train: TrainSettings | None = None) -> Path:
    """Weights of ``job.model`` with ``job.head`` and the gate file; its path."""
    import numpy as np

    head = job.head
    ref_backend, net, info = reference_model(job)
    vocab, maxpos = info["vocab_size"], info["max_positions"]
    b, s = job.gate_shape
    s = min(s, maxpos) if maxpos else s
    ids = token_ids(job.seed, b, s, vocab)
    labels = train_labels(job.seed, ids, head)
    if train is not None:
        step = ref_backend.make_train_step(net, "eager", "cpu", train.optimizer, head,
                                             train.accumulation_steps)
        batch = ref_backend.make_batch(ids, labels, "cpu")
        reference = np.array([float(ref_backend.to_numpy(step(batch)))
                              for _ in range(train.agreement_steps)])
    else:
        forward = ref_backend.make_forward(net, "eager", "cpu", head)
        reference = ref_backend.to_numpy(forward(ref_backend.make_inputs(ids, "cpu")))
    fp64 = {}
    if job.fp64_shapes:  # float64 references for the precision errors
        forward = ref_backend.make_forward(net.double(), "eager", "cpu", head)
        fp64["ref64_gate"] = ref_backend.to_numpy(forward(ref_backend.make_inputs(ids, "cpu")))
        for b, s in job.fp64_shapes:
            if not maxpos or s <= maxpos:
                cell_ids = token_ids(job.seed, b, s, vocab)[:REF_ROWS]
                x = ref_backend.make_inputs(cell_ids, "cpu")
                fp64[fp64_key(b, s)] = ref_backend.to_numpy(forward(x))
    return write_gate(job.gate_path, ids, labels, reference, info, fp64)


class Gate:
    """A gate file, loaded: ``ids``, ``labels``, ``reference``, ``info`` (model
    facts: parameter counts, vocabulary, positions, weights directory) and the
    float64 references, if any."""

    def __init__(self, path: Path):
        import numpy as np

        self._npz = np.load(path)
        self.ids = self._npz["ids"]
        self.labels = self._npz["labels"]
        self.reference = self._npz["reference"]
        self.info = json.loads(str(self._npz["info"]))

    def array(self, key: str):
        """A reference array the study wrote beside the gate batch, or None."""
        return self._npz[key] if key in self._npz else None

    def fp64(self, key: str):
        """A float64 reference (``ref64_gate`` or ``fp64_key(b, s)``), or None."""
        return self.array(key)


def make_forwards(backend, model, modes, device: str, head: str, dtype: str,
                  mode_options: dict | None = None):
    """Each mode's forward, built but not called (a compiled mode traces in its
    first call). Returns (forwards: mode -> fn, problems: mode -> (status,
    message) for a mode that could not be built)."""
    from .failure import describe, failure_status

    forwards, problems = {}, {}
    for mode in modes:
        try:
            forwards[mode] = backend.make_forward(model, mode, device, head, dtype, mode_options)
        except Exception as exc:
            problems[mode] = (failure_status(backend, exc), describe(exc))
    return forwards, problems


def check_output(out, gate: Gate, mode: str, dtype: str, equiv_tol: float,
                 mp_equiv_rtol: float | None = None) -> tuple[dict, str]:
    """One mode's output on the gate batch (numpy), checked: float32 against
    PyTorch's float32 output (max abs error within ``equiv_tol``); a reduced
    precision against the float64 reference where the study computed one
    (relative L2 error within ``mp_equiv_rtol``), which catches wrong weights
    or a broken cast, not rounding. Returns (the gate's error figures, the
    not-equivalent reason or "")."""
    from .error_metrics import error_metrics

    err = error_metrics(out, gate.reference)
    known = {"equiv_max_abs_err": err["max_abs_err"], "equiv_rel_err": err["rel_l2_err"]}
    if dtype == "float32":
        bad = (f"max abs error {err['max_abs_err']:.3g} vs reference exceeds "
               f"equiv_tol {equiv_tol:g}") if not err["max_abs_err"] <= equiv_tol else ""
    else:
        ref64 = gate.fp64("ref64_gate")
        if ref64 is not None:
            err = error_metrics(out, ref64)
        bad = (f"{dtype} output's relative L2 error {err['rel_l2_err']:.3g} on the gate "
               f"batch exceeds mp_equiv_rtol {mp_equiv_rtol:g}"
               ) if not err["rel_l2_err"] <= mp_equiv_rtol else ""
    emit(GATE, dtype=dtype, errors={mode: known["equiv_max_abs_err"]})
    return known, bad


def check_forward(backend, fn, mode: str, device: str, dtype: str, gate: Gate,
                  equiv_tol: float, mp_equiv_rtol: float | None = None) -> tuple[dict, str]:
    """``fn`` called on the gate batch and its output checked (:func:`check_output`)."""
    out = fn(backend.make_inputs(gate.ids, device))
    backend.sync(out)
    return check_output(backend.to_numpy(out), gate, mode, dtype, equiv_tol, mp_equiv_rtol)


def agreement_steps(backend, step, gate: Gate, device: str, n: int, first=None):
    """``n`` training steps on the gate batch: losses, the loss scale after each
    step, which steps dynamic loss scaling skipped (the scale went down), and
    how long each step taken here lasted (ns, its loss fetched: a sync).
    ``first``: (loss, loss scale before it) of the first step, already taken
    on the gate batch (a cell's timed first call); then ``n - 1`` follow."""
    import time

    import numpy as np

    batch = backend.make_batch(gate.ids, gate.labels, device)
    losses, scales, skipped, step_ns = [], [], [], []
    before = step.loss_scale() if first is None else first[1]
    for i in range(n):
        given = i == 0 and first is not None
        t0 = time.perf_counter_ns()
        out = first[0] if given else step(batch)
        losses.append(float(backend.to_numpy(out)))
        if not given:
            step_ns.append(time.perf_counter_ns() - t0)
        scales.append(step.loss_scale())
        skipped.append(bool(scales[-1] < before))
        before = scales[-1]
    return np.array(losses), np.array(scales), np.array(skipped), step_ns


def loss_problems(dtype: str, losses, ref, loss_tol: float, loss_curve_rtol: float,
                  mp_loss_rtol: float | None = None, who: str = "PyTorch",
                  run: str = "") -> list[str]:
    """Why these losses do not stand for the same training as the reference:
    float32 must follow it (``loss_tol`` on the first, then ``loss_curve_rtol``);
    a reduced precision must start from the same loss (``mp_loss_rtol``
    relative on the first step: the same weights and data, only rounding
    differs) and stay finite. How far its curve departs later is a finding
    about precision, not a failure. ``who``: the reference's name; ``run``:
    words naming this run (e.g. " with 2 worker(s)")."""
    import numpy as np

    problems = []
    if not np.all(np.isfinite(losses)):
        problems.append(f"{int((~np.isfinite(losses)).sum())} non-finite loss(es) "
                        "during the agreement steps")
    step0 = abs(losses[0] - ref[0])
    if dtype == "float32":
        curve = float(np.max(np.abs(losses - ref) / np.abs(ref)))
        if not step0 <= loss_tol:
            problems.append(f"first loss{run} differs from {who} by {step0:.3g} "
                            f"(loss_tol {loss_tol:g})")
        if not curve <= loss_curve_rtol:
            problems.append(f"loss curve{run} departs from {who} by {curve:.3g} relative "
                            f"(loss_curve_rtol {loss_curve_rtol:g})")
    elif not step0 / abs(ref[0]) <= mp_loss_rtol:
        problems.append(f"{dtype} first loss differs from PyTorch float32 by "
                        f"{step0 / abs(ref[0]):.3g} relative (mp_loss_rtol "
                        f"{mp_loss_rtol:g})")
    return problems
