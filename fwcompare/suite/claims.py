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

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.atomic import read_json, write_text
from ..results.judging import (CLAIM_ID, CLAIMS_FILE, DIRECTIONS, HARDWARE,  # noqa: F401
                               SHARED_METRICS, SINGLE_PROCESS, VERDICTS, Claim, ClaimsError, Known,
                               Measurement, Metric, StudyData, _devices, busy_host_note, cell_label,
                               check_cells, is_exact, judge, look_of, memory_ratio, speedup_trend,
                               stop_reason, time_ratio, timed_from)
from ..core.stats import VariancePrior, look_confidence, variance_prior
from ..core.machine_load import BUSY_HOST
from ..results.tables import hardware_line
from ..core.paths import OUTPUTS
from ..plan.schema import read_yaml
from .unmeasured import (LEFT_OUT, NO_FIGURE, NO_GPU, NO_RESULTS,  # noqa: F401 (the report's)
                         ran_on_gpu, why_unmeasured)

# -- loading ------------------------------------------------------------------------
_REQUIRED = {"id": str, "claim": str, "source": str, "claimed": str, "hardware": str,
             "study": str, "metric": str, "cells": dict, "expected": (int, float),
             "direction": str, "tolerance": (int, float)}
_OPTIONAL = {"reference": (int, float), "models": list, "shapes": str, "aggregate": str,
             "adaptation": str}


def load_claims(path: Path | str = CLAIMS_FILE) -> list[Claim]:
    """Read and check a claims file; every problem is named with its claim id."""
    from ..studies import STUDIES

    path = Path(path)
    data = read_yaml(path, "claims", ClaimsError)
    unknown = set(data) - {"sources", "claims"}
    if unknown or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ClaimsError(f"{path}: expected top-level keys 'sources' (mapping) and 'claims' "
                          f"(a non-empty list){'; unknown: ' + ', '.join(sorted(unknown)) if unknown else ''}")
    sources = data.get("sources") or {}
    known_metrics = metrics()
    vocabulary = known()
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
                             for p in (metric.check(raw["cells"], vocabulary) if metric.check else [])]
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
            source_text=" ".join(str(sources[raw["source"]]).split()),
            adaptation=" ".join(raw.get("adaptation", "").split())))
    if problems:
        raise ClaimsError(f"{path}: {len(problems)} problem(s)\n  " + "\n  ".join(problems))
    return claims


def claimed_variants(study: str, device: str, path: Path | str = CLAIMS_FILE,
                     memory: bool = False, claims: list[Claim] | None = None) -> set[str]:
    """The framework/mode variants ("torch/eager", or "*/plain" for a mode of
    every framework) that a claim of ``path`` compares in ``study`` on
    ``device``, as the study reads its claims (``Study.claimed_variants``):
    what ``rounds_for: claims`` repeats; ``memory``: only those of claims
    whose figure is a peak memory (``Metric.memory``: they take a memory
    pass in every round). ``claims``: those of ``path``, where the caller
    has loaded them already."""
    from ..studies import STUDIES

    known = metrics()
    out = set()
    for c in load_claims(path) if claims is None else claims:
        if c.study != study or device not in _devices(c.hardware):
            continue
        if memory and not known[c.metric].memory:
            continue
        out |= STUDIES[study].claimed_variants(c, known[c.metric])
    return out


def is_count(metric: str) -> bool:
    """Whether a metric's figure is a signed count (printed as +n)."""
    m = metrics().get(metric)
    return bool(m and m.count)


def known() -> Known:
    """What a claim's cells may name: per framework every mode a registered
    study has, and every registered study's tasks."""
    from ..studies import STUDIES

    modes: dict[str, set] = {}
    for study in STUDIES.values():
        for fw, names in study.modes.items():
            modes.setdefault(fw, set()).update(names)
    tasks = tuple(dict.fromkeys(t for study in STUDIES.values() for t in study.tasks))
    return Known(modes, tasks)


def metrics() -> dict[str, Metric]:
    """Every metric a claim may name: the shared ones and each study's."""
    from ..studies import STUDIES

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
    counts: frozenset = frozenset()  # the metrics whose figure is a signed count
    # the variance prior of each class of timed claims (``prior_class``: study,
    # device, schedule) that has one
    priors: dict[str, VariancePrior] = field(default_factory=dict)

    def verdict_counts(self) -> dict[str, int]:
        return {v: int((self.table["verdict"] == v).sum()) for v in VERDICTS}


def evaluate(claim: Claim, data: StudyData) -> tuple[dict, list[tuple[str, float]]]:
    """One claim's scorecard row and the per-cell values behind it."""
    row = {"id": claim.id, "claim": claim.claim, "source": claim.source,
           "source_text": claim.source_text, "claimed": claim.claimed,
           "claim_hardware": claim.hardware, "study": claim.study, "metric": claim.metric,
           "expected": claim.expected, "direction": claim.direction,
           "band_low": claim.band[0], "band_high": claim.band[1], "tolerance": claim.tolerance}
    metric = metrics()[claim.metric]
    look, looks = 1, 1
    devices = _devices(claim.hardware)
    if not data.present:
        m = Measurement(note=f"the {claim.study} study has no results for this profile")
    else:
        m, look, looks = measure(metric, data, claim, devices)
        if (claim.hardware == "gpu" and not math.isfinite(m.value) and not m.forced
                and ran_on_gpu(data)):
            m.forced = "not measured here"  # its GPU cells did not make a figure: m.note says why
        elif claim.hardware == "gpu" and not math.isfinite(m.value) and not m.forced:
            # Not measured on a GPU: show what the CPU cells say, unjudged.
            cpu, look, looks = measure(metric, data, claim, ("cpu",))
            if math.isfinite(cpu.value):
                cpu.forced = "not measured here"
                cpu.note = ("the claim is about GPUs and this run has no GPU cells; the "
                            "figure is this CPU's, shown for context and not judged"
                            + (f" ({cpu.note})" if cpu.note else ""))
                m, devices = cpu, ("cpu",)
            else:
                m.forced = "not measured here"
                m.note = "the claim is about GPUs and this run has no GPU cells"
    verdict = m.forced or judge(m.value, m.low, m.high, claim.band)
    unmeasured = ""
    if verdict == "not measured here":
        unmeasured, m.note = why_unmeasured(data, claim, m.note)
    judged = verdict in ("supported", "contradicted", "inconclusive")
    if judged and metric.timed and m.rounds == 1:
        verdict = "inconclusive"  # one process per variant: not a verdict (issue 48)
        m.add_note(SINGLE_PROCESS)
    elif judged and look > 1:
        m.add_note(f"after {look - 1} extra round(s) of its cells, its interval at "
                   f"{look_confidence(look, looks):.1%} (the error spent over the looks)")
    if verdict == "inconclusive" and metric.timed and m.rounds >= 2:
        why = (stop_reason(m, claim.band, look, looks, prior_dof(data, m))
               or skipped_note(data, claim))
        m.add_note(why)
    if m.host_load > BUSY_HOST and judged:
        m.add_note(busy_host_note(m.host_load))
    if claim.adaptation:  # what is measured here differs from what the source measured
        m.add_note(f"adapted from the source: {claim.adaptation}")
    hw = hardware_line(data.manifest) if data.manifest else ""
    has_ci = bool(math.isfinite(m.low) and math.isfinite(m.high))
    exact = is_exact(m.low, m.value, m.high)  # the same in every process: no level to state
    own = m
    if has_ci and metric.timed and data.prior is not None:  # its own t, beside the pooled
        alone = copy.copy(data)
        alone.prior = None
        own, _, _ = measure(metric, alone, claim, devices)
    row.update(verdict=verdict, value=m.value, ci_low=m.low, ci_high=m.high, unit=m.unit,
               has_ci=has_ci, exact=exact,
               confidence=(look_confidence(look, looks) if metric.timed else data.confidence)
               if has_ci and not exact else math.nan,
               own_ci_low=own.low if has_ci else math.nan,
               own_ci_high=own.high if has_ci else math.nan,
               prior_class=prior_class(data) if has_ci and data.prior is not None else "",
               look=look, looks=looks,
               n_cells=len(m.cells), cells="; ".join(m.cells), rounds=m.rounds,
               host_load=m.host_load,
               measured_on=("/".join(sorted(m.devices)) + (f": {hw}" if hw else ""))
               if m.devices else (hw or "no run"),
               note=m.note, unmeasured=unmeasured)
    return row, m.points


def measure(metric: Metric, data: StudyData, claim: Claim, devices) -> tuple[Measurement, int, int]:
    """A claim's figure, and which look at it this is of how many
    (``judging.look_of``): a timed figure whose cells took extra rounds is
    computed again with its interval at that look's confidence."""
    m = metric.fn(data, claim, devices)
    if not metric.timed:
        return m, 1, 1
    look, looks = look_of(m, data)
    if look > 1:
        data = copy.copy(data)
        data.confidence = look_confidence(look, looks)
        m = metric.fn(data, claim, devices)
    return m, look, looks


MORE_ROUNDS_FILE = "more_rounds.json"  # in a study's results: what the extra rounds did


def skipped_note(data: StudyData, claim: Claim) -> str:
    """Why a claim that could take another round did not: the report's time
    for extra rounds was spent, or its time budget was (``why``, written by
    ``api.more_rounds``; ``budget_spent``: spent before any claim was
    judged for one, so every claim that could take one was stopped by it), or
    no report's extra rounds ran at all."""
    path = data.dir / "results" / MORE_ROUNDS_FILE
    record = json.loads(path.read_text()) if path.is_file() else {}
    if claim.id in record.get("skipped", []) or record.get("budget_spent"):
        return record.get("why") or (
            "the report's time for extra rounds was spent before this claim's next round "
            f"(budget {record.get('budget_s', 0):.0f} s)")
    return "" if record else "no extra rounds were taken (a report takes them: fwcompare report)"


def prior_dof(data: StudyData, m: Measurement) -> float:
    """The degrees of freedom the class's variance prior adds to the t of the
    figure ``m`` (``VariancePrior.weight``); 0 without a prior."""
    return data.prior.weight(m.rounds - 1) if data.prior is not None else 0.0


def prior_class(data: StudyData) -> str:
    """The class of timed claims whose round-to-round spreads a claim's
    interval borrows: one study's, on one device, under one schedule. Spreads
    differ by class far more than within one (a training step's processes
    against an inference cell's: methodology.md, "the moderated t, within a
    class"), and a prior pooled over unlike figures narrows the noisy ones'
    intervals past their level and widens the quiet ones'."""
    p = data.params
    return f"{data.dir.name} ({p.get('device', 'cpu')}, {p.get('schedule', 'interleaved')})"


def class_spreads(claims: list[Claim], data: dict[str, StudyData]) -> dict[str, list]:
    """Per class (:func:`prior_class`): the (variance, degrees of freedom) of the
    per-round figures of its timed claims measured in two or more rounds, as
    they stand (extra rounds included). The distributed study's launches
    (several ranks each) give none: their spread is of another kind."""
    spreads: dict[str, list] = {}
    known = metrics()
    for c in claims:
        d = data.get(c.study)
        if not known[c.metric].timed or d is None or not d.present:
            continue
        d = copy.copy(d)
        d.prior, d.spreads = None, spreads.setdefault(prior_class(d), [])
        known[c.metric].fn(d, c, _devices(c.hardware))
    return {k: v for k, v in spreads.items() if v}


def variance_priors(claims: list[Claim], data: dict[str, StudyData]) -> dict[str, VariancePrior]:
    """The variance prior (``stats.variance_prior``, Smyth 2004) of each class
    of timed claims (:func:`prior_class`) that has one, from its spreads
    (:func:`class_spreads`). Three rounds give a figure's own variance 2
    degrees of freedom (t = 4.30); where a class's figures spread alike, its
    prior adds up to what the others have between them (t near 2), and a
    figure that spreads more than they do keeps its own t
    (``VariancePrior.typical``; methodology.md). A class of fewer than three
    such figures has none: each keeps its own t. Coverage on a real report's
    spreads: ``benchmarks/prior_coverage.py``."""
    return {k: prior for k, v in class_spreads(claims, data).items()
            if (prior := variance_prior(v)) is not None}


def studies_data(claims: list[Claim], folder) -> dict[str, StudyData]:
    """Each claimed study's stored results (``folder(study)``: its output
    folder), each with the variance prior of its class (:func:`prior_class`)."""
    data = {s: StudyData(Path(folder(s))) for s in dict.fromkeys(c.study for c in claims)}
    priors = variance_priors(claims, data)
    for d in data.values():
        d.prior = priors.get(prior_class(d)) if d.present else None
    return data


def doubtful(outs: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """The timed claims that should get another round: per study (``outs``:
    study -> its output folder), claim id -> the ids of the cells its figure
    used. A claim qualifies while it is inconclusive from two or more rounds
    and :func:`judging.stop_reason` finds no reason to stop."""
    out: dict[str, dict[str, list[str]]] = {}
    known = metrics()
    mine = [c for c in load_claims() if c.study in outs]
    data = studies_data(mine, outs.get)
    for c in mine:
        d = data[c.study]
        if not known[c.metric].timed or not d.present or d.more_rounds == 0:
            continue
        m, look, looks = measure(known[c.metric], d, c, _devices(c.hardware))
        if (judge(m.value, m.low, m.high, c.band) == "inconclusive" and not m.forced
                and m.rounds >= 2 and m.ids
                and not stop_reason(m, c.band, look, looks, prior_dof(d, m))):
            out.setdefault(c.study, {})[c.id] = m.ids
    return out


def scorecard(profile: str = "quick", results_dir: Path | str | None = None,
              claims_file: Path | str | None = None,
              output_dir: Path | str | None = None) -> Scorecard:
    """Judge every claim against the results in ``results_dir/<study>``
    (default outputs/<profile>). With ``output_dir``, also write
    scorecard.json, scorecard.csv and points.csv there (index.html reads the
    JSON)."""
    claims = load_claims(claims_file or CLAIMS_FILE)
    root = Path(results_dir) if results_dir else OUTPUTS / profile
    data = studies_data(claims, lambda study: root / study)
    rows, points = [], []
    for c in claims:
        row, pts = evaluate(c, data[c.study])
        rows.append(row)
        points += [{"id": c.id, "cell": label, "value": float(v)} for label, v in pts]
    card = Scorecard(pd.DataFrame(rows), pd.DataFrame(points, columns=["id", "cell", "value"]),
                     profile, frozenset(k for k, m in metrics().items() if m.count),
                     {prior_class(d): d.prior for d in data.values() if d.prior is not None})
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
           "variance_priors": {label: {k: _jsonable(v)
                                       for k, v in dataclasses.asdict(prior).items()}
                               for label, prior in card.priors.items()},
           "claims": [{k: _jsonable(v) for k, v in r.items()}
                      for r in card.table.to_dict("records")]}
    target = write_text(directory / "scorecard.json", json.dumps(doc, indent=1))
    card.table.to_csv(directory / "scorecard.csv", index=False)
    card.points.to_csv(directory / "points.csv", index=False)
    return target


def read(directory: Path) -> dict | None:
    """The scorecard a summary run wrote (``directory``: its folder, or the
    scorecard.json itself), or None; :class:`~fwcompare.core.atomic.UnreadableFile`
    where it cannot be read."""
    f = Path(directory)
    f = f if f.is_file() else f / "scorecard.json"
    if not f.is_file():
        return None
    doc = read_json(f, "scorecard", "run `fwcompare report` again: it judges the claims anew",
                    lambda d: None if isinstance(d.get("claims"), list)
                    else "no list of claims in it")
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
    if row.get("exact") in (True, "True"):
        text += " (exact)"  # the same figure in every process (judging.from_rounds)
    elif lo is not None and hi is not None and all(
            isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi)):
        text += f" [{num(lo)}, {num(hi)}]"
        level = row.get("confidence")
        if isinstance(level, (int, float)) and math.isfinite(level) and round(level, 4) != 0.95:
            text += f" at {level:.1%}"  # an interval of a later look (look_confidence)
    elif not count:
        text += " (no CI)"
    return text


def wrong_verdicts_bound(rows) -> float:
    """How many of these scorecard rows' verdicts may be wrong, in expectation
    at most, where each interval keeps its level: a decided verdict is wrong
    only where its interval lies wholly on one side of the truth, which an
    interval of level c does with a chance of at most (1 - c) / 2; a
    "contradicted" on a band with two edges (``about``) from either side, so
    twice that. A verdict from look k of a claim that took extra rounds spent
    the error of each of its k looks (:func:`look_confidence`): any of them
    could have decided it. Verdicts without an interval are not counted: they
    carry no such bound (:func:`decided_without_interval`)."""
    total = 0.0
    for r in rows:
        level = r.get("confidence")
        if (r.get("verdict") not in ("supported", "contradicted") or not r.get("has_ci")
                or not isinstance(level, (int, float)) or not math.isfinite(level)):
            continue
        sides = 2 if r["verdict"] == "contradicted" and r.get("direction") == "about" else 1
        look, looks = int(r.get("look") or 1), int(r.get("looks") or 1)
        spent = ((1 - level) if look == 1 else
                 sum(1 - look_confidence(j, looks) for j in range(1, look + 1)))
        total += sides * spent / 2
    return total


def decided_without_interval(rows) -> int:
    """The decided verdicts that rest on a figure without an interval."""
    return sum(1 for r in rows
               if r.get("verdict") in ("supported", "contradicted") and not r.get("has_ci"))


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

