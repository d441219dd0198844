"""What a claim is and how a study's figure for it is judged.

A claim of ``params/claims.yaml`` names a study and a metric. The metric
computes one figure from that study's raw samples (a geometric mean of median
ratios with its CI: Student's t over rounds, or the blocks' bootstrap from one
round; a peak-memory ratio, a count), the cells it used and the hardware they
ran on. The verdict compares the figure's CI with the claim's band (see the
head of claims.yaml): ``supported`` when the whole CI lies in the band,
``contradicted`` when it lies wholly outside, ``inconclusive`` when it reaches
both sides of an edge, ``not measured here`` when the run has no cells for the
claim.

The shared metrics live here; a study module adds its own (``Study.metrics``)
from these pieces. The scorecard, which takes the metrics of every registered
study, is :mod:`fwcompare.suite.claims`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ..core.paths import PARAMS
from .store import MEASURED, load_results
from ..plan.schema import ParamsError
from ..core.stats import geomean, geomean_ratio_ci, ratio_value
from .tables import baseline_pairs, both_measured, cell_keys, samples_by_cell, summarize

CLAIMS_FILE = PARAMS / "claims.yaml"
# A claim id names its figure file (claim_<id>.png) and its anchor in the report.
CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,70}$")
VERDICTS = ("supported", "contradicted", "inconclusive", "not measured here")
HARDWARE = ("cpu", "gpu", "any")
DIRECTIONS = ("about", "above", "below")


SINGLE_PROCESS = ("one process per variant (rounds: 1): its interval holds the noise of one "
                  "sampling window, not the spread between processes, so it decides nothing")


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
    # what the figure judged here differs in from the source's (its device,
    # its workload, its setting), said in the claim's note
    adaptation: str = ""

    @property
    def band(self) -> tuple[float, float]:
        """The values for which the claim holds."""
        if self.direction == "about":
            return self.expected - self.tolerance, self.expected + self.tolerance
        if self.direction == "above":
            return self.reference + self.tolerance, math.inf
        return -math.inf, self.reference - self.tolerance

    @property
    def variants(self) -> tuple[str, ...]:
        """The framework/mode variants its cells ``a`` and ``b`` name
        ("torch/eager"), in that order; none where they name a precision or a
        technique instead."""
        return tuple(str(v) for k, v in self.cells.items() if k in ("a", "b") and "/" in str(v))


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
    ids: list[str] = field(default_factory=list)  # the timed cells' ids (timed_from)
    host_load: float = math.nan  # the busiest share other work took (machine_load.py)

    def add_note(self, text: str) -> None:
        """``text`` after the note so far ("; " between; nothing for "")."""
        self.note = "; ".join(n for n in (self.note, text) if n)


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


# -- extra rounds for doubtful claims -------------------------------------------------
# A timed claim still inconclusive after a report's rounds may get up to
# ``more_rounds`` more rounds of its cells (``fwcompare.run_studies``), and is
# judged after each: look 1 is the report's own rounds, look k has k - 1 extra
# rounds behind every cell it used. Each look's interval is computed at
# ``stats.look_confidence(k, 1 + more_rounds)`` so that, whichever look a
# verdict comes from, it is wrong with a chance of at most 5%.

NARROW = 0.02  # an interval this narrow (high / low - 1) that still holds an edge: stop


def look_of(m: "Measurement", data: "StudyData") -> tuple[int, int]:
    """(this look, the most looks) for a timed figure: how many of the study's
    extra rounds are behind every cell the figure used, plus one."""
    looks = 1 + data.more_rounds
    if m.rounds <= data.rounds:
        return 1, looks
    return min(looks, 1 + m.rounds - data.rounds), looks


def stop_reason(m: "Measurement", band: tuple[float, float], look: int, looks: int,
                prior_dof: float = 0.0) -> str:
    """Why an inconclusive timed figure gets no further round ("": it should
    get one): extra rounds are off, the last one is taken, its interval is
    already narrow, or even every round left could not move the interval off
    the edge it holds (the figure sits at the edge, within 1% of it, or its
    spread is too wide for the rounds left: inconclusive is the honest
    answer; a spread from two rounds alone is never taken as too wide).
    ``prior_dof``: the degrees of freedom the report's
    variance prior adds to t (``stats.VariancePrior``)."""
    from ..core.stats import look_confidence, median_se_factor, t_quantile

    if looks == 1:
        return "no extra rounds in this profile (more_rounds: 0)"
    if m.rounds < 2 or not all(math.isfinite(x) and x > 0 for x in (m.value, m.low, m.high)):
        return ""
    if look >= looks:
        return f"still holds a band edge after the {looks - 1} extra rounds this profile allows"
    if m.high / m.low - 1 < NARROW:
        return (f"its interval is narrower than {NARROW:.0%} and still holds a band edge: "
                f"the figure sits at the edge")
    edges = [e for e in band if math.isfinite(e) and e > 0 and m.low < e < m.high]
    if not edges:
        return ""
    n, last = m.rounds, m.rounds + looks - look
    extra = min(prior_dof, 1e6)
    half = (math.log(m.high) - math.log(m.low)) / 2
    shrink = (t_quantile(look_confidence(looks, looks), last - 1 + extra)
              / t_quantile(look_confidence(look, looks), n - 1 + extra)
              * math.sqrt(n / last) * median_se_factor(last) / median_se_factor(n))
    gap = min(abs(math.log(m.value) - math.log(e)) for e in edges)
    # a spread on one degree of freedom (two rounds, no prior) is too uncertain to
    # project: its 95% range runs over a factor of 5000 in variance
    if gap >= NARROW / 2 and n - 1 + extra < 2:
        return ""
    if gap < half * shrink:
        why = ("the figure sits at the edge" if gap < NARROW / 2 else
               "its spread is too wide for the rounds left")
        return (f"{looks - look} more round(s) would likely still leave a band edge inside "
                f"its interval (it is {gap:.1%} from the edge, and at this spread they would "
                f"narrow it to about ±{math.expm1(half * shrink):.1%}): {why}")
    return ""


# -- the stored results of a profile ---------------------------------------------------
class StudyData:
    """A study's stored results, loaded once and summarised (rounds pooled).
    ``params``: the run's params (its ``params.json``); ``rounds`` and
    ``more_rounds``, read from them: the rounds every claim cell gets and the
    extra ones a doubtful claim may get; ``confidence``: the level the metrics' intervals are computed at
    (``claims.evaluate`` raises it for a claim whose cells took extra rounds)."""

    def __init__(self, directory: Path):
        import json

        self.dir = directory
        self.confidence = 0.95
        # the variance prior of this study's class of timed claims
        # (claims.prior_class), and a list that collects the figures' per-round
        # spreads to estimate it (claims.variance_priors)
        self.prior = None
        self.spreads = None
        params = directory / "results" / "params.json"
        # the run's params as its runner stored them ({} where none were)
        self.params = params = json.loads(params.read_text()) if params.is_file() else {}
        self.rounds = int(params.get("rounds", 1))
        self.more_rounds = int(params.get("more_rounds", 0))
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
             baseline_pairs(s, cell_keys(), s["variant"] == b)
             if r["variant"] == a and both_measured(r, base, data.by_cell)}
    rows = _pick_shapes([r for r, _ in pairs.values()], shapes)
    return [pairs[r["cell_id"]] for r in rows]


def claim_samples(data: StudyData, claim: Claim) -> list[tuple]:
    """The samples (a, b) of every cell a time-ratio claim compares, on its
    devices (what :func:`time_ratio` judges, every model's cells together):
    for benchmarks that look into the figure."""
    pairs = _pairs(data, claim, _devices(claim.hardware), claim.cells["a"], claim.cells["b"],
                   claim.shapes)
    return [(data.by_cell[ra["cell_id"]], data.by_cell[rb["cell_id"]]) for ra, rb in pairs]


def timed_from(m: "Measurement", data: "StudyData", cell_ids) -> None:
    """Record on ``m`` what the timings of these cells came from: the fewest
    rounds (fresh worker processes) behind any of them (0: none is known) and
    the busiest host load of any of their rounds (NaN: not measured), and
    a note where a round of them failed while others measured."""
    ids = list(dict.fromkeys(cell_ids))
    m.ids = ids
    if "cell_id" not in data.summary:
        return
    s = data.summary.drop_duplicates("cell_id").set_index("cell_id")
    if "rounds" in s:
        rounds = s["rounds"].reindex(ids).dropna()
        m.rounds = int(rounds.min()) if len(rounds) else 0
    if "host_load" in s:
        load = s["host_load"].reindex(ids).dropna()
        m.host_load = float(load.max()) if len(load) else math.nan
    if "lost_rounds" in s and (lost := int(s["lost_rounds"].reindex(ids).fillna(0).sum())):
        m.add_note(f"{lost} round(s) of its cells failed and are left out (the cells' "
                   f"error column says why)")


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
    """Geometric mean over the cells both ran of time(a) / time(b) (per round,
    turn by turn where they were interleaved: stats.round_log_ratio),
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
                                for ra, rb in ps], data.confidence,
                               prior=data.prior, spreads=data.spreads)
        if best is None or est[0] < best[1][0]:
            best = (ps, est)
    used, (m.value, m.low, m.high) = best
    timed_from(m, data, [r["cell_id"] for pair in used for r in pair])
    if claim.aggregate == "min":  # extra rounds for every model's cells: the lowest may change
        m.ids = list(dict.fromkeys(r["cell_id"] for pair in pairs for r in pair))
    m.cells = [cell_label(ra) for ra, _ in used]
    m.points = [(cell_label(ra), ratio_value(data.by_cell[ra["cell_id"]],
                                             data.by_cell[rb["cell_id"]])) for ra, rb in pairs]
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
    m.value, m.low, m.high = (x ** 2 for x in geomean_ratio_ci(
        arrays, data.confidence, prior=data.prior, spreads=data.spreads))
    timed_from(m, data, [r["cell_id"] for sizes in both for pair in sizes for r in pair])
    m.cells = [f"{cell_label(sa)} vs {la['batch_size']}x{la['seq_len']}" for (sa, _), (la, _) in both]

    def ratio(ra, rb):
        return ratio_value(data.by_cell[ra["cell_id"]], data.by_cell[rb["cell_id"]])

    for ra, rb in _pairs(data, claim, devices, a, b, "all"):
        m.points.append((cell_label(ra), ratio(ra, rb)))
    m.devices = {sa["device"] for (sa, _), _ in both}
    m.note = f"{a} time / {b} time: " + "; ".join(
        f"{sa['model']} {ratio(sa, sb):.2f} at {sa['batch_size']}x{sa['seq_len']}, "
        f"{ratio(la, lb):.2f} at {la['batch_size']}x{la['seq_len']}" for (sa, sb), (la, lb) in both)
    return m


# -- figures that are no timing: one per round --------------------------------------
# A memory peak, an agreement or a count is one figure per fresh process. Its
# cells repeat in every round (``Study.claimed_variants``), and the figure is
# computed per round, then: Student's t over the rounds where they differ,
# "exact" where every process gave the same figure, and no verdict from one
# process (issue 81: a verdict rests on an interval or on a figure shown exact).

ONE_PROCESS = ("a figure from one process (rounds: 1, or its other rounds failed): no "
               "interval, so it decides nothing")
EXACT_RTOL = 1e-9  # figures this close in every round are the same figure


def round_figures(data: StudyData, cell_id: str, column: str, positive: bool = True
                  ) -> dict[int, float]:
    """round -> the cell's ``column`` in that round (fresh process), for the
    rounds that measured it (a finite figure, above 0 where ``positive``)."""
    r = data.results
    if r.empty or column not in r:
        return {}
    g = r[(r["cell_id"] == cell_id) & r["status"].isin(MEASURED)]
    out = {}
    for rd, v in zip(g["round"] if "round" in g else [0] * len(g), g[column]):
        v = pd.to_numeric(v, errors="coerce")
        if pd.notna(v) and math.isfinite(v) and (v > 0 or not positive):
            out[int(rd)] = float(v)
    return out


def common(per_cell: list[dict[int, float]]) -> list[int]:
    """The rounds in which every one of these cells has a figure."""
    if not per_cell:
        return []
    return sorted(set.intersection(*(set(x) for x in per_cell)))


def from_rounds(m: Measurement, figures: Sequence[float], confidence: float, *,
                log: bool) -> None:
    """``m``'s value and interval from one figure per round (fresh process):
    Student's t on R - 1 degrees of freedom around their mean (of logs, for a
    ratio: ``log``) where they differ; the figure with a zero-width interval,
    noted as exact, where every round gave the same; from one round, the
    figure and a forced "inconclusive" (``ONE_PROCESS``), as for a figure the
    caller set with no round behind it."""
    from ..core.stats import t_quantile

    x = np.asarray([v for v in figures if math.isfinite(v)], dtype=float)
    m.rounds = len(x)
    if not len(x):  # a figure the caller shows without one per round decides nothing
        if math.isfinite(m.value):
            m.forced = "inconclusive"
        m.add_note("no round in which every cell it reads gave a figure")
        return
    y = np.log(x) if log else x
    back = np.exp if log else (lambda v: v)
    centre = float(y.mean())
    m.value = float(back(centre))
    if len(x) == 1:
        m.forced = "inconclusive"
        m.add_note(ONE_PROCESS)
        return
    if float(np.ptp(y)) <= EXACT_RTOL * max(1.0, float(np.abs(y).max())):
        m.low = m.high = m.value
        m.add_note(f"exact: the same figure in each of its {len(x)} fresh processes")
        return
    half = t_quantile(confidence, len(x) - 1) * float(y.std(ddof=1)) / math.sqrt(len(x))
    m.low, m.high = float(back(centre - half)), float(back(centre + half))
    m.add_note(f"Student's t over {len(x)} fresh processes")


def is_exact(low: float, value: float, high: float) -> bool:
    """Whether an interval is an exact figure's (:func:`from_rounds`)."""
    return all(math.isfinite(x) for x in (low, value, high)) and low == value == high


def memory_ratio(data: StudyData, claim: Claim, devices) -> Measurement:
    """Geometric mean over the cells both ran of peak memory(a) / peak
    memory(b), per round (each round's pass in a fresh process: the cells of a
    memory claim take one every round, ``RunPlan.memory_every_round``), with
    Student's t over the rounds (:func:`from_rounds`)."""
    a, b = claim.cells["a"], claim.cells["b"]
    m = Measurement(unit=f"{a} peak memory / {b} peak memory")
    pairs = _pairs(data, claim, devices, a, b, claim.shapes)
    per = [(round_figures(data, ra["cell_id"], "peak_mem_bytes"),
            round_figures(data, rb["cell_id"], "peak_mem_bytes")) for ra, rb in pairs]
    keep = [i for i, (fa, fb) in enumerate(per) if common([fa, fb])]
    if not keep:
        m.note = _why_none(data, claim, devices, [a, b]) if not pairs else (
            f"no round in which both {a} and {b} measured their peak memory")
        return m
    pairs, per = [pairs[i] for i in keep], [per[i] for i in keep]
    rounds = common([f for pair in per for f in pair])
    m.cells = [cell_label(ra) for ra, _ in pairs]
    # each cell's ratio in its own rounds (the points drawn), the figure from
    # the rounds every cell has
    m.points = [(c, geomean([fa[n] / fb[n] for n in common([fa, fb])]))
                for c, (fa, fb) in zip(m.cells, per)]
    m.devices = {ra["device"] for ra, _ in pairs}
    methods = sorted({str(ra.get("mem_method", "")) for ra, _ in pairs} - {""})
    if methods:
        m.note = ", ".join(methods)
    from_rounds(m, [geomean([fa[n] / fb[n] for fa, fb in per]) for n in rounds],
                data.confidence, log=True)
    return m


@dataclass(frozen=True)
class Metric:
    """A claim metric: ``fn(data, claim, devices) -> Measurement``, the keys its
    claim's ``cells`` need, a check of their values (problems, or []),
    whether its figure is a signed count (printed as +n), whether it is a
    ratio of timings (what ``rounds_for: claims`` repeats and the
    reproducibility benchmark reruns), whether it is some other figure taken
    once per round (``per_round``: a memory peak, an agreement, a count; its
    cells repeat as a timed claim's do, :func:`from_rounds`), and whether
    that figure is a peak memory (``memory``: its cells take a memory pass in
    every round, not only their first, ``RunPlan.memory_every_round``)."""

    fn: Callable[..., Measurement]
    cells: tuple[str, ...]
    check: Callable[[dict, "Known"], list[str]] | None = None
    count: bool = False
    timed: bool = False
    per_round: bool = False
    memory: bool = False

    @property
    def repeats(self) -> bool:
        """Whether a claim of this metric needs its cells in every round."""
        return self.timed or self.per_round


@dataclass(frozen=True)
class Known:
    """What the registered studies can measure, for checking a claim's cells:
    per framework every mode a study has, and every task (``claims.known``)."""

    modes: dict[str, set]
    tasks: tuple[str, ...]


def check_cells(cells: dict, known: Known) -> list[str]:
    """Names in a claim's cells that no registered study could have measured."""
    from ..core.spec import DTYPES

    modes = known.modes
    allowed = {"dtype": DTYPES, "task": known.tasks}
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
    "memory_ratio": Metric(memory_ratio, ("a", "b"), check_cells, per_round=True, memory=True),
}
