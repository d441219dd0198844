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
    return _ratio_grid(ratios, manifest, "time_ratio", "ci_low", "ci_high",
                       "time ratio (< 1: faster)",
                       "Time ratio against the baseline, per cell (95% bootstrap CI)",
                       lower_is_better=True)


def _ratio_grid(df: pd.DataFrame, manifest: dict, value: str, low: str, high: str,
                cbar_label: str, title: str, lower_is_better: bool):
    """One heatmap per model (rows) and variant (columns) over batch x
    sequence: ``value`` with its CI in each cell, coloured on a log2 scale
    (blue: better); failed cells grey and hatched with their status. Each
    panel is titled "variant / its baseline" (column ``baseline``)."""
    if df.empty:
        fig = plt.figure(figsize=(4, 1))
        fig.text(0.5, 0.5, "no variant besides the baseline", ha="center")
        return fig
    models = sorted(df["model"].unique())
    variants = sorted(df["variant"].unique())
    batches = sorted(df["batch_size"].unique())
    seqs = sorted(df["seq_len"].unique())
    span = 2.0  # colours saturate at 4x either way; the numbers carry the rest
    norm = matplotlib.colors.Normalize(-span, span, clip=True)
    cmap = plt.get_cmap("RdBu_r" if lower_is_better else "RdBu")
    fig, axes = plt.subplots(len(models), len(variants), squeeze=False,
                             figsize=(1.3 * len(seqs) * len(variants) + 2.4,
                                      0.85 * len(batches) * len(models) + 1.4 * len(models) + 0.6),
                             layout="constrained")
    fig.get_layout_engine().set(rect=(0, 0.06, 1, 0.94))
    for i, model in enumerate(models):
        for j, var in enumerate(variants):
            ax = axes[i, j]
            g = df[(df["model"] == model) & (df["variant"] == var)]
            ax.set_xlim(0, len(seqs))
            ax.set_ylim(len(batches), 0)
            for _, r in g.iterrows():
                x, yy = seqs.index(r["seq_len"]), batches.index(r["batch_size"])
                ok = math.isfinite(r[value])
                level = norm(np.log2(r[value])) if ok else 0.5
                color = cmap(level) if ok else (0.85, 0.85, 0.85)
                ax.add_patch(plt.Rectangle((x, yy), 1, 1, facecolor=color,
                                           hatch=None if ok else "//", edgecolor="white"))
                if ok:
                    txt = f"{r[value]:.2f}"
                    if math.isfinite(r[low]):
                        txt += f"\n[{r[low]:.2f}, {r[high]:.2f}]"
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
            base = g["baseline"].iloc[0] if len(g) else ""
            ax.set_title(f"{model}\n{var} / {base}", fontsize=8)
            if i == len(models) - 1:
                ax.set_xlabel("sequence length")
            if j == 0:
                ax.set_ylabel("batch size")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    cbar = fig.colorbar(sm, ax=axes, shrink=0.8, pad=0.02)
    ticks = np.arange(-span, span + 1)
    cbar.set_ticks(ticks, labels=[f"{2**t:g}" for t in ticks])
    cbar.set_label(cbar_label)
    fig.suptitle(title, x=0.02, ha="left", fontsize=12)
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


# -- acceleration -----------------------------------------------------------------
def speedup_heatmaps(table: pd.DataFrame, manifest: dict):
    """Per model and compiled mode: speed-up over the same framework's eager
    mode across batch x sequence, with its 95% bootstrap CI; where a mode
    helps (blue) and where it hurts (red)."""
    return _ratio_grid(table, manifest, "speedup", "speedup_low", "speedup_high",
                       "speed-up over eager (> 1: faster)",
                       "Speed-up over the same framework's eager mode, per cell "
                       "(95% bootstrap CI; compile time not included)",
                       lower_is_better=False)


def _no_data(message: str):
    fig, ax = plt.subplots(figsize=(6, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center")
    return fig


def _sweep_shapes(g: pd.DataFrame) -> list[str]:
    """The shapes ("BxS") of an acceleration table in sweep order."""
    return list(g.sort_values("sweep_order").drop_duplicates("shape")["shape"])


def _sweep_axis(ax, shapes: list[str]) -> None:
    ax.set_xticks(range(len(shapes)), [f"{sh}\n(cold)" if i == 0 else sh
                                       for i, sh in enumerate(shapes)])
    ax.set_xlabel("shape, batch x sequence, in sweep order")


def _legend_right(fig, axes, title: str, manifest: dict, note: str, right: float):
    """A figure legend on the right from the first panel, the title, the footer."""
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle(title, x=0.02, ha="left")
    _footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.07, right, 0.95))
    return fig


def time_to_first_result(table: pd.DataFrame, manifest: dict):
    """Per model: each compiled mode's time to first result in a fresh process
    (trace or compile plus the first call, at the sweep's first shape) beside
    the same framework's eager first call and one steady-state call, log scale;
    the breakeven number of calls written at the bar's end."""
    cold = table[table["cold"]]
    if cold.empty:
        return _no_data("no compiled mode ran")
    models = sorted(cold["model"].unique())
    height = max(len(cold[cold["model"] == m]) for m in models)
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(6.2 * len(models) + 1.0, 0.55 * height + 2.0))
    colors = palette(cold["variant"])
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = cold[cold["model"] == model].sort_values("variant", ascending=False)
        y = np.arange(len(g))
        ax.barh(y, g["first_call_s"], color=[colors[v] for v in g["variant"]], height=0.6)
        ax.scatter(g["eager_first_call_s"], y, marker="|", s=300, color="0.2", zorder=5,
                   label="eager first call")
        ax.scatter(g["median_s"], y, marker="o", s=25, color="white", edgecolor="0.2",
                   zorder=5, label="one steady-state call")
        for yy, (_, r) in zip(y, g.iterrows()):
            if not math.isfinite(r["first_call_s"]):
                ax.text(0.02, yy, STATUS_MARK.get(r["status"], r["status"]), va="center",
                        transform=ax.get_yaxis_transform(), fontsize=8)
                continue
            be = r["breakeven_calls"]
            be_txt = ("never pays off" if be == math.inf else
                      f"breakeven {be:,.0f} call{'s' if be > 1 else ''}" if math.isfinite(be)
                      else "")
            ax.annotate(f" {r['first_call_s']:.3g} s  {be_txt}", (r["first_call_s"], yy),
                        va="center", fontsize=8)
        ax.set_yticks(y, g["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_PLAIN)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 30)  # room for the labels
        shape = g["shape"].iloc[0]
        ax.set_title(f"{model}, first shape {shape}", fontsize=10)
        ax.set_xlabel("seconds (log)")
    return _legend_right(
        fig, axes, "Time to first result: trace or compile plus the first call, in a fresh "
        "process", manifest, "breakeven: calls at this shape after which the mode, first call "
        "included, has taken no longer than eager", 0.84)


def breakeven(table: pd.DataFrame, manifest: dict):
    """Per model: calls to break even at each shape of the sweep (first shape:
    the cold compile; later shapes: the recompile or re-trace a new shape
    costs), with the range from the CI of the per-call saving; modes that never
    pay off drawn at the top."""
    if table.empty:
        return _no_data("no compiled mode ran")
    models = sorted(table["model"].unique())
    fig, axes = plt.subplots(1, len(models), squeeze=False,
                             figsize=(5.6 * len(models) + 2.6, 4.2))
    colors = palette(table["variant"])
    for j, model in enumerate(models):
        ax = axes[0, j]
        g = table[table["model"] == model]
        shapes = _sweep_shapes(g)
        finite = g["breakeven_calls"].replace(math.inf, np.nan)
        top = max(float(np.nanmax(finite)) if finite.notna().any() else 10.0, 10.0) * 4
        n_var = g["variant"].nunique()
        for k, (var, h) in enumerate(g.groupby("variant")):
            h = h.sort_values("sweep_order")  # dodged a little so bars do not overlap
            x = np.array([shapes.index(sh) for sh in h["shape"]]) + (k - 0.5 * n_var) * 0.06
            be = h["breakeven_calls"].to_numpy(float)
            shown = np.where(np.isinf(be), top, be)
            lo = np.where(np.isfinite(h["breakeven_low"]), h["breakeven_low"], shown)
            hi = np.where(np.isfinite(h["breakeven_high"]), h["breakeven_high"], top)
            ax.errorbar(x, shown, yerr=[np.maximum(shown - lo, 0), np.maximum(hi - shown, 0)],
                        marker="o", ms=5, capsize=2, color=colors[var], label=var)
            never = np.isinf(be)
            ax.scatter(x[never], shown[never], marker="^", s=80, color=colors[var], zorder=5)
        ax.axhline(top, color="0.6", lw=0.8, ls=":")
        ax.text(0.01, top, " never pays off", va="bottom", fontsize=7, color="0.4",
                transform=ax.get_yaxis_transform())
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_PLAIN)
        _sweep_axis(ax, shapes)
        ax.set_title(model, fontsize=10)
        if j == 0:
            ax.set_ylabel("calls to break even (log)")
    return _legend_right(
        fig, axes, "Breakeven: calls at a shape until the mode has paid for its first call",
        manifest, "bars: range from the 95% CI of the per-call saving (first calls are single "
        "measurements); ▲ at the top: never pays off", 0.82)


def recompilations(table: pd.DataFrame, manifest: dict):
    """Per model: the traces/compilations each mode's first call at each new
    shape triggered (top; the framework's own count, "n/a" where it exposes
    none), and that first call's time above a steady call (bottom, log)."""
    if table.empty:
        return _no_data("no compiled mode ran")
    models = sorted(table["model"].unique())
    fig, axes = plt.subplots(2, len(models), squeeze=False, sharex="col",
                             figsize=(5.6 * len(models) + 2.6, 6.0))
    colors = palette(table["variant"])
    variants = sorted(table["variant"].unique())
    width = 0.8 / len(variants)
    for j, model in enumerate(models):
        top, bottom = axes[0, j], axes[1, j]
        g = table[table["model"] == model]
        shapes = _sweep_shapes(g)
        for k, var in enumerate(variants):
            h = g[g["variant"] == var].sort_values("sweep_order")
            if h.empty:
                continue
            x = np.array([shapes.index(sh) for sh in h["shape"]])
            counts = h["recompiles"].to_numpy(float)
            xb = x - 0.4 + width * (k + 0.5)
            top.bar(xb, np.nan_to_num(counts), width=width, color=colors[var], label=var)
            for xx, c in zip(xb, counts):
                top.text(xx, (c if math.isfinite(c) else 0) + 0.05,
                         f"{c:g}" if math.isfinite(c) else "n/a", ha="center", va="bottom",
                         fontsize=7)
            over = h["first_call_overhead_s"].to_numpy(float)
            bottom.plot(x, np.where(over > 0, over, np.nan), marker="o", ms=5,
                        color=colors[var])
        top.set_title(model, fontsize=10)
        most = float(np.nanmax(g["recompiles"].to_numpy(float), initial=0))
        top.set_ylim(0, max(1.0, most) * 1.25)
        top.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        bottom.set_yscale("log")
        bottom.yaxis.set_major_formatter(_PLAIN)
        _sweep_axis(bottom, shapes)
        if j == 0:
            top.set_ylabel("traces / compilations")
            bottom.set_ylabel("first call − steady call (s)")
    return _legend_right(
        fig, axes, "Recompilation: what each new input shape triggers and costs", manifest,
        "counts: torch.compile Dynamo graphs, TorchScript traces, tf.function traces, jax.jit "
        "cache entries", 0.82)


def _scaling_panels(table: pd.DataFrame):
    """(axes grid, panels): one panel per (model, scaling), weak first."""
    keys = sorted({(m, sc) for m, sc in zip(table["model"], table["scaling"])},
                  key=lambda k: (k[0], k[1] != "weak"))
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(4.6 * len(keys) + 2.2, 4.0))
    return fig, axes, keys


def _scaling_title(model: str, scaling: str, g: pd.DataFrame) -> str:
    if scaling == "weak":
        return f"{model}\nweak: {g['per_worker_batch'].iloc[0]} samples per worker"
    return f"{model}\nstrong: global batch {g['batch_size'].iloc[0]}"


def _mark_failed(ax, g: pd.DataFrame, x: str) -> None:
    for _, r in g[~g["status"].isin(("ok", "not_equivalent"))].iterrows():
        ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (r[x], 0), xycoords=(
            "data", "axes fraction"), xytext=(0, 4), textcoords="offset points", ha="center",
            fontsize=8, color="crimson")


def scaling_throughput(table: pd.DataFrame, manifest: dict):
    """Global samples per second against workers, per framework, with the
    95% CI as error bars; the dashed line is linear scaling from each
    framework's baseline (its fewest workers). Failed cells marked on the axis."""
    if table.empty:
        return _no_data("no distributed cell ran")
    fig, axes, keys = _scaling_panels(table)
    colors = palette(table["variant"])
    for ax, (model, scaling) in zip(axes[0], keys):
        g = table[(table["model"] == model) & (table["scaling"] == scaling)]
        for v, h in g.groupby("variant"):
            h = h.sort_values("workers")
            ok = h[h["status"].isin(("ok", "not_equivalent"))]
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
    return _legend_right(fig, axes, "Training throughput against workers (dashed: linear "
                         "scaling)", manifest, "error bars: 95% CI of the median step time, "
                         "timed on rank 0 to the slowest rank", 0.8)


def _bars_by_workers(table: pd.DataFrame, ylabel: str):
    """Panels per (model, scaling), axes labelled, with room for one bar per
    framework at each worker count: (fig, axes, draws), a draw being (axis,
    panel rows, bar x positions, the variant's rows by worker count, bar
    style) for the caller to draw."""
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


def scaling_efficiency(table: pd.DataFrame, manifest: dict):
    """Scaling efficiency (speed-up over the baseline / worker ratio) per
    worker count and framework, with its bootstrap 95% CI; 1 is linear."""
    rest = table[table["workers"] > table["baseline_workers"]] if len(table) else table
    if rest.empty:
        return _no_data("scaling efficiency needs two worker counts")
    fig, axes, draws = _bars_by_workers(rest, "scaling efficiency")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["efficiency"], yerr=[h["efficiency"] - h["efficiency_low"],
                                         h["efficiency_high"] - h["efficiency"]],
               capsize=3, **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["efficiency"] == r["efficiency"]:
                ax.annotate(f"{r['efficiency']:.0%}", (xx, r["efficiency_high"]),
                            ha="center", va="bottom", fontsize=8)
            elif isinstance(r["status"], str):
                ax.annotate(STATUS_MARK.get(r["status"], r["status"]), (xx, 0.02),
                            ha="center", fontsize=8, color="crimson")
        ax.axhline(1.0, color="0.3", lw=1, ls="--")
        ax.set_ylim(0, max(1.15, float(np.nanmax(g["efficiency_high"].to_numpy(float),
                                                  initial=0)) * 1.1))
    return _legend_right(fig, axes, "Scaling efficiency against the fewest workers (1 = linear)",
                         manifest, "error bars: bootstrap 95% CI from the raw step times of "
                         "both cells", 0.82)


def allreduce_share(table: pd.DataFrame, manifest: dict):
    """The gradient all-reduce (every gradient, timed alone after the cell)
    as a share of the step, per framework and worker count."""
    if table.empty or table["allreduce_share"].isna().all():
        return _no_data("no all-reduce was timed")
    fig, axes, draws = _bars_by_workers(table, "all-reduce time / step time")
    for ax, g, x, h, style in draws:
        ax.bar(x, h["allreduce_share"], **style)
        for xx, (_, r) in zip(x, h.iterrows()):
            if r["allreduce_share"] == r["allreduce_share"]:
                ax.annotate(f"{r['allreduce_s'] * 1e3:.3g} ms", (xx, r["allreduce_share"]),
                            ha="center", va="bottom", fontsize=7)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    return _legend_right(fig, axes, "Gradient all-reduce as a share of the training step",
                         manifest, "all-reduce of every gradient timed alone (labels: its "
                         "median); DDP overlaps it with the backward pass, so this bounds the "
                         "cost it adds", 0.82)


def save_figure(fig, directory: Path | str, name: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


# -- claims scorecard ------------------------------------------------------------------
VERDICT_COLOURS = {"supported": "#1a7f37", "contradicted": "#c62828",
                   "inconclusive": "#b26a00", "not measured here": "#6e7781"}
_COUNT_METRICS = ("oom_order", "precision_stability")


def claim_figure(row: dict, points: pd.DataFrame):
    """One claim: the band where it holds (green), the claimed figure (dashed),
    every cell's value (grey dots, the measured distribution) and the summary
    figure with its 95% CI, coloured by verdict. Ratios spanning more than 3x
    on a log axis."""
    import textwrap

    colour = VERDICT_COLOURS[row["verdict"]]
    value, lo, hi = (row.get(k) for k in ("value", "ci_low", "ci_high"))
    has_value = value is not None and math.isfinite(value)
    finite = [x for x in (value, lo, hi, row["expected"]) if x is not None and math.isfinite(x)]
    vals = points["value"].to_numpy(dtype=float) if len(points) else np.array([])
    finite += list(vals[np.isfinite(vals)])
    band = (row["band_low"], row["band_high"])
    finite += [b for b in band if b is not None and math.isfinite(b)]
    log = (row["metric"] not in _COUNT_METRICS and all(x > 0 for x in finite)
           and max(finite) / min(finite) > 3)
    fig, ax = plt.subplots(figsize=(6.4, 2.5))
    if log:
        ax.set_xscale("log")
        left, right = min(finite) / 1.25, max(finite) * 1.25
    else:
        span = (max(finite) - min(finite)) or 1.0
        left, right = min(finite) - 0.15 * span, max(finite) + 0.15 * span
    ax.set_xlim(left, right)
    ax.axvspan(max(band[0], left) if math.isfinite(band[0]) else left,
               min(band[1], right) if math.isfinite(band[1]) else right,
               color="#2da44e", alpha=0.13, lw=0, label="claim holds here")
    ax.axvline(row["expected"], color="0.2", ls="--", lw=1.2, label="claimed")
    if len(vals):
        jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(vals))
        ax.scatter(vals, jitter, s=18, color="0.45", alpha=0.8, zorder=3, label="each cell")
    if has_value:
        has_ci = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
        xerr = [[value - lo], [hi - value]] if has_ci else None
        ax.errorbar([value], [1], xerr=xerr, fmt="D", color=colour, ms=8, capsize=5, lw=2,
                    zorder=4, label="summary, 95% CI" if has_ci else "summary (no CI)")
    else:
        ax.text(0.5, 0.5, textwrap.fill(row["note"] or "no figure measured here", 75),
                transform=ax.transAxes, ha="center", va="center", fontsize=7.5, color=colour,
                bbox=dict(facecolor="white", edgecolor=colour, alpha=0.9))
    ax.set_ylim(-0.6, 1.6)
    ax.set_yticks([0, 1], ["cells", "summary"])
    if log:
        ax.xaxis.set_major_formatter(_PLAIN)
        ax.xaxis.set_minor_formatter(_PLAIN_MINOR)
    ax.set_xlabel(row["unit"], fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title(textwrap.fill(f"{row['verdict'].upper()} · claimed: {row['claimed']}", 95),
                 fontsize=7.5, color=colour, loc="left")
    fig.suptitle(textwrap.fill(row["claim"], 85), x=0.02, ha="left", fontsize=9.5)
    note = textwrap.shorten(f"{row['source']} · {row['study']} study · measured on "
                            f"{row['measured_on']}", 150)
    fig.text(0.005, 0.003, note, fontsize=6.5, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def claim_figures(card) -> list[tuple[str, object]]:
    """(figure name, figure) for every claim of a claims.Scorecard, in order."""
    out = []
    for row in card.table.to_dict("records"):
        out.append((f"claim_{row['id']}", claim_figure(row, card.points[card.points["id"] ==
                                                                         row["id"]])))
    return out
