"""The figures every study shares, and the helpers of the study modules' own
figures (``fwcompare.studies.*``). Every comparison figure shows its
uncertainty, names its hardware and versions in a footer, and draws failed
cells as marked cells instead of dropping them."""
from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib


import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .env import hardware_line  # noqa: E402,F401  (re-exported for notebooks)
from .results import FAILED_STATUSES, MEASURED  # noqa: E402

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


FOOTER_GID = "fwcompare-footer"  # how save_figure finds the footer for the caption


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
    machine's measured ceilings (``manifest["peak"]``, fwcompare.peak): the
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


# A figure's name becomes its file names and a link of the report's index.
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,80}$")
PNG_DPI = 200  # print quality; notebooks show it at screen size (Image(retina=True))


def check_slug(name: str, what: str = "figure name") -> str:
    """``name`` if it is a safe file name and URL part (lower-case letters,
    digits, '-' and '_'); ValueError naming it otherwise."""
    if not isinstance(name, str) or not SLUG.match(name):
        raise ValueError(f"{what} {name!r} must be lower-case letters, digits, '-' and '_' "
                         f"(it becomes a file name and a link)")
    return name


def save_figure(fig, directory: Path | str, name: str) -> None:
    """Save ``fig`` for print and reuse, and close it: ``<name>.png`` (200
    dpi), ``<name>.svg``, ``<name>.csv`` (every number drawn,
    :func:`drawn_data`) and ``<name>.caption.txt`` (its title and footer:
    what it shows, the hardware, the versions; the report's index shows it
    under the figure). In a notebook, show that very PNG. The figure is laid
    out once and drawn once per file: left open, the inline backend drew it
    again to show it (0.15-0.3 s a figure on a 2-core AMD EPYC)."""
    check_slug(name)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    # One layout for both files ("tight" lays out per savefig), at the PNG's dpi as its box was
    fig.set_dpi(PNG_DPI)
    fig.draw_without_rendering()
    box = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    # No engine: a placeholder lays out again; None alone takes the user's autolayout rc
    with matplotlib.rc_context({"figure.autolayout": False,
                                "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)
    fig.savefig(path, dpi=PNG_DPI, bbox_inches=box)
    fig.savefig(directory / f"{name}.svg", bbox_inches=box)
    drawn_data(fig).to_csv(directory / f"{name}.csv", index=False)
    (directory / f"{name}.caption.txt").write_text(caption(fig, name) + "\n")
    plt.close(fig)
    _show_in_notebook(path)


def caption(fig, name: str = "") -> str:
    """The figure's title (its suptitle, else its panels' titles) and its
    footer (note, hardware, versions, commit), as one paragraph."""
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    if not title:
        title = "; ".join(t for t in (ax.get_title() for ax in fig.axes) if t)
    foot = " ".join(t.get_text() for t in fig.texts if t.get_gid() == FOOTER_GID)
    text = ". ".join(x.strip().rstrip(".") for x in (title or name, foot) if x.strip())
    return " ".join(text.split())


def _tick_label(axis, value) -> str:
    """The tick label at ``value`` on ``axis`` (categorical axes), else ''."""
    try:
        for loc, lab in zip(axis.get_ticklocs(), axis.get_ticklabels()):
            if math.isclose(float(loc), float(value), rel_tol=1e-9, abs_tol=1e-9):
                return lab.get_text()
    except (TypeError, ValueError):
        pass
    return ""


def drawn_data(fig) -> pd.DataFrame:
    """Every number a figure draws, one row per point, bar, interval, band
    edge, heatmap cell or label, read back from its artists (so no figure
    can draw a number its CSV lacks): the panel (index, title, axis labels),
    the series (legend label), the kind of mark, x and y in data units with
    their tick labels on categorical axes, an interval's ends, a heatmap
    cell's value, a text mark's text."""
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh
    from matplotlib.container import BarContainer
    from matplotlib.image import AxesImage

    rows: list[dict] = []
    for i, ax in enumerate(fig.axes):
        if ax.get_label() == "<colorbar>":
            continue
        base = {"panel": i, "panel_title": ax.get_title(), "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel()}

        def add(kind, series="", x=math.nan, y=math.nan, **extra):
            label = "" if str(series).startswith("_") else str(series)
            rows.append({**base, "series": label, "kind": kind, "x": x, "y": y,
                         "x_label": _tick_label(ax.xaxis, x) if np.isfinite(x) else "",
                         "y_label": _tick_label(ax.yaxis, y) if np.isfinite(y) else "",
                         **extra})
        in_bars = set()
        for c in ax.containers:
            if isinstance(c, BarContainer):
                horizontal = getattr(c, "orientation", "vertical") == "horizontal"
                for p in c.patches:
                    in_bars.add(id(p))
                    if horizontal:
                        add("bar", c.get_label(), x=p.get_x() + p.get_width(),
                            y=p.get_y() + p.get_height() / 2)
                    else:
                        add("bar", c.get_label(), x=p.get_x() + p.get_width() / 2,
                            y=p.get_y() + p.get_height())
        for line in ax.lines:
            xs, ys = (np.asarray(v, dtype=float).ravel() for v in line.get_data(orig=True))
            for x, y in zip(xs, ys):
                add("line" if line.get_linestyle() not in ("None", "", " ") else "point",
                    line.get_label(), x=float(x), y=float(y))
        for coll in ax.collections:
            label = coll.get_label()
            if isinstance(coll, QuadMesh):
                values = np.ma.asarray(coll.get_array())
                coords = coll.get_coordinates()  # (rows + 1, cols + 1, 2) corners
                centres = (coords[:-1, :-1] + coords[1:, 1:]) / 2
                values = values.reshape(centres.shape[:2])
                for (r, c), v in np.ndenumerate(values):
                    add("cell", label, x=float(centres[r, c, 0]), y=float(centres[r, c, 1]),
                        value=math.nan if np.ma.is_masked(v) else float(v))
            elif isinstance(coll, LineCollection):
                for seg in coll.get_segments():
                    seg = np.asarray(seg, dtype=float)
                    if len(seg) < 2:
                        continue
                    (x0, y0), (x1, y1) = seg[0], seg[-1]
                    if math.isclose(x0, x1):
                        add("interval", label, x=x0, y_low=min(y0, y1), y_high=max(y0, y1))
                    else:
                        add("interval", label, y=y0, x_low=min(x0, x1), x_high=max(x0, x1))
            elif isinstance(coll, PolyCollection):  # fill_between bands: each x's extent
                for path in coll.get_paths():
                    v = np.asarray(path.vertices, dtype=float)
                    for x in np.unique(v[:, 0]):
                        ys = v[v[:, 0] == x, 1]
                        add("band", label, x=float(x), y_low=float(ys.min()),
                            y_high=float(ys.max()))
            elif isinstance(coll, PathCollection):  # scatter
                for x, y in np.asarray(coll.get_offsets(), dtype=float):
                    add("point", label, x=float(x), y=float(y))
        for p in ax.patches:
            if id(p) in in_bars or not hasattr(p, "get_width"):
                continue
            add("bar", p.get_label(), x=p.get_x() + p.get_width() / 2,
                y=p.get_y() + p.get_height())
        for img in ax.images:
            if isinstance(img, AxesImage):
                arr = np.ma.asarray(img.get_array())
                for (r, c), v in np.ndenumerate(arr[..., 0] if arr.ndim == 3 else arr):
                    add("cell", img.get_label(), x=float(c), y=float(r),
                        value=math.nan if np.ma.is_masked(v) else float(v))
        for t in ax.texts:
            if t.get_text().strip():
                x, y = t.get_position()
                add("text", x=float(x) if isinstance(x, (int, float)) else math.nan,
                    y=float(y) if isinstance(y, (int, float)) else math.nan,
                    text=t.get_text())
    cols = ["panel", "panel_title", "xlabel", "ylabel", "series", "kind", "x", "x_label",
            "y", "y_label", "y_low", "y_high", "x_low", "x_high", "value", "text"]
    return pd.DataFrame(rows).reindex(columns=cols)


def _show_in_notebook(path: Path) -> None:
    """Display a saved image in a running IPython kernel (a notebook); nothing elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        display(Image(filename=str(path), retina=True))


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
        figure = f"{value:.3g}" + (f" [{lo:.3g}, {hi:.3g}]" if has_ci else " (no CI)")
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
