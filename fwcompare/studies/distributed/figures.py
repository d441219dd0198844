"""The distributed figures (matplotlib is imported when a figure is drawn,
never in a worker)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...results.store import MEASURED
from .engines import DIST_MODES


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
def _scaling_panels(table: pd.DataFrame):
    """(axes grid, panels): one panel per (model, scaling), weak first."""
    import matplotlib.pyplot as plt

    keys = sorted({(m, sc) for m, sc in zip(table["model"], table["scaling"])},
                  key=lambda k: (k[0], k[1] != "weak"))
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(4.6 * len(keys) + 2.2, 4.0))
    return fig, axes, keys


def _scaling_title(model: str, scaling: str, g: pd.DataFrame) -> str:
    if scaling == "weak":
        return f"{model}\nweak: {g['per_worker_batch'].iloc[0]} samples per worker"
    return f"{model}\nstrong: global batch {g['batch_size'].iloc[0]}"


def _mark_failed(ax, g: pd.DataFrame, x: str) -> None:
    from ...results.plots import STATUS_MARK

    for _, r in g[~g["status"].isin(MEASURED)].iterrows():
        ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (r[x], 0), xycoords=(
            "data", "axes fraction"), xytext=(0, 4), textcoords="offset points", ha="center",
            fontsize=8, color="crimson")


def scaling_throughput(table: pd.DataFrame, manifest: dict):
    """Global samples per second against workers, per framework, with the
    95% CI as error bars; the dashed line is linear scaling from each
    framework's baseline (its fewest workers). Failed cells marked on the axis."""
    from ...results.plots import legend_right, no_data, palette

    if table.empty:
        return no_data("no distributed cell ran")
    fig, axes, keys = _scaling_panels(table)
    colors = palette(table["variant"])
    for ax, (model, scaling) in zip(axes[0], keys):
        g = table[(table["model"] == model) & (table["scaling"] == scaling)]
        for v, h in g.groupby("variant"):
            h = h.sort_values("workers")
            ok = h[h["status"].isin(MEASURED)]
            ax.errorbar(ok["workers"], ok["samples_per_s"],
                        yerr=[ok["samples_per_s"] - ok["samples_per_s_low"],
                              ok["samples_per_s_high"] - ok["samples_per_s"]],
                        marker="o", capsize=3, color=colors[v], label=v)
            base = ok[ok["workers"] == ok["baseline_workers"]]
            if len(base):
                b = base.iloc[0]
                ideal = b["samples_per_s"] * h["workers"] / b["workers"]
                ax.plot(h["workers"], ideal, ls="--", color=colors[v], alpha=0.6,
                        label=f"{v} linear")
            _mark_failed(ax, h, "workers")
        ax.set_xticks(sorted(g["workers"].unique()))
        ax.set_xlabel("workers")
        ax.set_ylabel("samples / s (all workers)")
        ax.set_ylim(bottom=0)
        ax.set_title(_scaling_title(model, scaling, g), fontsize=10)
    return legend_right(fig, axes, "Training throughput against workers (dashed: linear "
                        "scaling)", manifest, "error bars: 95% CI of the median step time, "
                        "timed on rank 0 to the slowest rank", 0.8)


def _bars_by_workers(table: pd.DataFrame, ylabel: str):
    """Panels per (model, scaling), axes labelled, with room for one bar per
    framework at each worker count: (fig, axes, draws), a draw being (axis,
    panel rows, bar x positions, the variant's rows by worker count, bar
    style) for the caller to draw."""
    from ...results.plots import palette

    fig, axes, keys = _scaling_panels(table)
    colors = palette(table["variant"])
    variants = sorted(table["variant"].unique())
    width = 0.8 / len(variants)
    draws = []
    for ax, (model, scaling) in zip(axes[0], keys):
        g = table[(table["model"] == model) & (table["scaling"] == scaling)]
        counts = sorted(g["workers"].unique())
        for k, v in enumerate(variants):
            h = g[g["variant"] == v].set_index("workers").reindex(counts)
            x = np.arange(len(counts)) + (k - (len(variants) - 1) / 2) * width
            draws.append((ax, g, x, h, dict(width=width, color=colors[v], label=v)))
        ax.set_xticks(range(len(counts)), [str(c) for c in counts])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.set_title(_scaling_title(model, scaling, g), fontsize=10)
    return fig, axes, draws


def _ratio_bars(ax, g, x, h, style, col: str, fmt: str, top: float, pad: float) -> None:
    """One panel's bars of a ratio (``col``, its CI in ``col``_low/_high)
    against 1 (dashed): each bar labelled with ``fmt`` of its value, a failed
    cell marked on the axis; the y axis up to ``top`` at least, or ``pad``
    times the highest CI end."""
    from ...results.plots import STATUS_MARK

    ax.bar(x, h[col], yerr=[h[col] - h[f"{col}_low"], h[f"{col}_high"] - h[col]],
           capsize=3, **style)
    for xx, (_, r) in zip(x, h.iterrows()):
        if r[col] == r[col]:
            ax.annotate(fmt.format(r[col]), (xx, r[f"{col}_high"]), ha="center",
                        va="bottom", fontsize=8)
        elif isinstance(r["status"], str):
            ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (xx, 0.02),
                        ha="center", fontsize=8, color="crimson")
    ax.axhline(1.0, color="0.3", lw=1, ls="--")
    ax.set_ylim(0, max(top, float(np.nanmax(g[f"{col}_high"].to_numpy(float), initial=0))
                       * pad))


def scaling_efficiency(table: pd.DataFrame, manifest: dict):
    """Scaling efficiency (speed-up over the baseline / worker ratio) per
    worker count and framework, with its 95% CI; 1 is linear."""
    from ...results.plots import legend_right, no_data

    rest = table[table["workers"] > table["baseline_workers"]] if len(table) else table
    if rest.empty:
        return no_data("scaling efficiency needs two worker counts (params key workers: the "
                       "quick profile launches 2 only; smoke and full scale from 1)")
    fig, axes, draws = _bars_by_workers(rest, "scaling efficiency")
    for draw in draws:
        _ratio_bars(*draw, "efficiency", "{:.0%}", 1.15, 1.1)
    return legend_right(fig, axes, "Scaling efficiency against the fewest workers (1 = linear)",
                        manifest, "error bars: 95% CI from the raw step times of "
                        "both cells", 0.82)


def allreduce_share(table: pd.DataFrame, manifest: dict):
    """The gradient all-reduce (every gradient, timed alone after the cell)
    as a share of the step, per framework and worker count."""
    import matplotlib

    from ...results.plots import legend_right, no_data

    if table.empty or table["allreduce_share"].isna().all():
        return no_data("no all-reduce was timed")
    fig, axes, draws = _bars_by_workers(table, "all-reduce time / step time")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["allreduce_share"], **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["allreduce_share"] == r["allreduce_share"]:
                ax.annotate(f"{r['allreduce_s'] * 1e3:.3g} ms", (xx, r["allreduce_share"]),
                            ha="center", va="bottom", fontsize=7)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    return legend_right(fig, axes, "Gradient communication as a share of the training step",
                        manifest, "all-reduce of every gradient timed alone (FSDP: its "
                        "all-gathers and reduce-scatter; parameter server: every worker's "
                        "pull of the weights and push of a gradient; labels: the median); "
                        "DDP and FSDP overlap it with the backward pass, so this bounds the "
                        "cost it adds", 0.82)


def engine_speedup(table: pd.DataFrame, manifest: dict):
    """Each engine's step time against its framework's plain engine at the
    same worker count (plain / engine: above 1 is faster), with its 95% CI."""
    from ...results.plots import legend_right, no_data

    rest = table[table["mode"] != table["framework"].map(lambda fw: DIST_MODES[fw][0])] \
        if len(table) else table
    if rest.empty or rest["speedup"].isna().all():
        return no_data("no engine ran beside its framework's plain one")
    fig, axes, draws = _bars_by_workers(rest, "speed-up over the plain engine")
    for draw in draws:
        _ratio_bars(*draw, "speedup", "{:.2f}x", 1.3, 1.12)
    return legend_right(fig, axes, "Engines against their framework's plain engine "
                        "(DDP; MultiWorkerMirroredStrategy's ring all-reduce), same workers "
                        "and batch", manifest,
                        "error bars: 95% CI from both cells' raw step times", 0.82)


def rank_memory(table: pd.DataFrame, manifest: dict):
    """Memory per rank (``Rank.memory``), per engine and worker count: the
    bar is the largest rank, the line down to the least rank."""
    from ...results.plots import legend_right, no_data

    if table.empty or table["mem_rank_max_mib"].isna().all():
        return no_data("no per-rank memory was measured")
    fig, axes, draws = _bars_by_workers(table, "memory per rank (MiB)")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["mem_rank_max_mib"],
               yerr=[h["mem_rank_max_mib"] - h["mem_rank_min_mib"], np.zeros(len(h))],
               capsize=2, **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["mem_rank_max_mib"] == r["mem_rank_max_mib"]:
                ax.annotate(f"{r['mem_rank_max_mib']:.0f}", (xx, r["mem_rank_max_mib"]),
                            ha="center", va="bottom", fontsize=7)
    return legend_right(fig, axes, "Memory per rank in training", manifest,
                        f"{_memory_scope(table)}; bar: the largest rank, line down to the least",
                        0.82)


def _memory_scope(table: pd.DataFrame) -> str:
    gpu = (table["device"] == "gpu").any()
    return ("each framework allocator's peak over a step on its GPU" if gpu else
            "RSS held after a step over the rank's RSS before its model was loaded (weights, "
            "optimizer state, what the engine keeps between steps); parameter server: each "
            "parameter server's and worker's RSS after a step over its start, the chief "
            "left out")
