"""The generation study's tables (its notebook's): each generation cell
beside its one-token cell, a compile's breakeven, the agreement of tokens."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...results.store import MEASURED
from ...results.tables import CELL_KEYS as KEYS
from .modes import GEN_MODES, uncompiled


def generation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per generation cell (new_tokens > 1) beside its variant's
    one-token cell of the same prompt: time to first token, generation time,
    decode time per token = (generation - first token) / (new_tokens - 1)
    with an interval from the two cells' intervals (the ends apart: wider
    than a joint interval, never narrower), tokens/s, the first calls, the
    compile cost (first call - steady call) and its breakeven in generated
    tokens against the framework's uncompiled mode, memory beside the
    analytic KV cache, and the token agreement."""
    if summary.empty:
        return pd.DataFrame()
    one = summary[summary["new_tokens"] == 1].set_index(["variant", *KEYS])
    rows = []
    for _, r in summary[summary["new_tokens"] > 1].iterrows():
        key = (r["variant"], *(r[k] for k in KEYS))
        t = one.loc[key] if key in one.index else None
        n = int(r["new_tokens"])
        ok = r["status"] in MEASURED and t is not None and t["status"] in MEASURED
        row = {"model": r["model"], "variant": r["variant"], "framework": r["framework"],
               "mode": r["mode"], "device": r["device"], "batch_size": r["batch_size"],
               "prompt": r["seq_len"], "padded_prompt": r["padded_len"], "new_tokens": n,
               "status": r["status"] if t is None or t["status"] == "ok" or r["status"] != "ok"
               else f"first token {t['status']}",
               "ttft_s": t["median_s"] if ok else math.nan,
               "ttft_low_s": t["ci_low_s"] if ok else math.nan,
               "ttft_high_s": t["ci_high_s"] if ok else math.nan,
               "generate_s": r["median_s"], "generate_low_s": r["ci_low_s"],
               "generate_high_s": r["ci_high_s"]}
        if ok:
            row.update(decode_s_per_token=(r["median_s"] - t["median_s"]) / (n - 1),
                       decode_low_s=(r["ci_low_s"] - t["ci_high_s"]) / (n - 1),
                       decode_high_s=(r["ci_high_s"] - t["ci_low_s"]) / (n - 1))
        else:
            row.update(decode_s_per_token=math.nan, decode_low_s=math.nan,
                       decode_high_s=math.nan)
        row.update(tokens_per_s=r["batch_size"] * n / r["median_s"],
                   first_call_s=r["first_call_s"],
                   ttft_first_call_s=t["first_call_s"] if t is not None else math.nan,
                   compile_s=r["first_call_s"] - r["median_s"],
                   recompiles=r["recompiles"],
                   ttft_recompiles=t["recompiles"] if t is not None else math.nan,
                   peak_mem_mb=r["peak_mem_bytes"] / 1e6, kv_cache_mb=r["kv_cache_bytes"] / 1e6,
                   tokens_agreed=r["tokens_agreed"], ref_min_margin=r["ref_min_margin"],
                   load_s=r["load_s"], error=r["error"])
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["breakeven_tokens"] = [breakeven(out, r) for _, r in out.iterrows()]
    order = {v: i for i, v in enumerate(f"{fw}/{m}" for fw, ms in GEN_MODES.items() for m in ms)}
    out["_o"] = out["variant"].map(order)
    return out.sort_values(["model", "_o", "batch_size", "prompt", "new_tokens"]) \
        .drop(columns="_o").reset_index(drop=True)


def breakeven(table: pd.DataFrame, r) -> float:
    """Generated tokens after which a compiled mode's compile has paid for
    itself against its framework's uncompiled mode at the same shape: the
    extra first-call seconds over the decode seconds saved per token. NaN
    for an uncompiled mode, and inf when it saves nothing per token."""
    base_mode = uncompiled(r["framework"], r["mode"])
    if base_mode is None:
        return math.nan
    b = table[(table["variant"] == f"{r['framework']}/{base_mode}")
              & (table["model"] == r["model"]) & (table["batch_size"] == r["batch_size"])
              & (table["prompt"] == r["prompt"]) & (table["new_tokens"] == r["new_tokens"])]
    if b.empty:
        return math.nan
    b = b.iloc[0]
    saved = b["decode_s_per_token"] - r["decode_s_per_token"]
    extra = r["compile_s"] - b["compile_s"]
    if not (math.isfinite(saved) and math.isfinite(extra)):
        return math.nan
    return extra / saved if saved > 0 else math.inf


def agreement_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per model, variant and prompt: generated tokens that match PyTorch
    eager's greedy tokens out of those compared, PyTorch's smallest top-2
    logit margin over them (a margin near float32 rounding is a near tie),
    the status and the first line of the message."""
    if summary.empty:
        return pd.DataFrame()
    g = summary[summary["new_tokens"] > 0].copy()
    g["agreed"] = [f"{a:.0f}/{n}" if np.isfinite(a) else "-"
                   for a, n in zip(g["tokens_agreed"], g["new_tokens"])]
    g["message"] = [e.splitlines()[0][:200] if e else "" for e in g["error"]]
    return g[["model", "variant", "batch_size", "seq_len", "new_tokens", "status", "agreed",
              "ref_min_margin", "message"]].rename(columns={"seq_len": "prompt"}) \
        .reset_index(drop=True)
