"""The pins agree: pyproject.toml (runtime and the groups `make setup` installs),
environment.yml and requirements.lock. Each check is a function of file paths, so
the tests at the end can show that it fails on a copy with one pin changed."""
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from fwcompare.paths import ROOT

PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"
LOCK = ROOT / "requirements.lock"
# The optional groups the lock covers: `make setup` installs them (`make test` and
# `make lab` need them). The gpu group is resolved on a GPU machine, not locked here.
LOCKED_GROUPS = ("test", "lab")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;=<>!~,]+)\s*(;.*)?$")


def _norm(req: str) -> str:
    return req.replace("_", "-").lower().replace(" ", "")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements(path: Path = PYPROJECT) -> list[str]:
    """The runtime dependencies and those of the locked groups."""
    project = tomllib.loads(path.read_text())["project"]
    groups = project.get("optional-dependencies", {})
    return [*project["dependencies"], *(r for g in LOCKED_GROUPS for r in groups.get(g, []))]


def environment_requirements(path: Path = ENVIRONMENT) -> list[str]:
    env = yaml.safe_load(path.read_text())
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def lock_lines(path: Path = LOCK) -> list[str]:
    """The lock's requirement lines, comments and blank lines left out."""
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def loose_lines(lines: list[str]) -> list[str]:
    """Lines that are not one package at one exact version."""
    return [line for line in lines if not PIN.match(line)]


def lock_versions(path: Path = LOCK) -> dict[str, str]:
    return {_name(m[1]): m[3] for m in map(PIN.match, lock_lines(path)) if m}


def disagreements(requirements: list[str], locked: dict[str, str]) -> list[str]:
    """Each pinned requirement the lock does not have at that exact version (a
    local build of it, torch's 2.13.0+cpu for 2.13.0, counts as that version)."""
    bad = []
    for req in requirements:
        m = PIN.match(req.strip())
        if not m:
            continue  # unpinned: test_every_dependency_is_pinned_exactly names it
        name, version = _name(m[1]), m[3]
        have = locked.get(name)
        if have is None:
            bad.append(f"{req}: not in the lock")
        elif have != version and not have.startswith(version + "+"):
            bad.append(f"{req}: the lock has {name}=={have}")
    return bad


def environment_disagreements(pyproject: Path = PYPROJECT,
                              environment: Path = ENVIRONMENT) -> list[str]:
    ours, theirs = set(map(_norm, pyproject_requirements(pyproject))), set(
        map(_norm, environment_requirements(environment)))
    return [f"only in pyproject.toml: {r}" for r in sorted(ours - theirs)] + [
        f"only in environment.yml: {r}" for r in sorted(theirs - ours)]


def test_environment_yml_matches_pyproject_pins():
    assert not environment_disagreements()
    assert "python=3.11" in yaml.safe_load(ENVIRONMENT.read_text())["dependencies"]


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    every = [*project["dependencies"], *(r for group in project["optional-dependencies"].values()
                                         for r in group)]
    loose = [d for d in every if "==" not in d]
    assert not loose, loose


def test_tests_and_lab_are_groups_not_runtime_dependencies():
    """pytest, Selenium and JupyterLab are only for `make test` and `make lab`."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    runtime = {_name(PIN.match(r)[1]) for r in project["dependencies"]}
    assert not runtime & {"pytest", "selenium", "jupyterlab"}
    groups = project["optional-dependencies"]
    assert {_name(PIN.match(r)[1]) for r in groups["test"]} >= {"pytest", "selenium"}
    assert {_name(PIN.match(r)[1]) for r in groups["lab"]} >= {"jupyterlab"}


def test_lock_pins_every_package_exactly():
    lines = lock_lines()
    assert len(lines) > len(pyproject_requirements()), "the lock lacks the packages under the pins"
    assert not loose_lines(lines)


def test_lock_has_every_pyproject_pin():
    assert not disagreements(pyproject_requirements(), lock_versions())


def test_lock_has_every_environment_yml_pin():
    assert not disagreements(environment_requirements(), lock_versions())


def test_make_setup_installs_the_lock_then_fwcompare_alone():
    rule = (ROOT / "Makefile").read_text().split("$(STAMP): ", 1)[1].split("\n\n", 1)[0]
    assert "requirements.lock" in rule.splitlines()[0]  # a changed lock installs again
    assert "pip install --quiet -r requirements.lock" in rule
    assert re.search(r"pip install .*--no-deps.* -e \.", rule)


# The checks above, on copies with one thing broken: each must fail.
def _copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, old
    target = tmp_path / source.name
    target.write_text(text.replace(old, new, 1))
    return target


def _lock_line(name: str) -> str:
    return next(line for line in lock_lines() if _name(line.split("==")[0]) == name)


@pytest.mark.parametrize("name", ["transformers", "submitit", "pytest"])
def test_lock_checks_fail_on_a_changed_version(tmp_path, name):
    line = _lock_line(name)
    broken = lock_versions(_copy(tmp_path, LOCK, f"\n{line}", f"\n{line}.post9"))
    assert disagreements(pyproject_requirements(), broken)
    assert disagreements(environment_requirements(), broken)


def test_lock_checks_fail_on_a_missing_package(tmp_path):
    line = _lock_line("platformdirs")
    broken = lock_versions(_copy(tmp_path, LOCK, f"\n{line}\n", "\n"))
    assert [d for d in disagreements(pyproject_requirements(), broken) if "platformdirs" in d]
    assert disagreements(environment_requirements(), broken)


@pytest.mark.parametrize("loose", ["{name}", "{name}>={version}", "{name}==", "-e ."])
def test_lock_checks_fail_on_an_unpinned_line(tmp_path, loose):
    name, version = _lock_line("numpy").split("==")
    broken = _copy(tmp_path, LOCK, f"\n{name}=={version}", "\n" + loose.format(
        name=name, version=version))
    assert loose_lines(lock_lines(broken))


def test_lock_checks_fail_on_a_changed_pyproject_pin(tmp_path):
    broken = _copy(tmp_path, PYPROJECT, '"selenium==', '"selenium==0.')
    assert disagreements(pyproject_requirements(broken), lock_versions())
    assert environment_disagreements(broken, ENVIRONMENT)


def test_environment_check_fails_on_a_changed_environment_yml_pin(tmp_path):
    broken = _copy(tmp_path, ENVIRONMENT, "- jupyterlab==", "- jupyterlab==0.")
    assert environment_disagreements(PYPROJECT, broken)
    assert disagreements(environment_requirements(broken), lock_versions())


def test_transformers_keeps_tensorflow_and_flax_classes():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pin = next(d for d in project["dependencies"] if d.startswith("transformers=="))
    assert int(pin.split("==")[1].split(".")[0]) < 5
    assert int(lock_versions()["transformers"].split(".")[0]) < 5


def test_rows_record_fwcompare_own_commit_never_an_enclosing_repository(tmp_path):
    """A copy of fwcompare unpacked inside another git repository records
    "unknown", not that repository's commit; the top of a checkout records
    its HEAD and whether tracked files changed."""
    import subprocess

    from fwcompare.env import git_info

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c",
                               "user.name=t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("commit", "-qm", "outer")
    inner = tmp_path / "fwcompare-copy"
    inner.mkdir()
    assert git_info(inner) == {"git_commit": "unknown", "git_dirty": False}
    assert git_info(tmp_path) == {"git_commit": git("rev-parse", "HEAD"), "git_dirty": False}
    (tmp_path / "a.txt").write_text("b")
    assert git_info(tmp_path)["git_dirty"] is True


def test_the_gpu_group_pins_the_same_framework_versions():
    """`pip install -e ".[gpu]"` adds the CUDA builds of the pinned versions:
    a GPU extra of another version would not install beside the pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(_norm(d).split("==") for d in project["dependencies"])
    gpu = project["optional-dependencies"]["gpu"]
    assert gpu, "no gpu group"
    for req in map(_norm, gpu):
        name, version = req.split("==")
        assert pins[name.split("[")[0]] == version, req
