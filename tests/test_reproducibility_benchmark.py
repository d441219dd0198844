"""benchmarks/reproducibility.py --scorecards: two whole reports' verdicts
compared (the gpu profile's runs, one per session on a lent GPU)."""
import json
import subprocess
import sys

import pytest

from conftest import benchmark

from fwcompare.core.paths import ROOT


def _card(path, claims):
    path.mkdir(parents=True)
    (path / "scorecard.json").write_text(json.dumps({"profile": "gpu", "claims": [
        {"id": i, "value": v, "ci_low": lo, "ci_high": hi, "verdict": verdict,
         "note": "", "host_load": None, "metric": "time_ratio", "has_ci": lo is not None}
        for i, v, lo, hi, verdict in claims]}))
    return path / "scorecard.json"


@pytest.mark.slow
def test_scorecards_of_two_runs_are_compared_on_the_claims_both_judged(tmp_path):
    (tmp_path / "time_breakdown.csv").write_text("phase,seconds\nsampling,1000\nnotebooks,190.5\n")
    a = _card(tmp_path / "a", [("x", 1.30, 1.20, 1.40, "supported"),
                               ("y", 0.90, 0.80, 1.05, "inconclusive"),
                               ("z", 2.00, 1.90, 2.10, "supported"),
                               ("w", None, None, None, "not measured here")])
    b = _card(tmp_path / "b", [("x", 1.35, 1.25, 1.45, "supported"),
                               ("y", 0.70, 0.65, 0.75, "contradicted"),
                               ("w", 1.0, 0.9, 1.1, "supported")])
    r = subprocess.run([sys.executable, "benchmarks/reproducibility.py", "--scorecards",
                        str(a), str(b)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    # each report's own figures (issue 81's bars): a's time from no breakdown, its
    # three judged claims, two decided, half-widths 7.7%, 13.9% and 5.0%
    assert (f"{tmp_path}: report 19:50.5 (within 20:00: yes); decided 2 of 3 judged (67%); "
            "median half-width of 3 timed intervals 7.7%; extra rounds 0; decided without "
            "an interval or an exact figure 0") in r.stdout, r.stdout
    # x and y judged in both (z only in a, w not measured in a): x covers both ways,
    # y's 0.70 lies outside a's [0.80, 1.05] and 0.90 outside b's [0.65, 0.75]
    assert ("claims judged in every run: 2; verdict changed: 1; run pairs flipping "
            "supported <-> contradicted: 0; a run's interval covers another run's value: "
            "2 of 4 (50%); calibrated intervals with nothing moving between runs: about 3.2 "
            "(81%)") in r.stdout, r.stdout
    # a card named otherwise in the same folder, from before rows had host_load
    doc = json.loads(b.read_text())
    for row in doc["claims"]:
        del row["host_load"]
    (tmp_path / "a" / "b.json").write_text(json.dumps(doc))
    again = subprocess.run([sys.executable, "benchmarks/reproducibility.py", "--scorecards",
                            str(a), str(tmp_path / "a" / "b.json")], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "covers another run's value: 2 of 4 (50%)" in again.stdout, again.stdout
    one = subprocess.run([sys.executable, "benchmarks/reproducibility.py", "--scorecards",
                          str(a)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert one.returncode == 2 and "two or more" in one.stderr


def test_calibrated_intervals_of_one_width_hold_each_others_values_83_percent_of_the_time():
    """The yardstick beside a coverage count: a run's calibrated 95% interval
    holds another run's value of the same quantity with probability
    2 Phi(1.96 / sqrt 2) - 1 = 0.834, since that value has an error of its own;
    checked against constructed runs too."""
    import numpy as np

    cover = benchmark("reproducibility").no_drift_cover
    a = {"value": 1.0, "ci_low": np.exp(-0.05), "ci_high": np.exp(0.05)}
    assert abs(cover(a, dict(a, value=1.1)) - 0.834) < 0.001
    assert abs(cover(a, {"value": 1.0, "ci_low": np.nan, "ci_high": np.nan}) - 0.834) < 0.001
    narrow = {"value": 1.0, "ci_low": np.exp(-0.005), "ci_high": np.exp(0.005)}
    assert cover(a, narrow) > 0.94 and cover(narrow, a) < 0.2  # a precise b lands inside a
    assert cover(dict(a, ci_low=1.0, ci_high=1.0), narrow) == 0.0  # zero width holds nothing
    rng = np.random.default_rng(0)  # two runs, their figures normal in the log, sd 0.05/1.96
    x = rng.normal(0, 0.05 / 1.96, (2, 20000))
    held = np.mean(np.abs(x[1] - x[0]) <= 0.05)
    assert abs(held - 0.834) < 0.01
