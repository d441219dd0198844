"""Figure files: a figure saved as PNG, SVG, the data it draws (CSV) and its
caption, under a name that is safe as a file name and a link; shown in a
running notebook."""
from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

FOOTER_GID = "fwcompare-footer"  # how save_figure finds the footer for the caption


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
    again to show it (measurements.md, "comments quoted")."""
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
