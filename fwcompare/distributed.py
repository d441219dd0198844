"""One rank of a data-parallel run: ``python -m fwcompare.distributed JOB.json``.

Started by ``torchrun`` (PyTorch) or once per worker with TF_CONFIG
(TensorFlow) by :mod:`fwcompare.launch`; every rank runs this same code with
its framework's engine (``frameworks.<fw>.DataParallel``):

1. **Agreement**: ``agreement_steps`` training steps on the gate batch, split
   evenly over the ranks. The loss of each step (mean over ranks: the mean
   over the global batch) is compared with the single-process PyTorch run over
   the same global batch (the prepare job's reference), as in the training
   study; then the weights are compared across ranks.
2. **Each cell** (weak or strong scaling at this worker count): every rank
   trains on its shard of the cell's global batch. A sample is one step
   followed by a scalar all-reduce that acts as a barrier, timed on rank 0
   from the end of the previous barrier to the end of this one: the time
   until the slowest rank has finished the step. Rank 0 decides when to stop
   (the shared protocol's rule) and sends that decision in the barrier's
   value, so every rank runs the same number of steps. Then the gradient
   all-reduce is timed alone and the weights are compared across ranks again.

Rank 0 writes the rows and sends the events; a rank that fails exits with an
error, and the launcher ends the others (a collective cannot go on without it).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from .worker import (emit, finish_cell, gate_path, optimizer_settings, sample_figures,
                     token_ids, train_labels)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def pin_local_cores(threads: int, rank: int) -> None:
    """Give each local rank its own ``threads`` cores (like one GPU each), so
    that ranks do not compete for the same cores."""
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        start = (rank * threads) % len(cores)
        mine = (cores + cores)[start:start + max(1, min(threads, len(cores)))]
        os.sched_setaffinity(0, mine)


def shard(rows, rank: int, world: int):
    """This rank's equal share of a global batch (rows split in order)."""
    n = len(rows) // world
    return rows[rank * n:(rank + 1) * n]


def _fault(label: str, rank: int, dp=None) -> None:
    """Fault injection for the robustness tests: FWCOMPARE_FAULT holds
    comma-separated ``kind@rank:label-part`` (kind crash, hang or desync;
    without @rank, every rank)."""
    for fault in filter(None, os.environ.get("FWCOMPARE_FAULT", "").split(",")):
        spec, _, where = fault.partition(":")
        kind, _, who = spec.partition("@")
        if not where or where not in label or (who and int(who) != rank):
            continue
        if kind == "crash":
            os._exit(3)
        if kind == "hang":
            time.sleep(1e6)
        if kind == "desync" and dp is not None:
            dp.perturb(1e-3)


class Rank:
    def __init__(self, job: dict, dp):
        import numpy as np

        from .results import ResultStore
        from .timing import TimingConfig

        self.job, self.dp = job, dp
        self.rank0 = dp.rank == 0
        self.cfg = TimingConfig(**job["timing"])
        self.store = ResultStore(job["store_dir"]) if self.rank0 else None
        self.gate = np.load(gate_path(job))
        self.info = json.loads(str(self.gate["info"]))
        self.provenance = dict(job["provenance"], mode_setup=dp.setup)

    def data(self, ids, labels):
        return self.dp.batch(shard(ids, self.dp.rank, self.dp.world),
                             shard(labels, self.dp.rank, self.dp.world))

    # -- 1. agreement ---------------------------------------------------------
    def agreement(self) -> tuple[dict, str]:
        """Known figures of every cell of this run, and its problems (empty if none)."""
        import numpy as np

        from .results import losses_frame

        ref = self.gate["reference"]
        batch = self.data(self.gate["ids"], self.gate["labels"])
        losses = np.array([self.dp.allreduce_sum(self.dp.step(batch)) / self.dp.world
                           for _ in range(len(ref))])
        spread = self.dp.max_weight_diff()
        train, world = self.job["train"], self.dp.world
        problems = []
        step0 = abs(losses[0] - ref[0])
        curve = float(np.max(np.abs(losses - ref) / np.abs(ref)))
        if not np.all(np.isfinite(losses)):
            problems.append("non-finite loss during the agreement steps")
        if not step0 <= train["loss_tol"]:
            problems.append(f"first loss with {world} worker(s) differs from the single-process "
                            f"run by {step0:.3g} (loss_tol {train['loss_tol']:g})")
        if not curve <= train["loss_curve_rtol"]:
            problems.append(f"loss curve with {world} worker(s) departs from the single-process "
                            f"run by {curve:.3g} relative (loss_curve_rtol "
                            f"{train['loss_curve_rtol']:g})")
        if not spread <= self.job["weight_tol"]:
            problems.append(f"weights differ across ranks by {spread:.3g} after "
                            f"{len(ref)} steps (weight_tol {self.job['weight_tol']:g})")
        if self.rank0:
            fw, mode = self.job["framework"], self.job["mode"]
            self.store.append_losses(
                losses_frame(self.job["model"], fw, f"{mode} x{world}", losses, ref),
                f"{self.job['model_key']}-{fw}-{mode}-x{world}")
            emit("gate", dtype="float32", errors={f"{mode} x{world}": float(step0)})
        known = dict(loss_step0=float(losses[0]), loss_final=float(losses[-1]),
                     equiv_max_abs_err=float(step0), equiv_rel_err=curve)
        return known, "; ".join(problems)

    # -- 2. cells ---------------------------------------------------------------
    def time_steps(self, batch):
        """(first step seconds, samples, converged, rel_ci) by the protocol above."""
        from .stats import rel_ci_halfwidth

        cfg, dp = self.cfg, self.dp
        dp.allreduce_sum(0.0)
        t0 = time.perf_counter()
        dp.step(batch)
        dp.allreduce_sum(0.0)
        first = time.perf_counter() - t0
        start, n = time.perf_counter(), 0
        while True:  # warm-up
            dp.step(batch)
            n += 1
            done = n >= cfg.warmup_iters and time.perf_counter() - start >= cfg.warmup_s
            if dp.allreduce_sum(1.0 if self.rank0 and done else 0.0) > 0:
                break
        samples, rel, converged = [], float("nan"), False
        start = prev = time.perf_counter()
        stop = False
        while True:
            dp.step(batch)
            if dp.allreduce_sum(1.0 if stop else 0.0) > 0:
                break
            now = time.perf_counter()
            samples.append(now - prev)
            prev = now
            if self.rank0 and len(samples) >= cfg.min_iters and now - start >= cfg.min_time_s:
                rel = rel_ci_halfwidth(samples, cfg.confidence)
                converged = rel <= cfg.target_rel_ci
                stop = converged or now - start >= cfg.max_time_s
        return first, samples, converged, rel

    def cell(self, spec, rnd, known: dict, problems: str) -> None:
        import numpy as np

        from . import models

        dp = self.dp
        if self.rank0:
            emit("start", cell=spec.cell_id, round=rnd, label=spec.label)
        dp.allreduce_sum(0.0)  # every rank is in this cell (a failure from here is its)
        _fault(spec.label, dp.rank, dp)
        per_worker = spec.batch_size // dp.world
        figures = dict(known, per_worker_batch=float(per_worker), load_s=self.job["load_s"])
        maxpos = self.info["max_positions"]
        if maxpos and spec.seq_len > maxpos:
            self.finish(spec, rnd, "unsupported",
                        f"seq_len {spec.seq_len} exceeds the model's {maxpos} positions", figures)
            return
        ids = token_ids(self.job["seed"], spec.batch_size, spec.seq_len, self.info["vocab_size"])
        batch = self.data(ids, train_labels(self.job["seed"], ids, self.job["head"]))
        first, samples, converged, rel = self.time_steps(batch)
        comm = dp.allreduce_grads_s(self.job["allreduce_repeats"])
        spread = dp.max_weight_diff()
        if not self.rank0:
            return
        figures.update(sample_figures(samples, self.cfg.confidence))
        med = figures["median_s"]
        allreduce_s = float(np.median(comm))
        flops = 3 * models.forward_flops(self.info, spec.batch_size, spec.seq_len)
        figures.update(
            calls_per_sample=1, rel_ci=rel, first_call_s=first,
            throughput_samples_per_s=spec.batch_size / med,
            tokens_per_s=spec.batch_size * spec.seq_len / med, flops_per_call=flops,
            achieved_flops_per_s=flops / med, converged=converged,
            weight_max_abs_diff=spread, allreduce_s=allreduce_s,
            allreduce_share=allreduce_s / med)
        notes = [problems] if problems else []
        if not spread <= self.job["weight_tol"]:
            notes.append(f"weights differ across ranks by {spread:.3g} after the cell "
                         f"(weight_tol {self.job['weight_tol']:g})")
        status = "not_equivalent" if notes else "ok"
        if not converged:
            notes.append(f"did not converge: CI half-width {rel:.1%} of the median after "
                         f"{self.cfg.max_time_s:g} s")
        self.finish(spec, rnd, status, "; ".join(notes), figures, samples)

    def finish(self, spec, rnd, status, error, figures, samples=None) -> None:
        if self.rank0:
            finish_cell(self.store, self.job, self.provenance, spec, rnd, status, error,
                        figures, samples)


def run(job: dict):
    from .frameworks import get_backend
    from .spec import RunSpec
    from .worker import release_freed_heap

    import numpy as np

    backend = get_backend(job["framework"])
    backend.configure(job["threads"], job["device"])
    t0 = time.perf_counter()
    weights = json.loads(str(np.load(gate_path(job))["info"]))["weights_dir"]
    dp = backend.DataParallel(weights, job["device"], job["head"], optimizer_settings(job),
                              job["mode"], job["collective_timeout_s"])
    job["load_s"] = time.perf_counter() - t0
    release_freed_heap()
    try:
        rank = Rank(job, dp)
        if rank.rank0:
            rank.provenance.update(backend.runtime_info(job["device"]))
        known, problems = rank.agreement()
        for c in job["cells"]:
            rank.cell(RunSpec.from_dict(c["spec"]), c["round"], known, problems)
        dp.allreduce_sum(0.0)  # nobody leaves while another rank still needs it
    finally:
        dp.close()
    return dp


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    """Run the job and leave with os._exit while the engine's objects are still
    referenced: freeing them can block for minutes (a gloo process group
    waiting on a rank that has already left; TensorFlow's collective service
    threads), and the results are written by then."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: every thread's stack to the log
    job = json.loads(Path(argv[0]).read_text())
    pin_local_cores(job["threads"], local_rank())
    try:
        engine = run(job)  # noqa: F841  (kept alive until the exit)
    except Exception:
        traceback.print_exc()
        _exit(1)
    _exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
