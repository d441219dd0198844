"""What glibc's allocator costs a PyTorch training step on a CPU (a benchmark,
not a test).

The training study's quick cell (BERT-base, batch 2 x 32, one AdamW step) is
measured as the quick report measures it (interleaved sets of fresh worker
processes, rounds in passes), with PyTorch eager in two variants that differ
only in a cell axis of this file's (``malloc``, a lane and a worker each):

- ``glibc``: glibc's malloc as it comes (``torch_malloc: system``). Its
  mmap threshold adapts up to 32 MiB, and freed heap above the trim threshold
  goes back to the system, so a step's gradients (``zero_grad(set_to_none=True)``)
  and AdamW's temporaries come back as fresh pages every step;
- ``reuse``: the same worker with glibc's mmap and trim thresholds at 1 GiB
  (``memory.reuse_freed_memory``, before the model is built): freed memory
  stays in the heap and the next step reuses it, what PyTorch's CPU tuning
  guide asks of jemalloc or TCMalloc ("For deep learning workloads, Jemalloc
  or TCMalloc can get better performance by reusing memory as much as
  possible than default malloc function"), with the C library the wheel
  already uses. The studies run PyTorch so on a CPU (``torch_malloc:
  reuse``); here the whole run has ``torch_malloc: system`` and only this
  variant's worker reuses.

TensorFlow's graph step (its own allocator) runs beside them in the same sets.
Each worker counts its minor page faults over its timed calls (``getrusage``).
It prints each variant's step time with its interval, the ratios reuse /
glibc and TensorFlow / PyTorch under each (the training claim's figure,
``pytorch-trains-bert-faster``), turn by turn as the scorecard takes them, and
the page faults per step.

``--study inference_sweep`` does the same for the inference sweep's quick cells
(BERT-base forward passes, batch 1 x 32 and 1 x 128).

Usage: .venv/bin/python benchmarks/cpu/allocator.py [--study training] [--rounds 3] [--turns 12]
       [--out outputs/allocator] [--analyse]
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from pathlib import Path

import pandas as pd

import fwcompare
from fwcompare.core import memory
from fwcompare import studies
from fwcompare.core.env import manifest
from fwcompare.results.tables import hardware_line
from fwcompare.core.paths import OUTPUTS, PARAMS
from fwcompare.results.store import load_results
from fwcompare.plan.schema import read_yaml
from fwcompare.core.spec import Axis
from fwcompare.core.stats import geomean_ratio_ci, rounds_median_ci
from fwcompare.execution.study import with_axis
from fwcompare.results.tables import samples_by_cell

MALLOC = Axis("malloc", "glibc", label=" malloc={malloc}")


def counting_faults(plan):
    """``plan`` whose timed callable counts this process's minor page faults
    (``faults_per_call`` in the row)."""
    seen = {"faults": 0, "calls": 0}

    def call():
        fn = plan.call()

        def run():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            out = fn()
            seen["faults"] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            seen["calls"] += 1
            return out
        return run

    def after(fn):
        return {**(plan.after(fn) if plan.after else {}),
                "faults_per_call": seen["faults"] / max(seen["calls"], 1)}

    return dataclasses.replace(plan, call=call, after=after)


def allocators_of(base):
    """The study ``base`` with the ``malloc`` axis: PyTorch eager in both
    variants, the other frameworks as they are."""

    def allocators(c):
        return ("glibc", "reuse") if c.framework == "torch" else ("glibc",)

    def plan(make, spec):  # the thresholds set before the model is built
        if spec.malloc == "reuse" and not memory.reuse_freed_memory():
            raise RuntimeError("glibc's mallopt refused the thresholds")
        p = make()
        return p if p.skip else counting_faults(p)

    return with_axis(base, MALLOC, allocators, __name__, plan, figures=("faults_per_call",))


# what a worker process imports this file for (studies.load finds them by name)
TRAINING = allocators_of(studies.STUDIES["training"])
INFERENCE = allocators_of(studies.STUDIES["inference_sweep"])
BY_STUDY = {"training": TRAINING, "inference_sweep": INFERENCE}


def params_for(study: str, rounds: int, turns: int) -> dict:
    """The study's quick params, PyTorch and TensorFlow only, every cell in
    ``rounds`` rounds of at least ``turns`` turns, no extra rounds."""
    p = read_yaml(PARAMS / study / "quick.yaml", "params")
    p.update(frameworks=["torch", "tensorflow"], rounds=rounds, rounds_for="all",
             more_rounds=0, more_rounds_s=0.0, min_iters=turns,
             torch_malloc="system")  # the reuse variant sets it in its own worker
    return p


def measure(study: str, rounds: int, turns: int, out: Path) -> None:
    from fwcompare import run_studies
    from fwcompare.execution.forkserver import ForkServers

    twins = BY_STUDY[study]
    studies.register(twins)
    t0 = time.perf_counter()
    with ForkServers(out / ".forkservers") as servers:
        _, failed = run_studies({twins.name: (params_for(study, rounds, turns),
                                              out / twins.name)},
                                profile="allocator", servers=servers, progress=False,
                                log=lambda line: None)
    print(f"measured in {time.perf_counter() - t0:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)


def report(study: str, out: Path) -> None:
    res = load_results(out / BY_STUDY[study].name)
    r = res.results[res.results["status"] == "ok"]
    if r.empty:
        raise SystemExit(f"no results under {out}")
    by_cell = samples_by_cell(res.samples)
    shapes = sorted(set(zip(r["batch_size"], r["seq_len"])))
    for b, s in shapes:
        print(f"\n{study}, batch {b} x {s}:")
        shape_report(r[(r["batch_size"] == b) & (r["seq_len"] == s)], by_cell)


def shape_report(r: pd.DataFrame, by_cell: dict) -> None:
    key = r["framework"] + "/" + r["malloc"]
    ids = r.assign(key=key).drop_duplicates("key").set_index("key")["cell_id"]
    rows = []
    for k, cid in ids.items():
        x = by_cell[cid]
        med, lo, hi = rounds_median_ci(x)
        faults = r.loc[r["cell_id"] == cid, "faults_per_call"]
        rows.append(dict(variant=k, rounds=len(x.rounds), median_s=med, low=lo, high=hi,
                         faults_per_step=faults.median()))
    pd.set_option("display.width", 200)
    print(pd.DataFrame(rows).round(4).to_string(index=False))
    for a, b in (("torch/reuse", "torch/glibc"), ("tensorflow/glibc", "torch/glibc"),
                 ("tensorflow/glibc", "torch/reuse")):
        if a in ids and b in ids:
            v, lo, hi = geomean_ratio_ci([(by_cell[ids[a]], by_cell[ids[b]])])
            print(f"{a} / {b}: {v:.3f} [{lo:.3f}, {hi:.3f}] (turn by turn, Student's t "
                  f"over the rounds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", choices=sorted(BY_STUDY), default="training")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12, help="turns per round (at least)")
    ap.add_argument("--out", type=Path, default=OUTPUTS / "allocator")
    ap.add_argument("--analyse", action="store_true", help="only print what is stored")
    args = ap.parse_args()
    print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}; fwcompare "
          f"{fwcompare.__version__}", flush=True)
    if not args.analyse:
        measure(args.study, args.rounds, args.turns, args.out)
    report(args.study, args.out)


if __name__ == "__main__":
    main()
