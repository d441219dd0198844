"""The end-to-end figures (matplotlib is imported when a figure is drawn,
never in a worker)."""
from __future__ import annotations

import numpy as np
import pandas as pd

PHASE_NAMES = {"data_s": "data (tokenize, pipeline)", "setup_s": "model set-up",
               "first_step_s": "first step (trace, compile)", "steps_s": "steps after it",
               "eval_s": "evaluations", "end_s": "after the last evaluation (teardown)"}


def phases_figure(fits: pd.DataFrame, manifest: dict):
    """Per stack, its whole run's wall time split into phases (the rounds'
    medians), a diamond at the time to the target accuracy."""
    import matplotlib.pyplot as plt

    from ...results.plots import footer, no_data

    if fits.empty:
        return no_data("no whole run measured")
    fig, ax = plt.subplots(figsize=(8.5, 0.7 * len(fits) + 2.4))
    colors = dict(zip(PHASE_NAMES, ["#8172b3", "#937860", "#c44e52", "#4c72b0", "#55a868",
                                       "#8c8c8c"]))
    y = np.arange(len(fits))
    left = np.zeros(len(fits))
    for key, name in PHASE_NAMES.items():
        vals = fits[key].fillna(0).clip(lower=0).to_numpy()
        ax.barh(y, vals, left=left, color=colors[key], label=name, height=0.6)
        left += vals
    tt = fits["time_to_target_s"].to_numpy()
    ok = np.isfinite(tt)
    ax.plot(tt[ok], y[ok], "D", color="black", label="target accuracy reached")
    for yi, r in zip(y, fits.itertuples()):
        if not np.isfinite(r.time_to_target_s):
            ax.text(left[yi], yi, f"  target not reached (best {r.best_accuracy:.3f})",
                    va="center", fontsize=8, color="#c44e52")
    ax.set_yticks(y, [f"{s}\n{m} {sh}" for s, m, sh in zip(fits["stack"], fits["model"],
                                                           fits["shape"])], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the run's start (median over rounds)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title("A whole training run, split into its phases", loc="left")
    footer(fig, manifest, "each bar: one run per round, its phases' medians; diamond: the "
                          "end of the first evaluation at or above the target")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def curve_figure(curve: pd.DataFrame, target: float, manifest: dict):
    """Held-out accuracy against the run's wall time (left) and against its
    steps (right), per stack and round: the same weights and batches give the
    same curve over steps, so the left panel shows what each stack's speed
    does to it."""
    import matplotlib.pyplot as plt

    from ...results.plots import footer, no_data, palette

    ev = curve[curve["kind"] == "eval"] if not curve.empty else curve
    if ev.empty:
        return no_data("no evaluation recorded")
    ev = ev.assign(stack=ev["framework"] + "/" + ev["mode"])
    colors = palette(ev["stack"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for (stack, rnd), g in ev.groupby(["stack", "round"]):
        g = g.sort_values("step")
        first = rnd == ev[ev["stack"] == stack]["round"].min()
        for ax, x in zip(axes, ("at_s", "step")):
            ax.plot(g[x], g["accuracy"], "o-", color=colors[stack], alpha=0.9 if first else 0.4,
                    label=stack if first and x == "at_s" else None, markersize=3)
    for ax, xl in zip(axes, ("seconds from the run's start", "training step")):
        ax.axhline(target, color="0.4", ls="--", lw=1)
        ax.set_xlabel(xl)
    axes[0].set_ylabel("held-out accuracy")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Accuracy over the run (dashed: the target, {target:g})", x=0.02, ha="left")
    footer(fig, manifest, "one line per stack and round (the first round darker)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.94))
    return fig


def pipelines_figure(pipes: pd.DataFrame, manifest: dict):
    """Per framework, each pipeline's examples per second alone and feeding
    the training step (95% intervals), on a log scale: where the fed bar sits
    under the memory pipeline's, the input starves the step."""
    import matplotlib.pyplot as plt

    from ...results.plots import footer, no_data

    if pipes.empty:
        return no_data("no pipeline measured")
    fws = list(dict.fromkeys(pipes["framework"]))
    fig, axes = plt.subplots(1, len(fws), figsize=(4.2 * len(fws), 4.4), squeeze=False)
    for ax, fw in zip(axes[0], fws):
        g = pipes[pipes["framework"] == fw].reset_index(drop=True)
        x = np.arange(len(g))
        for off, task, color, name in ((-0.2, "loader", "#4c72b0", "pipeline alone"),
                                       (0.2, "fed", "#dd8452", "feeding the training step")):
            col = f"{task}_examples_per_s"
            if col not in g:
                continue
            v = g[col].to_numpy(dtype=float)
            err = np.vstack([v - g[f"{task}_low"].to_numpy(dtype=float),
                             g[f"{task}_high"].to_numpy(dtype=float) - v])
            ax.bar(x + off, np.nan_to_num(v), width=0.4, color=color, label=name,
                   yerr=np.nan_to_num(np.abs(err)), capsize=2)
        ax.set_yscale("log")
        ax.set_xticks(x, g["pipeline"], rotation=30, ha="right", fontsize=8)
        ax.set_title(fw, fontsize=10)
        ax.set_ylabel("examples per second")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right", ncols=2)
    fig.suptitle("Input pipelines: alone, and feeding the training step", x=0.02, ha="left")
    footer(fig, manifest, "median examples/s with its 95% interval; a missing bar: not "
                          "measured in this profile")
    fig.tight_layout(rect=(0, 0.08, 1, 0.93))
    return fig
