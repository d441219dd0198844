"""Inference sweep: latency, throughput and memory of one forward call, per
framework and mode, over models x batch x sequence (the 2019 study's grid).

A worker holds one framework; per precision it loads one model with the
shared weights and measures the cells in ascending size; each mode's forward
is gated against PyTorch's reference in the smallest cell's first call.
"""
from __future__ import annotations

from ..plan.schema import TIMING, grid_params
from ..frameworks import MODES, defaults
from ..measure.workloads import EQUIV_TOL, plan_inference
from ..execution.study import Study


class InferenceSweep(Study):
    name = "inference_sweep"
    title = "Inference sweep: latency, throughput and memory"

    def schema(self):
        return {**grid_params(["bert-base-cased", "gpt2", "distilbert-base-uncased"],
                              defaults(lambda f: f.common_modes), MODES, [1, 2], [32, 128], 1800.0),
                "equiv_tol": EQUIV_TOL, **TIMING}

    def plan(self, ctx, spec):
        return plan_inference(ctx, spec)


STUDY = InferenceSweep()
