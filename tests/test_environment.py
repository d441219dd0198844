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
