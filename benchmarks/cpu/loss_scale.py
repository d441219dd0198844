"""What skipping an overflowed float16 step costs JAX's jitted training step
(a benchmark, not a test).

jmp's dynamic loss scale leaves the skip to its user. Its README selects
between the updated and the old parameters and optimizer state
(``jmp.select_tree(finite, new, old)``); optax's ``apply_if_finite`` branches
instead (``jax.lax.cond``: the update runs only when the gradients are
finite). The JAX backend branches (``backend._train_function``). This file
measures the mixed-precision study's training cell (MiniLM with its real
weights, float16 compute, batch 2 x 32, one AdamW step, the step's buffers
donated) both ways:

- ``branch``: the backend's step as it is;
- ``select``: the same step with ``jax.lax.cond`` replaced, in that process
  only, by computing both branches and ``jmp.select_tree`` of their results,
  which is what the backend did before 2026-11-28.

Each process (fresh, the variants alternating) times its first call (trace
and compile) and then ``--steps`` steps; the benchmark prints each variant's
medians over its processes, their range, and the ratios select / branch.

Usage: .venv/bin/python benchmarks/cpu/loss_scale.py [--processes 3] [--steps 40]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

VARIANTS = ("branch", "select")


def one_process(variant: str, steps: int) -> dict:
    import jax
    import jmp

    from fwcompare.core import models
    from fwcompare.frameworks.jax import backend

    backend.configure(0, "cpu")
    if variant == "select":
        jax.lax.cond = lambda pred, yes, no, operand: jmp.select_tree(pred, yes(operand),
                                                                      no(operand))
    wdir = models.weights_dir("all-minilm-l6-v2", 0, head="seq_cls")
    opt = {"learning_rate": 5e-5, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
           "weight_decay": 0.0}
    step = backend.make_train_step(backend.load(wdir, "cpu", "seq_cls", "float16"), "jit",
                                   "cpu", opt, "seq_cls", dtype="float16")
    ids = np.random.default_rng(0).integers(1000, 20000, size=(2, 32))
    batch = backend.make_batch(ids, np.array([0, 1]), "cpu")
    t = time.perf_counter()
    backend.sync(step(batch))
    first = time.perf_counter() - t
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        backend.sync(step(batch))
        times.append(time.perf_counter() - t)
    return {"variant": variant, "first_s": first, "step_s": float(np.median(times)),
            "loss_scale": step.loss_scale()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=3, help="per variant")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_process(a.child, a.steps)))
        return
    from fwcompare.core.env import manifest
    from fwcompare.results.tables import hardware_line

    print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}", flush=True)
    rows = []
    for i in range(a.processes):
        for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            out = subprocess.run([sys.executable, __file__, "--child", variant,
                                  "--steps", str(a.steps)],
                                 capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{variant:6}  first call {r['first_s']:6.2f} s  step "
                  f"{r['step_s'] * 1e3:6.1f} ms (median of {a.steps})  loss scale "
                  f"{r['loss_scale']:g}", flush=True)
    med = {}
    for variant in VARIANTS:
        got = [r for r in rows if r["variant"] == variant]
        med[variant] = {k: float(np.median([r[k] for r in got])) for k in ("first_s", "step_s")}
        span = {k: (min(r[k] for r in got), max(r[k] for r in got)) for k in ("first_s", "step_s")}
        print(f"{variant}: first call {med[variant]['first_s']:.2f} s "
              f"[{span['first_s'][0]:.2f}, {span['first_s'][1]:.2f}], step "
              f"{med[variant]['step_s'] * 1e3:.1f} ms [{span['step_s'][0] * 1e3:.1f}, "
              f"{span['step_s'][1] * 1e3:.1f}] (median and range of {len(got)} processes)")
    ratio = {k: med["select"][k] / med["branch"][k] for k in ("first_s", "step_s")}
    print(f"select / branch: first call {ratio['first_s']:.2f}x, step {ratio['step_s']:.3f}x")


if __name__ == "__main__":
    main()
