"""What a run will measure and how long it may take, before it starts
(``fwcompare run STUDY --dry-run``).

Every run records, per task, the cells it measured and the seconds it took
(``last_run_TASK.json`` beside its results); the estimate is the cells still
to run times the seconds per cell of the latest such run of the same study
and device. Without one, it is the params' own time limits: warm-up plus the
most sampling a cell may take, which leaves out model loads, first calls and
compiles (on a GPU JAX's compiles dominated a first full-grid run: 272 of 385 s).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .results import RECORD, record_run  # noqa: F401 (record_run: the runner's)

@dataclass
class Estimate:
    study: str
    cells: int  # cells of the params
    planned: int  # their measurements: (cell, round) pairs
    todo: int  # those a run would measure now (the rest are kept from an earlier run)
    rounds: int
    by_framework: dict[str, int]  # measurements planned per framework
    seconds: float
    basis: str  # where the seconds per measurement come from
    low_seconds: float | None = None  # without an earlier run: the least it may take

    def text(self) -> str:
        kept = self.planned - self.todo
        fw = ", ".join(f"{k} {v}" for k, v in self.by_framework.items())
        lines = [f"{self.study}: {self.cells} cells, {self.planned} measurements over "
                 f"{self.rounds} round{'s' if self.rounds != 1 else ''} ({fw})"
                 + (f"; {kept} already measured, {self.todo} to run" if kept else ""),
                 f"estimate: {self._range()} ({self.basis})"]
        return "\n".join(lines)

    def _range(self) -> str:
        if self.low_seconds is None:
            return _duration(self.seconds)
        return f"{_duration(self.low_seconds)} to {_duration(self.seconds)}"


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def earlier_rate(store_dir: Path, device: str) -> tuple[float, str] | None:
    """Seconds per measurement (a cell in one round) over the latest recorded
    runs of this store's tasks on ``device``, and a line saying which runs;
    None without one."""
    runs = []
    for path in sorted(Path(store_dir).glob(RECORD.format(task="*"))):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("device") == device and rec.get("cells", 0) > 0:
            runs.append(rec)
    if not runs:
        return None
    cells = sum(r["cells"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    where = sorted({f"{r['cpu_model']}, {r['date']}" for r in runs})
    return seconds / cells, (f"{seconds / cells:.1f} s per measurement, from {cells} "
                             f"measurements of the latest run here ({'; '.join(where)})")


def estimate(study, params: dict, store_dir: Path, claimed: set[str] | None = None) -> Estimate:
    """The cells a run of study ``study`` (a ``Study``) with validated
    ``params`` would measure and its duration (``claimed``: as
    ``runner.planned_cells`` takes it)."""
    from .env import params_hash
    from .results import ResultStore
    from .runner import planned_cells

    specs = study.cells(params)
    planned = planned_cells(study, params, specs, claimed)
    store = ResultStore(store_dir)
    # Results of other params are archived when a run begins: it starts afresh.
    done = store.finished() if store.stamped() == params_hash(params) else set()
    todo = [c for c in planned if (c.spec.cell_id, c.round) not in done]
    rate, low = earlier_rate(store_dir, params["device"]), None
    if rate is None:  # a cell samples at least min_time_s, at most max_time_s
        least, most = (params["warmup_s"] + params[k] for k in ("min_time_s", "max_time_s"))
        per_cell, low = most, least * len(todo)
        basis = (f"no earlier run here: {least:g} to {most:g} s of warm-up and sampling per "
                 "measurement, model loads, first calls and compiles not included")
    else:
        per_cell, basis = rate
    return Estimate(study.name, len(specs), len(planned), len(todo), params["rounds"],
                    dict(Counter(c.spec.framework for c in planned)), per_cell * len(todo),
                    basis, low)
