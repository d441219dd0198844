"""Subprocess entry point: ``python -m fwcompare.worker JOB.json``.

Two kinds of job:

- ``prepare``: make the shared weights of one model and head (PyTorch, fixed
  seed) and the reference the gate compares against: PyTorch eager fp32 output
  on fixed token ids (inference), or its losses over the first training steps
  on a fixed batch (training).
- ``group``: one (framework, model) group. Runs the gate before any timing
  (equivalence of outputs, or agreement of losses), then measures each cell
  (timing pass, then a separate memory pass) and appends its row to the store.

Progress goes to stdout as lines starting with EVENT_PREFIX; everything else a
library prints is ignored by the parent.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

EVENT_PREFIX = "@@fwcompare "


def emit(event: str, **fields) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def pin_threads(threads: int) -> None:
    """Give every framework the same cores: affinity first, before any import."""
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cores[:max(1, threads)])


def token_ids(seed: int, batch: int, seq: int, vocab: int):
    """The same token ids for a (batch, seq) cell in every framework."""
    import numpy as np

    low = min(5, vocab - 1)  # skip special tokens (padding ids shift RoBERTa positions)
    return np.random.default_rng([seed, batch, seq]).integers(low, vocab, size=(batch, seq))


def train_labels(seed: int, ids, head: str):
    """Labels of a synthetic training batch: the ids themselves for a causal LM
    (shifted inside the loss), seeded class labels for classification."""
    import numpy as np

    if head == "causal_lm":
        return ids
    b, s = ids.shape
    return np.random.default_rng([seed, b, s, 1]).integers(0, 2, size=b)


def optimizer_settings(job: dict) -> dict:
    return {k: job["train"][k] for k in ("learning_rate", "weight_decay", "beta1", "beta2", "eps")}


def release_freed_heap() -> None:
    """Return freed heap to the OS (glibc malloc_trim), so RSS after loading a
    model does not keep what loading alone needed (e.g. Flax's from_pt copy)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def gate_path(job: dict) -> Path:
    return Path(job["gate_dir"]) / f"{job['model_key']}-{job['task']}.npz"


def prepare(job: dict) -> None:
    import numpy as np

    from . import models
    from .frameworks import get_backend

    head = job["head"]
    wdir = models.weights_dir(job["model"], job["seed"], head=head)
    torch_backend = get_backend("torch")
    torch_backend.configure(job["threads"], "cpu")
    net = torch_backend.load(wdir, "cpu", head)
    config = net.config
    b, s = job["gate_shape"]
    maxpos = models.max_positions(config)
    s = min(s, maxpos) if maxpos else s
    ids = token_ids(job["seed"], b, s, config.vocab_size)
    n_emb = sum(p.numel() for n, p in net.named_parameters()
                if "emb" in n or n.split(".")[-2:-1] in (["wte"], ["wpe"]))
    info = models.param_counts(config, torch_backend.n_params(net), n_emb)
    info.update(vocab_size=config.vocab_size, max_positions=maxpos or 0, weights_dir=str(wdir))
    labels = train_labels(job["seed"], ids, head)
    if job["task"] == "train":
        step = torch_backend.make_train_step(net, "eager", "cpu", optimizer_settings(job), head,
                                             job["train"]["accumulation_steps"])
        batch = torch_backend.make_batch(ids, labels, "cpu")
        reference = np.array([float(torch_backend.to_numpy(step(batch)))
                              for _ in range(job["train"]["agreement_steps"])])
    else:
        forward = torch_backend.make_forward(net, "eager", "cpu", head)
        reference = torch_backend.to_numpy(forward(torch_backend.make_inputs(ids, "cpu")))
    fp64 = {}
    if job.get("fp64_shapes"):  # float64 references for the precision errors
        forward = torch_backend.make_forward(net.double(), "eager", "cpu", head)
        fp64["ref64_gate"] = torch_backend.to_numpy(forward(torch_backend.make_inputs(ids, "cpu")))
        for b, s in job["fp64_shapes"]:
            if not maxpos or s <= maxpos:
                cell_ids = token_ids(job["seed"], b, s, config.vocab_size)[:REF_ROWS]
                x = torch_backend.make_inputs(cell_ids, "cpu")
                fp64[fp64_key(b, s)] = torch_backend.to_numpy(forward(x))
    path = gate_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, ids=ids, labels=labels, reference=reference, info=json.dumps(info), **fp64)
    os.replace(tmp, path)


# Precision errors are computed over the first REF_ROWS sequences of a cell's
# batch (sequences are independent), so float64 references of large decoder
# logits (batch x seq x vocab) stay small.
REF_ROWS = 2


def fp64_key(batch: int, seq: int) -> str:
    return f"ref64_{batch}x{seq}"


# Precision errors of a cell's output against the float64 reference: results
# columns <- precision.error_metrics keys.
FP64_COLUMNS = {"fp64_max_abs_err": "max_abs_err", "fp64_rel_l2_err": "rel_l2_err",
                "fp64_cosine": "cosine_similarity", "fp64_argmax_agreement": "argmax_agreement",
                "out_nonfinite": "n_nonfinite"}


def dtype_order(dtypes) -> list[str]:
    """float32 first: the baseline of every speed-up."""
    from .spec import DTYPES

    return sorted(set(dtypes), key=DTYPES.index)


def _fault(label: str) -> None:
    """Fault injection for the robustness tests: FWCOMPARE_FAULT=kind:label-part."""
    kind, _, where = os.environ.get("FWCOMPARE_FAULT", "").partition(":")
    if not where or where not in label:
        return
    if kind == "crash":
        os._exit(3)
    if kind == "hang":
        time.sleep(1e6)
    if kind == "oom":
        raise MemoryError("injected out-of-memory (FWCOMPARE_FAULT)")


def failure_status(backend, exc: BaseException) -> str:
    from .frameworks import Unsupported

    if isinstance(exc, Unsupported):
        return "unsupported"
    return "oom" if backend.is_oom(exc) else "error"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def finish_cell(store, job: dict, provenance: dict, spec, rnd: int, status: str,
                error: str = "", figures: dict | None = None, samples=None) -> None:
    """Append a cell's row (and raw samples) to the store, then tell the parent."""
    from .results import make_row

    row = make_row(spec, status=status, error=error, figures=figures, provenance=provenance,
                   run_id=job["run_id"], profile=job["profile"], round=rnd)
    store.append(row, samples)
    emit("done", cell=spec.cell_id, round=rnd, status=status,
         median_s=figures.get("median_s") if figures else None,
         ci=[figures.get("ci_low_s"), figures.get("ci_high_s")] if figures else None,
         error=error[:200])


def sample_figures(samples, confidence: float) -> dict:
    """A cell's figures derived from its raw seconds-per-step samples."""
    import numpy as np

    from .stats import iqr, median_ci

    med, lo, hi = median_ci(samples, confidence)
    return dict(n_samples=len(samples), median_s=med, ci_low_s=lo, ci_high_s=hi,
                iqr_s=iqr(samples), mean_s=float(np.mean(samples)),
                p90_s=float(np.percentile(samples, 90)))


class Group:
    """One (framework, model) group inside its worker process."""

    def __init__(self, job: dict):
        import numpy as np

        from .frameworks import get_backend
        from .memory import current_rss_bytes
        from .results import ResultStore
        from .spec import RunSpec
        from .timing import TimingConfig

        self.job = job
        self.fw, self.device, self.head = job["framework"], job["device"], job["head"]
        self.backend = get_backend(self.fw)
        self.backend.configure(job["threads"], self.device)
        self.store = ResultStore(job["store_dir"])
        self.cfg = TimingConfig(**job["timing"])
        self.cells = [(RunSpec.from_dict(c["spec"]), c["round"]) for c in job["cells"]]
        self.provenance = dict(job["provenance"])
        self.gate = np.load(gate_path(job))
        self.info = json.loads(str(self.gate["info"]))
        self.baseline_rss = current_rss_bytes()  # imports done, no model yet

    def finish(self, spec, rnd, status, error="", figures=None, samples=None):
        finish_cell(self.store, self.job, self.provenance, spec, rnd, status, error, figures,
                    samples)

    def load(self, dtype: str = "float32"):
        """The model with the shared weights, set up for ``dtype``; its load time.
        Peak memory counts from here: the baseline is the process's RSS before
        this model, so a previous precision's leftovers are not charged to it."""
        from .memory import current_rss_bytes

        release_freed_heap()
        self.baseline_rss = current_rss_bytes()
        t0 = time.perf_counter()
        model = self.backend.load(self.info["weights_dir"], self.device, self.head, dtype)
        load_s = time.perf_counter() - t0
        release_freed_heap()
        self.provenance.update(self.backend.runtime_info(self.device),
                               precision_setup=self.backend.precision_setup(dtype, self.device))
        return model, load_s

    def skip_reason(self, spec) -> str | None:
        maxpos = self.info["max_positions"]
        if maxpos and spec.seq_len > maxpos:
            return f"seq_len {spec.seq_len} exceeds the model's {maxpos} positions"
        return None

    def measure(self, spec, rnd, call, known: dict, flops: float, not_equivalent: str,
                after=None, first=None) -> None:
        """Timing pass, then a separate memory pass, then ``after(fn)`` (more
        figures from the warm callable, e.g. precision errors), then the row.
        ``first(out)`` -> (figures, problem) checks the first call's output
        before warm-up; a problem flags the cell not_equivalent."""
        from .memory import PeakRSS
        from .timing import measure

        emit("start", cell=spec.cell_id, round=rnd, label=spec.label)
        reason = self.skip_reason(spec)
        if reason:
            self.finish(spec, rnd, "unsupported", reason, known)
            return
        try:
            _fault(spec.label)
            resettable = getattr(self.backend, "PEAK_RESETTABLE", True)
            if self.device == "gpu" and not resettable:
                self.backend.reset_peak_memory(self.device)  # marks the cell's start
            fn = call()
            checked: dict = {}

            def on_first(out):
                if first is not None:
                    figures, problem = first(out)
                    checked.update(figures, problem=problem)
            timing = measure(fn, self.backend.sync, self.cfg, on_first)
            problem = checked.pop("problem", "")
            not_equivalent = "; ".join(p for p in (not_equivalent, problem) if p)
            samples = timing.samples_s
            figures = dict(known, **checked, **sample_figures(samples, self.cfg.confidence))
            med = figures["median_s"]
            figures.update(
                calls_per_sample=timing.calls_per_sample, rel_ci=timing.rel_ci,
                first_call_s=timing.first_call_s,
                throughput_samples_per_s=spec.batch_size / med,
                tokens_per_s=spec.batch_size * spec.seq_len / med,
                flops_per_call=flops, achieved_flops_per_s=flops / med,
                converged=timing.converged)
            # Memory: a pass of its own, after timing, so sampling never perturbs timing.
            release_freed_heap()
            if self.device == "gpu":
                if resettable:
                    self.backend.reset_peak_memory(self.device)
                self.backend.sync(fn())
                peak_bytes = self.backend.peak_memory_bytes(self.device)
                figures["peak_mem_bytes"] = peak_bytes
                # None: a peak that cannot be reset (JAX) and a cell that stayed
                # below an earlier one (loading the model): no figure of its own.
                if peak_bytes is None:
                    suffix = "_unavailable" if resettable else "_masked_by_earlier_peak"
                else:
                    suffix = "" if resettable else "_since_cell_start"
                figures["mem_method"] = f"{self.fw}_allocator_peak{suffix}"
            else:
                with PeakRSS() as peak:
                    self.backend.sync(fn())
                figures["peak_mem_bytes"] = peak.peak_bytes - self.baseline_rss
                figures["mem_method"] = peak.method + "_over_pre_model_baseline"
            if after is not None:
                figures.update(after(fn))
            notes = [not_equivalent] if not_equivalent else []
            if not timing.converged:
                notes.append(f"did not converge: CI half-width {timing.rel_ci:.1%} of the "
                             f"median after {self.cfg.max_time_s:g} s")
            self.finish(spec, rnd, "not_equivalent" if not_equivalent else "ok",
                        "; ".join(notes), figures, samples)
        except Exception as exc:
            self.finish(spec, rnd, failure_status(self.backend, exc), _describe(exc), known)
            gc.collect()

    def fail_all(self, cells, status: str, error: str, known: dict | None = None) -> None:
        for spec, rnd in cells:
            emit("start", cell=spec.cell_id, round=rnd, label=spec.label)
            self.finish(spec, rnd, status, error, known)

    # -- inference: per precision one model, every mode gated --------------------
    def run_inference(self) -> None:
        for dtype in dtype_order(spec.dtype for spec, _ in self.cells):
            self.run_inference_precision(dtype, [(s, r) for s, r in self.cells if s.dtype == dtype])
            release_freed_heap()

    def gate_forwards(self, model, modes, dtype):
        """Each mode's forward, checked on the gate batch before any timing:
        float32 against PyTorch's float32 output (max abs error within
        equiv_tol); a reduced precision against the float64 reference where the
        study computed one (relative L2 error within mp_equiv_rtol), which
        catches wrong weights or a broken cast, not rounding."""
        from .precision import error_metrics

        ref64 = self.gate["ref64_gate"] if "ref64_gate" in self.gate else None
        forwards, known, problems = {}, {}, {}
        for mode in modes:
            try:
                fn = self.backend.make_forward(model, mode, self.device, self.head, dtype,
                                               self.job.get("mode_options"))
                out = fn(self.backend.make_inputs(self.gate["ids"], self.device))
                self.backend.sync(out)
                out = self.backend.to_numpy(out)
            except Exception as exc:
                problems[mode] = (failure_status(self.backend, exc), _describe(exc))
                continue
            err = error_metrics(out, self.gate["reference"])
            known[mode] = {"equiv_max_abs_err": err["max_abs_err"],
                           "equiv_rel_err": err["rel_l2_err"]}
            if dtype == "float32":
                tol = self.job["equiv_tol"]
                bad = (f"max abs error {err['max_abs_err']:.3g} vs reference exceeds "
                       f"equiv_tol {tol:g}") if not err["max_abs_err"] <= tol else ""
            else:
                if ref64 is not None:
                    err = error_metrics(out, ref64)
                tol = self.job["mp_equiv_rtol"]
                bad = (f"{dtype} output's relative L2 error {err['rel_l2_err']:.3g} on the gate "
                       f"batch exceeds mp_equiv_rtol {tol:g}") if not err["rel_l2_err"] <= tol else ""
            forwards[mode] = (fn, bad)
        emit("gate", dtype=dtype, errors={m: k["equiv_max_abs_err"] for m, k in known.items()})
        return forwards, known, problems

    def precision_errors(self, spec):
        """``after`` for measure: the cell's output against its float64 reference."""
        from .precision import error_metrics

        key = fp64_key(spec.batch_size, spec.seq_len)
        if key not in self.gate:
            return None

        def after(fn):
            out = self.backend.to_numpy(fn())[:REF_ROWS]
            err = error_metrics(out, self.gate[key])
            return {col: err[k] for col, k in FP64_COLUMNS.items()}
        return after

    def run_inference_precision(self, dtype: str, cells) -> None:
        from . import models

        try:
            model, load_s = self.load(dtype)
        except Exception as exc:  # the whole precision cannot run
            status = failure_status(self.backend, exc)
            self.fail_all(cells, status, _describe(exc) if status == "unsupported" else
                          f"loading the model for {dtype} failed: {_describe(exc)}")
            return
        forwards, known, problems = self.gate_forwards(
            model, sorted({spec.mode for spec, _ in cells}), dtype)
        for spec, rnd in cells:
            if spec.mode in problems:
                self.fail_all([(spec, rnd)], *problems[spec.mode])
                continue
            fn, bad = forwards[spec.mode]
            self.provenance["mode_setup"] = fn.setup
            ids = token_ids(self.job["seed"], spec.batch_size, spec.seq_len,
                            self.info["vocab_size"])

            def call(fn=fn, ids=ids):
                x = self.backend.make_inputs(ids, self.device)
                return lambda: fn(x)
            self.measure(spec, rnd, call, dict(known[spec.mode], load_s=load_s),
                         models.forward_flops(self.info, spec.batch_size, spec.seq_len), bad,
                         after=self.precision_errors(spec))

    # -- acceleration: one mode per process, compiled output checked per cell ----
    def run_acceleration(self) -> None:
        """The runner gives each mode a process of its own, so a compiled mode's
        first call is its cold time to first result: nothing in the process has
        traced or compiled it before (the gate batch runs through eager only,
        in every mode's process alike). Eager is gated against PyTorch's
        reference as in every study; a compiled mode is checked at every cell
        against this framework's eager output on the same input (max abs error
        within ``accel_tol``), right after its first call and before its steady
        state is timed. Cells run in ascending size, one compiled callable for
        all, so each new shape's first call shows what recompiling costs."""
        from . import models

        try:
            model, load_s = self.load("float32")
        except Exception as exc:
            self.fail_all(self.cells, failure_status(self.backend, exc),
                          f"loading the model failed: {_describe(exc)}")
            return
        forwards, known, problems = self.gate_forwards(model, ["eager"], "float32")
        if problems:
            status, message = problems["eager"]
            self.fail_all(self.cells, status, f"eager forward (the reference) failed: {message}")
            return
        eager, bad = forwards["eager"]
        for mode in sorted({spec.mode for spec, _ in self.cells}):
            cells = [(s, r) for s, r in self.cells if s.mode == mode]
            try:
                fn = eager if mode == "eager" else self.backend.make_forward(
                    model, mode, self.device, self.head, "float32", self.job.get("mode_options"))
            except Exception as exc:
                self.fail_all(cells, failure_status(self.backend, exc), _describe(exc))
                continue
            self.provenance["mode_setup"] = fn.setup
            for spec, rnd in cells:
                ids = token_ids(self.job["seed"], spec.batch_size, spec.seq_len,
                                self.info["vocab_size"])
                x = self.backend.make_inputs(ids, self.device)
                self.measure(spec, rnd, lambda fn=fn, x=x: (lambda: fn(x)),
                             dict(known["eager"], load_s=load_s),
                             models.forward_flops(self.info, spec.batch_size, spec.seq_len), bad,
                             first=None if mode == "eager" else self.accel_check(fn, eager, x))

    def accel_check(self, fn, eager, x):
        """``first`` for measure: the compilations the first call on ``x`` did
        (the framework's count before and after), and its output against
        eager's on the same input."""
        import math

        from .precision import error_metrics

        before = fn.compile_count()
        tol = self.job["accel_tol"]

        def check(out):
            after = fn.compile_count()
            err = error_metrics(self.backend.to_numpy(out), self.backend.to_numpy(eager(x)))
            problem = "" if err["max_abs_err"] <= tol else (
                f"output differs from eager by {err['max_abs_err']:.3g} max abs "
                f"(accel_tol {tol:g})")
            return {"accel_max_abs_err": err["max_abs_err"], "accel_rel_err": err["rel_l2_err"],
                    "recompiles": math.nan if after is None else float(after - before)}, problem
        return check

    # -- training: per mode and precision a fresh model, losses gated ------------
    def run_train(self) -> None:
        for mode in sorted({spec.mode for spec, _ in self.cells}):
            mine = [(s, r) for s, r in self.cells if s.mode == mode]
            for dtype in dtype_order(spec.dtype for spec, _ in mine):
                self.run_train_precision(mode, dtype, [(s, r) for s, r in mine
                                                       if s.dtype == dtype])
                release_freed_heap()

    def agreement_steps(self, step, n: int):
        """``n`` steps on the gate batch: losses, the loss scale after each step,
        and which steps dynamic loss scaling skipped (the scale went down)."""
        import numpy as np

        batch = self.backend.make_batch(self.gate["ids"], self.gate["labels"], self.device)
        losses, scales = [], []
        before = step.loss_scale()
        skipped = []
        for _ in range(n):
            losses.append(float(self.backend.to_numpy(step(batch))))
            scales.append(step.loss_scale())
            skipped.append(bool(scales[-1] < before))
            before = scales[-1]
        return np.array(losses), np.array(scales), np.array(skipped)

    def train_problems(self, dtype, losses, ref) -> list[str]:
        """Why this mode/precision's losses do not stand for the same training:
        float32 must follow PyTorch's losses (loss_tol on the first, then
        loss_curve_rtol); a reduced precision must start from the same loss
        (mp_loss_rtol relative on the first step: the same weights and data,
        only rounding differs) and stay finite. How far its curve departs
        later is what the mixed-precision study measures, not a failure."""
        import numpy as np

        train = self.job["train"]
        problems = []
        if not np.all(np.isfinite(losses)):
            problems.append(f"{int((~np.isfinite(losses)).sum())} non-finite loss(es) "
                            "during the agreement steps")
        step0 = abs(losses[0] - ref[0])
        if dtype == "float32":
            curve = float(np.max(np.abs(losses - ref) / np.abs(ref)))
            if not step0 <= train["loss_tol"]:
                problems.append(f"first loss differs from PyTorch by {step0:.3g} "
                                f"(loss_tol {train['loss_tol']:g})")
            if not curve <= train["loss_curve_rtol"]:
                problems.append(f"loss curve departs from PyTorch by {curve:.3g} relative "
                                f"(loss_curve_rtol {train['loss_curve_rtol']:g})")
        elif not step0 / abs(ref[0]) <= train["mp_loss_rtol"]:
            problems.append(f"{dtype} first loss differs from PyTorch float32 by "
                            f"{step0 / abs(ref[0]):.3g} relative (mp_loss_rtol "
                            f"{train['mp_loss_rtol']:g})")
        return problems

    def run_train_precision(self, mode: str, dtype: str, cells) -> None:
        import numpy as np

        from . import models
        from .results import losses_frame

        train = self.job["train"]
        ref = self.gate["reference"]
        n = self.info["n_params"]
        breakdown = {"param_bytes": 4.0 * n, "grad_bytes": 4.0 * n,
                     "optimizer_state_bytes": 8.0 * n}  # fp32; AdamW keeps m and v
        try:
            model, load_s = self.load(dtype)
            step = self.backend.make_train_step(model, mode, self.device,
                                                optimizer_settings(self.job), self.head,
                                                train["accumulation_steps"], dtype)
            losses, scales, skipped = self.agreement_steps(step, len(ref))
        except Exception as exc:
            self.fail_all(cells, failure_status(self.backend, exc), _describe(exc), breakdown)
            return
        self.store.append_losses(
            losses_frame(self.job["model"], self.fw, mode, losses, ref, dtype=dtype,
                         loss_scale=scales, skipped=skipped),
            f"{self.job['model_key']}-{self.fw}-{mode}-{dtype}")
        step0 = abs(losses[0] - ref[0])
        emit("gate", dtype=dtype, errors={mode: step0})
        known = dict(breakdown, load_s=load_s, loss_step0=float(losses[0]),
                     loss_final=float(losses[-1]), equiv_max_abs_err=float(step0),
                     equiv_rel_err=float(np.max(np.abs(losses - ref) / np.abs(ref))),
                     skipped_steps=float(skipped.sum()),
                     nonfinite_losses=float((~np.isfinite(losses)).sum()),
                     final_loss_scale=float(scales[-1]))
        problems = "; ".join(self.train_problems(dtype, losses, ref))
        for spec, rnd in cells:
            ids = token_ids(self.job["seed"], spec.batch_size, spec.seq_len,
                            self.info["vocab_size"])
            labels = train_labels(self.job["seed"], ids, self.head)

            def call(ids=ids, labels=labels):
                b = self.backend.make_batch(ids, labels, self.device)
                return lambda: step(b)
            flops = 3 * models.forward_flops(self.info, spec.batch_size, spec.seq_len)
            self.measure(spec, rnd, call, known, flops, problems)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    pin_threads(job["threads"])
    try:
        if job["kind"] == "prepare":
            prepare(job)
        else:
            group = Group(job)
            if job["task"] == "train":
                group.run_train()
            elif job.get("acceleration"):
                group.run_acceleration()
            else:
                group.run_inference()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
