"""The pins agree: pyproject.toml (runtime and the groups `make setup` installs),
environment.yml and requirements.lock, and so do the Python versions they and the
Makefile accept. Each check is a function of file paths, so the tests at the end
can show that it fails on a copy with one thing changed.

requirements.lock is one universal lock (uv) for Python 3.11 and 3.12: a line may
carry a marker (`; python_full_version < '3.12'`) and a package may appear twice, at
two versions under two markers."""
import importlib.util
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from fwcompare.core.paths import ROOT

PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"
LOCK = ROOT / "requirements.lock"
MAKEFILE = ROOT / "Makefile"
# `make check-install`'s reader of pip's report (a script, not a package: loaded by path).
_spec = importlib.util.spec_from_file_location("check_install", ROOT / "tools" / "check_install.py")
check_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_install)
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


def lock_versions(path: Path = LOCK) -> dict[str, dict[str, str]]:
    """name -> {marker: version}; the marker is "" on a line for every platform."""
    versions: dict[str, dict[str, str]] = {}
    for m in filter(None, map(PIN.match, lock_lines(path))):
        versions.setdefault(_name(m[1]), {})[(m[4] or ";")[1:].strip()] = m[3]
    return versions


def disagreements(requirements: list[str], locked: dict[str, dict[str, str]]) -> list[str]:
    """Each pinned requirement the lock does not have at that exact version, on one
    line for every platform and Python version (no marker)."""
    bad = []
    for req in requirements:
        m = PIN.match(req.strip())
        if not m:
            continue  # unpinned: test_every_dependency_is_pinned_exactly names it
        name, version = _name(m[1]), m[3]
        have = locked.get(name)
        if have is None:
            bad.append(f"{req}: not in the lock")
        elif have != {"": version}:
            bad.append(f"{req}: the lock has " + ", ".join(
                f"{name}=={v}" + (f" ; {marker}" if marker else "") for marker, v in have.items()))
    return bad


def local_labels(lines: list[str]) -> list[str]:
    """Pins with a local version label (2.13.0+cpu): only another index serves
    those, and the lock must resolve from PyPI alone."""
    return [line for line in lines if (m := PIN.match(line)) and "+" in m[3]]


# torch's CUDA-only packages: torch's metadata names them, PyPI's build of torch
# brings them and a CPU build none, so the lock leaves them out (the Makefile's
# LOCK_NO_EMIT). nvidia-ml-py, the NVML binding, is a pin of ours, pure Python.
CUDA_ONLY = check_install.CUDA_ONLY


def cuda_only_packages(lines: list[str]) -> list[str]:
    return [line for line in lines if (m := PIN.match(line)) and CUDA_ONLY.match(_name(m[1]))]


def requires_python_versions(path: Path = PYPROJECT) -> list[str]:
    """The 3.x versions pyproject.toml's requires-python admits."""
    spec = SpecifierSet(tomllib.loads(path.read_text())["project"]["requires-python"])
    return [f"3.{minor}" for minor in range(30) if f"3.{minor}" in spec]


def environment_python_versions(path: Path = ENVIRONMENT) -> list[str]:
    """The 3.x versions environment.yml's python (a conda match spec) admits."""
    deps = yaml.safe_load(path.read_text())["dependencies"]
    spec = next(d for d in deps if isinstance(d, str) and re.match(r"python\b", d))
    spec = re.sub(r"^python\s*", "", spec).strip()
    spec = SpecifierSet(f"=={spec[1:]}.*" if re.fullmatch(r"=\d+\.\d+", spec) else spec)
    return [f"3.{minor}" for minor in range(30) if f"3.{minor}" in spec]


def makefile_python_versions(path: Path = MAKEFILE) -> list[str]:
    """PYTHON_VERSIONS: what `make setup` accepts, in the order it tries them."""
    return re.search(r"^PYTHON_VERSIONS := (.*)$", path.read_text(), re.M)[1].split()


def python_disagreements(pyproject: Path = PYPROJECT, environment: Path = ENVIRONMENT,
                         makefile: Path = MAKEFILE) -> list[str]:
    want = requires_python_versions(pyproject)
    return [f"{source} accepts Python {', '.join(have) or 'none'}, requires-python "
            f"{', '.join(want)}" for source, have in [
                ("environment.yml", environment_python_versions(environment)),
                ("the Makefile", sorted(makefile_python_versions(makefile),
                                        key=lambda v: int(v.split(".")[1])))]
            if have != want]


def environment_disagreements(pyproject: Path = PYPROJECT,
                              environment: Path = ENVIRONMENT) -> list[str]:
    ours, theirs = set(map(_norm, pyproject_requirements(pyproject))), set(
        map(_norm, environment_requirements(environment)))
    return [f"only in pyproject.toml: {r}" for r in sorted(ours - theirs)] + [
        f"only in environment.yml: {r}" for r in sorted(theirs - ours)]


def test_environment_yml_matches_pyproject_pins():
    assert not environment_disagreements()


def test_python_versions_agree():
    """pyproject.toml's requires-python, environment.yml's python and the versions
    `make setup` accepts name the same versions: 3.11 and 3.12."""
    assert not python_disagreements()
    assert requires_python_versions() == ["3.11", "3.12"]


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


def test_lock_resolves_from_pypi_alone():
    """No local version label (torch==2.13.0, never 2.13.0+cpu), and none of torch's
    CUDA-only packages; nvidia-ml-py, our NVML pin, is there."""
    assert not local_labels(lock_lines())
    assert not cuda_only_packages(lock_lines())
    assert lock_versions()["torch"] == {"": "2.13.0"}
    assert "nvidia-ml-py" in lock_versions()


def test_the_lock_leaves_out_only_cuda_packages():
    """`make lock` leaves out (--no-emit-package) torch's CUDA-only packages and no
    other: a package of ours left out would be missing from every install."""
    no_emit = re.search(r"^LOCK_NO_EMIT := ((?:.*\\\n)*.*)$", MAKEFILE.read_text(), re.M)[1]
    names = no_emit.replace("\\\n", " ").split()
    assert {"torch", "triton", "cuda-toolkit", "nvidia-cudnn-cu13"} - {"torch"} <= set(names)
    assert [n for n in names if not CUDA_ONLY.match(n)] == []


def test_make_setup_installs_the_lock_then_fwcompare_alone():
    rule = MAKEFILE.read_text().split("$(STAMP): ", 1)[1].split("\n\n", 1)[0]
    first = rule.splitlines()[0]
    assert "requirements.lock" in first  # a changed lock installs again
    assert first.endswith("| python-check")  # the Python check comes first, always
    assert "$(PICK_PYTHON)" in rule  # a new .venv: a supported interpreter, or stop
    assert "pip install --quiet -r requirements.lock" in rule
    assert re.search(r"pip install .*--no-deps.* -e \.", rule)


# What `make setup` does with the interpreters it finds: fake ones, shell scripts
# that print a version, on a PATH of their own, and no .venv (a temporary folder).
def _fake_python(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def _make(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    for name in ("pyproject.toml", "requirements.lock"):  # what the .venv stamp depends on
        (tmp_path / name).touch()
    # Not the calling make's variables: `make test-fast VENV=... PYTHON=...` passes them
    # on in MAKEFLAGS (after " -- ") and in the environment of its commands.
    flags = os.environ.get("MAKEFLAGS", "")
    given = {w.split("=", 1)[0] for w in flags.partition(" -- ")[2].split() if "=" in w}
    outer = {k: v for k, v in os.environ.items()
             if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", *given}}
    return subprocess.run([make, "-s", "-f", str(MAKEFILE), "-C", str(tmp_path), *args,
                           "--eval", "picked: ; @p=$$($(PICK_PYTHON)) && echo $$p"],
                          capture_output=True, text=True, timeout=60,
                          env={**outer, **(env or {}), "PATH": str(tmp_path / "bin")})


def test_make_setup_takes_the_first_supported_python(tmp_path):
    _fake_python(tmp_path / "bin", "python3", "3.13.1")
    _fake_python(tmp_path / "bin", "python3.12", "3.12.4")
    assert _make(tmp_path, "picked").stdout.strip() == "python3.12"
    _fake_python(tmp_path / "bin", "python3.11", "3.11.9")
    assert _make(tmp_path, "picked").stdout.strip() == "python3.11"
    _fake_python(tmp_path / "bin", "python3", "3.12.1")
    assert _make(tmp_path, "picked").stdout.strip() == "python3"


def test_make_setup_stops_without_a_supported_python(tmp_path):
    _fake_python(tmp_path / "bin", "python3", "3.13.1")
    done = _make(tmp_path, "setup")
    assert done.returncode != 0
    assert ("fwcompare needs Python 3.11 or 3.12; python3 is 3.13.1, python3.11 not found, "
            "python3.12 not found.") in done.stderr
    assert not (tmp_path / ".venv").exists()  # stopped before making anything


def test_make_setup_checks_the_python_it_is_given(tmp_path):
    old = _fake_python(tmp_path / "bin", "old", "3.10.14")
    done = _make(tmp_path, "setup", f"PYTHON={old}")
    assert done.returncode != 0 and f"{old} is 3.10.14" in done.stderr
    assert not (tmp_path / ".venv").exists()
    new = _fake_python(tmp_path / "bin", "new", "3.12.2")
    assert _make(tmp_path, "picked", f"PYTHON={new}").stdout.strip() == str(new)


def test_make_refuses_a_venv_of_an_unsupported_python(tmp_path):
    _fake_python(tmp_path / ".venv" / "bin", "python", "3.13.0")
    _fake_python(tmp_path / "bin", "python3", "3.11.9")
    done = _make(tmp_path, "setup")
    assert done.returncode != 0
    assert ".venv is Python 3.13.0; fwcompare needs Python 3.11 or 3.12." in done.stderr


def _fake_df(folder: Path, free_kb: int, tmp_free_kb: int | None = None) -> None:
    """A `df -Pk FOLDER` that reports free_kb kilobytes available, or
    tmp_free_kb for a folder whose name ends in "tmp"."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "df"
    tmp = free_kb if tmp_free_kb is None else tmp_free_kb
    path.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                    f'case "$2" in *tmp) free={tmp};; *) free={free_kb};; esac\n'
                    "echo \"/dev/vda 264000000 1000 $free 99% /\"\n")
    path.chmod(0o755)


def test_make_setup_stops_before_installing_on_a_full_disk(tmp_path):
    """A new venv needs SETUP_MIN_FREE_GB (6) where it goes and SETUP_MIN_TMP_GB
    (2) in $TMPDIR; short of either, make setup names the folder and its free
    space before it makes or downloads anything."""
    _fake_python(tmp_path / "bin", "python3", "3.11.9")
    env = {"TMPDIR": str(tmp_path / "tmp")}
    _fake_df(tmp_path / "bin", 1_900_000)  # 1.9 GB: what the full CI machine had
    done = _make(tmp_path, "setup", env=env)
    assert done.returncode != 0
    assert (f"make setup needs about 6 GB free on the disk of {tmp_path} (a new venv takes"
            in done.stderr and "it has 1 GB" in done.stderr), done.stderr
    assert "making .venv" not in done.stdout  # stopped before making anything
    _fake_df(tmp_path / "bin", 20_000_000, tmp_free_kb=1_500_000)  # room, but not in $TMPDIR
    done = _make(tmp_path, "setup", env=env)
    assert done.returncode != 0 and "making .venv" not in done.stdout
    assert (f"needs about 2 GB free on the disk of {tmp_path / 'tmp'} (pip keeps" in done.stderr
            and "it has 1 GB" in done.stderr and "point TMPDIR at" in done.stderr), done.stderr
    # With room, or with the check off, it goes on to make the venv.
    for free_kb, extra in ((20_000_000, ()), (1_900_000, ("SETUP_MIN_FREE_GB=0",))):
        _fake_df(tmp_path / "bin", free_kb)
        done = _make(tmp_path, "setup", *extra, env=env)
        assert "needs about" not in done.stderr
        assert "making .venv with python3" in done.stdout, (done.stdout, done.stderr)
    bad = _make(tmp_path, "setup", "SETUP_MIN_FREE_GB=0.5", env=env)
    assert bad.returncode != 0 and "whole numbers of GB; got '0.5'" in bad.stderr


def test_make_setup_updating_a_venv_needs_only_the_temporary_room(tmp_path):
    """New pins in an existing venv install only what changed: the new venv's
    6 GB are not asked for, $TMPDIR's room still is."""
    _fake_python(tmp_path / ".venv" / "bin", "python", "3.11.9")
    env = {"TMPDIR": str(tmp_path / "tmp")}
    _fake_df(tmp_path / "bin", 1_900_000, tmp_free_kb=20_000_000)
    done = _make(tmp_path, "setup", env=env)
    assert "needs about" not in done.stderr  # went on to pip (which the fake python is not)
    _fake_df(tmp_path / "bin", 20_000_000, tmp_free_kb=1_900_000)
    done = _make(tmp_path, "setup", env=env)
    assert done.returncode != 0 and "needs about 2 GB free on the disk of" in done.stderr


# The checks above, on copies with one thing broken: each must fail.
def _copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, old
    target = tmp_path / source.name
    target.write_text(text.replace(old, new, 1))
    return target


def _lock_line(name: str) -> str:
    return next(line for line in lock_lines() if _name(line.split("==")[0]) == name)


def test_lock_checks_fail_on_a_local_label_or_a_cuda_package(tmp_path):
    line = _lock_line("torch")
    broken = lock_lines(_copy(tmp_path, LOCK, f"\n{line}\n",
                              f"\n{line}+cpu\nnvidia-cublas==13.1.1.3 ; sys_platform == 'linux'\n"))
    assert local_labels(broken) == ["torch==2.13.0+cpu"]
    assert cuda_only_packages(broken) == ["nvidia-cublas==13.1.1.3 ; sys_platform == 'linux'"]
    assert disagreements(pyproject_requirements(), lock_versions(_copy(
        tmp_path, LOCK, f"\n{line}\n", f"\n{line}+cpu\n")))


def test_lock_checks_fail_on_a_pin_under_a_marker(tmp_path):
    """A pin of ours on a line for one Python version only is missing on the other."""
    line = _lock_line("pandas")
    broken = lock_versions(_copy(tmp_path, LOCK, f"\n{line}\n",
                                 f"\n{line} ; python_full_version < '3.12'\n"))
    assert [d for d in disagreements(pyproject_requirements(), broken) if "pandas" in d]


def test_lock_versions_keep_both_lines_of_a_package(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("soupsieve==2.10 ; python_full_version < '3.11.5'\n    # via x\n"
                    "soupsieve==4.1.2 ; python_full_version >= '3.11.5'\n")
    assert lock_versions(lock) == {"soupsieve": {"python_full_version < '3.11.5'": "2.10",
                                                 "python_full_version >= '3.11.5'": "4.1.2"}}


def _report(*packages: tuple[str, str, list[str]]) -> dict:
    return {"install": [{"metadata": {"name": name, "version": version, "requires_dist": requires},
                         "download_info": {"url": f"https://files.pythonhosted.org/{name}.whl"}}
                        for name, version, requires in packages]}


def test_check_install_accepts_the_lock_and_the_cuda_packages_torch_brings(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("filelock==3.20.0\n    # via torch\ntorch==2.13.0\n"
                    "colorama==0.4.6 ; sys_platform == 'win32'\n")
    resolution = check_install.Resolution(_report(
        ("torch", "2.13.0", ["filelock", "cuda-toolkit[cublas]==13.0.3; sys_platform == 'linux'"]),
        ("filelock", "3.20.0", []),
        ("cuda-toolkit", "13.0.3.0", ["nvidia-cublas==13.1.1.3.*; extra == 'cublas'"]),
        ("nvidia-cublas", "13.1.1.3", [])), check_install.lock_pins(lock))
    assert resolution.failures == []
    assert resolution.cuda == ["cuda-toolkit", "nvidia-cublas"]
    assert resolution.left_out == ["colorama"]


@pytest.mark.parametrize("change, failure", [
    (("filelock", "3.19.1", []), "differs from the lock: filelock 3.19.1 (the lock: 3.20.0)"),
    (("nvidia-ml-py", "13.615.71", []), "not in the lock and not a CUDA package of torch: "
                                         "nvidia-ml-py 13.615.71"),
    (("nvidia-nccl-cu12", "2.27.3", []), "not in the lock and not a CUDA package of torch: "
                                         "nvidia-nccl-cu12 2.27.3"),
    (None, "in the lock for every platform but not resolved: filelock"),
])
def test_check_install_fails_where_the_resolution_is_not_the_lock(tmp_path, change, failure):
    lock = tmp_path / "requirements.lock"
    lock.write_text("filelock==3.20.0\ntorch==2.13.0\n")
    packages = {"torch": ("torch", "2.13.0", ["filelock"]), "filelock": ("filelock", "3.20.0", [])}
    if change is None:
        del packages["filelock"]
    else:
        packages[change[0]] = change
    resolution = check_install.Resolution(_report(*packages.values()),
                                          check_install.lock_pins(lock))
    assert resolution.failures == [failure]


@pytest.mark.parametrize("source, old, new", [
    (PYPROJECT, 'requires-python = ">=3.11,<3.13"', 'requires-python = ">=3.11,<3.14"'),
    (ENVIRONMENT, "python>=3.11,<3.13", "python=3.11"),
    (MAKEFILE, "PYTHON_VERSIONS := 3.11 3.12", "PYTHON_VERSIONS := 3.11"),
])
def test_python_check_fails_on_a_changed_version_list(tmp_path, source, old, new):
    broken = _copy(tmp_path, source, old, new)
    files = {PYPROJECT.name: PYPROJECT, ENVIRONMENT.name: ENVIRONMENT, MAKEFILE.name: MAKEFILE,
             source.name: broken}
    assert python_disagreements(files["pyproject.toml"], files["environment.yml"],
                                files["Makefile"])


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
    assert all(int(v.split(".")[0]) < 5 for v in lock_versions()["transformers"].values())


def test_rows_record_fwcompare_own_commit_never_an_enclosing_repository(tmp_path):
    """A copy of fwcompare unpacked inside another git repository records
    "unknown", not that repository's commit; the top of a checkout records
    its HEAD and whether tracked files changed."""
    import subprocess

    from fwcompare.core.env import git_info

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
