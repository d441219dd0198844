"""The standard figures. Every comparison figure shows its uncertainty, names
its hardware and versions in a footer, and draws failed cells as marked cells
instead of dropping them."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib


import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .env import hardware_line  # noqa: E402,F401  (re-exported for notebooks)
from .results import FAILED_STATUSES  # noqa: E402

STATUS_MARK = {"oom": "OOM", "unsupported": "n/s", "error": "ERR", "timeout": "T/O",
               "not_equivalent": "≠", "baseline oom": "base OOM",
               "baseline error": "base ERR", "baseline unsupported": "base n/s",
               "baseline timeout": "base T/O", "no baseline": "no base"}

sns.set_theme(style="whitegrid", context="notebook")
# Plain numbers on log axes ("300", not "3x10^2"); minor ticks labelled at 2, 3, 5 only.
_PLAIN = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
_PLAIN_MINOR = matplotlib.ticker.FuncFormatter(
    lambda v, _: f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5)
    else "")


_SHORT = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.2g}")
_NO_LABEL = matplotlib.ticker.NullFormatter()


def palette(variants) -> dict:
    variants = sorted(set(variants))
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))


def _footer(fig, manifest: dict, note: str = "") -> None:
    text = hardware_line(manifest) if manifest else ""
    fig.text(0.005, 0.003, (note + "\n" if note else "") + text, fontsize=7,
             color="0.35", ha="left", va="bottom")


def metric_vs_seq(summary: pd.DataFrame, manifest: dict, y: str, ylabel: str,
                  low: str | None = None, high: str | None = None, scale: float = 1.0,
                  title: str = "", logy: bool = True):
    """One panel per (model, batch size): ``y`` against sequence length per
    variant, with a CI band from ``low``/``high``; failed cells marked by an x
    on the axis with their status."""
    models = sorted(summary["model"].unique())
    batches = sorted(summary["batch_size"].unique())
    colors = palette(summary["variant"])
    fig, axes = plt.subplots(len(models), len(batches), squeeze=False, sharex=True,
                             figsize=(3.6 * len(batches) + 2.8, 2.9 * len(models) + 0.9))
    for i, model in enumerate(models):
        for j, b in enumerate(batches):
            ax = axes[i, j]
            cell = summary[(summary["model"] == model) & (summary["batch_size"] == b)]
            for var, g in cell.groupby("variant"):
                g = g.sort_values("seq_len")
                good = g[g["status"].isin(["ok", "not_equivalent"])]
                ax.plot(good["seq_len"], good[y] * scale, marker="o", ms=4, color=colors[var],
                        label=var)
                if low and high:
                    ax.fill_between(good["seq_len"], good[low] * scale, good[high] * scale,
                                    color=colors[var], alpha=0.25, lw=0)
                neq = good[good["status"] == "not_equivalent"]
                ax.scatter(neq["seq_len"], neq[y] * scale, s=90, facecolors="none",
                           edgecolors="red", lw=1.5, zorder=5)
                for _, r in g[g["status"].isin(FAILED_STATUSES)].iterrows():
                    ax.plot([r["seq_len"]], [0.02], marker="x", ms=9, mew=2, color=colors[var],
                            transform=ax.get_xaxis_transform(), clip_on=False)
                    ax.annotate(STATUS_MARK[r["status"]], (r["seq_len"], 0.06),
                                xycoords=("data", "axes fraction"), ha="center",
                                fontsize=7, color=colors[var])
            ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
                lo, hi = ax.get_ylim()
                ax.yaxis.set_major_formatter(_PLAIN)
                # Under a decade shown, label every minor tick or the axis has no numbers.
                ax.yaxis.set_minor_formatter(_PLAIN if hi / lo < 10 else _PLAIN_MINOR)
            ax.set_title(f"{model}, batch {b}", fontsize=10)
            if j == 0:
                ax.set_ylabel(ylabel)
            if i == len(models) - 1:
                ax.set_xlabel("sequence length (tokens)")
            seqs = sorted(summary["seq_len"].unique())
            ax.set_xticks(seqs, [str(s) for s in seqs])
    handles = [plt.Line2D([], [], color=c, marker="o", label=v) for v, c in colors.items()]
    handles.append(plt.Line2D([], [], color="0.3", marker="x", ls="", mew=2,
                              label="failed cell (OOM / n/s / ERR / T/O)"))
    handles.append(plt.Line2D([], [], marker="o", ls="", mfc="none", mec="red",
                              label="not equivalent"))
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=True)
    fig.suptitle(title, x=0.02, ha="left")
    _footer(fig, manifest, "bands: 95% CI of the median (distribution-free)" if low else "")
    fig.tight_layout(rect=(0, 0.05, 0.77, 0.96))
    return fig


def latency_vs_seq(summary, manifest):
    return metric_vs_seq(summary, manifest, "median_s", "median latency (ms)", "ci_low_s",
                         "ci_high_s", scale=1e3, title="Latency per forward call")


def step_time_vs_seq(summary, manifest):
    return metric_vs_seq(summary, manifest, "median_s", "median time per step (ms)", "ci_low_s",
                         "ci_high_s", scale=1e3,
                         title="Time per training step (forward, loss, backward, AdamW)")


def loss_curves(losses: pd.DataFrame, manifest: dict):
    """Per model: each framework/mode's loss over the agreement steps on the same
    batch from the same weights (top), and its distance from PyTorch's loss on a
    log scale (bottom), since agreeing curves hide each other."""
    models = sorted(losses["model"].unique())
    fig, axes = plt.subplots(2, len(models), squeeze=False, sharex="col",
                             figsize=(4.6 * len(models) + 2.4, 6.0))
    losses = losses.assign(variant=losses["framework"] + "/" + losses["mode"])
    colors = palette(losses["variant"])
    floor = 1e-9  # identical losses are drawn at this floor
    for j, model in enumerate(models):
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
    _footer(fig, manifest, f"bottom: differences below {floor:g} drawn at {floor:g}")
    fig.tight_layout(rect=(0, 0.06, 0.8, 0.95))
    return fig


def throughput(summary, manifest):
    return metric_vs_seq(summary, manifest, "tokens_per_s", "tokens / s", "tokens_per_s_low",
                         "tokens_per_s_high", title="Throughput (higher is better)")


def peak_memory(summary, manifest):
    method = ""
    if "mem_method" in summary and len(summary):
        method = ", ".join(sorted(set(summary["mem_method"].dropna()) - {""}))
    return metric_vs_seq(summary, manifest, "peak_mem_bytes", "peak memory (MiB)",
                         scale=1 / 2**20, logy=False,
                         title=f"Peak memory per call ({method or 'n/a'})")


def ratio_heatmaps(ratios: pd.DataFrame, manifest: dict):
    """Per model and variant: time / baseline time over batch x sequence,
    each cell with its 95% bootstrap CI; failed cells grey with their status."""
    if ratios.empty:
        fig = plt.figure(figsize=(4, 1))
        fig.text(0.5, 0.5, "no variant besides the baseline", ha="center")
        return fig
    models = sorted(ratios["model"].unique())
    variants = sorted(ratios["variant"].unique())
    batches = sorted(ratios["batch_size"].unique())
    seqs = sorted(ratios["seq_len"].unique())
    span = 2.0  # colours saturate at 4x either way; the numbers carry the rest
    norm = matplotlib.colors.Normalize(-span, span, clip=True)
    cmap = plt.get_cmap("RdBu_r")
    fig, axes = plt.subplots(len(models), len(variants), squeeze=False,
                             figsize=(1.3 * len(seqs) * len(variants) + 2.4,
                                      0.85 * len(batches) * len(models) + 1.4 * len(models) + 0.6),
                             layout="constrained")
    fig.get_layout_engine().set(rect=(0, 0.06, 1, 0.94))
    for i, model in enumerate(models):
        for j, var in enumerate(variants):
            ax = axes[i, j]
            g = ratios[(ratios["model"] == model) & (ratios["variant"] == var)]
            ax.set_xlim(0, len(seqs))
            ax.set_ylim(len(batches), 0)
            for _, r in g.iterrows():
                x, yy = seqs.index(r["seq_len"]), batches.index(r["batch_size"])
                ok = math.isfinite(r["time_ratio"])
                level = norm(np.log2(r["time_ratio"])) if ok else 0.5
                color = cmap(level) if ok else (0.85, 0.85, 0.85)
                ax.add_patch(plt.Rectangle((x, yy), 1, 1, facecolor=color,
                                           hatch=None if ok else "//", edgecolor="white"))
                if ok:
                    txt = f"{r['time_ratio']:.2f}"
                    if math.isfinite(r["ci_low"]):
                        txt += f"\n[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
                    if r["status"] == "not_equivalent":
                        txt += "\n≠ equiv"
                else:
                    txt = STATUS_MARK.get(r["status"], r["status"])
                dark = abs(level - 0.5) > 0.3
                ax.text(x + 0.5, yy + 0.5, txt, ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            ax.set_xticks(np.arange(len(seqs)) + 0.5, [str(s) for s in seqs])
            ax.set_yticks(np.arange(len(batches)) + 0.5, [str(b) for b in batches])
            ax.grid(False)
            ax.set_title(f"{model}\n{var} / {ratios['baseline'].iloc[0]}", fontsize=8)
            if i == len(models) - 1:
                ax.set_xlabel("sequence length")
            if j == 0:
                ax.set_ylabel("batch size")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    cbar = fig.colorbar(sm, ax=axes, shrink=0.8, pad=0.02)
    ticks = np.arange(-span, span + 1)
    cbar.set_ticks(ticks, labels=[f"{2**t:g}" for t in ticks])
    cbar.set_label("time ratio (< 1: faster)")
    fig.suptitle("Time ratio against the baseline, per cell (95% bootstrap CI)",
                 x=0.02, ha="left", fontsize=12)
    _footer(fig, manifest, "grey hatched: the cell failed (status shown)")
    return fig


# -- mixed precision --------------------------------------------------------------
PRECISION_MARKER = {"float32": "o", "tf32": "D", "bfloat16": "s", "float16": "^"}


def speed_vs_error(table: pd.DataFrame, manifest: dict):
    """Per model: each inference cell as a point, x its speed-up over float32
    of the same framework (95% bootstrap CI as a horizontal bar), y its
    relative L2 error against float64 (log). Colour: framework/mode; marker:
    precision. Cells that did not run are listed under the panels."""
    t = table[table["task"] == "inference"]
    models = sorted(t["model"].unique())
    colors = palette(t["variant"])
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(4.8 * len(models) + 2.8, 4.6))
    failed = []
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = t[t["model"] == model]
        for _, r in g.iterrows():
            if not (math.isfinite(r["speedup"]) and r["fp64_rel_l2_err"] > 0):
                failed.append(f"{r['dtype']} {r['status']}")
                continue
            lo, hi = r["speedup_low"], r["speedup_high"]
            xerr = ([[r["speedup"] - lo], [hi - r["speedup"]]]
                    if math.isfinite(lo) and math.isfinite(hi) else None)
            ax.errorbar(r["speedup"], r["fp64_rel_l2_err"], xerr=xerr,
                        marker=PRECISION_MARKER.get(r["dtype"], "o"), ms=7, ls="",
                        color=colors[r["variant"]], capsize=2,
                        mfc="none" if r["status"] == "not_equivalent" else colors[r["variant"]])
        ax.axvline(1.0, color="0.5", lw=1, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(_SHORT)
        lo, hi = ax.get_xlim()
        ax.xaxis.set_minor_formatter(_SHORT if hi / lo < 4 else _NO_LABEL)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("speed-up over float32, same framework (> 1: faster)")
        if j == 0:
            ax.set_ylabel("relative L2 error vs float64")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in colors.items()]
    handles += [plt.Line2D([], [], color="0.3", marker=m, ls="", label=d)
                for d, m in PRECISION_MARKER.items() if d in set(t["dtype"])]
    handles.append(plt.Line2D([], [], color="0.3", marker="o", mfc="none", ls="",
                              label="not equivalent (hollow)"))
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("Speed against error: what each precision buys and costs (inference)",
                 x=0.02, ha="left")
    note = "bars: 95% bootstrap CI of the speed-up"
    if failed:
        counts = pd.Series(failed).value_counts()
        note += "; cells not drawn: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    _footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.08, 0.8, 0.95))
    return fig


def precision_loss_curves(losses: pd.DataFrame, manifest: dict):
    """Per framework/mode (columns) and model: the loss of each precision over
    the same steps from the same weights and batch (top), and its relative
    deviation from that framework's float32 loss (bottom, log)."""
    if losses.empty:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no training run recorded losses", ha="center")
        return fig
    losses = losses.assign(variant=losses["framework"] + "/" + losses["mode"])
    cols = [(m, v) for m in sorted(losses["model"].unique())
            for v in sorted(losses.loc[losses["model"] == m, "variant"].unique())]
    fig, axes = plt.subplots(2, len(cols), squeeze=False, sharex="col",
                             figsize=(3.8 * len(cols) + 2.0, 5.8))
    dtypes = [d for d in PRECISION_MARKER if d in set(losses["dtype"])]
    colors = dict(zip(dtypes, sns.color_palette("colorblind", len(dtypes))))
    floor = 1e-7
    for j, (model, var) in enumerate(cols):
        top, bottom = axes[0, j], axes[1, j]
        g = losses[(losses["model"] == model) & (losses["variant"] == var)]
        base = g[g["dtype"] == "float32"].set_index("step")["loss"]
        for dtype in dtypes:
            h = g[g["dtype"] == dtype].sort_values("step")
            if h.empty:
                continue
            kw = dict(color=colors[dtype], marker=PRECISION_MARKER[dtype], ms=3, label=dtype)
            top.plot(h["step"], h["loss"], **kw)
            skipped = h[h["skipped"]]
            top.scatter(skipped["step"], skipped["loss"], marker="x", s=60, color="red", zorder=5)
            if dtype != "float32" and len(base):
                dev = ((h.set_index("step")["loss"] - base).abs() / base.abs()).dropna()
                bottom.plot(dev.index, np.maximum(dev.to_numpy(), floor), **kw)
        top.set_title(f"{model}\n{var}", fontsize=9)
        bottom.set_yscale("log")
        bottom.set_xlabel("training step (same batch)")
        bottom.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if j == 0:
            top.set_ylabel("loss")
            bottom.set_ylabel("|loss - fp32 loss| / fp32 loss")
    handles = [plt.Line2D([], [], color=colors[d], marker=PRECISION_MARKER[d], label=d)
               for d in dtypes]
    handles.append(plt.Line2D([], [], color="red", marker="x", ls="", label="step skipped"))
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("Training in each precision: same weights, same batch, same steps",
                 x=0.02, ha="left")
    _footer(fig, manifest, f"bottom: deviations below {floor:g} drawn at {floor:g}")
    fig.tight_layout(rect=(0, 0.06, 0.85, 0.95))
    return fig


def loss_scale_trajectories(losses: pd.DataFrame, manifest: dict):
    """The dynamic loss scale after each step of every scaled run (float16),
    skipped steps marked; a flat line means no overflow."""
    scaled = losses[np.isfinite(losses["loss_scale"])]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    if scaled.empty:
        ax.text(0.5, 0.5, "no run used loss scaling", ha="center", transform=ax.transAxes)
        return fig
    scaled = scaled.assign(label=scaled["model"] + " " + scaled["framework"] + "/"
                           + scaled["mode"] + " " + scaled["dtype"])
    colors = palette(scaled["label"])
    for label, h in scaled.groupby("label"):
        h = h.sort_values("step")
        ax.step(h["step"], h["loss_scale"], where="post", color=colors[label], label=label)
        sk = h[h["skipped"]]
        ax.scatter(sk["step"], sk["loss_scale"], marker="x", s=60, color="red", zorder=5)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Dynamic loss scale (float16); x: step skipped on overflow", fontsize=10)
    _footer(fig, manifest)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def save_figure(fig, directory: Path | str, name: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
