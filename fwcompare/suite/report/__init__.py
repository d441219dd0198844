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

The package by job: this module builds the report (which studies run, their
measuring, then the notebooks and the index); ``notebooks`` executes and renders
the notebooks in processes of their own; ``page`` writes index.html, the
scorecard first; ``breakdown`` says where the report's time went.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path

from .. import claims, doctor
from ...core import env, models
from ...core.folder_lock import hold
from ... import frameworks, run_studies
from ...execution.forkserver import ForkServers
from ...plan.run import RunPlan
from ..api import planned, run_plan
from ..params import (REPORT_BUDGET_S, describe_overrides, merge_overrides, overridden_profile,
                      overrides_by_study, profile_file, read_yaml, with_overrides)
from ...core.paths import NOTEBOOKS, OUTPUTS, PARAMS, ROOT
from ...results.store import ResultStore, time_breakdowns
from ...studies import STUDIES
from .breakdown import (FIGURE_PHASES, NOTEBOOK_PHASE, _mmss, format_breakdown,  # noqa: F401
                        host_line, time_breakdown)
from .notebooks import (KERNEL, NotebookJob, ReportError, _render_html, ensure_kernel,  # noqa: F401
                        notebook_jobs, run_notebook, run_notebooks)
from .page import (FOREST, NOISY_FACTOR, QUIET_SPREAD, SUMMARY, SUMMARY_NOTEBOOK,  # noqa: F401
                   SUMMARY_PARAMETERS, _not_installed_html, _readable_scorecard, _scorecard_section,
                   write_index)


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

    from ...results.store import RUN_FAILED

    f = out / "results" / "results.parquet"
    try:
        return bool(pd.read_parquet(f, columns=["status"])["status"].isin(RUN_FAILED).any())
    except (OSError, ValueError):  # missing, or cut short: its notebook consolidates again
        return True



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
    report over the same folder judges it and measures none of them again).
    Each study's folder (and the scorecard's) is held while it writes
    (:mod:`fwcompare.core.folder_lock`): FolderInUse where another process
    writes one of them; a dry run holds none. Reports of other studies may
    share the profile's folder (the tests build two groups at once)."""
    with contextlib.ExitStack() as held:
        return _build(profile, out_root, fresh, studies, overrides, progress, budget_s,
                      dry_run, scorecard, held)


def _build(profile, out_root, fresh, studies, overrides, progress, budget_s, dry_run,
           scorecard, held: contextlib.ExitStack) -> Path | None:
    """:func:`build`; ``held`` takes the folders' locks once the params pass."""
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
    # Each study's plan, made once: the estimates and the measuring read it.
    plans = {study: run_plan(study, typed[study]) for study, _ in stale}
    if dry_run:
        print(dry_run_text({study: (plans[study], out_root / study) for study, _ in stale},
                           [s for s in chosen if s not in dict(stale)], budget_s, fresh,
                           bool(on_gpu)))
        return None
    held.enter_context(hold(*(out_root / study for study in [*chosen, *[SUMMARY] * scorecard])))
    # 1. Every study's cells in round passes (round 0 of every study, then round 1...),
    # the workers forked from one set of fork servers: a framework's imports once per
    # report, not per study.
    if fresh:
        for study, _ in stale:
            ResultStore(out_root / study / "results").archive()
    measured = {study: (plans[study], out_root / study) for study, _ in stale}
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


def dry_run_text(studies: dict[str, tuple[RunPlan, Path]], unchanged: list[str],
                 budget_s: float | None, fresh: bool, on_gpu: bool) -> str:
    """``fwcompare report --dry-run`` (``studies``: study -> (its plan, or
    params ``api.planned`` plans, output folder)): each study's cells and estimate
    (``estimate.Estimate.text``), the studies a report would leave as they
    are (inputs unchanged), the report's estimate (:func:`total_estimate`),
    and, for a GPU profile on a machine without one, that the real run would
    stop at the doctor."""
    from ...execution.estimate import estimate

    studies = planned(studies)
    ests = [estimate(plan, out / "results", fresh=fresh, cells=True)
            for plan, out in studies.values()]
    lines = [e.text() for e in ests]
    lines += [f"{name}: its inputs are unchanged since its last report: not measured again "
              f"(--fresh measures it again)" for name in unchanged]
    if studies:
        lines.append(_total_line(studies, ests, budget_s))
    return "\n".join(filter(None, [*lines, doctor.dry_run_note("gpu") if on_gpu else ""]))


def total_estimate(studies: dict[str, tuple[RunPlan, Path]],
                   budget_s: float | None = None) -> str:
    """One line before a report measures (``studies`` as :func:`dry_run_text`
    takes them): the sum of its studies' estimates
    (``estimate.estimate``: each study's last run here, else its parts:
    sampling, imports, builds and first calls, ``estimate.fixed_costs``), and
    what their notebooks and the scorecard take after them
    (:func:`after_measuring`); and the report's time budget, if it has one."""
    from ...execution.estimate import estimate

    studies = planned(studies)
    ests = [estimate(plan, out / "results") for plan, out in studies.values()]
    return _total_line(studies, ests, budget_s)


def _total_line(studies: dict[str, tuple[RunPlan, Path]], ests: list,
                budget_s: float | None) -> str:
    """:func:`total_estimate`'s line from the studies' estimates (``ests``)."""
    # the report's studies share one set of fork servers: their imports once
    shared = sum(e.start_s for e in ests) - max((e.start_s for e in ests), default=0.0)
    high = sum(e.seconds for e in ests) - shared
    low = sum(e.seconds if e.low_seconds is None else e.low_seconds for e in ests) - shared
    # a study's sure extra rounds (more_rounds_sure): none where no claim is in doubt,
    # every claimed cell again where all are
    high += sum(_sure_rounds_s(plan, out, e) for (plan, out), e in zip(studies.values(), ests))
    # the extra rounds for doubtful claims spend at most their pooled budget, and
    # start only where they end before the report's time budget less its notebooks
    extra = sum(p.params["more_rounds_s"] for p, _ in studies.values()
                if "more_rounds" in p.params and p.params["more_rounds"] > 0)
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


def _sure_rounds_s(plan: RunPlan, out: Path, est) -> float:
    """The most a study's sure extra rounds take: its plan with them, less without."""
    from ...execution.estimate import estimate

    sure = plan.params["more_rounds_sure"]
    if not sure:
        return 0.0
    return estimate(plan.with_more(sure), Path(out) / "results").seconds - est.seconds


def after_measuring(k: int) -> tuple[float, float]:
    """What the notebooks of ``k`` studies and the scorecard take after the
    measuring, low and high (``estimate.NOTEBOOK_S``, ``estimate.SCORECARD_S``):
    ``notebook_jobs()`` at a time, the scorecard's first among them, so no less
    than it alone, the notebooks' waves, or the work shared out."""
    import math

    from ...execution.estimate import NOTEBOOK_S, SCORECARD_S

    jobs = notebook_jobs()
    low, high = (max(s, math.ceil(k / jobs) * n, (k * n + s) / jobs) if k else s
                 for n, s in zip(NOTEBOOK_S, SCORECARD_S))
    return low, high



def _unchanged(name: str, out: Path, digest: str) -> bool:
    """Whether ``name`` ran to the end with these inputs (``.inputs``) and its
    report is in place: it is not run again."""
    stamp = out / ".inputs"
    return stamp.is_file() and stamp.read_text() == digest and (out / f"{name}.html").is_file()


def _failures_only(text: str) -> None:
    """``run_studies``' log under ``-q``: a failed study's traceback, nothing else
    (its progress lines go to ``log`` whatever ``progress`` says: a test reads them)."""
    if "failed" in text.splitlines()[-1]:
        print(text, file=sys.stderr, flush=True)


