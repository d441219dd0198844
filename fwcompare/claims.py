"""The claims scorecard: every claim of ``params/claims.yaml`` judged against
the stored results of one profile.

Each claim names a study and a metric. The metric computes one figure from
that study's raw samples (a geometric mean of median ratios with its CI:
Student's t over rounds, or the blocks' bootstrap from one round; a
peak-memory ratio, a count), the cells it used and the hardware they ran
on. The verdict compares the figure's CI with the claim's band (see the head
of claims.yaml): ``supported`` when the whole CI lies in the band,
``contradicted`` when it lies wholly outside, ``inconclusive`` when it reaches
both sides of an edge, ``not measured here`` when the run has no cells for the
claim. A GPU claim on a CPU-only run is never judged: the figure computed on
the CPU cells is shown beside it, marked as such.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import load_results
from .atomic import write_text
from .env import hardware_line
from .host import BUSY_HOST
from .params import ParamsError, read_yaml
from .paths import OUTPUTS, PARAMS
from .stats import geomean, geomean_ratio_ci
from .results import MEASURED
from .tables import CELL_KEYS, baseline_pairs, both_measured, samples_by_cell, summarize

CLAIMS_FILE = PARAMS / "claims.yaml"
# A claim id names its figure file (claim_<id>.png) and its anchor in the report.
CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,70}$")
VERDICTS = ("supported", "contradicted", "inconclusive", "not measured here")
HARDWARE = ("cpu", "gpu", "any")
DIRECTIONS = ("about", "above", "below")


SINGLE_PROCESS = ("judged from a single process per variant (rounds: 1): the interval "
                  "covers one sampling window, not the spread between reruns")


def busy_host_note(load: float) -> str:
    return (f"measured on a busy machine: other processes and the hypervisor took up to "
            f"{load:.0%} of its CPU while these cells were timed; a rerun on a quiet "
            f"machine may differ")


class ClaimsError(ParamsError):
    """A claims file that cannot be judged; the message names the claim and key."""


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    source: str
    claimed: str
    hardware: str
    study: str
    metric: str
    cells: dict
    expected: float
    direction: str
    tolerance: float
    reference: float = math.nan
    models: tuple = ()
    shapes: str = "all"
    aggregate: str = "geomean"
    source_text: str = ""

    @property
    def band(self) -> tuple[float, float]:
        """The values for which the claim holds."""
        if self.direction == "about":
            return self.expected - self.tolerance, self.expected + self.tolerance
        if self.direction == "above":
            return self.reference + self.tolerance, math.inf
        return -math.inf, self.reference - self.tolerance


@dataclass
class Measurement:
    """What a metric found: the figure, its CI (NaN: none can be given), the
    cells used, per-cell values (the distribution drawn beside the claim),
    the devices of those cells, a note, and a verdict the metric forces when
    the band cannot decide (e.g. nothing overflowed in either precision)."""

    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    unit: str = ""
    cells: list[str] = field(default_factory=list)
    points: list[tuple[str, float]] = field(default_factory=list)
    devices: set = field(default_factory=set)
    note: str = ""
    forced: str = ""
    rounds: int = 0  # fewest rounds (fresh processes) behind any cell used; 0: not a timing
    host_load: float = math.nan  # busiest share of the machine taken by other work (host.py)


def judge(value: float, low: float, high: float, band: tuple[float, float]) -> str:
    """supported / contradicted / inconclusive for a figure and its CI against
    a band; a figure without a CI is judged on its value alone. Band edges
    count as outside (a claim of "faster" needs more than a tie)."""
    lo_edge, hi_edge = band
    if not math.isfinite(value):
        return "not measured here"
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = value
    if low > lo_edge and high < hi_edge:
        return "supported"
    if high <= lo_edge or low >= hi_edge:
        return "contradicted"
    return "inconclusive"


# -- loading ------------------------------------------------------------------------
_REQUIRED = {"id": str, "claim": str, "source": str, "claimed": str, "hardware": str,
             "study": str, "metric": str, "cells": dict, "expected": (int, float),
             "direction": str, "tolerance": (int, float)}
_OPTIONAL = {"reference": (int, float), "models": list, "shapes": str, "aggregate": str}


def load_claims(path: Path | str = CLAIMS_FILE) -> list[Claim]:
    """Read and check a claims file; every problem is named with its claim id."""
    from .studies import STUDIES

    path = Path(path)
    data = read_yaml(path, "claims", ClaimsError)
    unknown = set(data) - {"sources", "claims"}
    if unknown or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ClaimsError(f"{path}: expected top-level keys 'sources' (mapping) and 'claims' "
                          f"(a non-empty list){'; unknown: ' + ', '.join(sorted(unknown)) if unknown else ''}")
    sources = data.get("sources") or {}
    known_metrics = metrics()
    problems, claims, seen = [], [], set()
    for i, raw in enumerate(data["claims"]):
        where = f"claim {raw.get('id', i + 1)!r}" if isinstance(raw, dict) else f"claim {i + 1}"
        if not isinstance(raw, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        bad = [k for k in raw if k not in _REQUIRED and k not in _OPTIONAL]
        problems += [f"{where}: unknown key {k!r}; allowed: "
                     f"{', '.join([*_REQUIRED, *_OPTIONAL])}" for k in bad]
        for key, typ in {**_REQUIRED, **_OPTIONAL}.items():
            if key not in raw:
                if key in _REQUIRED:
                    problems.append(f"{where}: missing key {key!r}")
                continue
            if not isinstance(raw[key], typ) or isinstance(raw[key], bool):
                problems.append(f"{where}: key {key!r}: expected {getattr(typ, '__name__', 'a number')}, "
                                f"got {raw[key]!r}")
        if any(p.startswith(where) for p in problems):
            continue
        checks = [("source", raw["source"], list(sources)), ("hardware", raw["hardware"], HARDWARE),
                  ("study", raw["study"], list(STUDIES)), ("metric", raw["metric"], list(known_metrics)),
                  ("direction", raw["direction"], DIRECTIONS),
                  ("shapes", raw.get("shapes", "all"), ("all", "smallest", "largest")),
                  ("aggregate", raw.get("aggregate", "geomean"), ("geomean", "min"))]
        for key, value, allowed in checks:
            if value not in allowed:
                problems.append(f"{where}: key {key!r}: unknown value {value!r}; allowed: "
                                f"{', '.join(map(str, allowed))}")
        if raw["id"] in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(raw["id"])
        if not (isinstance(raw["id"], str) and CLAIM_ID.match(raw["id"])):
            problems.append(f"{where}: key 'id': must be lower-case letters, digits and '-' "
                            f"(it names the claim's figure file and its link in the report)")
        if raw["direction"] in ("above", "below") and "reference" not in raw:
            problems.append(f"{where}: direction {raw['direction']!r} needs a 'reference' "
                            f"(the no-effect value the claim is above or below)")
        if raw["tolerance"] < 0:
            problems.append(f"{where}: key 'tolerance': must be >= 0")
        if raw["metric"] in known_metrics:
            metric = known_metrics[raw["metric"]]
            needed = metric.cells
            missing = [k for k in needed if k not in raw["cells"]]
            extra = [k for k in raw["cells"] if k not in needed]
            if missing or extra:
                problems.append(f"{where}: key 'cells': metric {raw['metric']!r} needs "
                                f"{', '.join(needed)}" + (f"; unknown: {', '.join(extra)}"
                                                          if extra else ""))
            else:
                problems += [f"{where}: key 'cells': {p}"
                             for p in (metric.check(raw["cells"]) if metric.check else [])]
        if any(p.startswith(where) for p in problems):
            continue
        claims.append(Claim(
            id=raw["id"], claim=raw["claim"], source=raw["source"], claimed=raw["claimed"],
            hardware=raw["hardware"], study=raw["study"], metric=raw["metric"],
            cells=dict(raw["cells"]), expected=float(raw["expected"]),
            direction=raw["direction"], tolerance=float(raw["tolerance"]),
            reference=float(raw.get("reference", math.nan)),
            models=tuple(raw.get("models", ())), shapes=raw.get("shapes", "all"),
            aggregate=raw.get("aggregate", "geomean"),
            source_text=" ".join(str(sources[raw["source"]]).split())))
    if problems:
        raise ClaimsError(f"{path}: {len(problems)} problem(s)\n  " + "\n  ".join(problems))
    return claims


# -- the stored results of a profile ---------------------------------------------------
class StudyData:
    """A study's stored results, loaded once and summarised (rounds pooled)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.present = (directory / "results" / "results.parquet").is_file() or \
            (directory / "results" / "cells").is_dir()
        res = load_results(directory) if self.present else None
        self.results = res.results if res is not None else pd.DataFrame()
        self.present = self.present and len(self.results) > 0
        self.samples = res.samples if res is not None else pd.DataFrame()
        self.losses = res.losses if res is not None else None
        self.manifest = res.manifest if res is not None else {}
        self.summary = summarize(self.results, self.samples) if self.present else pd.DataFrame()
        self.by_cell = samples_by_cell(self.samples) if self.present else {}


def _devices(hardware: str) -> tuple[str, ...]:
    return {"cpu": ("cpu",), "gpu": ("gpu",), "any": ("cpu", "gpu")}[hardware]


def claimed_variants(study: str, device: str, path: Path | str = CLAIMS_FILE) -> set[str]:
    """The framework/mode variants ("torch/eager") that a claim of ``path``
    compares in ``study`` on ``device``: what ``rounds_for: claims`` repeats.
    A technique claim whose figure is a timing (cells ``technique``: the
    memory study's) compares the technique with ``plain`` in every framework:
    "*/checkpointing", "*/plain"."""
    out = set()
    for c in load_claims(path):
        if c.study != study or device not in _devices(c.hardware):
            continue
        out |= {str(v) for k, v in c.cells.items() if k in ("a", "b") and "/" in str(v)}
        if "technique" in c.cells and metrics()[c.metric].timed:
            out |= {f"*/{c.cells['technique']}", "*/plain"}
    return out


def is_claimed(framework: str, mode: str, variants: set[str]) -> bool:
    """Whether ``framework/mode`` is one of :func:`claimed_variants`."""
    return f"{framework}/{mode}" in variants or f"*/{mode}" in variants


def cell_label(r) -> str:
    return f"{r['model']} {r['batch_size']}x{r['seq_len']}"


def _pick_shapes(rows: list, shapes: str) -> list:
    """All rows, or each model's smallest / largest batch x sequence."""
    if shapes == "all":
        return rows
    pick = {}
    for r in rows:
        size = r["batch_size"] * r["seq_len"]
        best = pick.get(r["model"])
        if best is None or (size < best[0] if shapes == "smallest" else size > best[0]):
            pick[r["model"]] = (size, r)
    return [r for _, r in pick.values()]


def _pairs(data: StudyData, claim: Claim, devices, a: str, b: str, shapes: str):
    """(row of a, row of b) for every cell both ran ok, on these devices."""
    s = data.summary
    s = s[s["device"].isin(devices) & s["variant"].isin([a, b])]
    if claim.models:
        s = s[s["model"].isin(claim.models)]
    pairs = {r["cell_id"]: (r, base) for r, base, _ in
             baseline_pairs(s, CELL_KEYS, s["variant"] == b)
             if r["variant"] == a and both_measured(r, base, data.by_cell)}
    rows = _pick_shapes([r for r, _ in pairs.values()], shapes)
    return [pairs[r["cell_id"]] for r in rows]


def timed_from(m: "Measurement", data: "StudyData", cell_ids) -> None:
    """Record on ``m`` what the timings of these cells came from: the fewest
    rounds (fresh worker processes) behind any of them (0: none is known) and
    the busiest host load of any of their rounds (NaN: not measured)."""
    if "cell_id" not in data.summary:
        return
    s = data.summary.drop_duplicates("cell_id").set_index("cell_id")
    ids = list(cell_ids)
    if "rounds" in s:
        rounds = s["rounds"].reindex(ids).dropna()
        m.rounds = int(rounds.min()) if len(rounds) else 0
    if "host_load" in s:
        load = s["host_load"].reindex(ids).dropna()
        m.host_load = float(load.max()) if len(load) else math.nan


def _why_none(data: StudyData, claim: Claim, devices, needs: list[str]) -> str:
    s = data.summary
    on = s[s["device"].isin(devices)]
    if claim.models:
        on = on[on["model"].isin(claim.models)]
    what = f"{' or '.join(claim.models)} " if claim.models else ""
    if on.empty:
        return f"no {what}cells on {'/'.join(devices)} in the {claim.study} study"
    parts = []
    for v in needs:
        g = on[on["variant"] == v]
        if g.empty:
            parts.append(f"{v} did not run")
        elif not g["status"].isin(MEASURED).any():
            parts.append(f"{v}: " + ", ".join(f"{k} {n}" for k, n in
                                              g["status"].value_counts().items()))
    return "no cell where " + " and ".join(needs) + " both ran ok" + (
        f" ({'; '.join(parts)})" if parts else "")


# -- metrics ------------------------------------------------------------------------
def time_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """Geometric mean over the cells both ran of median time(a) / median time(b),
    with its CI from every cell's raw samples (stats.geomean_ratio_ci). aggregate ``min``: the
    model with the lowest ratio (each model's cells pooled), with its CI."""
    a, b = claim.cells["a"], claim.cells["b"]
    pairs = _pairs(data, claim, devices, a, b, claim.shapes)
    m = Measurement(unit=f"{a} time / {b} time")
    if not pairs:
        m.note = _why_none(data, claim, devices, [a, b])
        return m
    groups = {"all": pairs}
    if claim.aggregate == "min":
        groups = {}
        for ra, rb in pairs:
            groups.setdefault(ra["model"], []).append((ra, rb))
    best = None
    for name, ps in groups.items():
        est = geomean_ratio_ci([(data.by_cell[ra["cell_id"]], data.by_cell[rb["cell_id"]])
                                for ra, rb in ps])
        if best is None or est[0] < best[1][0]:
            best = (ps, est)
    used, (m.value, m.low, m.high) = best
    timed_from(m, data, [r["cell_id"] for pair in used for r in pair])
    m.cells = [cell_label(ra) for ra, _ in used]
    m.points = [(cell_label(ra), ra["median_s"] / rb["median_s"]) for ra, rb in pairs]
    m.devices = {ra["device"] for ra, _ in used}
    if claim.aggregate == "min" and len(groups) > 1:
        m.note = f"lowest of {len(groups)} models: {used[0][0]['model']}"
    return m


def speedup_trend(data: StudyData, claim: Claim, devices) -> Measurement:
    """How much more b speeds up over a at each model's smallest batch x
    sequence than at its largest: (a/b at smallest) / (a/b at largest),
    geometric mean over models, CI from the four cells' samples."""
    a, b = claim.cells["a"], claim.cells["b"]
    small = _pairs(data, claim, devices, a, b, "smallest")
    large = {ra["model"]: (ra, rb) for ra, rb in _pairs(data, claim, devices, a, b, "largest")}
    m = Measurement(unit=f"({a}/{b} at smallest) / ({a}/{b} at largest)")
    both = [(s, large[s[0]["model"]]) for s in small if s[0]["model"] in large
            and s[0]["cell_id"] != large[s[0]["model"]][0]["cell_id"]]
    if not both:
        m.note = ("each model needs two sizes where both ran: "
                  + _why_none(data, claim, devices, [a, b]) if not small else
                  "each model ran one batch x sequence only: no trend to see")
        return m
    arrays = []
    for (sa, sb), (la, lb) in both:
        arrays += [(data.by_cell[sa["cell_id"]], data.by_cell[sb["cell_id"]]),
                   (data.by_cell[lb["cell_id"]], data.by_cell[la["cell_id"]])]
    # The geometric mean over 2 log-ratios per model, squared, is the product of
    # the two per model (averaged over models): a monotone map, so the CI maps too.
    m.value, m.low, m.high = (x ** 2 for x in geomean_ratio_ci(arrays))
    timed_from(m, data, [r["cell_id"] for sizes in both for pair in sizes for r in pair])
    m.cells = [f"{cell_label(sa)} vs {la['batch_size']}x{la['seq_len']}" for (sa, _), (la, _) in both]
    for ra, rb in _pairs(data, claim, devices, a, b, "all"):
        m.points.append((cell_label(ra), ra["median_s"] / rb["median_s"]))
    m.devices = {sa["device"] for (sa, _), _ in both}
    m.note = f"{a} time / {b} time: " + "; ".join(
        f"{sa['model']} {sa['median_s'] / sb['median_s']:.2f} at {sa['batch_size']}x"
        f"{sa['seq_len']}, {la['median_s'] / lb['median_s']:.2f} at {la['batch_size']}x"
        f"{la['seq_len']}" for (sa, sb), (la, lb) in both)
    return m


def memory_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """Geometric mean over the cells both ran of peak memory(a) / peak memory(b).
    One memory measurement per cell: no CI."""
    a, b = claim.cells["a"], claim.cells["b"]
    pairs = [(ra, rb) for ra, rb in _pairs(data, claim, devices, a, b, claim.shapes)
             if ra["peak_mem_bytes"] > 0 and rb["peak_mem_bytes"] > 0]
    m = Measurement(unit=f"{a} peak memory / {b} peak memory")
    if not pairs:
        m.note = _why_none(data, claim, devices, [a, b])
        return m
    ratios = [ra["peak_mem_bytes"] / rb["peak_mem_bytes"] for ra, rb in pairs]
    m.value = geomean(ratios)
    m.cells = [cell_label(ra) for ra, _ in pairs]
    m.points = list(zip(m.cells, ratios))
    m.devices = {ra["device"] for ra, _ in pairs}
    methods = sorted({str(ra.get("mem_method", "")) for ra, _ in pairs} - {""})
    m.note = "one peak-memory measurement per cell: no CI" + (
        f" ({', '.join(methods)})" if methods else "")
    return m


@dataclass(frozen=True)
class Metric:
    """A claim metric: ``fn(data, claim, devices) -> Measurement``, the keys its
    claim's ``cells`` need, a check of their values (problems, or []),
    whether its figure is a signed count (no CI, printed as +n), and whether
    it is a ratio of timings (what ``rounds_for: claims`` repeats and the
    reproducibility benchmark reruns)."""

    fn: Callable[..., Measurement]
    cells: tuple[str, ...]
    check: Callable[[dict], list[str]] | None = None
    count: bool = False
    timed: bool = False


def is_count(metric: str) -> bool:
    """Whether a metric's figure is a signed count (no CI, printed as +n)."""
    m = metrics().get(metric)
    return bool(m and m.count)


def check_cells(cells: dict) -> list[str]:
    """Names in a claim's cells that no study could have measured."""
    from .spec import DTYPES, TASKS
    from .studies import STUDIES

    modes: dict[str, set] = {}
    for study in STUDIES.values():
        for fw, names in study.modes.items():
            modes.setdefault(fw, set()).update(names)
    allowed = {"dtype": DTYPES, "task": TASKS}
    problems = []
    for key, value in cells.items():
        if key in allowed and value not in allowed[key]:
            problems.append(f"{key} {value!r} is not one of {', '.join(allowed[key])}")
        elif key in ("a", "b") and value not in DTYPES:
            fw, _, mode = str(value).partition("/")
            if mode not in modes.get(fw, ()):
                problems.append(f"{key} {value!r} is neither framework/mode (e.g. torch/eager) "
                                f"nor a precision ({', '.join(DTYPES)})")
    return problems


# Metrics any study's results can feed; a study module adds its own (Study.metrics).
SHARED_METRICS = {
    "time_ratio": Metric(time_ratio, ("a", "b"), check_cells, timed=True),
    "speedup_trend": Metric(speedup_trend, ("a", "b"), check_cells, timed=True),
    "memory_ratio": Metric(memory_ratio, ("a", "b"), check_cells),
}


def metrics() -> dict[str, Metric]:
    """Every metric a claim may name: the shared ones and each study's."""
    from .studies import STUDIES

    out = dict(SHARED_METRICS)
    for study in STUDIES.values():
        out.update(study.metrics)
    return out


# -- the scorecard ------------------------------------------------------------------
@dataclass
class Scorecard:
    table: pd.DataFrame   # one row per claim
    points: pd.DataFrame  # per-cell values behind each claim's figure
    profile: str

    def verdict_counts(self) -> dict[str, int]:
        return {v: int((self.table["verdict"] == v).sum()) for v in VERDICTS}


def evaluate(claim: Claim, data: StudyData) -> tuple[dict, list[tuple[str, float]]]:
    """One claim's scorecard row and the per-cell values behind it."""
    row = {"id": claim.id, "claim": claim.claim, "source": claim.source,
           "source_text": claim.source_text, "claimed": claim.claimed,
           "claim_hardware": claim.hardware, "study": claim.study, "metric": claim.metric,
           "expected": claim.expected, "direction": claim.direction,
           "band_low": claim.band[0], "band_high": claim.band[1], "tolerance": claim.tolerance}
    fn = metrics()[claim.metric].fn
    if not data.present:
        m = Measurement(note=f"the {claim.study} study has no results for this profile")
    else:
        m = fn(data, claim, _devices(claim.hardware))
        if claim.hardware == "gpu" and not math.isfinite(m.value) and not m.forced:
            # Not measured on a GPU: show what the CPU cells say, unjudged.
            cpu = fn(data, claim, ("cpu",))
            if math.isfinite(cpu.value):
                cpu.forced = "not measured here"
                cpu.note = ("the claim is about GPUs and this run has no GPU cells; the "
                            "figure is this CPU's, shown for context and not judged"
                            + (f" ({cpu.note})" if cpu.note else ""))
                m = cpu
            else:
                m.forced = "not measured here"
                m.note = "the claim is about GPUs and this run has no GPU cells"
    verdict = m.forced or judge(m.value, m.low, m.high, claim.band)
    if verdict == "not measured here" and not m.note:
        m.note = "no figure could be computed"
    if m.rounds == 1 and verdict in ("supported", "contradicted", "inconclusive"):
        m.note = "; ".join(n for n in (m.note, SINGLE_PROCESS) if n)
    if m.host_load > BUSY_HOST and verdict in ("supported", "contradicted", "inconclusive"):
        m.note = "; ".join(n for n in (m.note, busy_host_note(m.host_load)) if n)
    hw = hardware_line(data.manifest) if data.manifest else ""
    row.update(verdict=verdict, value=m.value, ci_low=m.low, ci_high=m.high, unit=m.unit,
               has_ci=bool(math.isfinite(m.low) and math.isfinite(m.high)),
               n_cells=len(m.cells), cells="; ".join(m.cells), rounds=m.rounds,
               host_load=m.host_load,
               measured_on=("/".join(sorted(m.devices)) + (f": {hw}" if hw else ""))
               if m.devices else (hw or "no run"),
               note=m.note)
    return row, m.points


def scorecard(profile: str = "quick", results_dir: Path | str | None = None,
              claims_file: Path | str | None = None,
              output_dir: Path | str | None = None) -> Scorecard:
    """Judge every claim against the results in ``results_dir/<study>``
    (default outputs/<profile>). With ``output_dir``, also write
    scorecard.json, scorecard.csv and points.csv there (index.html reads the
    JSON)."""
    claims = load_claims(claims_file or CLAIMS_FILE)
    root = Path(results_dir) if results_dir else OUTPUTS / profile
    data: dict[str, StudyData] = {}
    rows, points = [], []
    for c in claims:
        if c.study not in data:
            data[c.study] = StudyData(root / c.study)
        row, pts = evaluate(c, data[c.study])
        rows.append(row)
        points += [{"id": c.id, "cell": label, "value": float(v)} for label, v in pts]
    card = Scorecard(pd.DataFrame(rows), pd.DataFrame(points, columns=["id", "cell", "value"]),
                     profile)
    if output_dir:
        write(card, Path(output_dir))
    return card


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return _jsonable(v.item())
    return v


def write(card: Scorecard, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"profile": card.profile, "verdicts": card.verdict_counts(),
           "claims": [{k: _jsonable(v) for k, v in r.items()}
                      for r in card.table.to_dict("records")]}
    target = write_text(directory / "scorecard.json", json.dumps(doc, indent=1))
    card.table.to_csv(directory / "scorecard.csv", index=False)
    card.points.to_csv(directory / "points.csv", index=False)
    return target


def read(directory: Path) -> dict | None:
    """The scorecard a summary run wrote, or None."""
    f = Path(directory) / "scorecard.json"
    if not f.is_file():
        return None
    doc = json.loads(f.read_text())
    for r in doc["claims"]:  # JSON has no infinity or NaN: written as "inf" / null
        for k, v in r.items():
            if v in ("inf", "-inf") or (v is None and k in _NUMERIC):
                r[k] = float(v) if v is not None else math.nan
    return doc


_NUMERIC = ("value", "ci_low", "ci_high", "band_low", "band_high", "expected", "tolerance")


def format_value(row) -> str:
    """The figure with its CI, as the scorecard prints it."""
    v, lo, hi = (row.get(k) for k in ("value", "ci_low", "ci_high"))
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    def num(x):
        return f"{x:.3f}" if 0.1 <= abs(x) < 10 else f"{x:.3g}"

    count = is_count(row.get("metric"))
    text = f"{v:+.0f}" if count else num(v)
    if lo is not None and hi is not None and all(
            isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi)):
        text += f" [{num(lo)}, {num(hi)}]"
    elif not count:
        text += " (no CI)"
    return text


def format_band(row) -> str:
    lo, hi = row.get("band_low"), row.get("band_high")
    if row.get("direction") == "above":
        return f"> {lo:.3g}"
    if row.get("direction") == "below":
        return f"< {hi:.3g}"
    return f"{lo:.3g} to {hi:.3g}"


VERDICT_COLOURS = {"supported": "#d4edda", "contradicted": "#f8d7da",
                   "inconclusive": "#fff3cd", "not measured here": "#e2e3e5"}


def display_table(card: Scorecard) -> pd.DataFrame:
    """The scorecard as a person reads it: claim, source, claimed, measured
    with CI, band, verdict, cells, hardware, note."""
    t = card.table.reset_index(drop=True)
    df = pd.DataFrame({
        "claim": t["claim"], "source": t["source"], "claimed": t["claimed"],
        "measured": [format_value(r) for r in t.to_dict("records")],
        "metric": t["unit"], "holds when": [format_band(r) for r in t.to_dict("records")],
        "verdict": t["verdict"], "cells": t["n_cells"], "measured on": t["measured_on"],
        "note": t["note"]})
    return df.set_axis(pd.Index(t["id"], name="id"))


def study_table(study: str, output_dir: Path | str,
                claims_file: Path | str | None = None) -> pd.DataFrame:
    """The claims about one study, judged on that study's results in
    ``output_dir`` (a study notebook's "claims beside this machine's
    measurements"; claims live only in claims.yaml)."""
    chosen = [c for c in load_claims(claims_file or CLAIMS_FILE) if c.study == study]
    if not chosen:
        return pd.DataFrame()
    data = StudyData(Path(output_dir))
    rows = [evaluate(c, data)[0] for c in chosen]
    return display_table(Scorecard(pd.DataFrame(rows), pd.DataFrame(), ""))


def styled(card: Scorecard):
    """display_table coloured by verdict (a pandas Styler, for the notebook)."""
    df = display_table(card)
    return df.style.map(lambda v: f"background-color: {VERDICT_COLOURS.get(v, '')}",
                        subset=["verdict"]).set_properties(**{"text-align": "left"})
