"""Sweeps sharded over machines: ``fwcompare run STUDY --shard I/N``,
``fwcompare merge OUT SHARD_DIR...`` and ``fwcompare submit STUDY --shards N``.

A shard is a share of a study's cells made of whole **units**: the cells that
must run on one machine. A unit joins every worker group of the study
(``Study.groups``: what one process runs, so nothing is split mid-process and
a cold first call stays the one the unsharded run would time) and, under the
interleaved schedule, every lane (a variant's process over all its shapes)
and every set (the variants of one shape, sampled in turns) that touches it;
with that schedule a unit is therefore one model of one task. Rounds stay
with their cell. The assignment is a function of the params alone, the same
on every machine: units are keyed by a hash of what their cells measure (the
spec without ``threads``, which a params value of 0 takes from each machine's
cores), taken largest first (ties by key) and each given to the shard with
the fewest measurements so far (ties to the lowest). Never ``hash()``, never
the order of a dict built on this machine.

Shards are numbered from 1: ``--shard 1/4`` to ``--shard 4/4``. Each writes a
normal results store in a folder of its own (default
``outputs/PROFILE/STUDY/shards/shard-I-of-N``) and, when every one of its
cells has a row, ``shard.json`` beside the rows: the study, I and N, the
params hash, its cells. A folder without it is no finished shard.

:func:`merge` joins the stores into one results folder that
``fwcompare.load_results`` and the study's notebook read as one run, each row,
sample and loss keeping its own ``run_id`` and ``hostname``. It refuses (and
writes nothing) unless the shards are 1..N of one study with one params hash,
one fwcompare commit and the same library versions, each with a row for every
cell of its share and no cell in two shards. It builds the folder beside the
target and renames it into place; results already there are archived to
``results/previous/<timestamp>/``, never overwritten.

``fwcompare.suite.submit.submit`` sends one job per shard through submitit (Slurm, or its local
executor: the shards as processes of this machine, at once, so for tests and
trials, not for measurements), each calling :func:`run_shard` as ``fwcompare
run --shard`` does; it prints each shard as it finishes, cancels every other
job when one fails, on a timeout or on Ctrl-C, and merges when all are done.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.atomic import write_json
from ..core.folder_lock import hold
from ..core.spec import RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from ..results.store import StudyResults
    from ..plan.run import RunPlan

SHARD_FILE = "shard.json"   # in a finished shard's results folder
MERGED_FILE = "shards.json"  # in a merged results folder: what it was merged from
SHARDS_DIR = "shards"        # under a study's output folder: one folder per shard


class ShardError(ValueError):
    """A bad ``--shard``, a folder that is no shard of this run, or a refused
    merge (the message names each problem)."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``, numbered from 1."""

    index: int
    count: int

    def __post_init__(self):
        if self.count < 1:
            raise ShardError(f"--shard {self.index}/{self.count}: N must be at least 1")
        if not 1 <= self.index <= self.count:
            raise ShardError(f"--shard {self.index}/{self.count}: I must be between 1 and N "
                             f"({self.count}); shards are numbered from 1")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        m = re.fullmatch(r"\s*([+-]?\d+)\s*/\s*([+-]?\d+)\s*", str(text))
        if not m:
            raise ShardError(f"--shard {text}: expected I/N, shard I of N with I from 1 to N "
                             "(e.g. 1/4)")
        return cls(int(m[1]), int(m[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def name(self) -> str:
        """Its folder's name: ``shard-I-of-N``."""
        return f"shard-{self.index}-of-{self.count}"


def measure_key(spec: RunSpec) -> str:
    """What a cell measures, the same on every machine: its spec without
    ``threads`` (0 in the params means each machine's cores, and the cell id
    follows it)."""
    d = spec.to_dict()
    d.pop("threads")
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Unit:
    """Cells that run on one machine (see the module doc)."""

    key: str                     # a hash of its cells' measure keys
    specs: tuple[RunSpec, ...]   # in the study's order
    measurements: int            # its (cell, round) pairs: what a shard's size counts


def units(plan: "RunPlan") -> list[Unit]:
    """The plan's cells cut into units, by the runner's own grouping: the
    study's ``groups`` hook per task, model and framework (as
    ``Runner._groups`` calls it), and under the interleaved schedule the lanes
    (``schedules.interleaved.variant_key``) and shape sets that ``run_interleaved`` forms
    from those groups. Sorted by key."""
    from ..execution.schedules.interleaved import variant_key
    from ..plan.job import CellRef

    study, params = plan.study, plan.params
    specs = list(dict.fromkeys(plan.specs))
    per_cell = Counter(c.spec for c in plan.of(specs))
    parent = {s: s for s in specs}

    def root(s: RunSpec) -> RunSpec:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    def join(cells) -> None:
        cells = list(cells)
        for c in cells[1:]:
            parent[root(c)] = root(cells[0])

    by_process: dict[tuple, list[RunSpec]] = defaultdict(list)
    for s in specs:
        by_process[(s.task, s.model, s.framework)].append(s)
    for (task, _, _), mine in by_process.items():
        for group in study.groups(task, [CellRef(s) for s in mine]):
            if group:
                join(c.spec for c in group)
    together: dict[tuple, list[RunSpec]] = defaultdict(list)
    for s in specs:  # the tasks the runner interleaves (Study.schedule)
        if study.schedule(params, s.task) == "interleaved":
            together[("lane", s.task, s.model, variant_key(CellRef(s)))].append(s)
            together[("set", s.task, s.model, s.shape)].append(s)
    for cells in together.values():
        join(cells)
    members: dict[RunSpec, list[RunSpec]] = defaultdict(list)
    for s in specs:
        members[root(s)].append(s)
    found = []
    for cells in members.values():
        key = hashlib.sha1("\n".join(sorted(map(measure_key, cells))).encode()).hexdigest()[:16]
        found.append(Unit(key, tuple(cells), sum(per_cell[s] for s in cells)))
    return sorted(found, key=lambda u: u.key)


def assign(all_units: list[Unit], count: int) -> list[list[Unit]]:
    """Units per shard (index 0 is shard 1): largest first, ties by key, each
    to the shard with the fewest measurements so far, ties to the lowest."""
    shards: list[list[Unit]] = [[] for _ in range(count)]
    load = [0] * count
    for u in sorted(all_units, key=lambda u: (-u.measurements, u.key)):
        i = min(range(count), key=lambda k: (load[k], k))
        shards[i].append(u)
        load[i] += u.measurements
    return shards


@dataclass(frozen=True)
class ShardPlan:
    """One shard's share of a study's cells."""

    study: str
    shard: Shard
    units: tuple[Unit, ...]
    specs: tuple[RunSpec, ...]   # its cells, in the study's order
    all_units: int
    all_measurements: int

    @property
    def measurements(self) -> int:
        return sum(u.measurements for u in self.units)

    def text(self) -> str:
        lines = [f"{self.study} shard {self.shard}: {len(self.specs)} cells "
                 f"({self.measurements} of {self.all_measurements} measurements) in "
                 f"{len(self.units)} of {self.all_units} units (cells that share a process "
                 "or an interleaved set)"]
        if not self.units:
            lines.append(f"  nothing to run: the study has {self.all_units} unit"
                         f"{'s' if self.all_units != 1 else ''} for {self.shard.count} shards")
        for u in self.units:
            variants = sorted({f"{s.framework}/{s.mode}" for s in u.specs})
            models = sorted({s.model for s in u.specs})
            lines.append(f"  {', '.join(models)}: {', '.join(variants)} "
                         f"({len(u.specs)} cells, {u.measurements} measurements)")
        return "\n".join(lines)


def plan_shard(plan: "RunPlan", shard: Shard) -> ShardPlan:
    """Shard ``shard``'s cells of a run's plan."""
    all_units = units(plan)
    mine = assign(all_units, shard.count)[shard.index - 1]
    keep = {s for u in mine for s in u.specs}
    return ShardPlan(plan.study.name, shard, tuple(sorted(mine, key=lambda u: u.key)),
                     tuple(s for s in dict.fromkeys(plan.specs) if s in keep),
                     len(all_units), sum(u.measurements for u in all_units))


def shard_dir(output_dir: Path | str, shard: Shard) -> Path:
    """A shard's default folder under a study's output folder."""
    return Path(output_dir) / SHARDS_DIR / shard.name


def results_dir(folder: Path | str) -> Path:
    """The results store of an output folder (``FOLDER/results``), or the
    folder itself when it is a store."""
    folder = Path(folder)
    return folder / "results" if (folder / "results").is_dir() else folder


def read_info(store_dir: Path) -> dict | None:
    path = Path(store_dir) / SHARD_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def write_info(store_dir: Path, plan: ShardPlan, params_hash: str, cells: list[str]) -> Path:
    """``shard.json``: what the folder's run was, written once every cell has a row."""
    return write_json(Path(store_dir) / SHARD_FILE, {
        "study": plan.study, "shard": plan.shard.index, "count": plan.shard.count,
        "params_hash": params_hash, "cells": sorted(cells),
        "units": [u.key for u in plan.units], "all_units": plan.all_units,
        "all_measurements": plan.all_measurements,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})


def _claim(store_dir: Path, plan: ShardPlan, params_hash: str, planned: set[str]) -> None:
    """Refuse a folder that holds another shard or other cells with these
    params (they would be merged twice); forget an earlier finished mark."""
    from ..results.store import ResultStore

    info = read_info(store_dir)
    if info and (info.get("study"), info.get("shard"), info.get("count")) != (
            plan.study, plan.shard.index, plan.shard.count):
        raise ShardError(f"{store_dir} holds shard {info.get('shard')}/{info.get('count')} of "
                         f"{info.get('study')}, not shard {plan.shard} of {plan.study}: give "
                         "this shard a folder of its own (--out)")
    store = ResultStore(store_dir)
    if store.stamped() == params_hash:  # kept by the run (other params are archived)
        rows = store.load()
        other = set(rows["cell_id"] + "-r" + rows["round"].astype(str)) - planned
        if other:
            raise ShardError(f"{store_dir} already holds {len(other)} cells of these params that "
                             f"are not shard {plan.shard}'s (an unsharded run, or another "
                             "sharding): give this shard a folder of its own (--out)")
    (store_dir / SHARD_FILE).unlink(missing_ok=True)


def run_shard(study: str, params: dict | None, shard: Shard, *, output_dir: Path | str,
              profile: str = "adhoc", study_file: str = "",
              progress: bool = True) -> "StudyResults":
    """Run (or resume) shard ``shard`` of ``study`` into ``output_dir`` (what
    ``fwcompare run STUDY --shard I/N`` and every submitted job call): as
    ``run_study`` runs a study, restricted to the shard's cells. A study
    registered outside fwcompare is imported from ``study_file``."""
    from .. import studies
    from .api import run_plan, run_study
    from .params import validate

    if study_file:
        studies.load(study, study_file)
    params = validate(study, params or {}, source=f"{study} params")
    run = run_plan(study, params)
    plan = plan_shard(run, shard)
    store_dir = Path(output_dir) / "results"
    planned = {c.key for c in run.of(plan.specs)}
    _claim(store_dir, plan, run.params_hash, planned)
    if progress:
        print(plan.text(), flush=True)
    res = run_study(study, params, profile=profile, output_dir=output_dir, progress=progress,
                    cells=list(plan.specs), plan=run)
    have = set(res.results["cell_id"] + "-r" + res.results["round"].astype(str))
    if planned <= have:  # every cell has a row: a finished shard
        write_info(store_dir, plan, run.params_hash, sorted(planned))
    return res


# -- merge ---------------------------------------------------------------------------------
@dataclass
class _Folder:
    given: Path
    store: Path
    info: dict
    env: dict
    rows: "pd.DataFrame"

    @property
    def label(self) -> str:
        return f"shard {self.info['shard']}/{self.info['count']} ({self.given})"


@dataclass
class Merged:
    """A merge's result: the results folder, the shards, the warnings."""

    results_dir: Path
    shards: int
    rows: int  # (cell, round) rows
    archived: Path | None = None
    warnings: list[str] = field(default_factory=list)


def _open(folder: Path) -> _Folder | str:
    from ..results.store import ResultStore, read_manifest

    store = results_dir(folder)
    if not store.is_dir():
        return f"{folder}: no such folder"
    info = read_info(store)
    if info is None:
        return (f"{folder}: no {SHARD_FILE}: not a shard's folder, or its run did not finish "
                "(run `fwcompare run STUDY --shard I/N --out FOLDER` again: it resumes)")
    env = read_manifest(store / "env.json")
    return _Folder(Path(folder), store, info, env, ResultStore(store).load())


def _check(folders: list[_Folder]) -> tuple[list[str], list[str]]:
    """(problems, warnings) of merging ``folders``."""
    from ..results.store import ResultStore

    problems: list[str] = []
    warnings: list[str] = []
    studies = sorted({f.info["study"] for f in folders})
    if len(studies) > 1:
        problems.append(f"the folders hold shards of different studies: {', '.join(studies)}")
    counts = sorted({f.info["count"] for f in folders})
    if len(counts) > 1:
        problems.append("the folders were cut into different numbers of shards: "
                        + ", ".join(f.label for f in folders))
    else:
        n = counts[0]
        by_index = defaultdict(list)
        for f in folders:
            by_index[f.info["shard"]].append(f)
        missing = [i for i in range(1, n + 1) if i not in by_index]
        if missing:
            problems.append(f"shard{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(f'{i}/{n}' for i in missing)} missing")
        for i, fs in sorted(by_index.items()):
            if len(fs) > 1:
                problems.append(f"shard {i}/{n} given twice: "
                                + ", ".join(str(f.given) for f in fs))
    hashes = defaultdict(list)
    for f in folders:
        stamped = ResultStore(f.store).stamped()
        if stamped != f.info["params_hash"]:
            problems.append(f"{f.label}: its results are of params {stamped}, not the "
                            f"{f.info['params_hash']} it finished with")
        hashes[f.info["params_hash"]].append(f.label)
    if len(hashes) > 1:
        problems.append("params differ between shards (params hash): " + "; ".join(
            f"{h}: {', '.join(labels)}" for h, labels in sorted(hashes.items())))
    # The code: fwcompare's commit (manifest and rows) and the libraries' versions.
    commits = {}
    for f in folders:
        mine = {f.env.get("git_commit") or "unknown"} | {
            c for c in f.rows["git_commit"].dropna().unique() if c}
        if len(mine) > 1:
            problems.append(f"{f.label}: rows from several fwcompare commits: "
                            f"{', '.join(sorted(mine))}")
        commits[f.label] = sorted(mine)
        if f.env.get("git_dirty") or bool(f.rows["git_dirty"].fillna(False).any()):
            warnings.append(f"{f.label} ran from a checkout with uncommitted changes (git_dirty): "
                            "one commit does not prove one code")
    if len({tuple(c) for c in commits.values()}) > 1:
        problems.append("fwcompare's git commit differs between shards: " + "; ".join(
            f"{label}: {', '.join(c)}" for label, c in commits.items()))
    elif all(c == ["unknown"] for c in commits.values()):
        warnings.append("fwcompare's git commit is unknown (not a git checkout): only the "
                        "library versions were compared")
    first = folders[0]
    for f in folders[1:]:
        a, b = first.env.get("versions", {}), f.env.get("versions", {})
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if differ:
            problems.append(f"library versions differ between {first.label} and {f.label}: "
                            + ", ".join(f"{k} {a.get(k)} vs {b.get(k)}" for k in differ)
                            + " (`fwcompare compare` is for runs of different versions)")
    # The cells: every one of a shard's share has a row, none is in two shards.
    where: dict[str, list[str]] = defaultdict(list)  # measure key -> shards
    label_of: dict[str, str] = {}
    totals = {f.info.get("all_measurements") for f in folders}
    for f in folders:
        planned = set(f.info["cells"])
        have = set(f.rows["cell_id"] + "-r" + f.rows["round"].astype(str))
        if planned - have:
            problems.append(f"{f.label}: {len(planned - have)} of its {len(planned)} cells have "
                            "no row (run its shard again: it resumes)")
        if have - planned:
            problems.append(f"{f.label}: {len(have - planned)} cells with rows that are not its "
                            "share (a folder of another run or sharding)")
        for spec in {RunSpec.from_dict(r) for r in f.rows.to_dict("records")}:
            where[measure_key(spec)].append(f.label)
            label_of[measure_key(spec)] = spec.label
    doubled = sorted((label_of[k], v) for k, v in where.items() if len(v) > 1)
    if doubled:
        problems.append(f"{len(doubled)} cell{'s are' if len(doubled) > 1 else ' is'} in more "
                        f"than one shard (e.g. {doubled[0][0]}: {'; '.join(doubled[0][1])})")
    if len(totals) == 1 and not problems:
        total = totals.pop()
        got = sum(len(f.info["cells"]) for f in folders)
        if total is not None and got != total:
            problems.append(f"the shards hold {got} measurements, the study has {total}")
    # The machines: the comparison is fair within a shard; say where they differ.
    for key, what in (("cpu_model", "CPU"), ("gpus", "GPUs"),
                      ("cpu_cores_available", "cores")):
        seen = {json.dumps(f.env.get(key), sort_keys=True) for f in folders}
        if len(seen) > 1:
            warnings.append(f"the shards ran on different {what}: "
                            + "; ".join(f"{f.label}: {f.env.get(key)}" for f in folders))
    threads = {f.label: sorted(set(f.rows["threads"].dropna().astype(int))) for f in folders}
    if len({tuple(t) for t in threads.values() if t}) > 1:
        warnings.append("the shards ran with different thread counts: " + "; ".join(
            f"{label}: {t}" for label, t in threads.items()))
    peaks = {json.dumps((f.env.get("peak") or {}).get("flops_per_s"), sort_keys=True)
             for f in folders}
    if len(peaks) > 1:
        warnings.append(f"the shards measured different FLOP/s ceilings: pct_of_peak of every "
                        f"row uses {first.label}'s (its env.json peak)")
    return problems, warnings


def _merged_env(folders: list[_Folder]) -> dict:
    env = json.loads(json.dumps(folders[0].env))
    for key in ("hostname", "cpu_model"):
        seen = list(dict.fromkeys(str(f.env.get(key, "")) for f in folders))
        if len(seen) > 1:
            env[key] = " / ".join(seen)
    env["shards"] = [{"shard": f"{f.info['shard']}/{f.info['count']}", "folder": str(f.given),
                      "hostname": f.env.get("hostname"), "cpu_model": f.env.get("cpu_model"),
                      "gpus": f.env.get("gpus"), "timestamp": f.env.get("timestamp"),
                      "peak": f.env.get("peak"),
                      "run_ids": sorted(set(f.rows["run_id"].dropna()))} for f in folders]
    return env


def _sum_json(files: list[Path], numbers: tuple[str, ...] | None) -> dict:
    """The shards' JSON records added up: every number (``numbers``: only
    those keys; the other keys from the first file that has them)."""
    out: dict = {}
    for path in files:
        d = json.loads(path.read_text())
        for k, v in d.items():
            add = isinstance(v, (int, float)) and not isinstance(v, bool) and (
                numbers is None or k in numbers)
            if add:
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


def _copy_dir(src: Path, dest: Path, tag: str) -> None:
    """Every Parquet file of ``src`` into ``dest``; a name already there
    (losses of one variant from two shards) gets ``tag``, nothing is dropped."""
    if not src.is_dir():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("*.parquet")):
        target = dest / f.name
        if target.exists():
            target = dest / f"{f.stem}--{tag}{f.suffix}"
        shutil.copy2(f, target)


def merge(out: Path | str, shard_dirs: list[Path | str]) -> Merged:
    """Join finished shards into ``OUT/results`` (see the module doc);
    ShardError, with every problem named and nothing written, when they do
    not make one run."""
    from .. import studies  # noqa: F401 (registers the cell axes a row's spec is read with)

    if not shard_dirs:
        raise ShardError("merge: no shard folders given")
    opened = [_open(Path(d)) for d in shard_dirs]
    problems = [o for o in opened if isinstance(o, str)]
    folders = sorted((o for o in opened if not isinstance(o, str)),
                     key=lambda f: (f.info["shard"], str(f.given)))
    warnings: list[str] = []
    if folders:
        more, warnings = _check(folders)
        problems += more
    if problems:
        raise ShardError("merge refused, nothing written:\n  - " + "\n  - ".join(problems))
    out = Path(out)
    final = out / "results"
    if any(final.resolve() == f.store.resolve() for f in folders):
        raise ShardError(f"merge refused, nothing written: {out} is one of the shards")
    with hold(out):  # one writer per folder: a second merge or a run stops here
        return _write(out, final, folders, warnings)


def _write(out: Path, final: Path, folders: list, warnings: list[str]) -> Merged:
    """:func:`merge`'s writing, checks passed and ``out`` held: the shards'
    rows into a temporary folder, then renamed into ``final`` (an earlier
    results folder kept in its ``previous/``)."""
    from ..results.store import BREAKDOWN, RECORD, ResultStore

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".results-merging-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for f in folders:
            tag = f"shard-{f.info['shard']}-of-{f.info['count']}"
            for sub in ("cells", "samples", "losses"):
                _copy_dir(f.store / sub, tmp / sub, tag)
        first = folders[0].store
        shutil.copy2(first / "params_hash", tmp / "params_hash")
        if (first / "params.json").is_file():
            shutil.copy2(first / "params.json", tmp / "params.json")
        write_json(tmp / "env.json", _merged_env(folders))
        names = sorted({p.name for f in folders for p in f.store.glob("*.json")})
        for name in names:
            files = [f.store / name for f in folders if (f.store / name).is_file()]
            if name.startswith(BREAKDOWN.split("{task}")[0]):  # seconds per phase, all machines
                write_json(tmp / name, _sum_json(files, None))
            elif name.startswith(RECORD.split("{task}")[0]):  # estimate.py: seconds per measurement
                write_json(tmp / name, _sum_json(files, ("cells", "seconds")))
        write_json(tmp / MERGED_FILE, [
            {"shard": f"{f.info['shard']}/{f.info['count']}", "folder": str(f.given.resolve()),
             "hostname": f.env.get("hostname"), "cells": len(f.info["cells"]),
             "finished": f.info.get("finished")} for f in folders])
        store = ResultStore(tmp)
        store.consolidate()
        rows = len(store.load())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    archived = None
    if final.exists() and any(final.iterdir()):  # never overwritten: kept in previous/
        old = out / f".results-replaced-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        archived = final / "previous" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        archived.parent.mkdir()
        if (old / "previous").is_dir():
            for kept in (old / "previous").iterdir():
                shutil.move(str(kept), archived.parent / kept.name)
        os.rename(old, archived)
    else:
        if final.exists():
            final.rmdir()
        os.rename(tmp, final)
    return Merged(final, len(folders), rows, archived, warnings)
