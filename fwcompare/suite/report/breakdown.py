"""Where a report's time went: its phases, the share that produced figures,
and what else the machine did while cells were sampled."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...core.machine_load import BUSY_HOST, host_load
from ...measure.peak import PHASE as PEAK_PHASE
from ...results.store import time_breakdowns


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
    from ...studies import STUDIES

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
    took while a study's cells were sampled (machine_load.py), per study."""
    parts = []
    for study in studies:
        try:
            df = pd.read_parquet(out_root / study / "results" / "results.parquet")
        except (OSError, ValueError):  # not consolidated, or cut short: no figure to give
            continue
        if "host_other_cpu" not in df:  # results from before machine_load.py
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
