"""The tidy results store: one row per cell, raw samples in a second table.

Layout under a study's results directory::

    cells/<cell_id>-r<round>.parquet     one row per finished cell
    samples/<cell_id>-r<round>.parquet   its raw samples (sample i of cells timed
                                         interleaved in one round: the same turn)
    losses/<model>-<framework>-<mode>.parquet   training: loss per agreement step
    results.parquet, samples.parquet     consolidated copies (after a run)

Every row, sample and loss carries the ``run_id`` of the run that made it and
the ``hostname`` of its machine, so the stores of two runs or machines can be
concatenated without mixing (``fwcompare compare`` keeps them apart).

Each finished cell is written to its own file through a temporary file and an
atomic rename, so an interrupted run loses at most the cell in flight and a
restarted run resumes. Failed cells are rows with a status and NaN figures,
never strings in number columns. A store whose params changed is moved aside
to ``previous/<timestamp>/``, never overwritten.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import shutil
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.atomic import first_line, read_json, write_atomic, write_json
from ..core.energy import FIGURES as ENERGY_FIGURES
from ..core.spec import RunSpec, axes

STATUSES = ("ok", "oom", "unsupported", "error", "timeout", "not_equivalent")
# Statuses of cells that were measured and carry figures (a not_equivalent cell
# is timed and flagged in every table and figure).
MEASURED = ("ok", "not_equivalent")
# Statuses of cells that produced no measurement.
FAILED_STATUSES = ("oom", "unsupported", "error", "timeout")
# Statuses a resumed run keeps; error and timeout cells are tried again.
FINAL_STATUSES = ("ok", "oom", "unsupported", "not_equivalent")
# The run failed the cell (not a finding about the framework, as oom and
# unsupported are): `fwcompare run` and `report` exit 1.
RUN_FAILED = tuple(s for s in STATUSES if s not in FINAL_STATUSES)

# The spec's shared fields (its axes' columns follow: the registered ones').
SPEC_SHARED = [f for f in RunSpec.__dataclass_fields__ if f != "axes"]
IDENTITY = ["run_id", "profile", "cell_id", "round"]
OUTCOME = {"status": "string", "error": "string", "converged": "bool"}
# Figures every study's rows have (the columns a study adds are its own:
# ``Study.columns``, handed here by the studies' registry through
# :func:`add_columns`, in the registry's order, between the head and the tail).
FIGURES_HEAD = ("n_samples", "calls_per_sample", "median_s", "ci_low_s", "ci_high_s", "rel_ci",
                "iqr_s", "mean_s", "p90_s", "first_call_s", "load_s",
                "throughput_samples_per_s", "tokens_per_s", "peak_mem_bytes", "xla_plan_bytes",
                *ENERGY_FIGURES,
                "flops_per_call", "achieved_flops_per_s", "peak_flops_per_s", "pct_of_peak",
                "bytes_per_call",
                "equiv_max_abs_err", "equiv_rel_err")
# what else the machine did while the cell was sampled (machine_load.py)
FIGURES_TAIL = ("host_other_cpu", "host_steal", "host_retakes")
PROVENANCE_HEAD = {"schedule": "string", "schedule_note": "string", "energy_note": "string",
                   "mem_method": "string", "precision_setup": "string", "mode_setup": "string"}
PROVENANCE_TAIL = {"framework_version": "string", "framework_threads": "float64",
                   "c_allocator": "string", "device_name": "string", "cpu_model": "string", "hostname": "string",
                   "versions": "string", "git_commit": "string", "git_dirty": "bool",
                   "params_hash": "string", "timestamp": "string"}
# Figures a failed row may keep: worked out from the cell's spec and model,
# not measured (training's analytic memory breakdown explains an oom). Every
# measured figure of a failed row is NaN, whatever the worker knew (a gate's
# load time and equivalence error belong to the variant, not to this cell).
ANALYTIC_SHARED = ("flops_per_call", "bytes_per_call")


@dataclass(frozen=True)
class Columns:
    """Result columns a study (or a workload several studies share) adds to its
    rows: ``figures`` (float64, NaN where not measured), ``analytic`` (those of
    its figures a failed row keeps) and ``provenance`` (name -> dtype)."""

    figures: tuple[str, ...] = ()
    analytic: tuple[str, ...] = ()
    provenance: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: "Columns") -> "Columns":
        return Columns(_union(self.figures, other.figures), _union(self.analytic, other.analytic),
                       _union(self.provenance, other.provenance))


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(dict.fromkeys((*a, *b)))


_ADDED = Columns()
SPEC_INT = ("batch_size", "seq_len", "threads")


def _rebuild() -> None:
    """The store's columns: the shared ones, the registered cell axes
    (``fwcompare.core.spec.add_axes``) and every added study's."""
    global SPEC_COLUMNS, FIGURES, ANALYTIC, PROVENANCE, DTYPES, COLUMNS
    SPEC_COLUMNS = [*SPEC_SHARED, *(a.name for a in axes())]
    FIGURES = [*FIGURES_HEAD, *_ADDED.figures, *FIGURES_TAIL]
    ANALYTIC = (*ANALYTIC_SHARED, *_ADDED.analytic)
    PROVENANCE = {**PROVENANCE_HEAD, **dict(_ADDED.provenance), **PROVENANCE_TAIL}
    DTYPES = {
        "run_id": "string", "profile": "string", "cell_id": "string", "round": "int64",
        **{c: ("int64" if c in SPEC_INT else "string") for c in SPEC_SHARED},
        **{a.name: a.dtype for a in axes()},
        **OUTCOME, **{c: "float64" for c in FIGURES}, **PROVENANCE,
    }
    COLUMNS = list(DTYPES)


def add_columns(columns: Columns) -> None:
    """Add a study's columns to the store's (``fwcompare.studies.register``
    calls it for each study it registers, after its axes: a column added twice
    stays once). The registered cell axes' columns are read again here."""
    global _ADDED
    _ADDED = _ADDED + columns
    _rebuild()


_rebuild()


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def make_row(spec: RunSpec, *, status: str, error: str = "", figures: dict | None = None,
             provenance: dict | None = None, run_id: str = "", profile: str = "",
             round: int = 0) -> dict:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    row: dict = {c: math.nan for c in FIGURES}
    row.update(spec.to_dict())
    row.update(run_id=run_id, profile=profile, cell_id=spec.cell_id, round=round,
               status=status, error=error, converged=False)
    for key, value in (provenance or {}).items():
        if key in DTYPES:
            row[key] = json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
    row.setdefault("timestamp", now_iso())
    for key, value in (figures or {}).items():
        if key not in DTYPES:
            raise KeyError(f"not a results column: {key}")
        if status in FAILED_STATUSES and key in FIGURES and key not in ANALYTIC:
            continue
        row[key] = value
    return row


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col, dtype in DTYPES.items():
        if col not in df:
            df[col] = math.nan if dtype == "float64" else (False if dtype == "bool" else "")
        if dtype == "string":
            df[col] = df[col].fillna("")
        df[col] = df[col].astype(dtype)
    return df[COLUMNS]


# Where a sample or a loss came from (the results rows carry the same two columns).
ORIGIN = {"run_id": "string", "hostname": "string"}


def _with_origin(df: pd.DataFrame, run_id: str, hostname: str) -> pd.DataFrame:
    return df.assign(run_id=pd.Series([run_id] * len(df), index=df.index, dtype="string"),
                     hostname=pd.Series([hostname] * len(df), index=df.index, dtype="string"))


def _fill_origin(df: pd.DataFrame) -> pd.DataFrame:
    """Stores from before the columns: empty strings, never NaN."""
    for col, dtype in ORIGIN.items():
        df[col] = (df[col].fillna("") if col in df else pd.Series([""] * len(df), index=df.index)
                   ).astype(dtype)
    return df


def losses_frame(model: str, framework: str, mode: str, losses, reference,
                 dtype: str = "float32", loss_scale=None, skipped=None) -> pd.DataFrame:
    """Loss per training step of one framework/mode/precision beside PyTorch's
    float32 reference; the dynamic loss scale after each step (NaN without
    scaling) and whether loss scaling skipped the step."""
    n = len(losses)

    def text(value):
        return pd.Series([value] * n, dtype="string")
    return pd.DataFrame({"model": text(model), "framework": text(framework), "mode": text(mode),
                         "dtype": text(dtype), "step": pd.Series(range(n), dtype="int64"),
                         "loss": pd.Series(losses, dtype="float64"),
                         "reference_loss": pd.Series(reference, dtype="float64"),
                         "loss_scale": pd.Series(math.nan if loss_scale is None else loss_scale,
                                                 index=range(n), dtype="float64"),
                         "skipped": pd.Series(False if skipped is None else skipped,
                                              index=range(n), dtype="bool")})


def _write_atomic(df: pd.DataFrame, path: Path) -> None:
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


class UnreadableResult(UserWarning):
    """A stored result file that cannot be read (empty, cut short): it is set
    aside and its cell measured again by the next run."""


UNREADABLE = ".unreadable"  # the suffix of a result file set aside


def _set_aside(path: Path, why: str) -> None:
    """Rename an unreadable result file (and its cell's other file: a row
    without its samples, or samples without their row, would stand for a
    measurement that is not there) so no reader sees it and a resumed run
    measures the cell again; say so in one line."""
    store = path.parent.parent
    names = [store / "cells" / path.name, store / "samples" / path.name] \
        if path.parent.name in ("cells", "samples") else [path]
    for f in names:
        try:
            if f.is_file():
                f.rename(f.with_name(f.name + UNREADABLE))
        except OSError:
            pass  # a read-only copy: skipped all the same
    warnings.warn(f"{path}: unreadable ({why}); set aside as {path.name}{UNREADABLE}: the "
                  f"next run of this study measures the cell again (--fresh starts the "
                  f"whole study over)", UnreadableResult, stacklevel=3)


def _read_parquet(path: Path) -> pd.DataFrame | None:
    """A stored result file's frame, or None where it cannot be read: it is set
    aside (:func:`_set_aside`), never the reason the others are lost."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        _set_aside(path, first_line(exc))
        return None


def _read_all(directory: Path, empty) -> pd.DataFrame:
    """Every readable Parquet file of a directory as one frame; ``empty()`` when
    there is none."""
    frames = [df for f in sorted(directory.glob("*.parquet"))
              if (df := _read_parquet(f)) is not None]
    if not frames:
        return empty()
    return pd.concat(frames, ignore_index=True)


def read_manifest(path: Path) -> dict:
    """A run's environment manifest (``env.json``; {} where there is none),
    or :class:`~fwcompare.core.atomic.UnreadableFile` naming it where it cannot be read
    (:func:`~fwcompare.core.atomic.read_json`)."""
    if not Path(path).is_file():
        return {}
    return read_json(path, "environment manifest", "run the study again with --fresh (the "
                     "earlier results are kept under previous/)")


class ResultStore:
    def __init__(self, directory: Path | str, run_id: str = "", hostname: str | None = None):
        self.dir = Path(directory)
        self.cells_dir = self.dir / "cells"
        self.samples_dir = self.dir / "samples"
        # Of the losses this process appends (rows and their samples carry their own).
        self.run_id, self.hostname = run_id, hostname or socket.gethostname()

    def archive(self) -> Path | None:
        """Move every result here to previous/<timestamp>/ (never overwrite)."""
        if not self.dir.is_dir():
            return None
        children = [c for c in self.dir.iterdir() if c.name != "previous"]
        if not children:
            return None
        dest = self.dir / "previous" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        dest.mkdir(parents=True)
        for child in children:
            shutil.move(str(child), dest / child.name)
        return dest

    def stamped(self) -> str | None:
        """The params hash of the results kept here (None: no run yet)."""
        stamp = self.dir / "params_hash"
        return stamp.read_text().strip() if stamp.exists() else None

    def begin(self, params_hash: str) -> None:
        """Prepare for a run with these params; archive results of other params."""
        if self.stamped() not in (None, params_hash):
            self.archive()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "params_hash").write_text(params_hash)

    def append(self, row: dict, samples_s: list[float] | None = None) -> None:
        name = f"{row['cell_id']}-r{row['round']}.parquet"
        if samples_s:
            calls = row.get("calls_per_sample")
            calls = 1 if calls is None or math.isnan(calls) else int(calls)
            s = pd.DataFrame({"cell_id": row["cell_id"], "round": row["round"],
                              "sample": range(len(samples_s)),
                              "seconds": pd.Series(samples_s, dtype="float64"),
                              "calls_per_sample": calls,
                              "schedule": pd.Series([row.get("schedule") or "sequential"]
                                                    * len(samples_s), dtype="string")})
            s = _with_origin(s, row.get("run_id") or "",
                             row.get("hostname") or socket.gethostname())
            _write_atomic(s, self.samples_dir / name)
        _write_atomic(_frame([row]), self.cells_dir / name)

    def append_losses(self, df: pd.DataFrame, name: str) -> None:
        _write_atomic(_with_origin(df, self.run_id, self.hostname),
                      self.dir / "losses" / f"{name}.parquet")

    def load_losses(self) -> pd.DataFrame:
        return _fill_origin(_read_all(self.dir / "losses",
                                      lambda: losses_frame("", "", "", [], [])))

    def load(self) -> pd.DataFrame:
        """Every row; measured rows with the run's FLOP/s ceiling for their
        precision (``env.json``'s ``peak``, fwcompare.measure.peak) and their share of it."""
        from ..core.stats import pct_of_peak

        df = _read_all(self.cells_dir, lambda: _frame([]))
        peak = read_manifest(self.dir / "env.json").get("peak")
        if peak and len(df):
            ceiling = df["dtype"].map(lambda d: (peak.get("flops_per_s") or {}).get(d))
            ceiling = ceiling.astype("float64").where(
                df["status"].isin(MEASURED) & (df["device"] == peak.get("device")))
            df["peak_flops_per_s"] = ceiling
            df["pct_of_peak"] = pct_of_peak(df["achieved_flops_per_s"], ceiling)
        return df

    def load_samples(self) -> pd.DataFrame:
        return _fill_origin(_read_all(self.samples_dir, lambda: pd.DataFrame(
            {"cell_id": pd.Series(dtype="string"), "round": pd.Series(dtype="int64"),
             "sample": pd.Series(dtype="int64"), "seconds": pd.Series(dtype="float64"),
             "calls_per_sample": pd.Series(dtype="int64"),
             "schedule": pd.Series(dtype="string")})))

    def row(self, cell_id: str, round: int = 0) -> dict | None:
        """The stored row of one cell and round, or None."""
        path = self.cells_dir / f"{cell_id}-r{round}.parquet"
        df = _read_parquet(path) if path.is_file() else None
        return None if df is None else df.iloc[0].to_dict()

    def stored_before(self, cell_id: str, before: int, holds) -> bool:
        """Whether a stored row of the cell in a round before ``before``
        satisfies ``holds(row)``: a figure taken once per cell, in its first
        round that took it (a memory pass, a launch's all-reduce alone)."""
        return any((row := self.row(cell_id, r)) is not None and holds(row)
                   for r in range(before))

    def finished(self) -> set[tuple[str, int]]:
        """(cell_id, round) of cells a resumed run keeps."""
        df = self.load()
        keep = df[df["status"].isin(FINAL_STATUSES)]
        return set(zip(keep["cell_id"], keep["round"]))

    def consolidate(self) -> None:
        _write_atomic(self.load(), self.dir / "results.parquet")
        _write_atomic(self.load_samples(), self.dir / "samples.parquet")

    def consolidated(self) -> bool:
        """Whether the consolidated copies hold every row and sample stored
        (none newer: a run stopped between its last cell and ``consolidate``
        left them behind)."""
        copies = [self.dir / "results.parquet", self.dir / "samples.parquet"]
        if not all(c.is_file() for c in copies):
            return False
        since = min(c.stat().st_mtime_ns for c in copies)
        return not any(f.stat().st_mtime_ns > since for d in (self.cells_dir, self.samples_dir)
                       if d.is_dir() for f in d.iterdir())


@dataclass
class StudyResults:
    """What a study run leaves behind: one row per cell, raw samples, manifest."""

    results: "object"   # pandas.DataFrame, one row per (cell, round)
    samples: "object"   # pandas.DataFrame, raw samples
    manifest: dict
    output_dir: Path
    losses: "object" = None  # pandas.DataFrame, training studies: loss per agreement step

    @property
    def figures_dir(self) -> Path:
        return self.output_dir / "figures"


def load_results(output_dir: str | Path) -> StudyResults:
    output_dir = Path(output_dir)
    store = ResultStore(output_dir / "results")
    manifest = read_manifest(store.dir / "env.json")
    results = store.load()
    return StudyResults(results, with_turns(store.load_samples(), results), manifest,
                        output_dir, store.load_losses())


def with_turns(samples: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """``samples`` with a ``turns`` column: per sample, the key of the set
    whose turns it was taken in, shared by the cells of one interleaved set
    (the interleaved schedule takes sample i of each in turn i, so
    ``stats.round_log_ratio`` pairs them); empty for a cell sampled on its
    own. The key is the set's run, round, task, model and shape, and its
    sampling window's host figures (``host.HostMeter``: one window per set,
    so a cell measured again later, alone, in the same round of the same
    run, does not share its old set's key). Derived from the rows, so
    stores from before it pair too."""
    cols = [c for c in ["run_id", "round", "task", "model", "device", "batch_size", "seq_len",
                        *(a.name for a in axes(True)), *FIGURES_TAIL] if c in results]
    rows = (results.loc[results["schedule"] == "interleaved", ["cell_id", *cols]]
            if "schedule" in results else results[:0])
    keys = {(cid, int(r)): "|".join(map(str, t)) for cid, r, t in
            zip(rows["cell_id"], rows["round"], rows[cols].itertuples(index=False))}
    turns = [keys.get((cid, int(r)), "") for cid, r in zip(samples["cell_id"], samples["round"])]
    return samples.assign(turns=pd.Series(turns, index=samples.index, dtype="string"))


# What each run of a task measured and how long it took, beside its results
# (``fwcompare.execution.estimate`` reads it).
RECORD = "last_run_{task}.json"


def record_run(store_dir: Path, task: str, run_id: str, cells: int, seconds: float,
               device: str, cpu_model: str) -> None:
    """What one run of a task measured and how long it took (read by :func:`estimate`)."""
    write_json(Path(store_dir) / RECORD.format(task=task),
               {"run_id": run_id, "cells": cells, "seconds": round(seconds, 3),
                "device": device, "cpu_model": cpu_model,
                "date": time.strftime("%Y-%m-%d")})


# Where each run of a task spent its time, seconds per phase and its ``total``
# (the runner writes it; the report's time breakdown and benchmarks read it).
BREAKDOWN = "time_breakdown_{task}.json"


def time_breakdowns(store_dir: Path) -> dict[str, dict[str, float]]:
    """The stored time breakdowns of one study's results folder, by task."""
    prefix, suffix = BREAKDOWN.split("{task}")
    return {f.name[len(prefix):-len(suffix)]: json.loads(f.read_text())
            for f in sorted(Path(store_dir).glob(BREAKDOWN.format(task="*")))}
