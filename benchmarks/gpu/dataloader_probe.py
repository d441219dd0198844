"""Does a DataLoader's worker process die when a process with a live CUDA
context makes one pipeline after another? (issue 49; a probe, not a test)

On an H200 (2026-11-30, docs/measurements.md) the end_to_end study's fed step
with ``dataloader-w1`` ended twice with "DataLoader worker (pid ...) is killed
by signal: Aborted", each time right after a ``dataloader-w0`` cell of the
same worker process (once its second ``dataloader-w1``); never on a CPU. The
study's worker logs went unread, so the abort's own message is unknown. This probe does what such a
worker process does, with nothing else of the study: a model on the device
and a training step on it, then fwcompare's PyTorch pipelines made, stepped
through and closed one after another (``--sequence``), every process with
Python's fault handler on (an abort prints the Python stack of the thread that
aborted), the DataLoader workers' stderr passed through. Each start method runs
in a fresh process of its own: ``fork`` (Linux's default, what the study uses)
and ``spawn`` (what PyTorch's notes advise where CUDA is in use).

Prints, per start method and pipeline: ok or the error, the time to its first
batch (a worker's start) and the median step with it (ms).

Usage (a GPU machine; runs on a CPU too):
    python benchmarks/gpu/dataloader_probe.py [--steps 40]
        [--sequence dataloader-w1,dataloader-w0,dataloader-w1,memory,dataloader-w1]
        [--methods fork,spawn]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SEQUENCE = "dataloader-w1,dataloader-w0,dataloader-w1,memory,dataloader-w1,dataloader-w1"


def examples(n: int = 1024, seq_len: int = 32, seed: int = 0):
    """The end_to_end study's own task (its training split, ``n`` examples),
    in its fixed word table (no tokenizer to load), padded to ``seq_len``."""
    from fwcompare.studies.end_to_end import data

    task = data.make_task(seed, n, 32)
    return data.tokenize(*task.train, seq_len, 30522, seed=seed)


def child(method: str, sequence: list[str], steps: int) -> int:
    import multiprocessing

    import torch

    from fwcompare.frameworks.torch.pipeline import Pipeline

    multiprocessing.set_start_method(method, force=True)  # the DataLoader's default context
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(30522, 256), torch.nn.Flatten(),
                                torch.nn.Linear(256 * 32, 2)).to(device)
    opt = torch.optim.AdamW(model.parameters())

    def step(ids, mask, labels):
        loss = torch.nn.functional.cross_entropy(model(ids * mask), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    data = examples()
    print(f"{method}: device {device}, torch {torch.__version__}, pid {os.getpid()}", flush=True)
    failed = 0
    for i, kind in enumerate(sequence):
        t0 = time.perf_counter()
        pipe = None
        try:
            pipe = Pipeline(kind, data, 32, device)
            batch = next(pipe)
            step(*batch)
            if device.type == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
            times = []
            for _ in range(steps):
                t = time.perf_counter()
                step(*next(pipe))
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            print(f"{method}: [{i}] {kind}: ok, first batch {first:.2f} s, step "
                  f"{statistics.median(times) * 1e3:.2f} ms", flush=True)
        except Exception as exc:  # the probe's finding: go on with the next pipeline
            failed += 1
            print(f"{method}: [{i}] {kind}: {type(exc).__name__}: {exc}", flush=True)
        finally:
            if pipe is not None:
                pipe.close()
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--sequence", default=SEQUENCE)
    ap.add_argument("--methods", default="fork,spawn")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sequence = a.sequence.split(",")
    if a.child:
        return child(a.child, sequence, a.steps)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # every process, spawned workers too
    worst = 0
    for method in a.methods.split(","):
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, __file__, "--child", method, "--steps",
                             str(a.steps), "--sequence", a.sequence], env=env).returncode
        print(f"{method}: exit {rc} after {time.perf_counter() - t0:.1f} s", flush=True)
        worst = max(worst, rc if rc >= 0 else 128 - rc)
    return worst


if __name__ == "__main__":
    sys.exit(main())
