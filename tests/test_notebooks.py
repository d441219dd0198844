"""The notebook contract: thin, committed without outputs, parameters in sync."""
import ast
import json

import pytest
import yaml

from fwcompare.suite import params
from fwcompare.core.paths import NOTEBOOKS, PARAMS
from fwcompare.studies import STUDIES


NOTEBOOK_FILES = sorted(f.name for f in NOTEBOOKS.glob("*.ipynb"))


def load(study):
    return json.loads((NOTEBOOKS / STUDIES[study].notebook).read_text())


def load_file(name):
    return json.loads((NOTEBOOKS / name).read_text())


def test_every_notebook_is_a_study_or_the_scorecard():
    assert set(NOTEBOOK_FILES) == {s.notebook for s in STUDIES.values()} | {"summary.ipynb"}


def parameters_cell(nb):
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    return "".join(tagged[0]["source"])


@pytest.mark.parametrize("name", NOTEBOOK_FILES)
def test_committed_without_outputs(name):
    for cell in load_file(name)["cells"]:
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None


@pytest.mark.parametrize("study", list(STUDIES))
def test_parameters_cell_matches_schema_defaults(study):
    tree = ast.parse(parameters_cell(load(study)))
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign)}
    expected = {**params.defaults(study), **params.RUNTIME_KEYS}
    assert values == expected


@pytest.mark.parametrize("name", NOTEBOOK_FILES)
def test_every_parameter_has_a_help_comment(name):
    for line in parameters_cell(load_file(name)).splitlines():
        if "=" in line and not line.startswith("#"):
            assert "  # " in line, line


@pytest.mark.parametrize("name", NOTEBOOK_FILES)
def test_notebook_is_thin(name):
    for cell in load_file(name)["cells"]:
        if cell["cell_type"] == "code":
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                assert not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Lambda))


@pytest.mark.parametrize("study", list(STUDIES))
def test_each_profile_has_a_params_file_with_known_keys(study):
    for profile in ("smoke", "quick", "full"):
        path = PARAMS / study / f"{profile}.yaml"
        keys = set(yaml.safe_load(path.read_text()))
        assert keys <= set(params.schema(study)), keys - set(params.schema(study))


@pytest.mark.parametrize("study", list(STUDIES))
def test_parameters_cell_is_generated_from_the_schema(study):
    assert parameters_cell(load(study)) == params.parameters_cell(study)


@pytest.mark.parametrize("study", list(STUDIES))
def test_papermill_reads_every_parameter(study):
    # Papermill parses the parameters cell itself; a line it cannot parse (e.g. an
    # "=" inside a help comment) only warns and leaves that parameter unknown to it.
    import papermill as pm

    found = set(pm.inspect_notebook(str(NOTEBOOKS / STUDIES[study].notebook)))
    assert found == set(params.schema(study)) | set(params.RUNTIME_KEYS)


def test_scorecard_notebook_takes_what_the_report_passes():
    import papermill as pm

    from fwcompare.suite import report

    found = set(pm.inspect_notebook(str(NOTEBOOKS / report.SUMMARY_NOTEBOOK)))
    assert found == set(report.SUMMARY_PARAMETERS)
