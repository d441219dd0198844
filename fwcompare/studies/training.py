"""Training: step time, memory and loss agreement of one AdamW training step
(forward, loss, backward, update) per framework and mode.

Each mode trains its own model in a process of its own (its memory is not
inflated by another mode's leftovers). Before timing, every framework runs
``agreement_steps`` steps on the gate batch from the shared weights; its
losses must follow PyTorch's (``loss_tol``, ``loss_curve_rtol``). The gate
batch is the smallest cell's, so the first agreement step is that cell's
timed first call (``plan_training``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..plan.schema import TIMING, Param, grid_params, positive
from ..frameworks import TRAIN_MODES, defaults
from ..results.tables import variant
from ..measure.workloads import (AGREEMENT, OPTIMIZER, PRECISION_COLUMNS, TRAINING_COLUMNS,
                                 plan_training, train_settings)
from ..execution.study import Study, per_mode


class Training(Study):
    name = "training"
    title = "Training: step time, memory and loss agreement"
    columns = TRAINING_COLUMNS + PRECISION_COLUMNS
    tasks = ("train",)

    def schema(self):
        return {**grid_params(["bert-base-cased", "gpt2"],
                              defaults(lambda f: f.train_modes), TRAIN_MODES, [2], [64], 1800.0),
                **OPTIMIZER,
                "accumulation_steps": Param("int", 1, "micro-batches per optimizer step (divides every batch size)", positive),
                **AGREEMENT, **TIMING}

    def check(self, params):
        acc = params["accumulation_steps"]
        uneven = [b for b in params["batch_sizes"] if b % acc]
        return ([f"key 'accumulation_steps': {acc} does not divide batch size(s) "
                 f"{', '.join(map(str, uneven))}"] if uneven else [])

    def groups(self, task, cells):
        return per_mode(cells)

    def train_settings(self, params):
        return train_settings(params, accumulation_steps=params["accumulation_steps"])

    def plan(self, ctx, spec):
        return plan_training(ctx, spec, self.train_settings(ctx.params))


STUDY = Training()


# -- tables -------------------------------------------------------------------------
def loss_agreement_table(losses: pd.DataFrame) -> pd.DataFrame:
    """Per model and framework/mode: first and last agreement-step loss, their
    differences from PyTorch's, and whether the loss fell over the steps."""
    rows = []
    for (model, fw, mode), g in losses.groupby(["model", "framework", "mode"]):
        g = g.sort_values("step")
        diff = (g["loss"] - g["reference_loss"]).abs()
        rows.append({"model": model, "variant": variant(fw, mode), "steps": len(g),
                     "first_loss": g["loss"].iloc[0], "last_loss": g["loss"].iloc[-1],
                     "first_loss_abs_diff": diff.iloc[0],
                     "max_rel_diff": (diff / g["reference_loss"].abs()).max(),
                     "loss_decreased": bool(g["loss"].iloc[-1] < g["loss"].iloc[0]),
                     "all_finite": bool(np.isfinite(g["loss"]).all())})
    return pd.DataFrame(rows)


def memory_breakdown_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Measured peak memory beside what parameters, gradients and AdamW state
    need in fp32 (analytic); the rest is activations, workspace and runtime."""
    cols = ["param_bytes", "grad_bytes", "optimizer_state_bytes"]
    out = summary[["model", "variant", "batch_size", "seq_len", "status", "peak_mem_bytes",
                   *cols]].copy()
    mib = 2 ** 20
    for c in ["peak_mem_bytes", *cols]:
        out[c.replace("_bytes", "_mib")] = out.pop(c) / mib
    out["rest_mib"] = out["peak_mem_mib"] - out[[c.replace("_bytes", "_mib") for c in cols]].sum(axis=1)
    return out


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def step_time_vs_seq(summary, manifest):
    from ..results.plots import metric_vs_seq

    return metric_vs_seq(summary, manifest, "median_s", "median time per step (ms)", "ci_low_s",
                         "ci_high_s", scale=1e3,
                         title="Time per training step (forward, loss, backward, AdamW)")


def loss_curves(losses: pd.DataFrame, manifest: dict):
    """Per model: each framework/mode's loss over the agreement steps on the same
    batch from the same weights (top), and its distance from PyTorch's loss on a
    log scale (bottom), since agreeing curves hide each other."""
    import matplotlib
    import matplotlib.pyplot as plt

    from ..results.plots import footer, palette

    models_ = sorted(losses["model"].unique())
    fig, axes = plt.subplots(2, len(models_), squeeze=False, sharex="col",
                             figsize=(4.6 * len(models_) + 2.4, 6.0))
    losses = losses.assign(variant=losses["framework"] + "/" + losses["mode"])
    colors = palette(losses["variant"])
    floor = 1e-9  # identical losses are drawn at this floor
    for j, model in enumerate(models_):
        top, bottom = axes[0, j], axes[1, j]
        g = losses[losses["model"] == model]
        ref = g.drop_duplicates("step").sort_values("step")
        top.plot(ref["step"], ref["reference_loss"], color="0.2", ls="--", lw=2.5, alpha=0.5,
                 label="PyTorch reference")
        for var, h in g.groupby("variant"):
            h = h.sort_values("step")
            top.plot(h["step"], h["loss"], marker="o", ms=4, color=colors[var], label=var)
            diff = np.maximum((h["loss"] - h["reference_loss"]).abs(), floor)
            bottom.plot(h["step"], diff, marker="o", ms=4, color=colors[var])
        top.set_title(model, fontsize=10)
        top.set_ylabel("loss")
        bottom.set_yscale("log")
        bottom.set_ylabel("|loss - PyTorch loss|")
        bottom.set_xlabel("training step (same batch)")
        bottom.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Loss agreement: same weights, same batch, each framework's AdamW",
                 x=0.02, ha="left")
    footer(fig, manifest, f"bottom: differences below {floor:g} drawn at {floor:g}")
    fig.tight_layout(rect=(0, 0.06, 0.8, 0.95))
    return fig
