"""The smoke report for the tests: every study a run's tests read, measured and
its notebook run once, the first time a test asks for one.

The studies the collected tests read (their ``smoke`` markers; a test that
names none reads the whole report, scorecard and index included) are built
in one ``report.build``, as ``make report`` builds them: the frameworks'
fork servers started once, the notebooks side by side. So ``pytest -k
generation`` builds the generation study alone, and the whole file the whole
report. A study whose measuring or notebook fails fails the tests that read
it, each naming it (the report goes on with the others, and its index says
so); the tests of the other studies pass.

Under pytest-xdist the tests of one file share a test process (``make test``'s
``--dist loadfile``); a file lock keeps the build to one process all the same
if a test of another file asks for it (pytest-xdist's recipe for a session
fixture run once).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from filelock import FileLock

from fwcompare import report
from fwcompare.studies import STUDIES

PROFILE = "smoke"


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

    def _built(self) -> dict[str, str]:
        """Build once (every test process of the run sees the same folder);
        each failed study and why."""
        failures = self.root / "failures.json"
        with FileLock(str(self.root / ".build.lock")):
            if not failures.is_file():
                failed: dict[str, str] = {}
                try:
                    report.build(PROFILE, out_root=self.root, progress=False,
                                 studies=self.studies,
                                 scorecard=self.studies == list(STUDIES))
                except report.ReportError as exc:  # the others and the index were written
                    failed = {s: str(exc) for s in self.studies
                              if not (self.out / s / ".inputs").is_file()}
                    failed = failed or {"summary": str(exc)}
                except Exception as exc:  # noqa: BLE001: every test that reads it says so
                    failed = {s: f"{type(exc).__name__}: {exc}" for s in [*self.studies,
                                                                           "summary"]}
                failures.write_text(json.dumps(failed))
        return json.loads(failures.read_text())

    def study(self, name: str) -> Path:
        """The folder of study ``name``'s smoke run (results, figures, page);
        a study that failed fails the test, naming it."""
        if name not in self.studies:
            pytest.fail(f"smoke study {name} is not among this run's ({self.studies}): "
                        f"mark the test @pytest.mark.smoke({name!r})", pytrace=False)
        why = self._built().get(name)
        if why is not None:
            pytest.fail(f"the smoke study {name} failed: {why}", pytrace=False)
        return self.out / name

    def report(self) -> tuple[Path, Path]:
        """(the profile's folder, its index.html): the whole report, the
        scorecard included; a failed study shows there as failed."""
        if self.studies != list(STUDIES):
            pytest.fail("the whole smoke report was not built in this run: mark the test "
                        "@pytest.mark.smoke()", pytrace=False)
        why = self._built().get("summary")
        if why is not None:
            pytest.fail(f"the smoke report's scorecard failed: {why}", pytrace=False)
        return self.out, self.out / "index.html"


def shared_root(tmp_path_factory, config) -> Path:
    """A folder every test process of this run shares (pytest-xdist's
    workers each have a base folder of their own, under a shared one)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if hasattr(config, "workerinput") else base) / "smoke-report"
