import tomllib

import yaml

from fwcompare.paths import ROOT


def _norm(req: str) -> str:
    return req.replace("_", "-").lower().replace(" ", "")


def test_environment_yml_matches_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(map(_norm, project["dependencies"])) == sorted(map(_norm, pip))
    assert "python=3.11" in env["dependencies"]


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    loose = [d for d in project["dependencies"] if "==" not in d]
    assert not loose, loose


def test_transformers_keeps_tensorflow_and_flax_classes():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = next(d for d in project["dependencies"] if d.startswith("transformers=="))
    assert int(pin.split("==")[1].split(".")[0]) < 5


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
