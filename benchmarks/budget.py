"""Does the quick report still fit its budget? (a benchmark, not a test)

The quick report's 20 minutes are a machine's: debf5ae's report took 19:45-20:08 on
a 2-core Intel Xeon with AMX (2026-11-25), and code close to it took 26:35 on the
same kind of VM a day later (docs/measurements.md): a VM's speed moves between
sessions and CPU models. So the budget is checked as a ratio, on whatever machine
this runs: a candidate commit's report against a baseline's, back to back,
alternating (baseline, candidate, baseline, candidate...), each
``fwcompare report --profile PROFILE --fresh`` from a clone of its commit into an
empty folder, with this interpreter (``PYTHONPATH`` the clone), nothing else
running. Prints each run's times (the report's own ``times:`` line), its extra
rounds, the ratio candidate over baseline of each pair and of each study, and
what the ratio makes of the baseline's time on the reference machine
(``--reference``, default 20:08).

Each run keeps its log, ``time_breakdown.csv`` and ``summary/scorecard.json``
under ``--out``; its other files (weights, workers' scratch: about 800 MB) go.
Ctrl-C (or SIGTERM) ends the running report and its workers.

Usage: .venv/bin/python benchmarks/budget.py [--baseline debf5ae] [--candidate HEAD]
           [--pairs 1] [--profile quick] [--out outputs/budget] [--reference 20:08]
       .venv/bin/python benchmarks/budget.py --logs A.log B.log [A.log B.log ...]
           (reports already run in that order: baseline, candidate, ...)

``--candidate worktree`` runs this checkout as it is, uncommitted changes included.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fwcompare.suite.report import _mmss as mmss  # the report's own form of a time

ROOT = Path(__file__).resolve().parents[1]
KEEP = ("time_breakdown.csv", "summary/scorecard.json")


def seconds(text: str) -> float:
    """A report's time as it prints it: ``1:22.0``, ``26.5 s`` or ``28:47.3``."""
    text = text.strip().removesuffix(" s")
    minutes, _, rest = text.rpartition(":")
    return (int(minutes) * 60 if minutes else 0) + float(rest)


TIME = r"(\d+:\d\d\.\d|\d+\.\d s)"


def parse_log(text: str) -> dict:
    """A report's log: its ``times:`` line (per study, the notebooks and the
    scorecard, the report), the extra rounds it took and skipped, and its
    busiest other-work share. Refuses a log with no ``times:`` line (a report
    that did not finish)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("times: ")]
    if not lines:
        raise ValueError("no 'times:' line: the report did not finish")
    line = lines[-1].removeprefix("times: ")
    head, _, report = line.rpartition("; report ")
    head = re.sub(r"\([^)]*\)", "", head)  # "(9 and the scorecard's, 2 at a time; ...)"
    parts = {name: seconds(t) for name, t in re.findall(r"([a-z_]+(?: and [a-z_]+)?) " + TIME,
                                                       head)}
    extra = [float(s) for s in re.findall(r": extra round \d+ took (\d+\.\d) s", text)]
    skipped = len(re.findall(r": extra round \d+ for .* not started", text)) + len(
        re.findall(r"^extra rounds: none started", text, re.M))  # the budget spent first
    other = [float(p) for p in re.findall(r"(\d+)%", next(
        (ln for ln in text.splitlines() if ln.startswith("other work while")), ""))]
    return {"parts": parts, "report_s": seconds(report), "extra_s": sum(extra),
            "extra_rounds": len(extra), "extra_skipped": skipped,
            "other_work": max(other) / 100 if other else math.nan}


def summarize(runs: list[dict], reference_s: float) -> str:
    """The runs in order (baseline first in each pair): each pair's ratio of the
    reports' times, with and without the candidate's extra rounds, the studies'
    ratios (median over pairs), and what the ratios make of ``reference_s``."""
    import statistics

    out = ["| run | commit | report | extra rounds | other work |",
           "| --- | --- | --- | --- | --- |"]
    for i, r in enumerate(runs):
        out.append(f"| {i + 1} ({r['role']}) | {r['commit']} | {mmss(r['report_s'])} | "
                   f"{r['extra_rounds']} ({r['extra_s']:.1f} s; {r['extra_skipped']} not "
                   f"started) | {r['other_work']:.0%} |")
    pairs = [(runs[i], runs[i + 1]) for i in range(0, len(runs) - 1, 2)]
    if not pairs:
        return "\n".join(out)
    ratios = [b["report_s"] / a["report_s"] for a, b in pairs]
    base = [(b["report_s"] - b["extra_s"]) / a["report_s"] for a, b in pairs]
    out += ["", "| pair | candidate / baseline | without the candidate's extra rounds |",
            "| --- | --- | --- |"]
    out += [f"| {k + 1} | {r:.3f} | {s:.3f} |" for k, (r, s) in enumerate(zip(ratios, base))]
    names = [n for n in pairs[0][1]["parts"]
             if all(n in a["parts"] and n in b["parts"] for a, b in pairs)]
    out += ["", "| part | baseline | candidate | ratio (median over pairs) |",
            "| --- | --- | --- | --- |"]
    for n in names:
        a = statistics.median(p[0]["parts"][n] for p in pairs)
        b = statistics.median(p[1]["parts"][n] for p in pairs)
        r = statistics.median(p[1]["parts"][n] / p[0]["parts"][n] for p in pairs)
        out.append(f"| {n} | {mmss(a)} | {mmss(b)} | {r:.3f} |")
    new = sorted(n for n in pairs[0][1]["parts"] if n not in names)
    if new:  # a study the baseline lacks (or a part named otherwise)
        took = {n: statistics.median(b["parts"][n] for _, b in pairs if n in b["parts"])
                for n in new}
        out.append("\nin the candidate only: " + ", ".join(f"{n} {mmss(s)}"
                                                          for n, s in took.items()))
    lo, hi = min(ratios), max(ratios)
    out.append(f"\nthe baseline's {mmss(reference_s)} on the reference machine makes the "
               f"candidate's {mmss(lo * reference_s)}" + (
                   f" to {mmss(hi * reference_s)}" if hi > lo else "")
               + f" ({len(pairs)} pair(s); without its extra rounds "
               f"{mmss(min(base) * reference_s)}"
               + (f" to {mmss(max(base) * reference_s)}" if max(base) > min(base) else "")
               + ")")
    return "\n".join(out)


def checkout(commit: str, into: Path) -> tuple[Path, str]:
    """A clone of this repository at ``commit`` (``worktree``: this checkout)."""
    if commit == "worktree":
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        return ROOT, sha + "+worktree"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", commit], check=True)
    sha = subprocess.run(["git", "-C", str(into), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return into, sha


def run_report(tree: Path, profile: str, out: Path, log: Path) -> None:
    """One ``fwcompare report --fresh`` in a session of its own, ended with its
    workers on Ctrl-C or SIGTERM; its bulky files removed after."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "fwcompare", "report", "--profile", profile, "--fresh",
           "--out", str(out)]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    folder = out / profile
    for keep in KEEP:
        if (folder / keep).is_file():
            (out / Path(keep).name).write_bytes((folder / keep).read_bytes())
    shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="debf5ae")
    ap.add_argument("--candidate", default="HEAD")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "budget")
    ap.add_argument("--reference", default="20:08",
                    help="the baseline's report time on the reference machine (M:SS)")
    ap.add_argument("--logs", nargs="+", type=Path,
                    help="report logs already run, baseline first in each pair")
    a = ap.parse_args()
    reference_s = seconds(a.reference)
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    if a.logs:
        runs = [dict(parse_log(p.read_text()), role="baseline" if i % 2 == 0 else "candidate",
                     commit=p.parent.name if p.stem == "report" else p.stem)
                for i, p in enumerate(a.logs)]
        print(summarize(runs, reference_s))
        return
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # ends like Ctrl-C
    a.out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="fwcompare-budget-") as tmp:
        trees = {role: checkout(commit, Path(tmp) / role)
                 for role, commit in (("baseline", a.baseline), ("candidate", a.candidate))}
        for i in range(2 * a.pairs):
            role = "baseline" if i % 2 == 0 else "candidate"
            tree, sha = trees[role]
            out = a.out / f"{i + 1}-{role}-{sha}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            print(f"run {i + 1} of {2 * a.pairs}: {role} {sha}, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
            run_report(tree, a.profile, out, out / "report.log")
            runs.append(dict(parse_log((out / "report.log").read_text()), role=role,
                             commit=sha))
            print(f"  report {mmss(runs[-1]['report_s'])}", flush=True)
    print(summarize(runs, reference_s))


if __name__ == "__main__":
    main()
