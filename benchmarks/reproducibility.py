"""Do the scorecard's CPU verdicts survive a rerun? (a benchmark, not a test)

Runs the studies behind the scorecard's CPU-judged claims N times (fresh
worker processes every run), under the sequential schedule (one cell after
another, one round: how fwcompare measured before interleaving) and the
interleaved one (``--rounds`` rounds, two-level intervals), then prints, per
schedule:

- per claim and run: the value, its interval and the verdict;
- how many claims changed verdict between runs, and how many run pairs
  flipped between supported and contradicted;
- the share of (claim, ordered run pair)s where one run's interval covers the
  other run's value, beside the share calibrated intervals give with nothing
  moving between runs (about 83%, not 95%: the other run's value has an error
  of its own; ``no_drift_cover``);
- each claim's between-run spread (coefficient of variation of its value)
  beside its mean interval half-width;
- per cell, the median time under each schedule (median over runs): does
  interleaving measure the same thing as a cell timed alone?

Each study runs its quick params restricted to the frameworks the claims
compare (the claims' own models where they name some). Results stay under
``--out`` (a rerun resumes; ``--analyse`` only prints).

``--fidelity K`` instead runs K back-to-back pairs (interleaved, then sequential,
one round each) of the inference sweep's quick cells and compares each cell's
median under the two schedules within each pair, minutes apart: does a cell timed
in turns with the others measure what it measures alone?

``--scorecards A B ...`` instead compares the scorecards of whole reports run
apart (each report's ``summary/scorecard.json``: two ``gpu`` reports of one
machine, run in sessions of their own): the claims every one judged, with the
same counts as above.

Usage: .venv/bin/python benchmarks/reproducibility.py [--runs 3]
       [--schedules sequential,interleaved] [--rounds 3] [--out outputs/reproducibility]
       .venv/bin/python benchmarks/reproducibility.py --fidelity 3
       .venv/bin/python benchmarks/reproducibility.py --scorecards A/scorecard.json B/scorecard.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

import fwcompare
from fwcompare.suite import claims as claims_mod
from fwcompare.core.env import manifest
from fwcompare.results.tables import hardware_line
from fwcompare.suite.params import ParamsError, read_yaml, validate
from fwcompare.core.paths import OUTPUTS, PARAMS
from fwcompare.results.tables import summarize

JUDGED = ("supported", "contradicted", "inconclusive")


def cpu_claims() -> list[claims_mod.Claim]:
    """Claims judged on a CPU run whose figure is a ratio of timings (with an
    interval), of studies that can run interleaved: a study that only runs
    sequentially (distributed: each launch's ranks take every core) measures
    the same way under both schedules, so it has nothing to compare here."""
    return [c for c in claims_mod.load_claims() if c.hardware in ("cpu", "any")
            and claims_mod.metrics()[c.metric].timed and interleaves(c.study)]


def interleaves(study: str) -> bool:
    try:
        validate(study, {"schedule": "interleaved"}, source=study)
    except ParamsError:
        return False
    return True


def study_params(study: str, chosen: list[claims_mod.Claim], schedule: str, rounds: int) -> dict:
    """The study's quick params, restricted to the frameworks its claims compare
    (a technique claim compares every framework; the memory study's search for
    the largest batch, which no timing claim uses, is left out)."""
    p = read_yaml(PARAMS / study / "quick.yaml", "params")
    fws = {str(c.cells[k]).partition("/")[0] for c in chosen for k in ("a", "b") if k in c.cells}
    if any("technique" in c.cells for c in chosen):
        fws |= set(p["frameworks"])
    if "fit_models" in p:
        p["fit_models"] = []
    p["frameworks"] = [fw for fw in p["frameworks"] if fw in fws]
    if "modes" in p:  # a profile without the key (end_to_end's quick) keeps its default
        p["modes"] = {fw: m for fw, m in p["modes"].items() if fw in fws}
    named = [m for c in chosen for m in c.models]
    if named and all(c.models for c in chosen):
        p["models"] = [m for m in p["models"] if m in named] or p["models"]
    p.update(schedule=schedule, rounds=rounds if schedule == "interleaved" else 1)
    return validate(study, p, source=f"{study} (reproducibility)")


def run_once(out: Path, chosen, schedule: str, rounds: int) -> pd.DataFrame:
    """One run of every study behind ``chosen``, in round passes as ``fwcompare
    report`` measures them (``fwcompare.run_studies``)."""
    from fwcompare.execution.forkserver import ForkServers

    studies = sorted({c.study for c in chosen})
    runs = {study: (study_params(study, [c for c in chosen if c.study == study], schedule,
                                 rounds), out / study) for study in studies}
    with ForkServers(out / ".forkservers") as servers:
        times, failed = fwcompare.run_studies(runs, profile="reproducibility", servers=servers,
                                              progress=False, log=lambda _: None)
    for study in studies:
        print(f"  {study}: {times[study]:.0f} s" + (" (failed)" if study in failed else ""),
              flush=True)
    for study, error in failed.items():
        print(error, flush=True)
    return scorecard_rows(out, chosen)


def scorecard_rows(out: Path, chosen) -> pd.DataFrame:
    card = claims_mod.scorecard(results_dir=out)
    ids = [c.id for c in chosen]
    return card.table[card.table["id"].isin(ids)][
        ["id", "value", "ci_low", "ci_high", "verdict", "note", "host_load"]
    ].reset_index(drop=True)


def scorecard_files(files: list[Path]) -> list[pd.DataFrame]:
    """The claims every scorecard judged (a verdict, not "not measured here"),
    in the first one's order, as ``scorecard_rows`` gives them."""
    cards = []
    for f in files:
        doc = claims_mod.read(f)
        if doc is None:
            raise SystemExit(f"no scorecard at {f}")
        t = pd.DataFrame(doc["claims"]).reindex(columns=[
            "id", "value", "ci_low", "ci_high", "verdict", "note", "host_load"])
        cards.append(t[t["verdict"].isin(JUDGED)])
    ids = [i for i in cards[0]["id"] if all(i in set(c["id"]) for c in cards[1:])]
    return [c.set_index("id").loc[ids].reset_index()[
        ["id", "value", "ci_low", "ci_high", "verdict", "note", "host_load"]] for c in cards]


def report_figures(card: Path) -> dict:
    """What issue 81 asks of one report (``card``: its scorecard.json or the
    folder of it): the seconds ``fwcompare report`` took (its
    ``time_breakdown.csv``, two folders up, summed), the claims judged and
    decided (supported or contradicted), the median relative half-width of
    the timed claims' intervals, the extra rounds started, and the decided
    verdicts with neither an interval nor an exact figure."""
    doc = claims_mod.read(card)
    if doc is None:
        raise SystemExit(f"no scorecard at {card}")
    folder = Path(card) if Path(card).is_dir() else Path(card).parent
    breakdown = folder.parent / "time_breakdown.csv"
    seconds = (float(pd.read_csv(breakdown)["seconds"].sum()) if breakdown.is_file()
               else math.nan)
    timed = {name for name, m in claims_mod.metrics().items() if m.timed}
    rows = [r for r in doc["claims"] if r["verdict"] in JUDGED]
    decided = [dict(r, has_ci=r.get("has_ci", True)) for r in rows
               if r["verdict"] in ("supported", "contradicted")]
    halves = [(r["ci_high"] - r["ci_low"]) / 2 / r["value"] for r in rows
              if r.get("metric") in timed and all(
                  isinstance(r[k], (int, float)) and math.isfinite(r[k])
                  for k in ("value", "ci_low", "ci_high"))]
    extra = 0
    for f in folder.parent.glob(f"*/results/{claims_mod.MORE_ROUNDS_FILE}"):
        extra += len(json.loads(f.read_text()).get("rounds", []))
    return {"report": str(folder.parent), "report time": seconds, "judged": len(rows),
            "decided": len(decided), "decided share": len(decided) / max(len(rows), 1),
            "timed intervals": len(halves),
            "median half-width": float(np.median(halves)) if halves else math.nan,
            "extra rounds": extra,
            "decided without an interval": claims_mod.decided_without_interval(decided)}


def report_lines(cards: list[Path]) -> str:
    """One line per report of :func:`report_figures`, then the issue's bars."""
    out = []
    for f in cards:
        r = report_figures(f)
        t = r["report time"]
        out.append(f"{r['report']}: report {int(t // 60)}:{t % 60:04.1f} "
                   f"(within 20:00: {'yes' if t <= 1200 else 'no'}); decided {r['decided']} "
                   f"of {r['judged']} judged ({r['decided share']:.0%}); median half-width "
                   f"of {r['timed intervals']} timed intervals {r['median half-width']:.1%}; "
                   f"extra rounds {r['extra rounds']}; decided without an interval or an "
                   f"exact figure {r['decided without an interval']}")
    return "\n".join(out)


def _half_width(r, log: bool) -> float:
    """An interval's half-width, in the log of its figure (a ratio's intervals
    are even there) or in the figure itself; NaN without an interval."""
    lo, hi = r["ci_low"], r["ci_high"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    return (math.log(hi) - math.log(lo)) / 2 if log else (hi - lo) / 2


def no_drift_cover(a, b) -> float:
    """The chance that run ``a``'s 95% interval holds run ``b``'s value when
    both measured the same quantity, nothing moved between them and each
    interval is calibrated (its half-width 1.96 sd of its figure, normal; in
    the figure's log where both intervals are positive):
    2 Phi(1.96 ha / sqrt(ha^2 + hb^2)) - 1; ``b`` without an interval is
    taken as wide as ``a``'s. Two intervals of one width: 0.834, not 0.95,
    since b's value carries its own error too (with Student's t on few
    degrees of freedom it is higher: P(|t_df| < t_df,0.975 / sqrt 2), 0.91 on
    2, 0.93 on 1)."""
    log = all(not math.isfinite(r["ci_low"]) or r["ci_low"] > 0 for r in (a, b))
    ha, hb = _half_width(a, log), _half_width(b, log)
    if not math.isfinite(hb):
        hb = ha
    if ha + hb == 0:
        return float(a["value"] == b["value"])
    return float(2 * norm.cdf(1.96 * ha / math.hypot(ha, hb)) - 1)


def analyse(runs: list[pd.DataFrame]) -> dict:
    """Verdict changes, flips, coverage and spread over runs of one schedule;
    ``expected``: the coverage calibrated intervals give with nothing moving
    between runs (:func:`no_drift_cover`, summed over the checks)."""
    by_id = pd.concat([r.assign(run=i) for i, r in enumerate(runs)]).groupby("id", sort=False)
    changed, flips, covered, checks, spread, expected = 0, 0, 0, 0, [], 0.0
    for cid, g in by_id:
        g = g.sort_values("run")
        verdicts = list(g["verdict"])
        changed += len(set(verdicts)) > 1
        flips += sum({a, b} == {"supported", "contradicted"}
                     for a, b in itertools.combinations(verdicts, 2))
        rows = g.to_dict("records")
        for a, b in itertools.permutations(rows, 2):
            if all(math.isfinite(x) for x in (a["ci_low"], a["ci_high"], b["value"])):
                checks += 1
                covered += a["ci_low"] <= b["value"] <= a["ci_high"]
                expected += no_drift_cover(a, b)
        v = g["value"].to_numpy(float)
        half = ((g["ci_high"] - g["ci_low"]) / 2 / g["value"]).to_numpy(float)
        with np.errstate(all="ignore"):  # a claim without a value or an interval: NaN
            cv = float(np.std(v, ddof=1) / np.mean(v)) if len(v) > 1 else math.nan
        spread.append({"id": cid, "values": ", ".join(f"{x:.3f}" for x in v),
                       "between-run CV": cv,
                       "mean half-width": (float(np.nanmean(half)) if np.isfinite(half).any()
                                           else math.nan)})
    return {"claims": len(by_id), "changed": changed, "flips": flips, "covered": covered,
            "checks": checks, "expected": expected, "spread": pd.DataFrame(spread)}


def coverage_line(a: dict) -> str:
    """How often a run's interval held another run's value, beside what
    calibrated intervals give with nothing moving between runs."""
    if not a["checks"]:
        return "a run's interval covers another run's value: no checks"
    n = a["checks"]
    return (f"a run's interval covers another run's value: {a['covered']} of {n} "
            f"({a['covered'] / n:.0%}); calibrated intervals with nothing moving between "
            f"runs: about {a['expected']:.1f} ({a['expected'] / n:.0%})")


def study_medians(d: Path) -> list[dict]:
    """Median time of every measured cell of one study's results (rounds pooled)."""
    res = fwcompare.load_results(d)
    s = summarize(res.results, res.samples)
    s = s[s["status"].isin(["ok", "not_equivalent"])]
    return [{"study": d.name, "cell": f"{r['model']} {r['variant']} {r['batch_size']}x{r['seq_len']}",
             "median_s": r["median_s"]} for _, r in s.iterrows()]


def cell_medians(out: Path) -> pd.DataFrame:
    """Median time of every cell of one run."""
    return pd.DataFrame([row for d in sorted(out.iterdir()) if (d / "results").is_dir()
                         for row in study_medians(d)])


def fidelity(out: Path, pairs: int) -> None:
    """Interleaved against sequential, pair by pair, on the inference sweep's quick cells."""
    chosen = [c for c in cpu_claims() if c.study == "inference_sweep"]
    rows = []
    for i in range(pairs):
        for schedule in ("interleaved", "sequential"):
            d = out / "fidelity" / f"pair-{i + 1}" / schedule
            t0 = time.monotonic()
            params = study_params("inference_sweep", chosen, schedule, 1)
            fwcompare.run_study("inference_sweep", params, profile="reproducibility",
                                output_dir=d, progress=False)
            print(f"pair {i + 1} {schedule}: {time.monotonic() - t0:.0f} s", flush=True)
            rows += [dict(r, schedule=schedule, pair=i + 1) for r in study_medians(d)]
    df = pd.DataFrame(rows)
    wide = df.pivot_table(index=["cell", "pair"], columns="schedule", values="median_s")
    wide["interleaved / sequential"] = wide["interleaved"] / wide["sequential"]
    print("\n## Same cell, interleaved then sequential, minutes apart (median s)\n")
    print(md(wide))
    per_cell = wide.groupby("cell")["interleaved / sequential"].median()
    print("\nper cell, median over pairs: " + "; ".join(
        f"{c} {v:.3f}" for c, v in per_cell.items()))
    r = wide["interleaved / sequential"]
    print(f"all pairs: median {r.median():.3f}, range {r.min():.3f} to {r.max():.3f} "
          f"({len(r)} cell pairs)")


def md(df: pd.DataFrame, index: bool = True) -> str:
    """A frame as a Markdown table (floats to 3 significant digits)."""
    df = df.reset_index() if index else df
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
             for row in df.itertuples(index=False)]
    head = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def fmt(r) -> str:
    if not math.isfinite(r["value"]):
        return f"- {r['verdict']}"
    ci = (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
          if math.isfinite(r["ci_low"]) and math.isfinite(r["ci_high"]) else "")
    return f"{r['verdict']} {r['value']:.3f}{ci}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--schedules", default="sequential,interleaved")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the interleaved runs")
    ap.add_argument("--out", type=Path, default=OUTPUTS / "reproducibility")
    ap.add_argument("--analyse", action="store_true", help="only print what --out holds")
    ap.add_argument("--fidelity", type=int, default=0, metavar="K",
                    help="only compare the schedules on the same cells, K back-to-back pairs")
    ap.add_argument("--scorecards", type=Path, nargs="+", metavar="FILE",
                    help="only compare these reports' scorecard.json (two or more)")
    args = ap.parse_args()
    if args.scorecards:
        if len(args.scorecards) < 2:
            ap.error("--scorecards needs two or more scorecard.json files")
        runs = scorecard_files(args.scorecards)
        a = analyse(runs)
        table = pd.DataFrame({str(f): [fmt(r) for r in run.to_dict("records")]
                              for f, run in zip(args.scorecards, runs)}, index=runs[0]["id"])
        print(md(table))
        print("\n" + report_lines(args.scorecards))
        print(f"\nclaims judged in every run: {a['claims']}; verdict changed: {a['changed']}; "
              f"run pairs flipping supported <-> contradicted: {a['flips']}; "
              f"{coverage_line(a)}\n")
        print(md(a["spread"], index=False))
        return
    if args.fidelity:
        print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}", flush=True)
        fidelity(args.out, args.fidelity)
        return
    chosen = cpu_claims()
    schedules = args.schedules.split(",")
    print(f"# Reproducibility of {len(chosen)} CPU claims: {', '.join(c.id for c in chosen)}")
    print(f"{hardware_line(manifest())}; {time.strftime('%Y-%m-%d')}\n", flush=True)
    results, medians = {}, {}
    for schedule in schedules:
        runs = []
        for i in range(args.runs):
            out = args.out / schedule / f"run-{i + 1}"
            t0 = time.monotonic()
            if args.analyse:
                runs.append(scorecard_rows(out, chosen))
            else:
                print(f"{schedule} run {i + 1}/{args.runs} -> {out}", flush=True)
                runs.append(run_once(out, chosen, schedule, args.rounds))
                print(f"  run took {time.monotonic() - t0:.0f} s", flush=True)
            medians[(schedule, i)] = cell_medians(out).assign(schedule=schedule, run=i + 1)
        results[schedule] = runs

    summary = []
    for schedule, runs in results.items():
        a = analyse(runs)
        rounds = args.rounds if schedule == "interleaved" else 1
        print(f"\n## {schedule} schedule ({rounds} round(s) per run), {len(runs)} runs\n")
        table = pd.DataFrame({f"run {i + 1}": [fmt(r) for r in run.to_dict("records")]
                              for i, run in enumerate(runs)}, index=runs[0]["id"])
        # What else the machine did (machine_load.py): a disturbed run shows here.
        table.loc["busiest host load of a claim's cells"] = [
            f"{run['host_load'].max():.1%}" if run["host_load"].notna().any() else "-"
            for run in runs]
        print(md(table))
        share = a["covered"] / a["checks"] if a["checks"] else math.nan
        print(f"\nclaims whose verdict changed between runs: {a['changed']} of {a['claims']}; "
              f"run pairs flipping supported <-> contradicted: {a['flips']}; "
              f"{coverage_line(a)}\n")
        print(md(a["spread"], index=False))
        summary.append({"schedule": schedule, "rounds": rounds, "runs": len(runs),
                        "verdict changes": a["changed"], "flips": a["flips"],
                        "coverage": f"{a['covered']}/{a['checks']} ({share:.0%})",
                        "calibrated, nothing moving": f"{a['expected']:.1f}/{a['checks']}",
                        "median between-run CV": float(a["spread"]["between-run CV"].median()),
                        "median half-width": float(a["spread"]["mean half-width"].median())})
    print("\n## Schedules side by side\n")
    print(md(pd.DataFrame(summary), index=False))
    if len(results) > 1:
        m = pd.concat(medians.values())
        wide = m.groupby(["study", "cell", "schedule"])["median_s"].median().unstack("schedule")
        if {"sequential", "interleaved"} <= set(wide):
            wide["interleaved / sequential"] = wide["interleaved"] / wide["sequential"]
            print("\n## Same cell, both schedules (median over runs of each run's median, s)\n")
            print(md(wide))
            r = wide["interleaved / sequential"]
            print(f"\ninterleaved / sequential: median {r.median():.3f}, "
                  f"range {r.min():.3f} to {r.max():.3f} over {len(r)} cells")
    args.out.mkdir(parents=True, exist_ok=True)
    pd.concat([r.assign(schedule=s, run=i + 1) for s, runs in results.items()
               for i, r in enumerate(runs)]).to_csv(args.out / "verdicts.csv", index=False)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
