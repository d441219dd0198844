"""Running studies: the entry points that notebooks, the command line and the
report call (``fwcompare.run_study``, ``fwcompare.run_studies``): they take a
study by name from the registry and hand it down to the runner."""
from __future__ import annotations

import contextlib
from pathlib import Path

from .paths import study_dir
from .results import StudyResults, load_results


def run_study(study: str, params: dict | None = None, *, profile: str = "adhoc",
              output_dir: str | Path | None = None, progress: bool = True,
              cells: list | None = None, servers=None) -> StudyResults:
    """Validate params, run (or resume) every cell of ``study`` (or only
    ``cells``, a subset of them: a shard, fwcompare.shard), return its results.
    ``servers``: fork servers to share (``fwcompare report`` keeps one set for
    all its studies); by default the run starts its own and closes them."""
    out = study_dir(study, profile, output_dir)
    _measure(study, params, profile, out, progress, cells, servers)
    return load_results(out)


def _measure(study: str, params: dict | None, profile: str, out: Path, progress: bool,
             cells: list | None = None, servers=None, upto_round: int | None = None,
             passes=None) -> None:
    """``run_study``'s measuring; ``upto_round`` and ``passes``: one round
    pass of ``run_studies``."""
    from .claims import claimed_for
    from .forkserver import ForkServers
    from .params import study_named, validate
    from .runner import Runner

    st = study_named(study)
    params = validate(study, params, source=f"{study} params")  # typed params pass as they are
    first = not upto_round  # the whole run, or its first round pass
    if params["device"] == "gpu" and first:  # stop before hours of unsupported cells
        from .doctor import require

        require(list(params["frameworks"]), "gpu")
    claimed = claimed_for(study, params)
    whole = cells is None
    cells = st.cells(params) if whole else list(cells)
    # What it will take, before it starts (``run --dry-run`` stops here); a subset
    # (a shard) prints its own plan instead.
    if progress and whole and first:
        from .estimate import estimate

        print(estimate(st, params, out / "results", claimed).text(), flush=True)
    with contextlib.nullcontext(servers) if servers is not None else ForkServers(
            out / "results" / "work" / "jobs") as servers:  # shared by the tasks
        for task in st.tasks:
            if progress and len(st.tasks) > 1:
                print(f"{study}: {task} cells", flush=True)
            Runner(st, params, out / "results", profile=profile, progress=progress,
                   task=task, servers=servers, upto_round=upto_round,
                   passes=passes, claimed=claimed).run([c for c in cells if c.task == task])


def run_studies(runs: dict, *, profile: str, servers, progress: bool = True,
                log=None) -> tuple[dict[str, float], dict[str, str]]:
    """Measure several studies (``runs``: study -> (params, output folder)) in
    round passes: round 0 of every study, then round 1 of those with a second
    round, and so on. A study's rounds are then minutes apart, with the other
    studies between them, so a slow spell of the machine (its speed drifts by
    10-25% over minutes) lands on one round of several studies instead of on
    every round of one, and the between-round part of each interval sees it.
    Weights, exports and compile caches are made in the first pass and kept
    for the next. ``log(text)`` gets the progress lines (default: stderr).
    Returns the seconds spent per study and, per study whose measuring
    raised, the traceback (its later passes are skipped)."""
    import shutil
    import sys
    import time
    import traceback

    from .params import validate
    from .runner import Passes

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    runs = {study: (validate(study, params, source=f"{study} params"), out)
            for study, (params, out) in runs.items()}  # typed params pass as they are
    rounds = {study: params["rounds"] for study, (params, _) in runs.items()}
    passes = {study: Passes() for study in runs}
    times = dict.fromkeys(runs, 0.0)
    failed: dict[str, str] = {}
    try:
        for k in range(max(rounds.values(), default=0)):
            now = [s for s in runs if rounds[s] > k and s not in failed]
            for n, study in enumerate(now, 1):
                params, out = runs[study]
                log(f"[{n}/{len(now)}] {study}: measuring (profile {profile}"
                    + (f", round {k + 1} of {rounds[study]})" if rounds[study] > 1 else ")"))
                t0 = time.perf_counter()
                try:
                    _measure(study, params, profile, Path(out), progress, servers=servers,
                             upto_round=k, passes=passes[study])
                except Exception:
                    failed[study] = traceback.format_exc()
                    log(failed[study] + f"{study}: the measurement failed")
                times[study] += time.perf_counter() - t0
                log(f"{study}: measured in {time.perf_counter() - t0:.1f} s")
    finally:  # the compile caches kept between passes (a finished run removed its own)
        for _, out in runs.values():
            shutil.rmtree(Path(out) / "results" / "work" / "compile", ignore_errors=True)
    return times, failed
