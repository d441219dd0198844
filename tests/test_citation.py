"""CITATION.cff is valid Citation File Format 1.2.0 and agrees with pyproject.toml
and LICENSE (the keys and types the CFF 1.2.0 schema requires; `cffconvert
--validate` checks the whole schema)."""
import datetime
import re
import tomllib

import yaml

from fwcompare.core.paths import ROOT

REQUIRED = {"cff-version": str, "message": str, "title": str, "authors": list}


def _cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def test_citation_has_the_keys_cff_1_2_0_requires():
    cff = _cff()
    for key, kind in REQUIRED.items():
        assert isinstance(cff.get(key), kind) and cff[key], key
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software"
    for author in cff["authors"]:  # a person has family-names, an entity a name
        assert author.get("name") or author.get("family-names"), author
    assert cff["authors"] == [{"name": "The fwcompare developers"}]
    datetime.date.fromisoformat(cff["date-released"])  # a string: YAML's date would not validate
    assert len(re.findall(r"[.!?](\s|$)", cff["abstract"].strip())) == 2  # two sentences


def test_citation_version_and_licence_match_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cff = _cff()
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"] == "Apache-2.0"
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License\n" in licence and "Version 2.0, January 2004" in licence
    assert licence.startswith("Copyright 2026 the fwcompare developers\n")
