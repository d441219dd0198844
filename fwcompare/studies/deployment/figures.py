"""The deployment figures (matplotlib is imported when a figure is drawn,
never in a worker)."""
from __future__ import annotations

import math

import pandas as pd

from ...results.store import MEASURED


# -- figures (matplotlib is imported when a figure is drawn, never in a worker) -----
WEIGHTS_MARKER = {"float32": "o", "float16": "^", "int8": "s"}
# Where the labels of successive points go (points offset, alignment), so
# that paths with the same error (float32 rounding) do not print over each other.
_LABEL_OFFSETS = ((4, 5, "left"), (4, -11, "left"), (-4, 5, "right"), (-4, -11, "right"),
                  (4, 14, "left"), (-4, -20, "right"))


def speed_vs_error(table: pd.DataFrame, manifest: dict):
    """Per model: each path's cells as points, x the speed-up over its
    framework's baseline (95% CI as a bar), y the relative L2 error against
    float64 (log). Colour: path; marker: the weights' precision. Paths that
    did not run are listed under the panels."""
    import matplotlib.pyplot as plt

    from ...results.plots import (footer, palette, speed_error_axes, speed_error_legend,
                                  speed_error_point)

    if table.empty:
        from ...results.plots import no_data

        return no_data("no deployment cells")
    models_ = list(dict.fromkeys(table["model"]))
    colors = palette(table["framework"])
    fig, axes = plt.subplots(1, len(models_), squeeze=False,
                             figsize=(6.0 * len(models_) + 2.4, 5.2))
    failed = []
    shapes = {m: min(zip(g["batch_size"], g["seq_len"]), key=lambda t: (t[0] * t[1], t[0]))
              for m, g in table.groupby("model")}
    for j, model in enumerate(models_):
        ax, labelled = axes[0, j], 0
        for _, r in table[table["model"] == model].iterrows():
            if not speed_error_point(ax, r, colors[r["framework"]],
                                     WEIGHTS_MARKER.get(r["weights"], "o")):
                failed.append(f"{r['path']} ({r['status']})")
                continue
            if (r["batch_size"], r["seq_len"]) == shapes[model]:  # one label per path
                dx, dy, ha = _LABEL_OFFSETS[labelled % len(_LABEL_OFFSETS)]
                labelled += 1
                ax.annotate(r["path"].split("/", 1)[1], (r["speedup"], r["fp64_rel_l2_err"]),
                            xytext=(dx, dy), textcoords="offset points", fontsize=7, ha=ha,
                            color=colors[r["framework"]])
        speed_error_axes(ax, model, "speed-up over the framework's baseline (> 1: faster)",
                         j == 0)
    speed_error_legend(fig, colors, {f"{w} weights": mk for w, mk in WEIGHTS_MARKER.items()
                                     if w in set(table["weights"])})
    fig.suptitle("Deployment paths: speed-up against error", x=0.02, ha="left")
    note = ("baselines: PyTorch eager, tf.function, jax.jit; bars: 95% CI of the speed-up; "
            "labels at each model's smallest shape")
    if failed:
        note += "; not drawn: " + ", ".join(dict.fromkeys(failed))
    footer(fig, manifest, note)
    fig.tight_layout(rect=(0, 0.08, 0.8, 0.95))
    return fig


def size_and_load(table: pd.DataFrame, manifest: dict):
    """Per path (rows) and model (colour): the artifact's size, its export
    time from the model, and its cold load in a fresh process. Paths with no
    artifact (the baselines load the shared weights) show only a load time;
    paths that did not export are marked."""
    import matplotlib.pyplot as plt

    from ...results.plots import footer, palette

    if table.empty:
        from ...results.plots import no_data

        return no_data("no deployment cells")
    t = table.drop_duplicates(["model", "path"])
    paths = list(dict.fromkeys(t["path"]))
    models_ = list(dict.fromkeys(t["model"]))
    colors = palette(models_)
    fig, axes = plt.subplots(1, 3, sharey=True, figsize=(13, 0.38 * len(paths) + 2.2))
    h = 0.8 / len(models_)
    for k, (col, label) in enumerate([("artifact_mb", "artifact size (MB)"),
                                      ("export_s", "export time from the model (s)"),
                                      ("load_s", "cold load in a fresh process (s)")]):
        ax = axes[k]
        for i, model in enumerate(models_):
            g = t[t["model"] == model].set_index("path")
            for y, path in enumerate(paths):
                if path not in g.index:
                    continue
                v = g.loc[path, col]
                pos = y + (i - (len(models_) - 1) / 2) * h
                if math.isfinite(v):
                    ax.barh(pos, v, height=h, color=colors[model],
                            label=model if y == 0 or k else None)
                elif g.loc[path, "status"] not in MEASURED and col == "artifact_mb":
                    ax.text(0, pos, f" {g.loc[path, 'status']}", va="center", fontsize=7,
                            color="firebrick")
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(paths)), paths, fontsize=8)
    axes[0].invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[m], label=m) for m in models_]
    fig.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle("What each path costs before its first call", x=0.02, ha="left")
    footer(fig, manifest, "baselines have no artifact: they load the shared safetensors weights")
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return fig
