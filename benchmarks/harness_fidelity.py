"""Fidelity and cost of fwcompare's timing protocol (a benchmark, not a test).

1. Fidelity: the same PyTorch forward timed in one process by fwcompare and by
   torch.utils.benchmark.Timer.blocked_autorange, alternating, several rounds;
   prints both medians and their ratio (goal: within 3%).
2. Cost: wall time fwcompare needs to reach a 2% CI of the median, beside the
   2019 study's method (timeit, 30 repeats of 3 calls, mean), with the spread
   that method leaves unreported.

Usage: .venv/bin/python benchmarks/harness_fidelity.py [--model distilbert-base-uncased]
       [--batch 1] [--seq 128] [--rounds 3]
"""
from __future__ import annotations

import os

os.environ.setdefault("USE_TF", "0")  # transformers would import TensorFlow too
os.environ.setdefault("USE_FLAX", "0")

import argparse  # noqa: E402
import statistics
import time
import timeit

import numpy as np
import torch
import torch.utils.benchmark as tbench
import transformers

from fwcompare.core import env, models
from fwcompare.core.stats import median_ci
from fwcompare.core.timing import TimingConfig, measure
from fwcompare.core.models import token_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="distilbert-base-uncased")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-run-time", type=float, default=5.0)
    args = ap.parse_args()

    m = env.manifest()
    print(f"# {m['cpu_model']}, {m['cpu_cores_available']} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    net = transformers.AutoModel.from_pretrained(models.weights_dir(args.model)).eval()
    ids = torch.as_tensor(token_ids(0, args.batch, args.seq, net.config.vocab_size))

    def fn():
        with torch.inference_mode():
            return net(input_ids=ids).last_hidden_state

    print(f"# workload: {args.model} forward, batch {args.batch} x {args.seq} tokens")
    ours, theirs = [], []
    cfg = TimingConfig(warmup_iters=3, warmup_s=0.5, min_iters=20,
                       min_time_s=args.min_run_time, max_time_s=4 * args.min_run_time,
                       target_rel_ci=0.01)
    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    for r in range(args.rounds):
        t = measure(fn, config=cfg)
        med_f = float(np.median(t.samples_s))
        med_t = timer.blocked_autorange(min_run_time=args.min_run_time).median
        ours.append(med_f)
        theirs.append(med_t)
        print(f"round {r + 1}: fwcompare median {med_f * 1e3:.2f} ms "
              f"({len(t.samples_s)} samples, converged={t.converged}) | "
              f"torch.utils.benchmark median {med_t * 1e3:.2f} ms | ratio {med_f / med_t:.4f}")
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"FIDELITY fwcompare / torch.utils.benchmark = {ratio:.4f} "
          f"({abs(ratio - 1) * 100:.1f}% apart; goal within 3%)")

    # Cost to a 2% CI of the median, against the 2019 method.
    t0 = time.perf_counter()
    t = measure(fn, config=TimingConfig(warmup_iters=2, warmup_s=0.3, min_iters=7,
                                        min_time_s=0.5, max_time_s=30, target_rel_ci=0.02))
    ours_s = time.perf_counter() - t0
    med, lo, hi = median_ci(t.samples_s)
    t0 = time.perf_counter()
    runs = np.array(timeit.repeat(fn, repeat=30, number=3)) / 3
    old_s = time.perf_counter() - t0
    print(f"COST fwcompare to a 2% CI: {ours_s:.1f} s wall, median {med * 1e3:.2f} ms "
          f"[{lo * 1e3:.2f}, {hi * 1e3:.2f}], converged={t.converged}, "
          f"{len(t.samples_s)} samples")
    print(f"COST 2019 method (timeit 30 x 3, mean): {old_s:.1f} s wall, mean "
          f"{runs.mean() * 1e3:.2f} ms, min {runs.min() * 1e3:.2f} ms, "
          f"spread of repeats (sd/mean) {runs.std() / runs.mean():.1%}, no interval reported")


if __name__ == "__main__":
    main()
