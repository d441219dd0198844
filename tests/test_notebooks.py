"""The notebook contract: thin, committed without outputs, parameters in sync."""
import ast
import json

import pytest
import yaml

from fwcompare import params
from fwcompare.paths import NOTEBOOKS, PARAMS
from fwcompare.studies import STUDIES


def load(study):
    return json.loads((NOTEBOOKS / STUDIES[study].notebook).read_text())


def parameters_cell(nb):
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    return "".join(tagged[0]["source"])


@pytest.mark.parametrize("study", list(STUDIES))
def test_committed_without_outputs(study):
    for cell in load(study)["cells"]:
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None


@pytest.mark.parametrize("study", list(STUDIES))
def test_parameters_cell_matches_schema_defaults(study):
    tree = ast.parse(parameters_cell(load(study)))
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign)}
    expected = {**params.defaults(study), **params.RUNTIME_KEYS}
    assert values == expected


@pytest.mark.parametrize("study", list(STUDIES))
def test_every_parameter_has_a_help_comment(study):
    for line in parameters_cell(load(study)).splitlines():
        if "=" in line and not line.startswith("#"):
            assert "  # " in line, line


@pytest.mark.parametrize("study", list(STUDIES))
def test_notebook_is_thin(study):
    for cell in load(study)["cells"]:
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
