"""The smoke report for the tests: every study a run's tests read, measured and
its notebook run once, the first time a test asks for one.

The studies the collected tests read (their ``smoke`` markers; a test that
names none reads the whole report, scorecard and index included) are built
as ``make report`` builds them: the frameworks' fork servers started once per
build, the notebooks side by side. So ``pytest -k generation`` builds the
generation study alone, and the whole suite the whole report. A study whose
measuring or notebook fails fails the tests that read it, each naming it (the
report goes on with the others, and its index says so); the tests of the
other studies pass.

The studies come in two :data:`GROUPS`, one build each, whose tests sit in
two files (``test_smoke_report.py`` and ``test_smoke_studies.py``): under
pytest-xdist (``make test``'s ``--dist loadfile``) the two builds run in two
test processes at once. The whole report's tests then judge the scorecard
over both groups' folders, measuring nothing again. A file lock per group
keeps each build to one process (pytest-xdist's recipe for a session fixture
run once).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from filelock import FileLock
from PIL import Image

from fwcompare import load_results
from fwcompare.suite import report
from fwcompare.suite.params import load_file
from fwcompare.core.paths import PARAMS
from fwcompare.studies import STUDIES

PROFILE = "smoke"
# The studies of each build. The first is the longer (measured at one thread, as a
# test process of make test has one core: 397 s against 296 s; 11:07 and 5:57 to
# build: docs/measurements.md, 2026-12-06, Intel Xeon): its file, which also holds the
# whole report's tests, starts first, and the other test process runs the rest of the
# suite after the shorter build.
GROUPS = (("deployment", "memory", "generation", "end_to_end"),
          ("acceleration", "distributed", "mixed_precision", "inference_sweep", "training"))
assert sorted(s for g in GROUPS for s in g) == sorted(STUDIES), "every study in one group"


def needed(items) -> list[str]:
    """The studies the collected tests read, in the report's order (a
    ``smoke`` marker without names: every study)."""
    names: set[str] = set()
    for item in items:
        for mark in item.iter_markers("smoke"):
            names |= set(mark.args) or set(STUDIES)
    return [s for s in STUDIES if s in names]


class SmokeReport:
    def __init__(self, root: Path, studies: list[str]):
        self.root = Path(root)
        self.studies = studies or list(STUDIES)
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def out(self) -> Path:
        """The profile's folder: a folder per study, the scorecard, index.html."""
        return self.root / PROFILE

    def _build(self, name: str, studies: list[str], scorecard: bool) -> dict[str, str]:
        """Build ``studies`` once (every test process of the run sees the same
        folder, under the lock ``name``); each failed study and why."""
        failures = self.root / f"failures-{name}.json"
        with FileLock(str(self.root / f".{name}.lock")):
            if not failures.is_file():
                failed: dict[str, str] = {}
                try:
                    report.build(PROFILE, out_root=self.root, progress=False,
                                 studies=studies, scorecard=scorecard)
                except report.ReportError as exc:  # the others and the index were written
                    failed = {s: str(exc) for s in studies
                              if not (self.out / s / ".inputs").is_file()}
                    failed = failed or {"summary": str(exc)}
                except Exception as exc:  # noqa: BLE001: every test that reads it says so
                    failed = {s: f"{type(exc).__name__}: {exc}" for s in [*studies, "summary"]}
                failures.write_text(json.dumps(failed))
        return json.loads(failures.read_text())

    def _group(self, i: int) -> dict[str, str]:
        """Build group ``i`` (the studies of it this run reads), not judged."""
        return self._build(f"group{i}", [s for s in GROUPS[i] if s in self.studies], False)

    def study(self, name: str) -> Path:
        """The folder of study ``name``'s smoke run (results, figures, page);
        a study that failed fails the test, naming it."""
        if name not in self.studies:
            pytest.fail(f"smoke study {name} is not among this run's ({self.studies}): "
                        f"mark the test @pytest.mark.smoke({name!r})", pytrace=False)
        why = self._group(next(i for i, g in enumerate(GROUPS) if name in g)).get(name)
        if why is not None:
            pytest.fail(f"the smoke study {name} failed: {why}", pytrace=False)
        return self.out / name

    def report(self) -> tuple[Path, Path]:
        """(the profile's folder, its index.html): the whole report, the
        scorecard included; a failed study shows there as failed."""
        if self.studies != list(STUDIES):
            pytest.fail("the whole smoke report was not built in this run: mark the test "
                        "@pytest.mark.smoke()", pytrace=False)
        for i in range(len(GROUPS)):
            self._group(i)
        # every study measured and rendered by now: this judges the scorecard, runs its
        # page and writes the index (a failed study is tried again, and shows as failed)
        why = self._build("summary", self.studies, True).get("summary")
        if why is not None:
            pytest.fail(f"the smoke report's scorecard failed: {why}", pytrace=False)
        return self.out, self.out / "index.html"


def shared_root(tmp_path_factory, config) -> Path:
    """A folder every test process of this run shares (pytest-xdist's
    workers each have a base folder of their own, under a shared one)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if hasattr(config, "workerinput") else base) / "smoke-report"


# -- what the tests of both files check ------------------------------------------------
def each(studies) -> list:
    """Parameters of a test run once per study, each marked with the study it reads."""
    return [pytest.param(s, marks=pytest.mark.smoke(s)) for s in studies]


def results_and_params(smoke, study):
    """A smoke study's stored results and the params file it ran with."""
    return load_results(smoke.study(study)), load_file(PARAMS / study / "smoke.yaml")


def n_variants(p):
    """Framework/mode pairs of a params file."""
    return sum(len(p["modes"][fw]) for fw in p["frameworks"])


FIGURES = {"inference_sweep": ("latency", "speed_ratio", "throughput", "peak_memory"),
           "training": ("loss_agreement", "step_time", "speed_ratio", "throughput",
                        "peak_memory"),
           "mixed_precision": ("speed_vs_error", "loss_by_precision", "loss_scale"),
           "acceleration": ("speedup_heatmaps", "time_to_first_result", "breakeven",
                            "recompilations"),
           "distributed": ("scaling_throughput", "scaling_efficiency", "allreduce_share"),
           "deployment": ("speed_vs_error", "size_and_load"),
           "generation": ("latency", "throughput", "compile_cost"),
           "memory": ("memory_breakdown", "memory_vs_time", "largest_batch")}
PAGE_SAYS = {"inference_sweep": "Equivalence gate", "training": "Loss agreement",
             "mixed_precision": "Training stability, defined",
             "acceleration": "Breakeven calls",
             "distributed": "Do all workers train the same model?"}


def renders_page_and_figures(smoke: "SmokeReport", name: str) -> None:
    """A study's smoke run through its notebook: its page, and every figure as
    PNG, SVG, the CSV of what it draws and its caption (hardware and
    versions, not a file name), which the page shows."""
    study = smoke.study(name)
    html = (study / f"{name}.html").read_text()
    assert "run_study(" not in html  # code hidden
    assert not list(study.glob(".*.running.ipynb"))
    if name in PAGE_SAYS:
        assert PAGE_SAYS[name] in html
    for fig in FIGURES.get(name, ()):
        png = study / "figures" / f"{fig}.png"
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG", png
    pngs = list((study / "figures").glob("*.png"))
    assert pngs, f"{name} drew no figure"
    for png in pngs:
        stem = png.name[:-4]
        assert min(Image.open(png).info["dpi"]) >= 199.5, png
        assert "<svg" in png.with_suffix(".svg").read_text()[:2000], png
        drawn = pd.read_csv(png.with_suffix(".csv"))
        assert len(drawn) and drawn[["x", "y", "value", "y_low"]].notna().any().any(), png
        cap = (study / "figures" / f"{stem}.caption.txt").read_text().strip()
        assert "torch " in cap and "cores" in cap, (png, cap)


def has_its_share_of_the_peak(smoke: "SmokeReport", study: str) -> None:
    """Every study's run measured the machine's ceilings with the frameworks'
    own matmuls (env.json), every measured row has pct_of_peak = 100 x
    achieved FLOP/s / its precision's ceiling, and every study drew a roofline."""
    res = load_results(smoke.study(study))
    peak = res.manifest["peak"]
    assert peak["flops_per_s"]["float32"] > 1e9, peak  # a real CPU's matmul
    assert peak["bandwidth_bytes_per_s"] > 1e9, peak
    assert {"torch", "tensorflow"} <= set(peak["frameworks"]), (study, peak["frameworks"])
    df = res.results[res.results["status"].isin(["ok", "not_equivalent"])]
    ceiling = df["dtype"].map(peak["flops_per_s"])
    assert df["pct_of_peak"].notna().all(), (study, df[["dtype", "pct_of_peak"]])
    assert np.allclose(df["pct_of_peak"], 100 * df["achieved_flops_per_s"] / ceiling)
    # INT8 paths (deployment) run integer kernels that can beat the float32
    # matmul's ceiling (147% seen on 2026-11-25): only above 0 for them.
    fp = df[~df["mode"].astype(str).str.contains("int8")]
    assert (df["pct_of_peak"] > 0).all() and (fp["pct_of_peak"] < 100).all(), \
        (study, df["pct_of_peak"].describe())
    assert (df["bytes_per_call"] > 0).all(), study
    assert (smoke.study(study) / "figures" / "roofline.png").stat().st_size > 10_000
