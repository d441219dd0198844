"""What a run will measure and how long it may take, before it starts
(``fwcompare run STUDY --dry-run``).

Every run records, per task, the cells it measured and the seconds it took
(``last_run_TASK.json`` beside its results); the estimate is the cells still
to run times the seconds per cell of the latest such run of the same study
and device. Without one, it is the params' own time limits (warm-up plus the
least and the most sampling a cell may take) plus its parts (``fixed_costs``):
the imports, a build per variant and round, and a first call per cell: a
compile in its first round where the mode compiles device code (on a GPU, JAX
eager's op-by-op compiles dominated the first acceleration run: 254 of its
385 s), a host trace in every round where it traces on the host.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..results.store import RECORD, record_run  # noqa: F401 (record_run: the runner's)

if TYPE_CHECKING:
    from ..plan.run import RunPlan

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
    start_s: float = 0.0  # of which the process starts and imports (a report's studies share them)
    listing: tuple[str, ...] = ()  # the cells, a line per variant, where asked (``cell_lines``)

    def text(self) -> str:
        """The cell count and the estimate, with the cells between them where
        they were listed (``fwcompare run --dry-run``)."""
        kept = self.planned - self.todo
        fw = ", ".join(f"{k} {v}" for k, v in self.by_framework.items())
        lines = [f"{self.study}: {self.cells} cells, {self.planned} measurements over "
                 f"{self.rounds} round{'s' if self.rounds != 1 else ''} ({fw})"
                 + (f"; {kept} already measured, {self.todo} to run" if kept else ""),
                 *self.listing,
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


def estimate(plan: RunPlan, store_dir: Path, fresh: bool = False,
             cells: bool = False) -> Estimate:
    """The cells a run of ``plan`` would measure and its duration (``fresh``:
    the stored results would be archived first, so every cell runs;
    ``cells``: list them, a dry run's)."""
    from .. import frameworks
    from ..results.store import ResultStore

    study, params = plan.study, plan.params
    specs, planned = plan.specs, plan.cells
    store = ResultStore(store_dir)
    # Results of other params are archived when a run begins: it starts afresh.
    done = store.finished() if not fresh and store.stamped() == plan.params_hash else set()
    todo = [c for c in planned if (c.spec.cell_id, c.round) not in done]
    # a framework or model package this machine lacks, or a model the study cannot
    # run (generation's encoders): its cells are unsupported at once and take no time
    no_fw = set(filter(frameworks.not_installed, {c.spec.framework for c in todo}))
    no_model = {m for m in {c.spec.model for c in todo} if model_problem(study, m)}
    timed = [c for c in todo if c.spec.framework not in no_fw and c.spec.model not in no_model]
    if study.machine_problem(params):  # every cell unsupported at once (too few GPUs)
        timed = []
    rate, low, start = earlier_rate(store_dir, params["device"]), None, 0.0
    if rate is None:  # a cell samples at least min_time_s, at most max_time_s
        least, most = (params["warmup_s"] + params[k] for k in ("min_time_s", "max_time_s"))
        fixed, parts = fixed_costs(timed, params["device"], study)
        start = FIXED_S.get(params["device"], FIXED_S["cpu"])["start"] if timed else 0.0
        sampled = sum(not study.whole_run(c) for c in timed)  # a whole run is its own time
        seconds, low = most * sampled + fixed, least * sampled + fixed
        basis = (f"no earlier run here: {least:g} to {most:g} s of warm-up and sampling per "
                 f"measurement, plus {parts}")
    else:
        seconds = rate[0] * len(timed)
        basis = rate[1]
    if len(timed) < len(todo):
        basis += (f"; {len(todo) - len(timed)} measurements that cannot run here (a "
                  "framework, model package or GPUs this machine lacks, or a model the "
                  "study cannot run) take none")
    return Estimate(study.name, len(specs), len(planned), len(todo), params["rounds"],
                    dict(Counter(c.spec.framework for c in planned)), seconds, basis, low,
                    start, tuple(cell_lines(study, params, planned)) if cells else ())


def model_problem(study, model: str) -> str:
    """Why none of ``model``'s cells can run here ("" where they can): its
    package is missing, or the study cannot run it (named with the model)."""
    from ..core import models

    problem = study.model_problem(model)
    return models.not_installed(model) or (problem and f"{model}: {problem}")


def cell_lines(study, params: dict, planned) -> list[str]:
    """The cells of ``planned`` (CellRefs), a line per variant: model,
    framework/mode, precision, task and the study's own axes away from their
    defaults, then its batch x sequence shapes (``Study.shape_text``) and the
    rounds each takes. A variant whose cells will be ``unsupported`` at once (a
    framework or model package this machine lacks, its GPUs:
    ``Study.machine_problem``, or a model the study cannot run:
    ``Study.model_problem``, generation's encoders) ends with "(not here)",
    and each reason follows once."""
    from .. import frameworks

    machine = study.machine_problem(params)
    variants: dict[tuple, dict[tuple[int, int], int]] = {}
    for c in planned:
        s = c.spec
        key = (s.model, f"{s.framework}/{s.mode}", s.dtype, s.task,
               " ".join(f"{k}={v}" for k, v in s.axes))
        shapes = variants.setdefault(key, {})
        shape = study.shape_text(s)
        shapes[shape] = shapes.get(shape, 0) + 1

    def rounds(n: int) -> str:
        return f"{n} round{'s' if n != 1 else ''}"

    rows, reasons = [], {}
    for (model, variant, dtype, task, axes), shapes in variants.items():
        counts = set(shapes.values())
        grid = _grid(shapes)
        if len(counts) == 1:
            where = f"{grid or ' '.join(shapes)}, {rounds(counts.pop())}"
        else:
            where = ", ".join(f"{shape} ({rounds(n)})" for shape, n in shapes.items())
        why = frameworks.not_installed(variant.partition("/")[0]) or \
            model_problem(study, model) or machine
        if why:
            reasons[why] = None
        rows.append([model, variant, dtype, task, axes, where + (" (not here)" if why else "")])
    width = [max(len(r[i]) for r in rows) for i in range(5)] if rows else []
    lines = ["  " + "  ".join([*(v.ljust(w) for v, w in zip(r, width) if w), r[5]])
             for r in rows]
    return lines + [f"  not here: {why}" for why in reasons]


def _grid(shapes) -> str:
    """Shapes written "BxS" that make up a whole grid of more than two, as
    "batch 1,2,4 x sequence 8,64" ("" otherwise)."""
    try:
        pairs = [tuple(int(n) for n in s.split("x")) for s in shapes]
    except ValueError:  # a study's own wording (``Study.shape_text``)
        return ""
    if any(len(p) != 2 for p in pairs):
        return ""
    batches, seqs = (sorted({p[i] for p in pairs}) for i in (0, 1))
    if len(pairs) <= 2 or len(batches) == 1 or len(seqs) == 1 \
            or len(set(pairs)) != len(batches) * len(seqs):
        return ""
    return (f"batch {','.join(map(str, batches))} x sequence "
            f"{','.join(map(str, seqs))}")


# What a run costs beyond its sampling, where no earlier run here says better
# (seconds at a base-sized model's 12 layers; where each figure comes from:
# docs/measurements.md, "the figures the library's comments quoted").
#
# A traced mode's first call at a shape either compiles device code (XLA: JAX's
# jit, TensorFlow's xla; Inductor: torch.compile) or traces on the host
# (tf.function without XLA, TorchScript, Keras fit), ``Framework.compiles``. A
# compile ("compile") is paid in the first round only: the later rounds' processes
# load the program from its persistent cache ("cached"). A host trace is paid in
# every process and is the same Python and graph work on a GPU machine as on the
# CPU, so both devices take the CPU's figure. JAX's eager mode compiles each
# operation at its first shape ("op_compiles"), paid and cached like a compile but
# far dearer on a GPU. A whole run (``Study.whole_run``) is a fresh process
# ("process") plus the cold compiles of its training and evaluation steps
# ("run_compiles") where its stack compiles, its traces ("run_traces") where it
# traces on the host (Keras fit). A data-parallel launch (``Study.launch_key``):
# everything beyond its sampling (processes, rendezvous, builds, first step,
# agreement steps, all-reduce, memory pass); never measured on a GPU (one GPU runs
# none), where the CPU's figure stands.
_HOST = {"trace": 2.0, "trace_train": 8.5, "run_traces": 28.0}
# The first-call kinds paid in a variant's first round only, "cached" after it.
_COMPILES = ("compile", "op_compiles")
FIXED_S = {
    "gpu": {"start": 12.0, "build": 2.0, "compile": 20.0, "op_compiles": 200.0, "cached": 2.0,
            "eager": 0.3, "prepare": 10.0, "process": 4.6, "run_compiles": 140.0,
            "launch": 40.0, **_HOST},
    "cpu": {"start": 10.0, "build": 3.0, "compile": 8.0, "op_compiles": 4.0, "cached": 2.0,
            "eager": 0.5, "prepare": 2.0, "process": 8.6, "run_compiles": 16.0,
            "launch": 40.0, **_HOST},
}


# What a report takes after its measurements, in seconds (low, high): a wave of
# notebooks (report.notebook_jobs() at a time), and the scorecard's (measured on
# 2 cores and on an H200's host: docs/measurements.md, as above).
NOTEBOOK_S = (8.0, 26.0)
SCORECARD_S = (11.0, 27.0)


def _size(model: str) -> float:
    """A model's builds and compiles against a base-sized one's (12 layers,
    the figures of ``FIXED_S``): its layers / 12, within [0.1, 4]; 1 where its
    config cannot be read here."""
    from ..core.models import config_for

    try:
        layers = getattr(config_for(model), "num_hidden_layers", 0) or 12
    except Exception:  # noqa: BLE001 (a model this machine cannot describe: base-sized)
        return 1.0
    return min(4.0, max(0.1, layers / 12))


def _variant(c) -> tuple:
    """What one worker builds for a cell (``c``: a CellRef): model,
    framework, mode, precision and task."""
    s = c.spec
    return (s.model, s.framework, s.mode, s.dtype, s.task)


def _first_call(c, study=None) -> str:
    """What kind of first call a cell makes (``FIXED_S``'s key, whose figure
    is its whole cost): "compile" (device code: ``Framework.compiles``;
    "op_compiles" where the mode is an eager one that compiles op by op),
    "trace" or "trace_train" (on the host, in every process), or "eager" (its
    mode traces nothing, or the cell calls no model: ``Study.times_model``).
    By the cell's mode: a memory technique or a fed pipeline runs the
    framework's first training mode, which the built-in frameworks' defaults
    classify alike (TensorFlow's graph, JAX's jit, PyTorch's eager)."""
    from ..frameworks import get

    try:
        fw = get(c.spec.framework)
    except ValueError:  # a framework declared outside fwcompare, unknown here
        return "eager"
    if not fw.traces(c.spec.mode) or (study is not None and not study.times_model(c)):
        return "eager"
    if fw.compiles(c.spec.mode):
        return "op_compiles" if c.spec.mode == "eager" else "compile"
    return "trace" if c.spec.task == "inference" else "trace_train"


def fixed_costs(todo, device: str, study=None) -> tuple[float, str]:
    """The seconds ``todo`` (CellRefs) costs beyond sampling, by its parts
    (``FIXED_S``, scaled by each model's depth: ``_size``): the imports
    once, a build per variant and round, and a first call per cell: a
    compiling mode's compile in the first round it runs (later rounds load
    the program from its compile cache), a host trace in every round, an
    eager call's otherwise. With ``study``, also the references each (model,
    task) prepares, the fresh processes a cell starts beyond its lane
    (``Study.processes``: a largest-batch search's tries, which stand for the
    cell's own build and first call, each try with its first call's trace or
    compile), a whole run's process and, in every round, its cold compiles or
    host traces (``Study.whole_run``), and a launch's processes, build, cold
    compile, agreement steps, timed all-reduce and memory pass
    (``Study.launch_key``: its cells' builds and first calls are the
    launch's). Returns the seconds and a line naming the parts."""
    if not todo:
        return 0.0, "nothing to run"
    cost = FIXED_S.get(device, FIXED_S["cpu"])
    scale = {m: _size(m) for m in {c.spec.model for c in todo}}
    first = {c: _first_call(c, study) for c in todo}
    extra = {c: study.processes(c) if study is not None else 0 for c in todo}
    runs = [c for c in todo if study is not None and study.whole_run(c)]
    compiling = [c for c in runs if first[c] in _COMPILES]  # cold in every round
    tracing = [c for c in runs if first[c].startswith("trace")]
    launch = {c: study.launch_key(c) if study is not None else None for c in todo}
    launches = {k: scale[c.spec.model] for c, k in launch.items() if k is not None}
    alone = set(runs) | {c for c, k in launch.items() if k is not None}
    own = [c for c in todo if not extra[c] and c not in alone]  # a lane's worker runs them
    variants = {(*_variant(c), c.round) for c in own}
    first_round = {}
    for c in own:
        key = (*_variant(c), c.spec.batch_size, c.spec.seq_len)
        first_round[key] = min(first_round.get(key, c.round), c.round)
    kinds: Counter = Counter()
    seconds = cost["start"] + sum(cost["build"] * scale[v[0]] for v in variants)
    for c in own:
        key = (*_variant(c), c.spec.batch_size, c.spec.seq_len)
        kind = first[c]
        if kind in _COMPILES and first_round[key] != c.round:
            kind = "cached"
        kinds[kind] += 1
        seconds += cost[kind] * scale[c.spec.model]
    for c, n in extra.items():  # a try: a fresh process, its first call at a new batch
        call = cost[first[c]] if first[c] != "eager" else 0.0
        seconds += (cost["process"] + call) * n * scale[c.spec.model]
    seconds += sum(cost["process"] * scale[c.spec.model] for c in runs)
    seconds += sum(cost["run_compiles"] * scale[c.spec.model] for c in compiling)
    seconds += sum(cost["run_traces"] * scale[c.spec.model] for c in tracing)
    seconds += sum(cost["launch"] * size for size in launches.values())
    pairs = {(c.spec.model, c.spec.task) for c in todo} if study is not None else set()
    seconds += sum(cost["prepare"] * scale[m] for m, _ in pairs)
    more = (f", {len(pairs)} reference set{'s' if len(pairs) != 1 else ''} prepared"
            if pairs else "") + (f", {sum(extra.values())} tries" if any(extra.values()) else "")
    if runs:
        how = [f"{n} {what}" for n, what in ((len(compiling), "compiling cold"),
                                               (len(tracing), "tracing")) if n]
        more += (f", {len(runs)} whole run{'s' if len(runs) != 1 else ''}"
                 + (f" ({', '.join(how)})" if how else ""))
    if launches:
        more += f", {len(launches)} launch{'es' if len(launches) != 1 else ''}"
    traces = kinds["trace"] + kinds["trace_train"]
    ops = f" ({kinds['op_compiles']} op by op)" if kinds["op_compiles"] else ""
    return seconds, (f"{_duration(seconds)} for the imports, {len(variants)} builds, "
                     f"{kinds['compile'] + kinds['op_compiles']} compiles{ops}, "
                     f"{kinds['cached']} cached, "
                     f"{traces} traced and {kinds['eager']} eager first calls{more} "
                     f"({device} figures of docs/measurements.md)")
