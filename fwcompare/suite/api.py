"""Running studies: the entry points that notebooks, the command line and the
report call (``fwcompare.run_study``, ``fwcompare.run_studies``): they take a
study by name from the registry and hand it down to the runner."""
from __future__ import annotations

import contextlib
from pathlib import Path

from ..core.folder_lock import hold
from ..core.paths import study_dir
from ..results.store import StudyResults, load_results


def run_study(study: str, params: dict | None = None, *, profile: str = "adhoc",
              output_dir: str | Path | None = None, progress: bool = True,
              cells: list | None = None, servers=None, plan=None) -> StudyResults:
    """Validate params, run (or resume) every cell of ``study`` (or only
    ``cells``, a subset of them: a shard, fwcompare.suite.shard), return its results.
    The output folder is held while it runs: ``FolderInUse`` (nothing
    measured) where another process writes it (fwcompare.core.folder_lock).
    ``servers``: fork servers to share (``fwcompare report`` keeps one set for
    all its studies); by default the run starts its own and closes them.
    ``plan``: the run's plan, made already by the caller (a shard's), for
    these validated params."""
    out = study_dir(study, profile, output_dir)
    plan = _plan_of(study, params if plan is None else plan)  # bad params stop first
    with hold(out):  # one run per folder: a second one stops here (FolderInUse)
        _measure(plan, profile, out, progress, cells, servers)
    return load_results(out)


def run_plan(study, params):
    """The plan of a run of ``study`` (its name, or the Study) with validated
    ``params``: with ``rounds_for: claims``, its later rounds measure the
    variants a claim of ``params/claims.yaml`` compares in that study on its
    device; the variants a memory claim compares take a memory pass in every
    round. Every run's plan is made here, once, and handed to what reads it
    (the estimate, the shard split, the runner, the extra rounds, the report)."""
    from ..plan.run import RunPlan
    from .claims import claimed_variants, load_claims
    from .params import study_named

    st = study_named(study) if isinstance(study, str) else study
    read = load_claims()  # once: both sets read it
    claimed = (None if params["rounds_for"] == "all"
               else frozenset(claimed_variants(st.name, params["device"], claims=read)))
    return RunPlan(st, params, claimed, memory=frozenset(
        claimed_variants(st.name, params["device"], memory=True, claims=read)))


def _measure(plan, profile: str, out: Path, progress: bool, cells: list | None = None,
             servers=None, upto_round: int | None = None, passes=None) -> None:
    """``run_study``'s measuring of ``plan`` (``cells``: only these);
    ``upto_round`` and ``passes``: one round pass of ``run_studies`` (with
    the plan's ``more``: an extra round of ``cells``)."""
    from ..execution.forkserver import ForkServers
    from ..execution.runner import Runner

    st, params = plan.study, plan.params
    first = not upto_round  # the whole run, or its first round pass
    if params["device"] == "gpu" and first:  # stop before hours of unsupported cells
        from .doctor import require

        require(list(params["frameworks"]), "gpu")
    whole = cells is None
    cells = list(plan.specs) if whole else list(cells)
    # What it will take, before it starts (``run --dry-run`` stops here); a subset
    # (a shard) prints its own plan instead.
    if progress and whole and first:
        from ..execution.estimate import estimate

        print(estimate(plan, out / "results").text(), flush=True)
    with contextlib.nullcontext(servers) if servers is not None else ForkServers(
            out / "results" / "work" / "jobs") as servers:  # shared by the tasks
        for task in st.tasks:
            if progress and len(st.tasks) > 1:
                print(f"{st.name}: {task} cells", flush=True)
            Runner(plan, out / "results", profile=profile, progress=progress,
                   task=task, servers=servers, upto_round=upto_round,
                   passes=passes).run([c for c in cells if c.task == task])


def run_studies(runs: dict, *, profile: str, servers, progress: bool = True,
                log=None, until: float | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Measure several studies (``runs``: study -> (params or their plan,
    output folder)) in
    round passes: round 0 of every study, then round 1 of those with a second
    round, and so on. A study's rounds are then minutes apart, with the other
    studies between them, so a slow spell of the machine (its speed drifts by
    10-25% over minutes) lands on one round of several studies instead of on
    every round of one, and the between-round part of each interval sees it.
    Weights, exports and compile caches are made in the first pass and kept
    for the next. Then the timed claims still in doubt get extra rounds
    (:func:`more_rounds`; ``until``: the ``time.monotonic()`` by which they
    end). ``log(text)`` gets the progress lines (default: stderr). Returns
    the seconds spent per study and, per study whose measuring raised, the
    traceback (its later passes are skipped)."""
    import shutil
    import sys
    import time
    import traceback

    from ..execution.runner import Passes

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    runs = planned(runs)
    rounds = {study: plan.params["rounds"] for study, (plan, _) in runs.items()}
    passes = {study: Passes() for study in runs}
    times = dict.fromkeys(runs, 0.0)
    per_cell: dict[str, float] = {}  # seconds per cell of a study's last round pass
    failed: dict[str, str] = {}
    try:
        for k in range(max(rounds.values(), default=0)):
            now = [s for s in runs if rounds[s] > k and s not in failed]
            for n, study in enumerate(now, 1):
                plan, out = runs[study]
                log(f"[{n}/{len(now)}] {study}: measuring (profile {profile}"
                    + (f", round {k + 1} of {rounds[study]})" if rounds[study] > 1 else ")"))
                t0 = time.perf_counter()
                before = sum(passes[study].cells.values())
                try:
                    _measure(plan, profile, Path(out), progress, servers=servers,
                             upto_round=k, passes=passes[study])
                except Exception:
                    failed[study] = traceback.format_exc()
                    log(failed[study] + f"{study}: the measurement failed")
                took = time.perf_counter() - t0
                times[study] += took
                if k > 0 and sum(passes[study].cells.values()) > before:
                    per_cell[study] = took / (sum(passes[study].cells.values()) - before)
                log(f"{study}: measured in {took:.1f} s")
        more_rounds({s: v for s, v in runs.items() if s not in failed}, profile=profile,
                    servers=servers, progress=progress, log=log, passes=passes,
                    per_cell=per_cell, times=times, until=until)
    finally:  # the compile caches kept between passes and extra rounds
        for _, out in runs.values():
            shutil.rmtree(Path(out) / "results" / "work" / "compile", ignore_errors=True)
    return times, failed


def planned(runs: dict) -> dict:
    """``runs`` (study -> (params or its plan, output folder)) with each
    study's plan: params are validated (typed params pass as they are) and
    planned (:func:`run_plan`); a plan passes as it is."""
    return {study: (_plan_of(study, first), out) for study, (first, out) in runs.items()}


def _plan_of(study: str, given):
    """``given`` if it is a plan, else the plan of ``study`` with ``given``
    as its params, validated first (typed params pass as they are)."""
    from ..plan.run import RunPlan
    from .params import validate

    if isinstance(given, RunPlan):
        return given
    return run_plan(study, validate(study, given, source=f"{study} params"))


def more_rounds(runs: dict, *, profile: str, servers, progress: bool, log, passes: dict,
                per_cell: dict[str, float], times: dict[str, float],
                until: float | None = None) -> None:
    """Extra rounds where a verdict is in doubt (``run_studies``' last step):
    while some timed claim is inconclusive from two or more rounds and
    ``judging.stop_reason`` finds no reason to stop, its cells (only those)
    get one more round, in fresh processes and interleaved as before, every
    study's in turn; then the claims are looked at again. It ends when no
    claim is in doubt, each study's ``more_rounds`` are taken, or the pooled
    budget (the studies' ``more_rounds_s``) or the report's own (``until``, a
    ``time.monotonic()``: the report's time budget less what its notebooks
    take after the measuring) would be overrun: a round is started only
    where its estimate (seconds per cell of the study's last round pass,
    times the (cell, round)s it needs) fits what is left of both; with no
    such estimate none is started. A study's first ``more_rounds_sure``
    extra rounds are planned work, started whatever either budget says (their
    time still counts against the pool). What it did goes to each study's
    ``results/more_rounds.json`` after every step, which the scorecard reads
    to say why a claim stopped. Judging that fails ends the extra rounds (the
    report goes on; its scorecard shows the failure)."""
    import math
    import time
    import traceback

    from ..core.atomic import write_json
    from .claims import MORE_ROUNDS_FILE, doubtful
    from ..results.store import ResultStore

    runs = planned(runs)
    limit = {study: plan.params["more_rounds"] for study, (plan, _) in runs.items()}
    taking = dict(limit)  # 0 once a study's extra rounds have ended (budget, failure)
    budget = left = sum(plan.params["more_rounds_s"] for plan, _ in runs.values())
    record = {study: {"budget_s": budget, "rounds": [], "skipped": [], "failed": []}
              for study in runs}

    def keep(study: str) -> None:  # after every step: an interrupted report keeps its record
        if limit[study]:
            write_json(Path(runs[study][1]) / "results" / MORE_ROUNDS_FILE, record[study])

    for study in runs:
        keep(study)
    sure = {study: plan.params["more_rounds_sure"] for study, (plan, _) in runs.items()}
    for extra in range(1, max(limit.values(), default=0) + 1):
        now = {s: out for s, (_, out) in runs.items() if taking[s] >= extra}
        late = [s for s in now if extra > sure[s]]  # the rounds the budget bounds
        if late and until is not None and until <= time.monotonic():
            # No round could start: the claims are not judged for one (seconds of a
            # report), and the scorecard names the budget as
            # the reason for each claim that would have taken one (claims.skipped_note).
            for study in late:
                record[study]["why"] = (
                    "the report's time budget was spent before its extra rounds could start")
                record[study]["budget_spent"] = True
                taking[study] = 0
                keep(study)
                del now[study]
            log("extra rounds: none started: the report's time budget was spent while it "
                "measured" + (f" (the sure ones go on: {', '.join(now)})" if now else ""))
            if not now:
                break
        try:
            wanted = doubtful(now) if now else {}
        except Exception:  # judging failed: the measuring is done; the scorecard says why
            log(traceback.format_exc() + "extra rounds: the claims could not be judged")
            break
        if not wanted:
            break
        for study, claims in wanted.items():
            plan, out = runs[study]
            plan = plan.with_more(extra)
            ids = {i for cells in claims.values() for i in cells}
            cells = [c for c in plan.specs if c.cell_id in ids]
            # every (cell, round) this round plans that is not stored (a cell a round behind
            # catches up), at the study's seconds per cell; none known: none started
            done = ResultStore(Path(out) / "results").finished()
            missing = sum((c.spec.cell_id, c.round) not in done for c in plan.of(cells))
            rate = per_cell.get(study, max(per_cell.values(), default=math.inf))
            cost = rate * missing
            room = left if until is None else min(left, until - time.monotonic())
            if cost > room and extra > sure[study]:
                record[study]["skipped"] += list(claims)
                ours = room < left  # the report's own budget, not the pool, is what ran out
                if ours:
                    record[study]["why"] = (
                        f"the report's time budget had no room for this claim's next round "
                        f"(about {cost:.0f} s; {max(room, 0):.0f} s left before its notebooks)")
                taking[study] = 0
                keep(study)
                log(f"{study}: extra round {extra} for {', '.join(claims)} not started: it "
                    f"would take about {cost:.0f} s and {max(room, 0):.0f} s are left of "
                    + ("the report's time budget" if ours else f"{budget:.0f} s"))
                continue
            log(f"{study}: extra round {extra} of {len(ids)} cells for {', '.join(claims)}")
            t0 = time.perf_counter()
            try:
                _measure(plan, profile, Path(out), progress, cells=cells, servers=servers,
                         upto_round=plan.rounds - 1, passes=passes[study])
            except Exception as exc:  # the rounds taken so far stand
                log(f"{study}: extra round {extra} failed: {exc}")
                record[study]["failed"].append({"round": extra, "error": str(exc)})
                taking[study] = 0
            took = time.perf_counter() - t0
            times[study] += took
            left -= took
            record[study]["rounds"].append({"round": extra, "claims": sorted(claims),
                                            "cells": len(ids), "seconds": round(took, 1)})
            keep(study)
            log(f"{study}: extra round {extra} took {took:.1f} s ({max(left, 0):.0f} s left)")
