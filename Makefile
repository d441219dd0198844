# fwcompare: `make report` regenerates every study; `make test` runs the test suite.
PROFILE ?= quick
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The venv is (re)built only when the pins change: a second call installs nothing.
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup report test lab validate env clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'
	@echo "  PROFILE=smoke|quick|full (default quick)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $(STAMP)

setup: $(STAMP) ## create .venv and install the pinned dependencies

report: $(STAMP) ## run every study for PROFILE into outputs/PROFILE/ (index.html)
	$(PY) -m fwcompare report --profile $(PROFILE)

test: $(STAMP) ## run the test suite (unit, notebook contract, smoke profile end to end)
	$(PY) -m pytest

validate: $(STAMP) ## check every params file
	$(PY) -m fwcompare validate

env: $(STAMP) ## print the environment and fairness manifest
	$(PY) -m fwcompare env

lab: $(STAMP) ## open JupyterLab on the notebooks
	$(VENV)/bin/jupyter lab notebooks/

clean: ## remove generated outputs and caches (keeps .venv)
	rm -rf outputs .cache .pytest_cache
