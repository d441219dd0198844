"""``fwcompare compare A B``: two runs of the same studies (two machines, two
commits, two library versions), cell by cell.

A and B are output folders: one study's (``outputs/quick/inference_sweep``)
or a profile's (``outputs/quick``, every study folder in it). Cells match on
what they measure (:func:`match`: the spec without ``threads``, which follows
the machine's cores when the params say 0), never on the cell id or the row
order. For each cell measured in both:

- ``time_b_over_a``: median seconds per call in B over A (above 1: B is
  slower), with a 95% interval from the raw samples (:func:`stats.ratio_ci`:
  with 2 or more rounds on each side, Student's t over the rounds, which
  carries the between-process spread; with one, a bootstrap of the sample
  blocks, which sees one sampling window only and says so in ``interval``).
  The two runs are independent: their blocks are never paired.
- per study, task, variant and precision: the geometric mean of those ratios
  with its interval (:func:`stats.geomean_ratio_ci`).
- the cells present in one run only, with their status there;
- the two environment manifests (``results/env.json``) side by side where they
  differ: versions, CPU/GPU, threads, flags, the measured peak; a warning
  where they differ in what changes results (:data:`HARDWARE_KEYS`: the CPU's
  instruction-set flags and highest clock, the GPUs' clocks and power limits).

Printed as tables, and written as CSV and Markdown (``--out``) or JSON.
:meth:`Comparison.regressions` makes it a regression gate, as asv's
``continuous`` and pytest-benchmark's ``--benchmark-compare-fail`` are: the
cells whose B/A ratio lies above a threshold for sure (its interval's lower
end above it), or below one (the upper end below it).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .store import load_results
from .store import FAILED_STATUSES, MEASURED
from ..core.spec import RunSpec, axes
from ..core.stats import CellSamples, geomean_ratio_ci, ratio_ci
from .tables import samples_by_cell, variant, with_axes

# The spec's shared fields without threads; the registered cell axes follow (match()).
MATCH = [f for f in RunSpec.__dataclass_fields__ if f not in ("threads", "axes")]
GROUP = ["study", "task", "variant", "dtype"]


def match() -> list[str]:
    """What two runs' cells must share to be the same cell: :data:`MATCH` and
    every registered cell axis (``fwcompare.core.spec.Axis``)."""
    return [*MATCH, *(a.name for a in axes())]


# Manifest keys (dotted, as env_diff writes them) whose difference between two
# runs makes their timings incomparable cell by cell: each prefix, what it is.
HARDWARE_KEYS = {"cpu_flags.": "instruction-set flags of the CPU",
                 "cpu_freq_mhz.": "CPU's highest clock",
                 "gpus": "GPUs (model, clocks, power limit)"}


class CompareError(ValueError):
    """A or B is no output folder, or the two share no study."""


def study_name(folder: Path) -> str:
    """The study a folder's results belong to (its rows say; a folder can be
    named anything, as ``--out`` allows), else the folder's name."""
    cells = sorted((folder / "results" / "cells").glob("*.parquet"))[:1]
    if cells:
        study = pd.read_parquet(cells[0], columns=["study"])["study"]
        if len(study) and study.iloc[0]:
            return str(study.iloc[0])
    return folder.name


def study_folders(path: Path | str) -> dict[str, Path]:
    """The study folders of an output folder, by study: itself when it holds
    ``results/``, else each child that does (a profile's folder)."""
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"{path}: no such folder")
    if (path / "results").is_dir():
        return {study_name(path): path}
    found = {study_name(c): c for c in sorted(path.iterdir()) if (c / "results").is_dir()}
    if not found:
        raise CompareError(f"{path}: no study results here (expected results/ or "
                           f"<study>/results/, as `fwcompare run` and `make report` write)")
    return found


def _side(samples: CellSamples, rounds: set[int]) -> CellSamples:
    """The rounds kept apart when both sides have the same 2 or more rounds;
    otherwise every round pooled into one (never blocks paired across runs)."""
    if len(samples.rounds) >= 2 and set(samples.rounds) == rounds:
        return CellSamples(samples.rounds, interleaved=False)
    return CellSamples({0: samples.pooled}, interleaved=False)


def _cells(path: Path) -> tuple[pd.DataFrame, dict[str, CellSamples], dict]:
    res = load_results(path)
    df = res.results.copy()
    if df.empty:
        return df, {}, res.manifest
    df = with_axes(df)
    df["variant"] = [variant(f, m) for f, m in zip(df["framework"], df["mode"])]
    # One row per cell: the worst status of its rounds, the rounds counted.
    agg = df.sort_values("round").groupby("cell_id", sort=False).agg(
        **{k: (k, "first") for k in [*match(), "variant", "threads", "run_id", "hostname"]},
        status=("status", lambda s: next((x for x in s if x != "ok"), "ok")),
        rounds=("round", "nunique")).reset_index()
    return agg, samples_by_cell(res.samples), res.manifest


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, list) else v
    return out


def env_diff(a: dict, b: dict) -> pd.DataFrame:
    """The manifest entries (nested keys dotted) that differ between A and B."""
    fa, fb = _flat(a), _flat(b)
    rows = [{"key": k, "a": fa.get(k, ""), "b": fb.get(k, "")} for k in sorted({*fa, *fb})
            if str(fa.get(k, "")) != str(fb.get(k, ""))]
    return pd.DataFrame(rows, columns=["key", "a", "b"])


def hardware_warnings(env: pd.DataFrame) -> list[str]:
    """One warning per kind of :data:`HARDWARE_KEYS` in which the two runs'
    manifests (``env``: :func:`env_diff`'s rows, any study) differ."""
    out = []
    for prefix, what in HARDWARE_KEYS.items():
        rows = env[env["key"].str.startswith(prefix)].drop_duplicates("key")
        if not len(rows):
            continue
        unrecorded = [side for side in ("a", "b") if (rows[side].astype(str) == "").all()]
        if unrecorded:  # an older run, or a machine that does not tell
            out.append(f"{unrecorded[0].upper()} does not record the {what} (a run made "
                       f"before fwcompare recorded them, or a machine that does not tell): "
                       f"whether the machines differ in them is unknown")
            continue
        parts = [f"{r.key[len(prefix):] if prefix.endswith('.') else r.key} "
                 f"(A: {r.a if r.a != '' else 'not recorded'}, "
                 f"B: {r.b if r.b != '' else 'not recorded'})" for r in rows.itertuples()]
        out.append(f"A and B differ in the {what}: {'; '.join(parts)}. These change "
                   f"which kernels run and how fast: a ratio between them measures the "
                   f"machines as much as the code")
    return out


def _records(df: pd.DataFrame) -> list[dict]:
    """A table as JSON-ready rows (NaN as null)."""
    return json.loads(df.to_json(orient="records")) if len(df) else []


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (pandas' own needs tabulate, which is no dependency)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(map(str, df.columns)) + " |",
             "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in df.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class Comparison:
    a: str
    b: str
    cells: pd.DataFrame       # one row per cell present in both
    variants: pd.DataFrame    # geometric mean per study, task, variant, precision
    only: pd.DataFrame        # cells present in one run only
    env: pd.DataFrame         # manifest entries that differ, per study

    @property
    def warnings(self) -> list[str]:
        return hardware_warnings(self.env)

    def regressions(self, above: float | None = None,
                    below: float | None = None) -> pd.DataFrame:
        """The cells a gate stops on: B/A above ``above`` for sure (the
        interval's lower end above it; or measured in A and not in B: an
        error, a timeout, out of memory, unsupported), or below ``below`` for
        sure (the upper end below it); ``why`` says which. Empty when neither
        threshold is given. "For sure" is as sure as the interval: with one
        round per side it holds one sampling window's noise only
        (``interval`` says ``blocks``; :meth:`gate_warnings`)."""
        cells = self.cells
        if not len(cells) or (above is None and below is None):
            return pd.DataFrame(columns=[*cells.columns, "why"])
        why = pd.Series("", index=cells.index)
        if above is not None:
            why[cells["ci_low"] > above] = f"B/A above {above:g} (interval's lower end)"
            lost = cells["status_a"].isin(MEASURED) & cells["status_b"].isin(FAILED_STATUSES)
            why[lost] = "measured in A, " + cells.loc[lost, "status_b"].astype(str) + " in B"
        if below is not None:
            why[cells["ci_high"] < below] = f"B/A below {below:g} (interval's upper end)"
        hit = cells[why != ""].assign(why=why[why != ""])
        return hit.sort_values("time_b_over_a", ascending=False, ignore_index=True)

    def gate_warnings(self, hits: pd.DataFrame) -> list[str]:
        """A warning when the gate stops on a ratio whose interval holds one
        sampling window per run: a rerun can fall outside it."""
        one = hits[hits["interval"] == "blocks"] if len(hits) else hits
        if not len(one):
            return []
        return [f"{len(one)} of the gate's cells ran one round per side: their intervals "
                f"hold one sampling window's noise, not the spread between processes "
                f"(docs/methodology.md, \"Rounds and intervals\"); measure both runs with "
                f"--set rounds=3 --set rounds_for=all before trusting a gate on them"]

    def to_json(self, above: float | None = None, below: float | None = None) -> dict:
        """The comparison as one JSON document (``fwcompare compare --json``)."""
        hits = self.regressions(above, below)
        return {"a": self.a, "b": self.b, "ratio": "time_b_over_a (above 1: B is slower)",
                "warnings": self.warnings + self.gate_warnings(hits),
                "gate": {"fail_above": above, "fail_below": below,
                         "regressions": _records(hits)},
                "variants": _records(self.variants), "cells": _records(self.cells),
                "only_in_one": _records(self.only), "env_diff": _records(self.env)}

    def text(self) -> str:
        """The comparison as plain-text tables (what ``fwcompare compare`` prints)."""
        def fmt(df: pd.DataFrame) -> str:
            return df.to_string(index=False, float_format=lambda v: f"{v:.3g}") if len(df) \
                else "(none)"
        # the task where a variant has several (end_to_end: the fed training step and
        # the input pipeline alone), else two of its rows would read as one cell twice
        tasks = (len(self.cells) and "task" in self.cells
                 and self.cells.groupby(["study", "variant"])["task"].nunique().max() > 1)
        cols = ["study", "model", "variant", *["task"] * bool(tasks), "dtype", "batch_size",
                "seq_len", *(a.name for a in axes(True)), "median_a_s", "median_b_s",
                "time_b_over_a", "ci_low", "ci_high", "interval"]
        return "\n\n".join([
            f"A: {self.a}\nB: {self.b}\ntime_b_over_a above 1: B is slower",
            "per variant (geometric mean over its cells, 95% CI):\n" + fmt(self.variants),
            "per cell:\n" + fmt(self.cells[[c for c in cols if c in self.cells]]),
            "in one run only:\n" + fmt(self.only),
            "environment, where it differs:\n" + fmt(self.env),
            *(f"warning: {w}" for w in self.warnings)])

    def markdown(self) -> str:
        def md(df: pd.DataFrame) -> str:
            return markdown_table(df) if len(df) else "(none)"
        return "\n\n".join([
            "# fwcompare compare", f"- A: `{self.a}`\n- B: `{self.b}`\n- `time_b_over_a` "
            "above 1: B is slower. Intervals: 95%; `rounds` when both runs had the same 2+ "
            "rounds (between-process spread included), `blocks` for one sampling window "
            "per run (a rerun can fall outside it).",
            "## Per variant", md(self.variants), "## Per cell", md(self.cells),
            "## In one run only", md(self.only), "## Environment, where it differs",
            md(self.env), *(f"**Warning:** {w}" for w in self.warnings)]) + "\n"

    def write(self, out: Path | str) -> list[Path]:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        files = []
        for name, df in [("cells", self.cells), ("variants", self.variants),
                         ("only_in_one", self.only), ("env_diff", self.env)]:
            df.to_csv(out / f"{name}.csv", index=False)
            files.append(out / f"{name}.csv")
        (out / "compare.md").write_text(self.markdown())
        return [*files, out / "compare.md"]


def compare(a: Path | str, b: Path | str, confidence: float = 0.95) -> Comparison:
    """A against B: see the module's docstring."""
    fa, fb = study_folders(a), study_folders(b)
    common = [s for s in fa if s in fb]
    if not common:
        raise CompareError(f"{a} and {b} share no study (A: {', '.join(fa)}; "
                           f"B: {', '.join(fb)})")
    cells, variants, only, envs = [], [], [], []
    for study in common:
        ca, sa, ma = _cells(fa[study])
        cb, sb, mb = _cells(fb[study])
        d = env_diff(ma, mb)
        envs.append(d.assign(study=study)[["study", "key", "a", "b"]])
        if ca.empty and cb.empty:
            continue
        keyed = ca.merge(cb, on=[*match(), "variant"], how="outer", suffixes=("_a", "_b"),
                         indicator=True)
        for side, tag in (("left_only", "a"), ("right_only", "b")):
            part = keyed[keyed["_merge"] == side]
            if len(part):
                only.append(part[[*match(), "variant"]].assign(
                    only_in=tag, status=part[f"status_{tag}"].to_numpy()))
        both = keyed[keyed["_merge"] == "both"]
        rows, pairs = [], {}
        for _, r in both.iterrows():
            row = {k: r[k] for k in ["study", "model", "variant", "framework", "mode", "dtype",
                                     "task", "batch_size", "seq_len",
                                     *(a.name for a in (*axes(True), *axes(False)))]}
            row.update(status_a=r["status_a"], status_b=r["status_b"],
                       threads_a=r["threads_a"], threads_b=r["threads_b"],
                       rounds_a=r["rounds_a"], rounds_b=r["rounds_b"],
                       cell_id_a=r["cell_id_a"], cell_id_b=r["cell_id_b"])
            xa, xb = sa.get(r["cell_id_a"]), sb.get(r["cell_id_b"])
            ok = (r["status_a"] in MEASURED and r["status_b"] in MEASURED
                  and xa is not None and xb is not None and len(xa) and len(xb))
            if ok:
                rounds = set(xa.rounds) if set(xa.rounds) == set(xb.rounds) else set()
                pa, pb = _side(xa, rounds), _side(xb, rounds)
                value, lo, hi = ratio_ci(pb, pa, confidence)
                row.update(median_a_s=float(np.median(pa.pooled)),
                           median_b_s=float(np.median(pb.pooled)), time_b_over_a=value,
                           ci_low=lo, ci_high=hi,
                           interval="rounds" if len(pa.rounds) >= 2 else "blocks")
                pairs.setdefault(tuple(row[k] for k in GROUP), []).append((pb, pa))
            else:
                row.update(median_a_s=math.nan, median_b_s=math.nan, time_b_over_a=math.nan,
                           ci_low=math.nan, ci_high=math.nan, interval="")
            rows.append(row)
        cells.append(pd.DataFrame(rows))
        for key, ps in pairs.items():
            value, lo, hi = geomean_ratio_ci(ps, confidence)
            variants.append({**dict(zip(GROUP, key)), "cells": len(ps),
                             "geomean_time_b_over_a": value, "ci_low": lo, "ci_high": hi})
    cells_df = pd.concat(cells, ignore_index=True) if cells else pd.DataFrame()
    if len(cells_df):
        cells_df = cells_df.sort_values(["study", "model", "variant", "dtype", "batch_size",
                                         "seq_len", *(a.name for a in axes(True))],
                                        ignore_index=True)
    return Comparison(
        str(a), str(b), cells_df,
        pd.DataFrame(variants, columns=[*GROUP, "cells", "geomean_time_b_over_a", "ci_low",
                                        "ci_high"]),
        pd.concat(only, ignore_index=True) if only else pd.DataFrame(
            columns=[*match(), "variant", "only_in", "status"]),
        pd.concat(envs, ignore_index=True))
