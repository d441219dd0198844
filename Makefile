# fwcompare: `make report` regenerates every study; `make test` runs the test suite.
PROFILE ?= quick
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The venv is (re)built only when the pins change: a second call installs nothing.
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup report test test-fast lab validate env clean browser gpu-deps lock

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'
	@echo "  PROFILE=smoke|quick|full (default quick)"

# Every package from the lock (runtime and the test and lab groups, each at its
# pinned version), then fwcompare itself without resolving anything again; its
# build backend is the lock's setuptools (no isolated build that fetches another).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

setup: $(STAMP) ## create .venv and install the locked dependencies (requirements.lock)

# requirements.lock: pip-compile (pip-tools, in a venv of its own under build/) resolves
# pyproject.toml's pins with the groups `test` and `lab` and pins every package under
# them. A pin already in the lock stays unless pyproject.toml's pins call for another;
# UPGRADE=1 moves every unpinned package under them to its newest version. The command
# (written into the lock's header too):
#   pip-compile --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
#     --extra test --extra lab --output-file requirements.lock pyproject.toml
LOCK_TOOLS := build/pip-tools
lock: ## regenerate requirements.lock from pyproject.toml (UPGRADE=1: newest versions)
	@test -x $(LOCK_TOOLS)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_TOOLS) && \
		$(LOCK_TOOLS)/bin/pip install --quiet pip==23.2.1 pip-tools==7.6.2; }
	$(LOCK_TOOLS)/bin/pip-compile --quiet --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links --extra test --extra lab $(if $(UPGRADE),--upgrade) \
		--output-file requirements.lock pyproject.toml

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

lab: $(STAMP) ## open JupyterLab on the notebooks (kernel "fwcompare"; results go to outputs/lab/)
	$(PY) -c "from fwcompare.report import ensure_kernel; print('kernel:', ensure_kernel())"
	$(VENV)/bin/jupyter lab notebooks/

clean: ## remove generated outputs and caches (keeps .venv)
	rm -rf outputs .cache .pytest_cache
