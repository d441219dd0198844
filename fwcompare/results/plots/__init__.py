"""The figures every study shares, and the helpers of the study modules' own
figures (``fwcompare.studies.*``). Every comparison figure shows its
uncertainty, names its hardware and versions in a footer, and draws failed
cells as marked cells instead of dropping them. Saving a figure (its files,
caption and drawn data) is :mod:`fwcompare.results.plots.files`; its names are this
module's too."""
from __future__ import annotations

import math
from collections.abc import Iterator

import matplotlib


import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ..tables import hardware_line  # noqa: E402,F401  (re-exported for notebooks)
from ..store import FAILED_STATUSES, MEASURED  # noqa: E402
from ..judging import is_exact  # noqa: E402
from .files import (FOOTER_GID, PNG_DPI, SLUG, caption, check_slug, drawn_data,  # noqa: E402,F401
                    save_figure)

STATUS_MARK = {"oom": "OOM", "unsupported": "n/s", "error": "ERR", "timeout": "T/O",
               "not_equivalent": "≠", "baseline oom": "base OOM",
               "baseline error": "base ERR", "baseline unsupported": "base n/s",
               "baseline timeout": "base T/O", "no baseline": "no base"}

sns.set_theme(style="whitegrid", context="notebook")
# Plain numbers on log axes ("300", not "3x10^2"); minor ticks labelled at 2, 3, 5 only.
PLAIN = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
PLAIN_MINOR = matplotlib.ticker.FuncFormatter(
    lambda v, _: f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5)
    else "")


SHORT = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.2g}")
NO_LABEL = matplotlib.ticker.NullFormatter()


def palette(variants) -> dict:
    variants = sorted(set(variants))
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))




def footer(fig, manifest: dict, note: str = "") -> None:
    text = hardware_line(manifest) if manifest else ""
    fig.text(0.005, 0.003, (note + "\n" if note else "") + text, fontsize=7,
             color="0.35", ha="left", va="bottom", gid=FOOTER_GID)


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
                good = g[g["status"].isin(MEASURED)]
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
                ax.yaxis.set_major_formatter(PLAIN)
                # Under a decade shown, label every minor tick or the axis has no numbers.
                ax.yaxis.set_minor_formatter(PLAIN if hi / lo < 10 else PLAIN_MINOR)
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
    footer(fig, manifest, "bands: 95% CI of the median (distribution-free)" if low else "")
    fig.tight_layout(rect=(0, 0.05, 0.77, 0.96))
    return fig


def latency_vs_seq(summary, manifest):
    return metric_vs_seq(summary, manifest, "median_s", "median latency (ms)", "ci_low_s",
                         "ci_high_s", scale=1e3, title="Latency per forward call")


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
    each cell with its 95% CI; failed cells grey with their status."""
    return ratio_grid(ratios, manifest, "time_ratio", "ci_low", "ci_high",
                      "time ratio (< 1: faster)",
                      "Time ratio against the baseline, per cell (95% CI)",
                      lower_is_better=True)


def ratio_grid(df: pd.DataFrame, manifest: dict, value: str, low: str, high: str,
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
    footer(fig, manifest, "grey hatched: the cell failed (status shown)")
    return fig


def roofline(summary: pd.DataFrame, manifest: dict):
    """Achieved GFLOP/s against arithmetic intensity (FLOPs per byte of weight
    traffic, ``bytes_per_call``), one point per measured cell, under the
    machine's measured ceilings (``manifest["peak"]``, fwcompare.measure.peak): the
    bandwidth slope and the matmul roof of each precision the cells ran in. A
    cell far below both is bound by overhead (dispatch, small kernels,
    Python), not by the machine."""
    import textwrap

    peak = (manifest or {}).get("peak") or {}
    ok = summary[summary["status"].isin(MEASURED)] if "status" in summary else summary
    need = ["achieved_flops_per_s", "bytes_per_call", "flops_per_call"]
    if any(c not in ok for c in need):
        return no_data("no FLOP and traffic figures in these results")
    ok = ok.dropna(subset=need)
    ok = ok[(ok["bytes_per_call"] > 0) & (ok["achieved_flops_per_s"] > 0)]
    roofs = {d: r for d, r in (peak.get("flops_per_s") or {}).items() if d in set(ok["dtype"])}
    if ok.empty or not roofs:
        return no_data("no measured cell with a FLOP figure, or no measured peak")
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    x = ok["flops_per_call"] / ok["bytes_per_call"]
    bw = peak.get("bandwidth_bytes_per_s")
    ridge = min(roofs.values()) / bw if bw else x.min()  # where the slope meets a roof
    grid = np.geomspace(min(x.min(), ridge) / 3, x.max() * 3, 200)
    for (dtype, roof), ls in zip(sorted(roofs.items()), ["-", "--", ":", "-."]):
        y = np.minimum(roof, bw * grid) if bw else np.full_like(grid, roof)
        ax.plot(grid, y / 1e9, color="0.3", lw=1.2, ls=ls,
                label=f"{dtype} roof {roof / 1e9:.3g} GFLOP/s"
                      + (f", {bw / 1e9:.3g} GB/s slope" if bw else ""))
    colors = palette(ok["variant"])
    marks = dict(zip(sorted(ok["dtype"].unique()), ["o", "s", "^", "D"]))
    for (variant, dtype), g in ok.groupby(["variant", "dtype"]):
        ax.scatter(g["flops_per_call"] / g["bytes_per_call"], g["achieved_flops_per_s"] / 1e9,
                   color=colors[variant], marker=marks[dtype], s=40, edgecolor="white",
                   lw=0.5, zorder=3, label=f"{variant} {dtype}" if len(marks) > 1 else variant)
    ax.set(xscale="log", yscale="log",
           xlabel="arithmetic intensity (FLOPs per byte of weights moved)",
           ylabel="achieved GFLOP/s",
           ylim=(ok["achieved_flops_per_s"].min() / 1e9 / 2, max(roofs.values()) / 1e9 * 1.6))
    ax.xaxis.set_major_formatter(PLAIN)
    ax.xaxis.set_minor_formatter(NO_LABEL)
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(PLAIN_MINOR)
    ax.set_title("Each cell against this machine's measured ceilings (roofline)", loc="left",
                 fontsize=11)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    footer(fig, manifest, textwrap.fill(f"ceilings: {peak.get('method', 'measured')}", 170))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


# -- helpers for the study modules' own figures ---------------------------------------


def speed_error_point(ax, r, color, marker: str) -> bool:
    """One cell of a speed-against-error figure (mixed precision, deployment):
    x its ``speedup`` with its 95% CI (``speedup_low``, ``speedup_high``) as a
    horizontal bar, y its ``fp64_rel_l2_err``; hollow when not equivalent.
    False, and nothing drawn, when either figure is not a positive number."""
    if not (math.isfinite(r["speedup"]) and r["fp64_rel_l2_err"] > 0):
        return False
    lo, hi = r["speedup_low"], r["speedup_high"]
    xerr = ([[r["speedup"] - lo], [hi - r["speedup"]]]
            if math.isfinite(lo) and math.isfinite(hi) else None)
    ax.errorbar(r["speedup"], r["fp64_rel_l2_err"], xerr=xerr, marker=marker, ms=7, ls="",
                capsize=2, color=color, mfc="none" if r["status"] == "not_equivalent" else color)
    return True


def speed_error_axes(ax, title: str, xlabel: str, first: bool) -> None:
    """A speed-against-error panel's axes: log 2 speed-up (1 dotted), log error."""
    ax.axvline(1.0, color="0.5", lw=1, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(SHORT)
    lo, hi = ax.get_xlim()
    ax.xaxis.set_minor_formatter(SHORT if hi / lo < 4 else NO_LABEL)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    if first:
        ax.set_ylabel("relative L2 error vs float64")


def speed_error_legend(fig, colors: dict, markers: dict) -> None:
    """The legend right of a speed-against-error figure: a colour per variant
    (``colors``), a marker per kind (``markers``: label -> marker), hollow."""
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=v) for v, c in colors.items()]
    handles += [plt.Line2D([], [], color="0.3", marker=m, ls="", label=label)
                for label, m in markers.items()]
    handles.append(plt.Line2D([], [], color="0.3", marker="o", mfc="none", ls="",
                              label="not equivalent (hollow)"))
    fig.legend(handles=handles, loc="center right", fontsize=8)


def no_data(message: str):
    fig, ax = plt.subplots(figsize=(6, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center")
    return fig


def legend_right(fig, axes, title: str, manifest: dict, note: str, right: float):
    """A figure legend on the right from the first panel, the title, the footer."""
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle(title, x=0.02, ha="left")
    footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.07, right, 0.95))
    return fig


# -- claims scorecard ------------------------------------------------------------------
VERDICT_COLOURS = {"supported": "#1a7f37", "contradicted": "#c62828",
                   "inconclusive": "#b26a00", "not measured here": "#6e7781"}


def _claim_axis(ax, row: dict, more=(), count: bool = False) -> bool:
    """A claim's x axis on ``ax``: its limits around the figure, its CI, the
    claimed figure, the band's finite edges and ``more`` values; log when all
    are positive and span more than 3x (not for a count); the band where the
    claim holds shaded green and the claimed figure dashed. True when log."""
    value, lo, hi = (row.get(k) for k in ("value", "ci_low", "ci_high"))
    finite = [x for x in (value, lo, hi, row["expected"], *more)
              if x is not None and math.isfinite(x)]
    band = (row["band_low"], row["band_high"])
    finite += [b for b in band if b is not None and math.isfinite(b)]
    log = (not count and all(x > 0 for x in finite)
           and max(finite) / min(finite) > 3)
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
    return log


def claim_figure(row: dict, points: pd.DataFrame, count: bool = False):
    """One claim: the band where it holds (green), the claimed figure (dashed),
    every cell's value (grey dots, the measured distribution) and the summary
    figure with its 95% CI, coloured by verdict. Ratios spanning more than 3x
    on a log axis; ``count``: the figure is a signed count (a linear axis)."""
    import textwrap

    colour = VERDICT_COLOURS[row["verdict"]]
    value, lo, hi = (row.get(k) for k in ("value", "ci_low", "ci_high"))
    has_value = value is not None and math.isfinite(value)
    vals = points["value"].to_numpy(dtype=float) if len(points) else np.array([])
    fig, ax = plt.subplots(figsize=(6.4, 2.5))
    log = _claim_axis(ax, row, vals, count)
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
        ax.xaxis.set_major_formatter(PLAIN)
        ax.xaxis.set_minor_formatter(PLAIN_MINOR)
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


def claim_figures(card) -> Iterator[tuple[str, object]]:
    """(figure name, figure) for every claim of a claims.Scorecard, in order,
    each drawn when asked for: the caller saves (and closes) one before the
    next is open (45 at once made matplotlib warn of too many open figures)."""
    for row in card.table.to_dict("records"):
        yield (f"claim_{row['id']}", claim_figure(row, card.points[card.points["id"] == row["id"]],
                                                   row["metric"] in card.counts))


def scorecard_forest(card, manifest: dict | None = None):
    """Every judged claim at a glance (a forest plot), grouped by study: per
    claim, its band where it holds (green), the claimed figure (dashed), the
    measured figure with its 95% CI as a line, the marker in the verdict's
    colour (hollow: no interval). Each row has its own scale (the claims'
    units differ: time ratios, counts, correlations); ``manifest``: the
    machine for the footer. Claims not measured here are counted, not drawn."""
    rows = [r for r in card.table.to_dict("records") if r["verdict"] != "not measured here"]
    if not rows:
        return no_data("no claim could be judged from these results")
    lines: list[tuple[str, object]] = []
    for study in dict.fromkeys(r["study"] for r in rows):
        lines += [("study", study)] + [("claim", r) for r in rows if r["study"] == study]
    fig = plt.figure(figsize=(9.0, 0.36 * len(lines) + 1.2))
    grid = fig.add_gridspec(len(lines), 1, hspace=0.9)
    for i, (kind, item) in enumerate(lines):
        ax = fig.add_subplot(grid[i])
        if kind == "study":
            ax.axis("off")
            ax.text(-0.01, 0.0, f"{item} study", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=8.5, weight="bold")
            continue
        r, colour = item, VERDICT_COLOURS[item["verdict"]]
        log = _claim_axis(ax, r, count=r["metric"] in card.counts)
        value, lo, hi = r["value"], r["ci_low"], r["ci_high"]
        has_ci = math.isfinite(lo) and math.isfinite(hi)
        bar = ax.errorbar([value], [0], xerr=[[value - lo], [hi - value]] if has_ci else None,
                          fmt="D", ms=5.5, lw=2, capsize=3, color=colour, zorder=4,
                          mfc=colour if has_ci else "white")
        bar.lines[0].set_label(f"{r['id']}: {r['verdict']}")  # the marker, in the CSV
        ax.set_ylim(-1, 1)
        ax.set_yticks([])
        ax.grid(False, axis="y")
        if log:
            ax.xaxis.set_major_formatter(PLAIN)
            ax.xaxis.set_minor_formatter(PLAIN_MINOR)
        ax.tick_params(axis="x", which="both", labelsize=6, pad=1, length=2)
        ax.text(-0.01, 0.5, r["id"], transform=ax.transAxes, ha="right", va="center",
                fontsize=7.5)
        exact = is_exact(lo, value, hi)  # the same in every process (from_rounds)
        figure = f"{value:.3g}" + (" (exact)" if exact else f" [{lo:.3g}, {hi:.3g}]" if has_ci
                                   else " (no CI)")
        ax.text(1.01, 0.5, f"{r['verdict']}: {figure}", transform=ax.transAxes, ha="left",
                va="center", fontsize=7, color=colour)
    counts = card.verdict_counts()
    fig.suptitle("The scorecard at a glance: "
                 + ", ".join(f"{n} {v}" for v, n in counts.items() if n), x=0.02, ha="left",
                 fontsize=10)
    footer(fig, manifest or {}, "green: where the claim holds; dashed: the claimed figure; "
           "line: the measured figure's 95% CI (hollow marker: a figure with no CI); "
           "each row its own scale")
    fig.subplots_adjust(left=0.3, right=0.8, top=1 - 0.55 / fig.get_figheight(),
                        bottom=0.75 / fig.get_figheight())
    return fig
