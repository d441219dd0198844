"""Subprocess entry point: ``python -m fwcompare.worker JOB.json``.

Two kinds of job:

- ``prepare``: make the shared weights of one model (PyTorch, fixed seed) and
  the equivalence reference: PyTorch eager fp32 output on fixed token ids.
- ``group``: one (framework, model) group. Loads the model once, runs the
  equivalence gate for every mode before any timing, then measures each cell
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


def gate_path(job: dict) -> Path:
    return Path(job["gate_dir"]) / f"{job['model_key']}.npz"


def prepare(job: dict) -> None:
    import numpy as np
    import torch
    import transformers

    from . import models

    wdir = models.weights_dir(job["model"], job["seed"])
    net = transformers.AutoModel.from_pretrained(wdir, local_files_only=True).eval()
    config = net.config
    b, s = job["gate_shape"]
    maxpos = models.max_positions(config)
    s = min(s, maxpos) if maxpos else s
    ids = token_ids(job["seed"], b, s, config.vocab_size)
    with torch.inference_mode():
        ref = net(input_ids=torch.as_tensor(ids)).last_hidden_state.double().numpy()
    n_emb = sum(p.numel() for n, p in net.named_parameters()
                if "emb" in n or n.split(".")[-2:-1] in (["wte"], ["wpe"]))
    info = models.param_counts(config, sum(p.numel() for p in net.parameters()), n_emb)
    info.update(vocab_size=config.vocab_size, max_positions=maxpos or 0,
                weights_dir=str(wdir))
    path = gate_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, ids=ids, reference=ref, info=json.dumps(info))
    os.replace(tmp, path)


def release_freed_heap() -> None:
    """Return freed heap to the OS (glibc malloc_trim), so RSS after loading a
    model does not keep what loading alone needed (e.g. Flax's from_pt copy)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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


def run_group(job: dict) -> None:
    import numpy as np

    from . import models
    from .frameworks import get_backend
    from .memory import PeakRSS, current_rss_bytes
    from .precision import error_metrics
    from .results import ResultStore, make_row
    from .spec import RunSpec
    from .stats import iqr, median_ci
    from .timing import TimingConfig, measure

    fw, device = job["framework"], job["device"]
    backend = get_backend(fw)
    backend.configure(job["threads"], device)
    store = ResultStore(job["store_dir"])
    cfg = TimingConfig(**job["timing"])
    cells = [(RunSpec.from_dict(c["spec"]), c["round"]) for c in job["cells"]]
    provenance = dict(job["provenance"])
    baseline_rss = current_rss_bytes()

    def finish(spec, rnd, status, error="", figures=None, samples=None):
        row = make_row(spec, status=status, error=error, figures=figures,
                       provenance=provenance, run_id=job["run_id"],
                       profile=job["profile"], round=rnd)
        store.append(row, samples)
        emit("done", cell=spec.cell_id, round=rnd, status=status,
             median_s=figures.get("median_s") if figures else None,
             ci=[figures.get("ci_low_s"), figures.get("ci_high_s")] if figures else None,
             error=error[:200])

    gate = np.load(gate_path(job))
    info = json.loads(str(gate["info"]))
    try:
        t0 = time.perf_counter()
        model = backend.load(info["weights_dir"], device)
        load_s = time.perf_counter() - t0
        release_freed_heap()
        provenance.update(backend.runtime_info(device))
    except Exception as exc:  # the whole group cannot run
        status = failure_status(backend, exc)
        for spec, rnd in cells:
            emit("start", cell=spec.cell_id, round=rnd, label=spec.label)
            finish(spec, rnd, status, f"loading the model failed: {type(exc).__name__}: {exc}")
        return

    # Equivalence gate, before any timing: same ids, every mode, vs the reference.
    forwards, gate_errors, mode_problems = {}, {}, {}
    for mode in sorted({spec.mode for spec, _ in cells}):
        try:
            fn = backend.make_forward(model, mode, device)
            out = fn(backend.make_inputs(gate["ids"], device))
            backend.sync(out)
            gate_errors[mode] = error_metrics(backend.to_numpy(out), gate["reference"])
            forwards[mode] = fn
        except Exception as exc:
            mode_problems[mode] = (failure_status(backend, exc), f"{type(exc).__name__}: {exc}")
    emit("gate", errors={m: e["max_abs_err"] for m, e in gate_errors.items()})

    for spec, rnd in cells:
        emit("start", cell=spec.cell_id, round=rnd, label=spec.label)
        if spec.mode in mode_problems:
            finish(spec, rnd, *mode_problems[spec.mode])
            continue
        if info["max_positions"] and spec.seq_len > info["max_positions"]:
            finish(spec, rnd, "unsupported", f"seq_len {spec.seq_len} exceeds the model's "
                   f"{info['max_positions']} positions")
            continue
        err = gate_errors[spec.mode]
        # Known before the cell runs, so kept on its row even if the cell fails.
        known = {"equiv_max_abs_err": err["max_abs_err"], "equiv_rel_err": err["rel_l2_err"],
                 "load_s": load_s}
        try:
            _fault(spec.label)
            fn = forwards[spec.mode]
            x = backend.make_inputs(token_ids(job["seed"], spec.batch_size, spec.seq_len,
                                              info["vocab_size"]), device)
            timing = measure(lambda: fn(x), backend.sync, cfg)
            samples = timing.samples_s
            med, lo, hi = median_ci(samples, cfg.confidence)
            flops = models.forward_flops(info, spec.batch_size, spec.seq_len)
            figures = dict(
                known, n_samples=len(samples), calls_per_sample=timing.calls_per_sample,
                median_s=med, ci_low_s=lo, ci_high_s=hi, rel_ci=timing.rel_ci,
                iqr_s=iqr(samples), mean_s=float(np.mean(samples)),
                p90_s=float(np.percentile(samples, 90)), first_call_s=timing.first_call_s,
                throughput_samples_per_s=spec.batch_size / med,
                tokens_per_s=spec.batch_size * spec.seq_len / med,
                flops_per_call=flops, achieved_flops_per_s=flops / med)
            # Memory: a pass of its own, after timing, so sampling never perturbs timing.
            release_freed_heap()
            if device == "gpu":
                backend.reset_peak_memory(device)
                backend.sync(fn(x))
                figures["peak_mem_bytes"] = backend.peak_memory_bytes(device)
                figures["mem_method"] = f"{fw}_allocator_peak"
            else:
                with PeakRSS() as peak:
                    backend.sync(fn(x))
                figures["peak_mem_bytes"] = peak.peak_bytes - baseline_rss
                figures["mem_method"] = peak.method + "_over_pre_model_baseline"
            status = "ok" if err["max_abs_err"] <= job["equiv_tol"] else "not_equivalent"
            note = "" if status == "ok" else (
                f"max abs error {err['max_abs_err']:.3g} vs reference exceeds "
                f"equiv_tol {job['equiv_tol']:g}")
            if not timing.converged:
                note = (note + "; " if note else "") + (
                    f"did not converge: CI half-width {timing.rel_ci:.1%} of the median "
                    f"after {cfg.max_time_s:g} s")
            figures["converged"] = timing.converged
            finish(spec, rnd, status, note, figures, samples)
        except Exception as exc:
            finish(spec, rnd, failure_status(backend, exc), f"{type(exc).__name__}: {exc}", known)
            gc.collect()


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    pin_threads(job["threads"])
    try:
        prepare(job) if job["kind"] == "prepare" else run_group(job)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
