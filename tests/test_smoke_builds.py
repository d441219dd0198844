"""tests/smoke.py's bookkeeping, with ``report.build`` replaced: one build per
group, once; a study that failed fails the tests that read it, naming it and
why, and the other studies' tests get their folders."""
import pytest

from fwcompare.suite import report
from fwcompare.studies import STUDIES
from smoke import GROUPS, SmokeReport


@pytest.fixture
def builds(monkeypatch):
    """The builds asked for; a study named ``training`` fails its notebook."""
    calls = []

    def build(profile, out_root, progress, studies, scorecard):
        calls.append((list(studies), scorecard))
        for s in studies:
            if s != "training":
                (out_root / profile / s).mkdir(parents=True, exist_ok=True)
                (out_root / profile / s / ".inputs").write_text("stamp")
        if "training" in studies:
            raise report.ReportError("1 study(ies) failed: training: PapermillExecutionError")
    monkeypatch.setattr(report, "build", build)
    return calls


def test_a_failed_study_fails_its_own_tests_and_no_other(tmp_path, builds):
    smoke = SmokeReport(tmp_path, list(STUDIES))
    with pytest.raises(pytest.fail.Exception,
                       match="the smoke study training failed: .*PapermillExecutionError"):
        smoke.study("training")
    group = next(g for g in GROUPS if "training" in g)
    assert builds == [(list(group), False)]  # its group alone, not judged
    for name in group:
        if name != "training":  # built by the same call, not again
            assert smoke.study(name) == tmp_path / "smoke" / name
    assert len(builds) == 1
    other = next(g for g in GROUPS if "training" not in g)
    assert smoke.study(other[0]) == tmp_path / "smoke" / other[0]
    assert builds[1] == (list(other), False)
    # The whole report: both groups are built already; the scorecard is judged over
    # them once, and a study that failed shows there without failing the index's tests.
    assert smoke.report() == (tmp_path / "smoke", tmp_path / "smoke" / "index.html")
    smoke.report()
    assert builds[2:] == [(list(STUDIES), True)]


def test_a_run_that_reads_some_studies_builds_those_alone(tmp_path, builds):
    smoke = SmokeReport(tmp_path, ["generation"])
    assert smoke.study("generation") == tmp_path / "smoke" / "generation"
    assert builds == [(["generation"], False)]
    with pytest.raises(pytest.fail.Exception, match=r"mark the test @pytest.mark.smoke\('memory'\)"):
        smoke.study("memory")
    with pytest.raises(pytest.fail.Exception, match="the whole smoke report was not built"):
        smoke.report()
