"""`fwcompare report`: run every study notebook for a profile and index it.

Validate every study's params file (before anything runs); measure every
study's cells in this process, in round passes (round 0 of every study, then
round 1 of every study..., ``fwcompare.run_studies``), with one set of fork
servers for all of them; then execute the notebooks with papermill, a few at
a time in processes of their own (a notebook finds its cells measured and
only reads them), each into a temporary file moved into place (a failed run
leaves no half-written output), render HTML with the code hidden; the
scorecard's among them, first, where no study has cells left to measure (else
after them); then ``outputs/<profile>/index.html``. A study whose inputs (params
file, notebook, library source, package versions) did not change is not run
again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.parse
from pathlib import Path

import pandas as pd
import yaml

from . import claims, doctor, env, frameworks, load_results, models, run_studies
from .atomic import UnreadableFile, write_text
from .forkserver import ForkServers, kill_group
from .host import BUSY_HOST, host_load
from .params import (REPORT_BUDGET_S, describe_overrides, merge_overrides,
                     overridden_profile, overrides_by_study, profile_file, read_yaml,
                     with_overrides)
from .paths import NOTEBOOKS, OUTPUTS, PARAMS, ROOT
from .results import ResultStore, time_breakdowns
from .peak import PHASE as PEAK_PHASE
from .studies import STUDIES


def _hash_files(files: list[Path], extra: str = "") -> str:
    h = hashlib.sha1()
    for f in [*files, *sorted((ROOT / "fwcompare").rglob("*.py"))]:
        h.update(f.name.encode())
        h.update(f.read_bytes() if f.is_file() else b"(missing)")
    h.update(json.dumps(env.versions(), sort_keys=True).encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


def _inputs_hash(study: str, profile: str, overrides: dict | None = None) -> str:
    return _hash_files([PARAMS / study / f"{profile}.yaml", NOTEBOOKS / STUDIES[study].notebook],
                       json.dumps(overrides or {}, sort_keys=True, default=str))


def _summary_hash(out_root: Path) -> str:
    """The scorecard's inputs: claims, notebook, library, and every study's
    stored results (by name, size and modification time)."""
    stored = []
    for study in STUDIES:
        res = out_root / study / "results"
        for f in sorted([*res.glob("*.parquet"), *res.glob("env.json")]):
            st = f.stat()
            stored.append(f"{study}/{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return _hash_files([claims.CLAIMS_FILE, NOTEBOOKS / SUMMARY_NOTEBOOK], "\n".join(stored))


def _measures_again(out: Path) -> bool:
    """Whether a study's notebook will measure (and store) more: cells whose
    status a run tries again (error, timeout), or no consolidated results."""
    import pandas as pd

    from .results import RUN_FAILED

    f = out / "results" / "results.parquet"
    try:
        return bool(pd.read_parquet(f, columns=["status"])["status"].isin(RUN_FAILED).any())
    except (OSError, ValueError):  # missing, or cut short: its notebook consolidates again
        return True


def _render_html(notebook: Path, target: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    try:
        exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True,
                                exclude_output_prompt=True)
        body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    except Exception as exc:  # its first line names the problem; the last, a path
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RuntimeError(
            f"{notebook.name} ran, but nbconvert could not render its HTML page "
            f"({type(exc).__name__}: {first}; nbconvert's templates are found through "
            f"JUPYTER_PATH and the environment's share/jupyter)") from exc
    write_text(target, body)


SUMMARY = "summary"  # the claims scorecard: judged after every study, opens index.html
FOREST = "scorecard_forest"  # its figure of every judged claim, above its table
SUMMARY_NOTEBOOK = "summary.ipynb"
# A quiet machine's typical round-to-round spread of the timed claims (the
# variance prior's s0, from three fresh quick reports: docs/measurements.md, "the
# figures the library's comments quoted"). Where a run's spread is above
# NOISY_FACTOR times it, the first page says the machine was noisy, and by how much.
QUIET_SPREAD = 0.01
NOISY_FACTOR = 2.0
# Its parameters: the report sets results_dir (and profile, output_dir, as for
# every notebook); claims_file is for running it by hand on other claims.
SUMMARY_PARAMETERS = ("profile", "results_dir", "claims_file", "output_dir")


# The Jupyter kernel of this environment's interpreter: papermill runs every
# notebook in it, the notebooks name it, `make lab` offers it.
KERNEL = "fwcompare"


def ensure_kernel() -> str:
    """Register KERNEL for this interpreter (``<sys.prefix>/share/jupyter``)
    unless it already points here; return its name. Without it, papermill's
    ``python3`` ran whatever interpreter a user's own kernelspec named."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def found():
        try:
            return KernelSpecManager().get_kernel_spec(KERNEL)
        except NoSuchKernel:
            return None
    spec = found()
    if spec is not None and spec.argv[0] == sys.executable:
        return KERNEL
    from ipykernel.kernelspec import install

    install(kernel_name=KERNEL, display_name=f"fwcompare ({Path(sys.prefix).name})",
            prefix=sys.prefix)
    spec = found()
    if spec is None or spec.argv[0] != sys.executable:  # one earlier on Jupyter's path
        raise ReportError(
            f"the Jupyter kernel {KERNEL!r} at {spec.resource_dir if spec else '?'} runs "
            f"{spec.argv[0] if spec else '?'}, not this environment's {sys.executable}: "
            f"remove it (jupyter kernelspec remove {KERNEL}) and run again")
    return KERNEL


class ReportError(RuntimeError):
    """One or more studies failed; the others and the index were still written."""


def run_notebook(study: str, profile: str, params: dict, out: Path,
                 notebook: str | None = None) -> Path:
    """Execute a study notebook (or ``notebook``) into ``out``. On failure the
    partial notebook is kept as ``<study>.failed.ipynb`` (for its traceback)
    and the error re-raised."""
    import papermill as pm

    out.mkdir(parents=True, exist_ok=True)
    nb_in = NOTEBOOKS / (notebook or STUDIES[study].notebook)
    tmp = out / f".{study}.running.ipynb"
    try:
        pm.execute_notebook(str(nb_in), str(tmp), cwd=str(ROOT), kernel_name=ensure_kernel(),
                            parameters={**params, "profile": profile, "output_dir": str(out)},
                            log_output=True, progress_bar=False)
    except BaseException:
        if tmp.exists():
            os.replace(tmp, out / f"{study}.failed.ipynb")
        raise
    final = out / f"{study}.ipynb"
    os.replace(tmp, final)
    (out / f"{study}.failed.ipynb").unlink(missing_ok=True)
    return final


def build(profile: str = "quick", out_root: Path | None = None, fresh: bool = False,
          studies: list[str] | None = None, overrides: dict | None = None,
          progress: bool = True, budget_s: float | None = None,
          dry_run: bool = False, scorecard: bool = True) -> Path | None:
    """The report of ``profile`` (``studies``: a subset), into
    ``out_root/<profile>``; with ``overrides`` (the command line's params,
    :func:`params.overrides_by_study`) into ``out_root/<profile>-<hash>``
    (:func:`params.overridden_profile`). ``progress``: False prints only
    failures and where the report is. ``budget_s``: the report's time
    budget, which its extra rounds do not overrun (default: the profile's,
    ``params.REPORT_BUDGET_S``, where no override changes what it measures; 0: none).
    ``dry_run``: the params checked, each study's cells and estimate and the
    report's printed (:func:`dry_run_text`), nothing measured; returns None.
    ``scorecard=False``: the studies alone, the scorecard not judged (a later
    report over the same folder judges it and measures none of them again)."""
    t_begin = time.monotonic()
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if progress else (
        lambda *a, **k: None)
    overrides = overrides or {}
    label = overridden_profile(profile, overrides)
    out_root = Path(out_root or OUTPUTS) / label
    chosen = studies or list(STUDIES)
    per_study = overrides_by_study(chosen, overrides)
    # Validate every params file first: a typo fails in seconds, before any run.
    # The typed params measure; the notebooks get the file's values (papermill
    # injects plain values) and check them again, as a notebook run by hand does.
    raw, typed, on_gpu = {}, {}, []
    for study in chosen:
        path = profile_file(study, profile, PARAMS)
        typed[study] = full = with_overrides(study, path, per_study[study])
        if full["device"] == "gpu":
            on_gpu += full["frameworks"]
        raw[study] = merge_overrides(read_yaml(path, "params"), per_study[study])
    if overrides:
        say(f"your own question ({describe_overrides(overrides)}): the report goes to "
            f"{out_root}")
    named = dict.fromkeys(fw for full in typed.values() for fw in full["frameworks"])
    chosen_models = dict.fromkeys(m for full in typed.values() for m in full["models"])
    for why in filter(None, [*map(frameworks.not_installed, named),  # once, not per study
                             *map(models.not_installed, chosen_models)]):
        say(f"{why}: its cells will be unsupported, the others run")
    claims.load_claims()  # the scorecard's claims, checked before anything runs too
    if on_gpu and not dry_run:  # the GPU checked once, before any study (their kernels
        doctor.require(on_gpu, "gpu")  # inherit the pass)
    failures: dict[str, str] = {}
    t_all = time.perf_counter()
    stale = []
    for study in chosen:
        digest = _inputs_hash(study, profile, per_study[study])
        if fresh or not _unchanged(study, out_root / study, digest):
            stale.append((study, digest))
    if budget_s is None:
        budget_s = None if overrides else REPORT_BUDGET_S.get(profile)
    if dry_run:
        print(dry_run_text({study: (typed[study], out_root / study) for study, _ in stale},
                           [s for s in chosen if s not in dict(stale)], budget_s, fresh,
                           bool(on_gpu)))
        return None
    # 1. Every study's cells in round passes (round 0 of every study, then round 1...),
    # the workers forked from one set of fork servers: a framework's imports once per
    # report, not per study.
    if fresh:
        for study, _ in stale:
            ResultStore(out_root / study / "results").archive()
    measured = {study: (typed[study], out_root / study) for study, _ in stale}
    # The breakdowns stored before measuring: a task with nothing left to measure
    # keeps an earlier report's, which is not this report's time.
    earlier = {study: time_breakdowns(out_root / study / "results") for study in measured}
    until = (t_begin + budget_s - after_measuring(len(stale))[1]) if budget_s else None
    if stale:
        say(total_estimate(measured, budget_s))
    with ForkServers(out_root / ".forkservers") as servers:
        times, failed = run_studies(measured,
                                    profile=label, servers=servers, progress=progress,
                                    log=None if progress else _failures_only, until=until)
    for study in failed:  # its notebook runs it again and keeps the error
        print(f"{study}: the measurement failed; its notebook runs it again", file=sys.stderr)
    # Where the measuring went, read now: a notebook that measures a failed cell
    # again writes its own run's breakdown over the measurement's.
    measured_runs = {study: {task: run for task, run in
                             time_breakdowns(out_root / study / "results").items()
                             if run != earlier.get(study, {}).get(task)} for study in times}
    # 2. The notebooks (tables, figures, HTML), a few at a time: they only read
    # what step 1 stored, so measuring is over when they share the CPU. 3. The
    # scorecard judges whatever results are stored: beside them, first (the
    # longest), where every study's measurement ended; else after them (a failed
    # study's notebook runs it again and may store more).
    jobs = [NotebookJob(study, label, out_root / study, digest, raw[study],
                        str(NOTEBOOKS / STUDIES[study].notebook),
                        PARAMS / study / f"{profile}.yaml") for study, digest in stale]
    out = out_root / SUMMARY

    def summary_job() -> list[NotebookJob]:
        if not scorecard:
            return []
        digest = _summary_hash(out_root)
        if _unchanged(SUMMARY, out, digest) and _readable_scorecard(out):
            say(f"[scorecard] {SUMMARY}: inputs unchanged, not run again ({out})")
            return []
        return [NotebookJob(SUMMARY, label, out, digest, {"results_dir": str(out_root)},
                            str(NOTEBOOKS / SUMMARY_NOTEBOOK), claims.CLAIMS_FILE)]

    beside = not failed and not any(_measures_again(out_root / study) for study, _ in stale)
    t0 = time.perf_counter()
    took = run_notebooks((summary_job() if beside else []) + jobs, failures, progress)
    notebooks_s = time.perf_counter() - t0 if stale or SUMMARY in took else 0.0
    summary_s = 0.0
    if not beside:
        t0 = time.perf_counter()
        took.update(run_notebooks(summary_job(), failures, progress))
        summary_s = time.perf_counter() - t0 if SUMMARY in took else 0.0
    index = write_index(label, out_root, failures)
    if times or took:
        parts = [f"{k} {_mmss(v)}" for k, v in times.items()]
        if beside and SUMMARY in took:
            parts.append(f"notebooks and scorecard {_mmss(notebooks_s)} ({len(stale)} and "
                         f"the scorecard's, {notebook_jobs()} at a time; the scorecard "
                         f"{_mmss(took[SUMMARY])})")
        elif stale:
            parts.append(f"notebooks {_mmss(notebooks_s)} ({len(stale)}, "
                         f"{notebook_jobs()} at a time)")
        if summary_s:
            parts.append(f"scorecard {_mmss(summary_s)}")
        say("times: " + ", ".join(parts) + f"; report {_mmss(time.perf_counter() - t_all)}")
        breakdown = time_breakdown(out_root, times, time.perf_counter() - t_all,
                                   notebooks_s + summary_s, runs=measured_runs)
        breakdown.to_csv(out_root / "time_breakdown.csv", index=False)
        say(format_breakdown(breakdown))
        say(host_line(out_root, list(times)))
    print(f"report: {index}", file=sys.stderr)
    if failures:
        raise ReportError(f"{len(failures)} study(ies) failed: " + "; ".join(
            f"{k}: {v}" for k, v in failures.items()))
    return index


def dry_run_text(studies: dict[str, tuple[dict, Path]], unchanged: list[str],
                 budget_s: float | None, fresh: bool, on_gpu: bool) -> str:
    """``fwcompare report --dry-run``: each study's cells and estimate
    (``estimate.Estimate.text``), the studies a report would leave as they
    are (inputs unchanged), the report's estimate (:func:`total_estimate`),
    and, for a GPU profile on a machine without one, that the real run would
    stop at the doctor."""
    from .estimate import estimate

    ests = [estimate(STUDIES[name], params, out / "results", claims.claimed_for(name, params),
                     fresh=fresh, cells=True) for name, (params, out) in studies.items()]
    lines = [e.text() for e in ests]
    lines += [f"{name}: its inputs are unchanged since its last report: not measured again "
              f"(--fresh measures it again)" for name in unchanged]
    if studies:
        lines.append(_total_line(studies, ests, budget_s))
    return "\n".join(filter(None, [*lines, doctor.dry_run_note("gpu") if on_gpu else ""]))


def total_estimate(studies: dict[str, tuple[dict, Path]], budget_s: float | None = None) -> str:
    """One line before a report measures: the sum of its studies' estimates
    (``estimate.estimate``: each study's last run here, else its parts:
    sampling, imports, builds and first calls, ``estimate.fixed_costs``), and
    what their notebooks and the scorecard take after them
    (:func:`after_measuring`); and the report's time budget, if it has one."""
    from .estimate import estimate

    ests = [estimate(STUDIES[name], params, out / "results", claims.claimed_for(name, params))
            for name, (params, out) in studies.items()]
    return _total_line(studies, ests, budget_s)


def _total_line(studies: dict[str, tuple[dict, Path]], ests: list,
                budget_s: float | None) -> str:
    """:func:`total_estimate`'s line from the studies' estimates (``ests``)."""
    # the report's studies share one set of fork servers: their imports once
    shared = sum(e.start_s for e in ests) - max((e.start_s for e in ests), default=0.0)
    high = sum(e.seconds for e in ests) - shared
    low = sum(e.seconds if e.low_seconds is None else e.low_seconds for e in ests) - shared
    # the extra rounds for doubtful claims spend at most their pooled budget, and
    # start only where they end before the report's time budget less its notebooks
    extra = sum(p["more_rounds_s"] for p, _ in studies.values()
                if "more_rounds" in p and p["more_rounds"] > 0)
    after = after_measuring(len(ests))
    more = extra > 0
    if budget_s and extra:  # they may spend what the measuring leaves, at most the pool
        room = budget_s - after[1]
        high += min(extra, max(0.0, room - high))
        extra = min(extra, max(0.0, room - low))
    else:
        high += extra
    bare = [e.study for e in ests if e.low_seconds is not None]
    span = _mmss(high) if low == high else f"{_mmss(low)} to {_mmss(high)}"
    what = f"{len(ests)} stud{'y' if len(ests) == 1 else 'ies'}"
    return (f"estimate for the report of {what}: {_mmss(low + after[0])} to "
            f"{_mmss(high + after[1])}: measurements {span}"
            + (f" ({', '.join(bare)}: no earlier run here, so from its parts: sampling, "
               "imports, builds, first calls, references, tries, whole runs and launches"
               if bare else " (each study's last run here")
            + (f"; up to {_mmss(extra)} of extra rounds for doubtful claims)" if extra
               else ")")
            + f", then notebooks and scorecard {_mmss(after[0])} to {_mmss(after[1])}"
            + (f"; its time budget {budget_s / 60:g} minutes: extra rounds only where they "
               "fit in it" if budget_s and extra else "")
            + (f"; no room for extra rounds in its time budget of {budget_s / 60:g} minutes"
               if budget_s and not extra and more else "")
            # the budget bounds the extra rounds only: a report that cannot fit says so
            + (f"; over its time budget of {budget_s / 60:g} minutes even at its low end "
               "(the budget bounds only extra rounds; every planned cell runs)"
               if budget_s and low + after[0] > budget_s else ""))


def after_measuring(k: int) -> tuple[float, float]:
    """What the notebooks of ``k`` studies and the scorecard take after the
    measuring, low and high (``estimate.NOTEBOOK_S``, ``estimate.SCORECARD_S``):
    ``notebook_jobs()`` at a time, the scorecard's first among them, so no less
    than it alone, the notebooks' waves, or the work shared out."""
    import math

    from .estimate import NOTEBOOK_S, SCORECARD_S

    jobs = notebook_jobs()
    low, high = (max(s, math.ceil(k / jobs) * n, (k * n + s) / jobs) if k else s
                 for n, s in zip(NOTEBOOK_S, SCORECARD_S))
    return low, high


# Phases that produce figures (the rest is overhead: process starts, model builds...).
FIGURE_PHASES = ("timing samples", "first calls and compiles", "memory passes",
                 "stability steps (loss curves)", PEAK_PHASE)


NOTEBOOK_PHASE = "notebooks (kernel, tables, figures, HTML)"


def time_breakdown(out_root: Path, times: dict[str, float], total: float,
                   notebooks_s: float = 0.0,
                   runs: dict[str, dict[str, dict[str, float]]] | None = None) -> pd.DataFrame:
    """Where a report's time went: the runners' phases of every study that
    ran (``runs``: ``results.time_breakdowns`` of each study as its measuring
    left them; default: as stored now), the rest of each study's measuring,
    the notebooks (``notebooks_s``, wall time: several run at once) and the
    report's own work."""
    phases: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        phases[name] = phases.get(name, 0.0) + seconds
    for study, seconds in times.items():
        runner_total = 0.0
        study_runs = (runs[study] if runs is not None
                      else time_breakdowns(out_root / study / "results"))
        for run in map(dict, study_runs.values()):
            total_of_run = run.pop("total", 0.0)
            runner_total += total_of_run
            for name, sec in run.items():
                add(name, sec)
            add("runner, other (process exits, scheduling)", total_of_run - sum(run.values()))
        add("study, other (params, plan, loading results)", max(0.0, seconds - runner_total))
    add(NOTEBOOK_PHASE, notebooks_s)
    add("report, other (params checks, index)",
        max(0.0, total - sum(times.values()) - notebooks_s))
    df = pd.DataFrame({"phase": list(phases), "seconds": list(phases.values())})
    df["share"] = df["seconds"] / total
    from .studies import STUDIES

    df["figures"] = df["phase"].isin(
        [*FIGURE_PHASES, *(ph for st in STUDIES.values() for ph in st.figure_phases)])
    return df.sort_values("seconds", ascending=False, ignore_index=True)


def format_breakdown(df: pd.DataFrame) -> str:
    total = df["seconds"].sum()
    lines = [f"where the time went ({_mmss(total)} in all):"]
    lines += [f"  {r.phase:<45} {_mmss(r.seconds):>8} {r.share:6.1%}{'  *' if r.figures else ''}"
              for r in df.itertuples()]
    fig = df[df["figures"]]["seconds"].sum()
    lines.append(f"  * producing figures: {_mmss(fig)}, {fig / total:.0%} of the report")
    return "\n".join(lines)


def host_line(out_root: Path, studies: list[str]) -> str:
    """The busiest share of the CPU that other processes and the hypervisor
    took while a study's cells were sampled (host.py), per study."""
    parts = []
    for study in studies:
        try:
            df = pd.read_parquet(out_root / study / "results" / "results.parquet")
        except (OSError, ValueError):  # not consolidated, or cut short: no figure to give
            continue
        if "host_other_cpu" not in df:  # results from before host.py
            continue
        load = host_load(df["host_other_cpu"], df["host_steal"])
        if load.notna().any():
            parts.append(f"{study} {load.max():.0%}" + (" (busy)" if load.max() > BUSY_HOST
                                                       else ""))
    return ("other work while cells were sampled (other processes and steal, busiest "
            "cell's share of the CPU): " + (", ".join(parts) or "not measured"))


def _mmss(seconds: float) -> str:
    """Minutes and seconds to a tenth, rounded before they split (299.96 s is
    5:00.0, not 4:60.0)."""
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds, 1), 60)
    return f"{int(minutes)}:{rest:04.1f}"


def _readable_scorecard(out: Path) -> bool:
    """Whether the scorecard in ``out`` can be read (one cut short is judged anew)."""
    try:
        claims.read(out)
    except UnreadableFile:
        return False
    return True


def _unchanged(name: str, out: Path, digest: str) -> bool:
    """Whether ``name`` ran to the end with these inputs (``.inputs``) and its
    report is in place: it is not run again."""
    stamp = out / ".inputs"
    return stamp.is_file() and stamp.read_text() == digest and (out / f"{name}.html").is_file()


@dataclasses.dataclass
class NotebookJob:
    """One notebook to execute and render: a study's, or the scorecard's."""

    name: str
    profile: str
    out: Path
    digest: str  # its inputs' hash: written to ``.inputs`` once it succeeded
    params: dict
    notebook: str  # its path (the process it runs in reads no patched NOTEBOOKS)
    params_file: Path


def notebook_jobs() -> int:
    """How many notebooks run at once: one per core, at most 4 (each is a
    kernel plus papermill, mostly one core's work)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _failures_only(text: str) -> None:
    """``run_studies``' log under ``-q``: a failed study's traceback, nothing else
    (its progress lines go to ``log`` whatever ``progress`` says: a test reads them)."""
    if "failed" in text.splitlines()[-1]:
        print(text, file=sys.stderr, flush=True)


def run_notebooks(jobs: list[NotebookJob], failures: dict[str, str],
                  progress: bool = True) -> dict[str, float]:
    """Execute and render ``jobs``, :func:`notebook_jobs` at a time, in as many
    notebook processes (``python -m fwcompare.report``, each in a session of
    its own): each imports papermill and nbconvert once and takes the jobs it
    is handed one after another, every notebook in a fresh kernel, its output
    in ``<out>/.notebook.log``. A process per notebook paid those imports,
    Python's start and nbconvert's templates (about 3 s of a 2-core AMD EPYC,
    timed apart; each job 1.5-7 s shorter in a quick report's stage) for
    every notebook of a report, ten in a quick one. A failure is recorded in
    ``failures``, never raised; a process that dies takes only its own job
    with it (a fresh one takes the rest). Returns each succeeded job's seconds.
    On an interrupt or error here, the processes are told to stop (SIGTERM:
    papermill shuts its kernel down), then killed."""
    import queue
    import threading

    pending, took = list(jobs), {}
    results: queue.Queue = queue.Queue()
    procs: list[subprocess.Popen] = []
    busy: dict[int, tuple[NotebookJob, float]] = {}  # process index -> its job, since when
    if jobs:
        ensure_kernel()  # once, here: the processes would race to register it

    def start() -> int:
        proc = subprocess.Popen([sys.executable, "-m", "fwcompare.report"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                                start_new_session=True)  # stopped by us, not by Ctrl-C
        procs.append(proc)
        i = len(procs) - 1

        def read() -> None:
            for line in proc.stdout:
                results.put((i, line))
            results.put((i, None))
        threading.Thread(target=read, daemon=True).start()
        return i

    def hand(i: int) -> None:
        job = pending.pop(0)
        job.out.mkdir(parents=True, exist_ok=True)
        if progress:
            print(f"{job.name}: running {Path(job.notebook).name} (profile {job.profile})",
                  file=sys.stderr)
        busy[i] = (job, time.perf_counter())
        try:
            procs[i].stdin.write(json.dumps({**dataclasses.asdict(job), "out": str(job.out),
                                             "params_file": str(job.params_file)}) + "\n")
            procs[i].stdin.flush()
        except OSError:  # it ended while idle: a fresh one takes the job
            del busy[i]
            pending.insert(0, job)
            hand(start())

    def failed(job: NotebookJob, why: str) -> None:
        failures[job.name] = why
        where = (job.out / f"{job.name}.failed.ipynb" if (job.out / f"{job.name}.failed.ipynb")
                 .exists() else job.out / ".notebook.log")
        print(f"{job.name}: FAILED ({why}); see {where}", file=sys.stderr)

    try:
        for _ in range(min(notebook_jobs(), len(jobs))):
            hand(start())
        last: dict[int, str] = {}  # a process's last words outside a job (its start)
        while busy:
            try:
                i, line = results.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                said = json.loads(line) if line is not None else None
            except json.JSONDecodeError:
                said = None
            if line is not None and not isinstance(said, dict):
                last[i] = line.strip() or last.get(i, "")
                continue
            if i not in busy:  # an idle process ended: nothing lost
                continue
            job, t0 = busy.pop(i)
            if said is None:  # the process ended with its job unfinished
                code = procs[i].wait()
                log = job.out / ".notebook.log"
                text = log.read_text(errors="replace") if log.is_file() else ""
                failed(job, f"the notebook's process ended with code {code}: "
                       + (" ".join(text.strip().splitlines()[-1:]) or last.get(i, "")))
                if pending:
                    hand(start())
                continue
            if said["ok"]:
                took[job.name] = time.perf_counter() - t0
                if progress:
                    print(f"{job.name}: done in {_mmss(took[job.name])}", file=sys.stderr)
            else:
                failed(job, said["failure"])
            if pending:
                hand(i)
    finally:
        for proc in procs:  # idle: end of input; still busy (an interrupt): SIGTERM
            if proc.poll() is None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        for i in busy:
            if procs[i].poll() is None:
                procs[i].terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait()
    return took


def _notebook_job(job: NotebookJob) -> str:
    """One job of a notebook process: execute, render, stamp. "" when it
    succeeded, else why it failed (one line; the traceback in its log)."""
    try:
        _execute_and_render(job)
    except Exception as exc:  # one failed study never loses the others
        traceback.print_exc()
        last_line = (str(exc).strip().splitlines() or [""])[-1]
        return f"{type(exc).__name__}: {last_line}"
    return ""


def _execute_and_render(job: NotebookJob) -> None:
    executed = run_notebook(job.name, job.profile, job.params, job.out, job.notebook)
    _render_html(executed, job.out / f"{job.name}.html")
    if job.name == SUMMARY:
        shutil.copyfile(job.params_file, job.out / job.params_file.name)
    elif job.params == (yaml.safe_load(job.params_file.read_text()) or {}):
        shutil.copyfile(job.params_file, job.out / "params.yaml")
    else:  # the command line's overrides merged in: what the study ran with
        write_text(job.out / "params.yaml", f"# {job.params_file} with the command line's "
                   f"overrides\n" + yaml.safe_dump(job.params, sort_keys=False))
    (job.out / ".inputs").write_text(job.digest)


def _notebook_process() -> int:
    """A notebook process (:func:`run_notebooks`): a job per line of its
    stdin, one at a time; for each, a line of JSON on its stdout (``ok``,
    ``failure``), while everything the job prints, papermill's log of its
    cells and the kernel's output included, goes to the job's
    ``.notebook.log``. It ends at the end of its input."""
    def stop(*_):  # SIGTERM from the report: papermill's cleanup shuts the kernel down
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)  # not inherited
    for line in sys.stdin:
        job = json.loads(line)
        job = NotebookJob(**{**job, "out": Path(job["out"]),
                             "params_file": Path(job["params_file"])})
        sys.stdout.flush()
        sys.stderr.flush()
        with open(job.out / ".notebook.log", "w") as log:  # fds 1 and 2: a kernel's too
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            why = _notebook_job(job)
            sys.stdout.flush()
            sys.stderr.flush()
        answer.write(json.dumps({"ok": not why, "failure": why}) + "\n")
    return 0


def _href(path: str) -> str:
    """A relative link, quoted for a URL and escaped for an attribute."""
    return html.escape(urllib.parse.quote(path), quote=True)


def _figure_html(folder: str, png: Path, lead: str = "") -> str:
    """One figure of the index: the PNG, its caption (``<name>.caption.txt``,
    plots.save_figure: what it shows, the hardware, the versions; the file
    name where a figure has none) after ``lead``, and links to its SVG and its
    data (CSV)."""
    stem = png.name[:-len(".png")]
    cap = png.with_name(f"{stem}.caption.txt")
    text = cap.read_text().strip() if cap.is_file() else stem
    text = f"{lead}: {text}" if lead else text
    alts = " · ".join(f'<a href="{_href(f"{folder}/{stem}{ext}")}">{label}</a>'
                      for ext, label in ((".svg", "SVG"), (".csv", "data (CSV)"))
                      if png.with_name(stem + ext).is_file())
    src = _href(f"{folder}/{png.name}")
    return (f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(text)}"></a>'
            f"<figcaption>{html.escape(text)}{' · ' + alts if alts else ''}</figcaption>"
            f"</figure>")


def _table(rows: dict) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                    for k, v in rows.items())
    return f"<table>{cells}</table>"


def _scorecard_section(out_root: Path, failures: dict[str, str]) -> str:
    """The claims scorecard, first thing on the page: one row per claim with
    its verdict, coloured; links to each claim's figure."""
    out = out_root / SUMMARY
    head = "<section id=\"scorecard\"><h2>Claims scorecard</h2>"
    try:
        card = claims.read(out)
    except UnreadableFile as exc:
        return f'{head}<p class="failed">{html.escape(str(exc))}</p></section>'

    if SUMMARY in failures or card is None:
        why = (f"The scorecard failed: {html.escape(failures[SUMMARY])}. "
               f'<a href="{SUMMARY}/{SUMMARY}.failed.ipynb">the failed notebook</a>'
               if SUMMARY in failures and (out / f"{SUMMARY}.failed.ipynb").exists() else
               "No scorecard for this profile yet.")
        return f'{head}<p class="failed">{why}</p></section>'
    counts = " · ".join(f'<span class="v" data-verdict="{v}">{n} {v}</span>'
                        for v, n in card["verdicts"].items() if n)
    counts += _unmeasured_html(card)
    rows = []
    for r in card["claims"]:
        fig = f"{SUMMARY}/figures/claim_{r['id']}.png"
        fig_link = f' <a href="{_href(fig)}">figure</a>' if (out_root / fig).is_file() else ""
        rows.append(
            f'<tr id="claim-{html.escape(r["id"])}"><td><b>{html.escape(r["claim"])}</b>'
            f'<br><span class="src" title="{html.escape(r["source_text"])}">'
            f'{html.escape(r["source"])}</span>{fig_link}</td>'
            f"<td>{html.escape(r['claimed'])}</td>"
            f"<td><span class=\"num\">{html.escape(claims.format_value(r))}</span><br>"
            f"<span class=\"src\">"
            f"{html.escape(r['unit'])}</span></td>"
            f"<td class=\"num\">{html.escape(claims.format_band(r))}</td>"
            f'<td class="verdict" data-verdict="{html.escape(r["verdict"])}">'
            f"{html.escape(r['verdict'])}</td>"
            f'<td title="{html.escape(r["cells"])}">{r["n_cells"]}</td>'
            f"<td>{html.escape(r['measured_on'].split(':')[0] if r['n_cells'] else '')}</td>"
            f"<td>{html.escape(r['note'])}</td></tr>")
    links = " · ".join(
        f'<a href="{SUMMARY}/{fn}">{label}</a>' for fn, label in [
            (f"{SUMMARY}.html", "scorecard report, one figure per claim"),
            (f"{SUMMARY}.ipynb", "executed notebook"), ("claims.yaml", "claims judged"),
            ("scorecard.csv", "scorecard (CSV)"), ("points.csv", "per-cell values (CSV)")]
        if (out / fn).exists())
    figs = "".join(
        _figure_html(f"{SUMMARY}/figures", png, f"{r['id']} ({r['verdict']})")
        for r in card["claims"]
        for png in [out / "figures" / f"claim_{r['id']}.png"] if png.is_file())
    figs = (f'<details open><summary>Each claim beside its measurement (green: where the '
            f'claim holds; dashed: the claimed figure; dots: each cell; diamond: the summary '
            f'with its 95% CI)</summary><div class="figs">{figs}</div></details>'
            if figs else "")
    forest = out / "figures" / f"{FOREST}.png"
    glance = (f'<div class="glance">{_figure_html(f"{SUMMARY}/figures", forest, "")}</div>'
              if forest.is_file() else "")
    prior = card.get("variance_prior")
    dof = float(prior["dof"]) if prior else math.nan  # "inf" in JSON
    spread = math.sqrt(prior["var"]) if prior else math.nan
    pooled = (f" A timed claim's interval from rounds borrows the round-to-round spread of "
              f"this report's other timed claims (moderated t: typical spread "
              f"{spread:.2%} of the log ratio, worth "
              f"{'unlimited' if math.isinf(dof) else format(dof, '.0f')}"
              f" degrees of freedom, from {prior['figures']} figures); one that spreads more "
              f"keeps its own (docs/methodology.md)." if prior else "")
    if spread > NOISY_FACTOR * QUIET_SPREAD:
        pooled += (f" <b>This machine was noisy:</b> that spread is {spread / QUIET_SPREAD:.0f} "
                   f"times a quiet machine's (about {QUIET_SPREAD:.0%} on a 2-core Xeon), so its "
                   f"intervals are wider and more verdicts inconclusive than a quiet machine's; "
                   f"a quieter machine, or more rounds (<code>--set rounds=5</code>), narrows "
                   f"them.")
    return (f"{head}<p>Each claim from the 2019 Hugging Face study or framework-comparison "
            f"articles, judged against this profile's measurements: <b>supported</b> when "
            f"the whole 95% CI lies where the claim holds, <b>contradicted</b> when it lies "
            f"wholly outside, <b>inconclusive</b> when it straddles an edge, <b>not measured "
            f"here</b> when this run has no cells for it (a GPU claim on a CPU, say). "
            f"Verdicts are about this machine, not the frameworks in general.{pooled}</p>"
            f"<p>{counts}</p><p>{links}</p>{glance}"
            f'<table class="scorecard"><thead><tr><th>claim</th><th>claimed</th>'
            f"<th>measured here (95% CI)</th><th>holds when</th><th>verdict</th>"
            f"<th>cells</th><th>on</th><th>note</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{figs}</section>")


def _unmeasured_html(card: dict) -> str:
    """Why the claims not measured here are not, counted by reason
    (``claims._unmeasured``: a framework or package this machine lacks, the
    GPUs a study needs, what the profile's params leave out...), most first;
    "" where every claim was measured (or the scorecard predates the count)."""
    from collections import Counter

    why = Counter(r.get("unmeasured") for r in card["claims"]
                  if r["verdict"] == "not measured here" and r.get("unmeasured"))
    if not why:
        return ""
    return ("<br>Not measured here, by reason: " + " · ".join(
        f"<b>{n}</b> {html.escape(reason)}" for reason, n in why.most_common()))


def _not_installed_html() -> str:
    """The frameworks this machine lacks, said once on the first page: their
    cells are unsupported with that reason (``frameworks.not_installed``)."""
    lacking = [why for fw in frameworks.BUILT_IN if (why := frameworks.not_installed(fw))]
    missing = [why for m in models.REAL if (why := models.not_installed(m))]
    return "".join([*(f'<p class="failed">{html.escape(why)}: its cells are unsupported and '
                      f'its claims not judged from them; the other frameworks ran.</p>'
                      for why in lacking),
                    *(f'<p class="failed">{html.escape(why)}: its cells are unsupported and '
                      f'the claims about it not judged from them; the other models ran.</p>'
                      for why in missing)])


def write_index(profile: str, out_root: Path, failures: dict[str, str] | None = None) -> Path:
    manifest = env.manifest()
    failures = failures or {}
    sections = []
    toc = []
    for name, study in STUDIES.items():
        out = out_root / name
        toc.append(f'<a href="#{name}">{html.escape(study.title.split(":")[0])}</a>')
        head = f'<section id="{name}"><h2>{html.escape(study.title)}</h2>'
        if name in failures:
            link = (f' <a href="{name}/{name}.failed.ipynb">the failed notebook</a>'
                    if (out / f"{name}.failed.ipynb").exists() else "")
            sections.append(f'{head}<p class="failed">This study failed: '
                            f"{html.escape(failures[name])}.{link}</p></section>")
            continue
        if not (out / f"{name}.html").is_file():
            sections.append(f"{head}<p>Not run for this profile.</p></section>")
            continue
        res = load_results(out)
        counts = res.results["status"].value_counts().to_dict() if len(res.results) else {}
        status = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no cells"
        # In the order the notebook saved them, which is the order it explains them.
        figs = sorted((out / "figures").glob("*.png"), key=lambda f: f.stat().st_mtime_ns)
        imgs = "".join(_figure_html(f"{name}/figures", f) for f in figs)
        links = " · ".join(
            f'<a href="{name}/{fn}">{label}</a>' for fn, label in [
                (f"{name}.html", "report (code hidden)"), (f"{name}.ipynb", "executed notebook"),
                ("params.yaml", "params used"), ("results/results.parquet", "results (Parquet)"),
                ("results/samples.parquet", "raw samples (Parquet)"),
                ("results/env.json", "environment of the run")]
            if (out / fn).exists())
        sections.append(f"{head}<p>{links}</p>"
                        f"<p>Cells by status: {html.escape(status)}</p>"
                        f'<div class="figs">{imgs}</div></section>')
    colours = "".join(f'[data-verdict="{v}"] {{ background: {c}; }}\n'
                      for v, c in claims.VERDICT_COLOURS.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>fwcompare report: {html.escape(profile)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
       padding: 0 1em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }}
table.scorecard {{ width: 100%; }} table.scorecard td:first-child {{ min-width: 16em; }}
.num {{ white-space: nowrap; }}
td.verdict {{ font-weight: bold; white-space: nowrap; }} .v {{ padding: 0.1em 0.4em; }}
.src {{ color: #555; font-size: 0.85em; }} nav a {{ margin-right: 1em; }}
{colours}.figs {{ display: flex; flex-wrap: wrap; gap: 1em; }}
figure {{ margin: 0; width: 380px; }} figure img {{ width: 100%; border: 1px solid #ddd; }}
.glance figure {{ width: min(100%, 900px); margin: 0.5em 0 1em; }}
figcaption {{ font-size: 0.8em; color: #555; }} .failed {{ color: #b00; }}
</style></head><body>
<h1>fwcompare report: profile <code>{html.escape(profile)}</code></h1>
<p>PyTorch, TensorFlow and JAX on Transformer models, measured on this machine
({html.escape(env.hardware_line(manifest))}). Every figure shows 95% confidence intervals;
failed cells are marked, not dropped. Index written {html.escape(manifest['timestamp'])}.</p>
{_not_installed_html()}
<nav><a href="#scorecard">Claims scorecard</a>{''.join(toc)}<a href="#environment">Environment</a></nav>
{_scorecard_section(out_root, failures)}
{''.join(sections)}
<section id="environment"><h2>Environment</h2>{_table({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                                       for k, v in manifest.items()})}</section>
</body></html>
"""
    out_root.mkdir(parents=True, exist_ok=True)
    return write_text(out_root / "index.html", page)


if __name__ == "__main__":
    sys.exit(_notebook_process())
