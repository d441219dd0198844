"""The generation study's figures (matplotlib is imported when a figure is
drawn, never in a worker)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...results.store import MEASURED


def latency(table: pd.DataFrame, manifest: dict):
    """Per model (rows) and batch size: time to first token (left) and
    decode time per generated token (right) per variant and prompt, with
    their 95% intervals; a failed or flagged cell says so in its label."""
    import matplotlib.pyplot as plt

    from ...results.plots import PLAIN, PLAIN_MINOR, footer, no_data, palette

    if table.empty:
        return no_data("no generation cells")
    keys = list(table.groupby(["model", "batch_size"]).groups)
    fig, axes = plt.subplots(len(keys), 2, squeeze=False,
                             figsize=(11, 0.45 * table.groupby(["model", "batch_size"]).size().max()
                                      * 1 + 2.2 * len(keys)))
    colors = palette(table["variant"])
    for i, (model, batch) in enumerate(keys):
        g = table[(table["model"] == model) & (table["batch_size"] == batch)].iloc[::-1]
        labels = [f"{v}  p={p}+{n}" + ("" if st == "ok" else f" ({st})")
                  for v, p, n, st in zip(g["variant"], g["prompt"], g["new_tokens"], g["status"])]
        for ax, (y, lo, hi, title) in zip(axes[i], [
                ("ttft_s", "ttft_low_s", "ttft_high_s", "time to first token (ms)"),
                ("decode_s_per_token", "decode_low_s", "decode_high_s",
                 "decode time per generated token (ms)")]):
            v = g[y].to_numpy(float) * 1e3
            err = np.array([v - g[lo].to_numpy(float) * 1e3, g[hi].to_numpy(float) * 1e3 - v])
            ax.barh(range(len(g)), np.nan_to_num(v), xerr=np.nan_to_num(np.abs(err)),
                    color=[colors[x] for x in g["variant"]], capsize=3)
            ax.set_yticks(range(len(g)), labels if ax is axes[i, 0] else [""] * len(g),
                          fontsize=8)
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(PLAIN)
            ax.xaxis.set_minor_formatter(PLAIN_MINOR)
            ax.tick_params(axis="x", which="minor", labelsize=7)
            ax.set_xlabel(title)
            ax.set_title(f"{model}, batch {batch}", fontsize=9, loc="left")
            ends = g[hi].to_numpy(float) * 1e3
            for k, val in enumerate(v):  # the value right of its interval
                if np.isfinite(val):
                    ax.annotate(f"{val:.3g}", (np.nanmax([val, ends[k]]), k), xytext=(4, -3),
                                textcoords="offset points", fontsize=7)
            ax.set_xlim(right=np.nanmax([*v, *ends, 1e-3]) * 1.6)
    fig.suptitle("Text generation: time to first token and per-token decode time "
                 "(greedy, KV cache; bars: 95% CI)", x=0.02, ha="left")
    footer(fig, manifest, "decode per token = (generation - first token) / (new tokens - 1); "
                          "its interval spans the two cells' intervals")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def throughput(table: pd.DataFrame, manifest: dict):
    """Generated tokens per second (batch x new tokens / generation time)
    against batch size, per variant, one panel per model and prompt."""
    import matplotlib.pyplot as plt

    from ...results.plots import legend_right, no_data, palette

    ok = table[table["status"].isin(MEASURED)] if not table.empty else table
    if ok.empty:
        return no_data("no measured generation cells")
    keys = list(ok.groupby(["model", "prompt", "new_tokens"]).groups)
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(4.2 * len(keys) + 2.6, 3.6))
    colors = palette(ok["variant"])
    for j, (model, prompt, n) in enumerate(keys):
        ax = axes[0, j]
        g = ok[(ok["model"] == model) & (ok["prompt"] == prompt) & (ok["new_tokens"] == n)]
        for var, h in g.groupby("variant"):
            h = h.sort_values("batch_size")
            tps = h["tokens_per_s"].to_numpy(float)
            lo = h["batch_size"] * h["new_tokens"] / h["generate_high_s"]
            hi = h["batch_size"] * h["new_tokens"] / h["generate_low_s"]
            ax.errorbar(h["batch_size"], tps, yerr=[tps - lo, hi - tps], marker="o", ms=5,
                        capsize=3, color=colors[var], label=var)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("generated tokens / s")
        ax.set_title(f"{model}, prompt {prompt}, {n} new tokens", fontsize=9)
    return legend_right(fig, axes, "Generation throughput (95% CI)", manifest,
                        "one batch size: a point per variant", 0.8)


def compile_cost(table: pd.DataFrame, manifest: dict):
    """Each variant's first call against its steady-state call (log scale),
    for the one-token call and the full generation: what tracing and
    compiling cost before the first token a user sees."""
    import matplotlib.pyplot as plt

    from ...results.plots import PLAIN, footer, no_data

    if table.empty:
        return no_data("no generation cells")
    g = table.iloc[::-1]
    labels = [f"{m}  {v}  {b}x{p}+{n}" for m, v, b, p, n in
              zip(g["model"], g["variant"], g["batch_size"], g["prompt"], g["new_tokens"])]
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(g) + 1.8))
    y = np.arange(len(g))
    h = 0.27
    for k, (col, name, color) in enumerate([
            ("ttft_first_call_s", "first call, one token", "#cc79a7"),
            ("first_call_s", "first call, all tokens", "#d55e00"),
            ("generate_s", "steady call, all tokens", "#0072b2")]):
        v = g[col].to_numpy(float)
        ax.barh(y + (1 - k) * h, np.nan_to_num(v), height=h, color=color, label=name)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(PLAIN)
    ax.set_xlabel("seconds")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("First call (trace and compile) against the steady state", loc="left")
    footer(fig, manifest, "breakeven: the generated tokens after which the compile has paid "
                          "for itself (table below)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
