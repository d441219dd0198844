"""What training end to end and the input pipelines cost here (a benchmark, not
a test; issue 50, before its study is registered): the figures that size the
study's quick profile.

Each framework runs in a fresh process of its own, one after the other (never
two at once): its input pipelines alone (every kind it offers, batches pulled
and synced, no model: ``--pull`` batches after ``--pull // 4`` of warm-up,
``--repeats`` times, the median examples per second and the range), then one
end-to-end run (``Backend.fit``: Trainer, Keras fit, the Flax loop) of MiniLM on
the generated sentence task, its phases, steady examples per second, first
losses, accuracy at each evaluation and time to the target. Prints one table of
each and the runs' first losses side by side.

Usage: .venv/bin/python benchmarks/end_to_end.py [--train 2048] [--steps 60]
       [--every 10] [--batch 32] [--seq 32] [--target 0.95] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "all-minilm-l6-v2"


def child(args) -> dict:
    """One framework's figures (runs inside its own process)."""
    import numpy as np

    from fwcompare.core import models
    from fwcompare.core.training_run import FitLog, FitSettings
    from fwcompare.frameworks import get, get_backend
    from fwcompare.studies.end_to_end import data

    fw = args.child
    backend = get_backend(fw)
    backend.configure(args.threads, "cpu", {"torch_malloc": "reuse"})  # as the study does
    task = data.make_task(0, args.train, args.eval)
    local = models.local_path(MODEL)
    vocab = models.config_for(MODEL).vocab_size
    train = data.tokenize(*task.train, args.seq, vocab, local, MODEL, seed=1)
    held = data.tokenize(*task.eval, args.seq, vocab, local, MODEL, seed=1)
    pipes = {}
    for kind in get(fw).pipelines:
        pipe = backend.make_pipeline(kind, train, args.batch, "cpu")
        rates = []
        for _ in range(args.pull // 4):
            next(pipe)
        for _ in range(args.repeats):
            t = time.perf_counter()
            for _ in range(args.pull):
                out = next(pipe)
            np.asarray(out[0])  # the last batch there (a sync)
            rates.append(args.pull * args.batch / (time.perf_counter() - t))
        pipe.close()
        pipes[kind] = {"median": float(np.median(rates)), "low": min(rates),
                       "high": max(rates), "setup": pipe.setup}
    settings = FitSettings(batch_size=args.batch, max_steps=args.steps, eval_every=args.every,
                           target_accuracy=args.target, eval_batch_size=64,
                           optimizer=dict(learning_rate=5e-5, weight_decay=0.01, beta1=0.9,
                                          beta2=0.999, eps=1e-8))
    log = FitLog()
    backend.fit(train, held, models.weights_dir(MODEL, 0, head="seq_cls"), "cpu", settings, log)
    return {"pipelines": pipes, "fit": log.figures(settings), "losses": log.losses,
            "evals": log.evals, "tokenizer": train.tokenizer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=2048)
    ap.add_argument("--eval", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--pull", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)))
        return
    found = {}
    for fw in ("torch", "tensorflow", "jax"):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", fw],
                           capture_output=True, text=True, cwd=ROOT, timeout=1800)
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        if r.returncode or not line:
            print(f"{fw}: failed (exit {r.returncode})\n{r.stderr[-2000:]}")
            continue
        found[fw] = json.loads(line[-1][len("RESULT "):])
        print(f"{fw}: {time.perf_counter() - t:.1f} s in its process", flush=True)
    print(f"\ninput pipelines alone: examples/s, median of {args.repeats} x {args.pull} "
          f"batches of {args.batch} x {args.seq} [min, max]")
    for fw, r in found.items():
        for kind, p in r["pipelines"].items():
            print(f"  {fw:10} {kind:16} {p['median']:>10,.0f} [{p['low']:,.0f}, "
                  f"{p['high']:,.0f}]  {p['setup']}")
    print(f"\nend to end: {MODEL}, {args.train} examples, {args.steps} steps of {args.batch}, "
          f"evaluation every {args.every} on {args.eval}, target {args.target}")
    keys = ("data_s", "setup_s", "first_step_s", "steps_s", "eval_s", "total_s",
            "examples_per_s", "time_to_target_s", "steps_to_target", "best_accuracy")
    print("  " + " ".join(f"{k:>15}" for k in ("framework", *keys)))
    for fw, r in found.items():
        print("  " + " ".join(f"{v:>15}" for v in (
            fw, *(f"{r['fit'][k]:.3f}" for k in keys))))
    print("\nfirst losses (same weights, same batches):")
    for fw, r in found.items():
        print(f"  {fw:10} " + ", ".join(f"{x:.6f}" for x in r["losses"]))
    print("\naccuracy at each evaluation:")
    for fw, r in found.items():
        print(f"  {fw:10} " + ", ".join(f"{e['step']}: {e['accuracy']:.3f}" for e in r["evals"]))


if __name__ == "__main__":
    main()
