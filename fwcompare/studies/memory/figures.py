"""The memory figures (matplotlib is imported when a figure is drawn, never
in a worker)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .tables import search_bound
from .techniques import PLAIN, TECHNIQUES


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def breakdown_figure(table: pd.DataFrame, manifest: dict):
    """Per model and size: a stacked bar per framework and technique, fp32
    parameters, gradients, AdamW state and the rest (activations, workspace,
    runtime) of the measured peak; failed cells are named, not dropped."""
    import matplotlib.pyplot as plt

    from ...results.plots import footer, no_data

    if table.empty:
        return no_data("no training cells")
    groups = list(table.groupby(["model", "batch_size", "seq_len"], sort=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False,
                             figsize=(max(7.0, 1.0 * table.groupby(["model", "batch_size", "seq_len"]).size().max() + 3), 4.6))
    colors = {"param_mib": "#4c72b0", "grad_mib": "#55a868", "optimizer_state_mib": "#c44e52",
              "rest_mib": "#8c8c8c"}
    names = {"param_mib": "parameters (fp32)", "grad_mib": "gradients (fp32)",
             "optimizer_state_mib": "AdamW moments (fp32)",
             "rest_mib": "the rest: activations, workspace, runtime"}
    for ax, ((model, b, s), g) in zip(axes[0], groups):
        labels = [f"{fw}\n{t}" for fw, t in zip(g["framework"], g["technique"])]
        x = np.arange(len(g))
        bottom = np.zeros(len(g))
        for part, color in colors.items():
            vals = np.where(g["status"] == "ok", g[part].fillna(0).clip(lower=0), 0)
            ax.bar(x, vals, bottom=bottom, color=color, label=names[part], width=0.7)
            bottom += vals
        for xi, (_, r) in zip(x, g.iterrows()):
            if r["status"] != "ok":
                ax.text(xi, 0, r["status"], rotation=90, ha="center", va="bottom", fontsize=8,
                        color="#c44e52")
        ax.set_xticks(x, labels, fontsize=7, rotation=45, ha="right")
        ax.set_ylabel("peak memory (MiB)")
        ax.set_title(f"{model}, batch {b} x {s}", fontsize=10)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.suptitle("Peak memory of one training step, split by what holds it", x=0.02, ha="left")
    footer(fig, manifest, "bars: measured peak; the three lower parts are computed from the "
                          "parameter count; a cell that did not run says why")
    fig.tight_layout(rect=(0, 0.07, 0.78, 0.94))
    return fig


def trade_figure(table: pd.DataFrame, manifest: dict):
    """Each technique's peak memory against its step time (95% CI), per
    framework; arrows from the plain step show what a technique trades."""
    import matplotlib.pyplot as plt

    from ...results.plots import legend_right, no_data, palette

    t = table[table["status"] == "ok"] if len(table) else table
    if t.empty:
        return no_data("no measured training cells")
    groups = list(t.groupby(["model", "batch_size", "seq_len"], sort=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False, figsize=(6.0 * len(groups) + 2, 4.4))
    colors = palette(t["framework"])
    markers = dict(zip(TECHNIQUES, "osD^"))
    for ax, ((model, b, s), g) in zip(axes[0], groups):
        for fw, h in g.groupby("framework"):
            for _, r in h.iterrows():
                ax.errorbar(r["median_ms"], r["peak_mib"],
                            xerr=[[r["median_ms"] - r["ci_low_ms"]],
                                  [r["ci_high_ms"] - r["median_ms"]]],
                            marker=markers.get(r["technique"], "o"), color=colors[fw], ms=7,
                            ls="none", capsize=3, label=f"{fw} {r['technique']}")
            base = h[h["technique"] == PLAIN]
            if len(base):
                b0 = base.iloc[0]
                for _, r in h[h["technique"] != PLAIN].iterrows():
                    ax.annotate("", (r["median_ms"], r["peak_mib"]),
                                (b0["median_ms"], b0["peak_mib"]),
                                arrowprops=dict(arrowstyle="->", color=colors[fw], alpha=0.5))
        ax.set_xlabel("median step time (ms, 95% CI)")
        ax.set_ylabel("peak memory (MiB)")
        ax.set_title(f"{model}, batch {b} x {s}", fontsize=10)
    return legend_right(fig, axes, "What each technique trades: memory against step time",
                        manifest, "markers: o plain, s checkpointing, D accumulate-2, "
                                  "^ accumulate-4; arrows start at the same framework's plain "
                                  "step", 0.78)


def largest_batch_figure(table: pd.DataFrame, manifest: dict):
    """The largest batch each framework fit per search, with the smallest that
    did not as a hollow bar end; a search that found nothing says so. With
    rounds (each a search of its own), the bar is the largest batch that fit
    in every round and the hollow end reaches the highest of the rounds'
    smallest failing batches, so every round's limit lies within it."""
    import matplotlib.pyplot as plt

    from ...results.plots import legend_right, no_data, palette

    if table.empty:
        return no_data("no largest-batch search ran")
    # a GPU's search has no budget of its own (NaN): the device's memory bounds it
    groups = list(table.groupby(["model", "seq_len", "budget_gib"], sort=False, dropna=False))
    fig, axes = plt.subplots(1, len(groups), squeeze=False, figsize=(5.5 * len(groups) + 2, 4.2))
    colors = palette(table["framework"])
    for ax, ((model, s, budget), g) in zip(axes[0], groups):
        whats = list(dict.fromkeys(g["what"]))
        fws = sorted(g["framework"].unique())
        width = 0.8 / max(1, len(fws))
        for i, fw in enumerate(fws):
            h = g[g["framework"] == fw]
            for j, w in enumerate(whats):
                rounds = h[h["what"] == w]
                if rounds.empty:
                    continue
                ok = rounds[rounds["status"] == "ok"]
                x = j + (i - (len(fws) - 1) / 2) * width
                if ok.empty:
                    ax.text(x, 0, f"{fw}: {rounds['status'].iloc[0]}", rotation=90, ha="center",
                            va="bottom", fontsize=8, color="#c44e52")
                    continue
                low, top = ok["largest_batch"].min(), ok["largest_batch"].max()
                ax.bar(x, low, width=width, color=colors[fw], label=fw if j == 0 else None)
                oom = ok["oom_batch"].max()
                if oom == oom:
                    ax.bar(x, oom - low, bottom=low, width=width, fill=False,
                           edgecolor=colors[fw], hatch="//")
                ax.text(x, low, f"{low:g}" if top == low else f"{low:g}-{top:g}",
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(whats)), whats)
        ax.set_xlim(-0.5, len(whats) - 0.5)  # a framework's slot even where it drew only a word
        ax.set_ylabel("largest batch that fits")
        ax.set_title(f"{model}, sequence {s}, {search_bound(budget)}", fontsize=10)
    return legend_right(fig, axes, "The largest batch each framework fits in the budget",
                        manifest, "filled: the largest batch that fit in every round (label: "
                                  "its range over rounds); hatched up to the smallest that ran "
                                  "out of memory", 0.82)
