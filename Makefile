# fwcompare: `make report` regenerates every study; `make test` runs the test suite.
PROFILE ?= quick
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The venv is (re)built only when the pins change: a second call installs nothing.
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup report test test-fast lab validate env clean browser gpu-deps

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'
	@echo "  PROFILE=smoke|quick|full (default quick)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $(STAMP)

setup: $(STAMP) ## create .venv and install the pinned dependencies

report: $(STAMP) ## run every study for PROFILE into outputs/PROFILE/ (index.html)
	$(PY) -m fwcompare report --profile $(PROFILE)

test: $(STAMP) browser ## run the test suite (unit, notebook contract, smoke profile end to end, the report in headless Chromium)
	$(PY) -m pytest

test-fast: $(STAMP) ## the unit tests only: no test that starts worker processes (about 2 minutes)
	$(PY) -m pytest -m "not slow"

# The report's browser test opens index.html in Debian's Chromium through chromedriver
# (Playwright's own browser download does not work offline). Installed when missing
# and run as root (CI); otherwise the command to run is printed and the test skips.
browser: ## install Debian's chromium and chromium-driver if missing (needs root)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "browser test needs: sudo apt-get install chromium chromium-driver"; fi

# Resolves the pins with the gpu group against PyPI, as a GPU machine would (this
# machine's local CPU wheel of torch set aside); installs nothing.
gpu-deps: $(STAMP) ## check that the pins and the gpu group (CUDA builds) resolve together
	env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $(PY) -m pip install --dry-run \
		--ignore-installed --quiet --report $(VENV)/gpu-resolution.json -e ".[gpu]"
	$(PY) -c "import json; r = json.load(open('$(VENV)/gpu-resolution.json'))['install']; \
		print(len(r), 'packages:', ', '.join(sorted(i['metadata']['name'] + ' ' + \
		i['metadata']['version'] for i in r if i['metadata']['name'] in \
		('torch', 'jax', 'jax-cuda13-plugin', 'tensorflow', 'nvidia-cublas', 'nvidia-cublas-cu12'))))"

validate: $(STAMP) ## check every params file
	$(PY) -m fwcompare validate

env: $(STAMP) ## print the environment and fairness manifest
	$(PY) -m fwcompare env

lab: $(STAMP) ## open JupyterLab on the notebooks
	$(VENV)/bin/jupyter lab notebooks/

clean: ## remove generated outputs and caches (keeps .venv)
	rm -rf outputs .cache .pytest_cache
