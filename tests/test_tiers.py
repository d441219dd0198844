"""The tiers' guard (tests/tiers.py) holds: a fast test that starts a worker,
forks or loads a framework it does not name fails, saying which marker it
needs; a marked one may."""
import subprocess
import sys

import pytest

INI = """[pytest]
markers =
    slow: starts processes
    report: papermill
    gpu: a GPU
    frameworks(*names): named frameworks
"""


def test_a_fast_test_may_run_a_tool_that_is_not_python():
    out = subprocess.run(["git", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("git version")


@pytest.mark.slow
def test_a_slow_test_may_start_one():
    r = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
    assert r.stdout.strip() == "42"


@pytest.mark.slow  # its own session's marked test starts an interpreter
def test_the_guard_fails_fast_tests_that_break_the_rule_even_when_they_hide_it(pytester):
    """Run as pytest would run them: a fast test that swallows the guard's
    error still fails at teardown; one that forks fails; a test that loads a
    framework it does not name fails; the same tests marked pass."""
    pytester.makeini(INI)
    pytester.makeconftest("pytest_plugins = ['tiers']")
    pytester.makepyfile(test_inner="""
        import os, subprocess, sys
        import pytest

        def test_starts_a_worker_and_hides_it():
            try:  # as the runner starts one
                subprocess.Popen([sys.executable, "-m", "fwcompare.commands.worker", "x.json"])
            except Exception:
                pass

        def test_forks():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

        def test_loads_a_framework_unnamed():
            import types
            sys.modules["jax"] = types.ModuleType("jax")  # as an import would leave it

        @pytest.mark.frameworks("jax")
        def test_loads_a_framework_named():
            import types
            sys.modules["flax"] = types.ModuleType("flax")

        @pytest.mark.slow
        def test_marked_slow():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    """)
    saved = {m: sys.modules.pop(m) for m in ("jax", "flax") if m in sys.modules}
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist",
                                              "-p", "no:timeout")
    finally:
        for m in ("jax", "flax"):
            sys.modules.pop(m, None)
        sys.modules.update(saved)
    outcomes = result.parseoutcomes()
    # passed: the three that break no rule, and the two whose rule breaking is
    # found at teardown (an error each)
    assert outcomes.get("passed") == 4 and outcomes.get("errors") == 2, outcomes
    assert outcomes.get("failed") == 1, outcomes
    text = result.stdout.str()
    assert "ERROR at teardown of test_starts_a_worker_and_hides_it" in text
    assert "a fast test started a Python process" in text
    assert "FAILED test_inner.py::test_forks" in text and "forked a process" in text
    assert "ERROR at teardown of test_loads_a_framework_unnamed" in text
    assert "@pytest.mark.frameworks('jax')" in text
