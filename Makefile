# fwcompare: `make report` regenerates every study; `make test` runs the test suite.
PROFILE ?= quick
VENV := .venv
PY := $(VENV)/bin/python
# The venv is (re)built only when the pins change: a second call installs nothing.
STAMP := $(VENV)/.installed
PYPI := https://pypi.org/simple

.DEFAULT_GOAL := help
.PHONY: help setup report test test-fast lab validate env clean browser gpu-deps lock \
	check-install python-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'
	@echo "  PROFILE=smoke|quick|gpu|full (default quick); PYTHON=/path/to/python3.12: the interpreter of a new .venv"

# The Python versions fwcompare supports: pyproject.toml's requires-python, which
# tests/test_environment.py checks against this list. Without PYTHON=, a new .venv
# is made by the first of python3, python3.11, python3.12 that runs and is one of
# them: 3.11 before 3.12, since the whole test suite runs on 3.11 (CI).
PYTHON_VERSIONS := 3.11 3.12
empty :=
PYTHON_ACCEPTED := $(subst $(empty) $(empty), or ,$(PYTHON_VERSIONS))
# Prints the interpreter to use, or stops with the versions it accepts. A name may
# be on PATH and still not run (a pyenv shim of a version not selected): it counts
# as missing. `make setup PYTHON=...` checks the one given.
PICK_PYTHON = for p in $(or $(PYTHON),python3 $(addprefix python,$(PYTHON_VERSIONS))); do \
	  v=$$("$$p" -c 'import sys; print(*sys.version_info[:3], sep=".")' 2>/dev/null) \
	    || { seen="$$seen$${seen:+, }$$p not found"; continue; }; \
	  case " $(PYTHON_VERSIONS) " in *" $${v%.*} "*) echo "$$p"; exit 0;; esac; \
	  seen="$$seen$${seen:+, }$$p is $$v"; \
	done; \
	echo "fwcompare needs Python $(PYTHON_ACCEPTED); $$seen. Install one, or run" \
	  "make setup PYTHON=/path/to/python$(lastword $(PYTHON_VERSIONS))" >&2; exit 1

# Before anything uses or makes .venv: an existing .venv must be of a supported
# version (and of PYTHON='s, when given); a new one needs a supported interpreter.
python-check:
	@if [ -e $(PY) ]; then \
	  v=$$($(PY) -c 'import sys; print(*sys.version_info[:3], sep=".")') || exit 1; \
	  case " $(PYTHON_VERSIONS) " in *" $${v%.*} "*) ;; *) echo "$(VENV) is Python $$v;" \
	    "fwcompare needs Python $(PYTHON_ACCEPTED). Remove it (rm -rf $(VENV)) and run" \
	    "make setup again (PYTHON=/path/to/python$(lastword $(PYTHON_VERSIONS)) to choose one)" >&2; exit 1;; esac; \
	  if [ -n "$(PYTHON)" ]; then p=$$($(PICK_PYTHON)) || exit 1; \
	    w=$$("$$p" -c 'import sys; print(*sys.version_info[:3], sep=".")'); \
	    [ "$${w%.*}" = "$${v%.*}" ] || { echo "$(VENV) is Python $$v, PYTHON=$(PYTHON) is $$w:" \
	      "remove $(VENV) (rm -rf $(VENV)) to make it again with $(PYTHON)" >&2; exit 1; }; fi; \
	else p=$$($(PICK_PYTHON)) || exit 1; fi

# Free disk before an install, checked before anything is downloaded: a new
# venv takes 4.7 GB with a CPU build of PyTorch and 8.4 GB with PyPI's CUDA build
# (docs/measurements.md), and pip keeps the wheels it downloads (3.85 GB with PyPI's
# CUDA build, 2.73 GB of it PyTorch and its CUDA libraries: the rest and a CPU
# build's wheel fit in 2 GB) in the temporary directory until the install ends. The figures are the smallest install's (a CPU build: a larger one
# may still run out), so that no install that fits is refused. A full disk
# otherwise stops pip halfway with "No space left on device". An existing venv
# that takes new pins needs only the temporary room. Where df is missing or does
# not answer, nothing is checked. SETUP_MIN_FREE_GB=0 skips the check.
SETUP_MIN_FREE_GB ?= 6
SETUP_MIN_TMP_GB ?= 2
DISK_CHECK = need() { \
	  kb=$$(df -Pk "$$1" 2>/dev/null | { read -r _; read -r _ _ _ kb _; echo "$$kb"; }); \
	  case "$$kb" in ""|*[!0-9]*) return 0;; esac; \
	  [ "$$kb" -ge $$(($$2 * 1048576)) ] || { echo "make setup needs about $$2 GB free on" \
	    "the disk of $$1 $$3; it has $$((kb / 1048576)) GB. Free some space$$4, or set" \
	    "SETUP_MIN_FREE_GB=0 to skip this check" >&2; exit 1; }; }; \
	for v in "$(SETUP_MIN_FREE_GB)" "$(SETUP_MIN_TMP_GB)"; do case "$$v" in ""|*[!0-9]*) \
	  echo "SETUP_MIN_FREE_GB and SETUP_MIN_TMP_GB are whole numbers of GB; got '$$v'" >&2; \
	  exit 1;; esac; done; \
	test -x $(PY) || need "$(CURDIR)" $(SETUP_MIN_FREE_GB) "(a new venv takes 4.7 GB with a CPU \
	  build of PyTorch, 8.4 GB with PyPI's CUDA build)"; \
	need "$${TMPDIR:-/tmp}" $(SETUP_MIN_TMP_GB) "(pip keeps the wheels it downloads there until \
	  the install ends: 3.85 GB with PyPI's CUDA build of PyTorch, less with a CPU build)" \
	  " or point TMPDIR at a folder on a larger disk"

# Every package from the lock (runtime and the test and lab groups, each at its
# pinned version), then fwcompare itself without resolving anything again; its
# build backend is the lock's setuptools (no isolated build that fetches another).
$(STAMP): pyproject.toml requirements.lock | python-check
	@if [ "$(SETUP_MIN_FREE_GB)" != 0 ]; then $(DISK_CHECK); fi
	@test -x $(PY) || { p=$$($(PICK_PYTHON)) && echo "making $(VENV) with $$p" && "$$p" -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

setup: $(STAMP) ## create .venv and install the locked dependencies (requirements.lock)

# requirements.lock: one universal lock, for Python 3.11 and 3.12 on every platform
# (a line with a marker, `; python_full_version < '3.12'`, applies where it holds),
# made by uv (in a venv of its own under build/) from pyproject.toml's pins with the
# groups `test` and `lab`, from PyPI alone: uv reads no pip configuration, and
# --no-config and the unset UV_ variables keep any uv.toml or uv setting out. A pin
# already in the lock stays unless pyproject.toml's pins call for another; UPGRADE=1
# moves every unpinned package under them to its newest version.
# torch==2.13.0 carries no local label: pip installs PyPI's build (on Linux x86_64 the
# CUDA one), or a +cpu build of 2.13.0 where an index or a wheel folder offers one
# (PyTorch's CPU index; this machine's local wheel, so CI installs no CUDA library).
# torch's CUDA-only packages (LOCK_NO_EMIT) are left out of the lock: torch's own
# metadata names them (cuda-toolkit exactly, through its extras one release of each
# NVIDIA library; cuda-bindings and nvidia-nvjitlink by a range), so PyPI's build
# still brings them and a CPU build none. The note below goes under uv's header.
UV := build/uv/bin/uv
UV_VERSION := 0.13.9
LOCK_NO_EMIT := cuda-bindings cuda-pathfinder cuda-toolkit triton nvidia-cublas \
	nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft \
	nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 \
	nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx
LOCK_NOTE := \
	"\#" \
	"\# One lock for Python 3.11 and 3.12 on every platform, from PyPI alone (uv's" \
	"\# universal resolution: a line with a marker applies where the marker holds)." \
	"\# torch==2.13.0 has no local label: pip takes PyPI's build, CUDA on Linux x86_64," \
	"\# or the +cpu build of 2.13.0 where an index or a wheel folder offers one" \
	"\# (PyTorch's CPU index). torch's CUDA-only packages (cuda-*, nvidia-* but" \
	"\# nvidia-ml-py, triton) are left out on purpose: torch's own metadata names them" \
	"\# (cuda-toolkit exactly, one release of each NVIDIA library through its extras;" \
	"\# cuda-bindings and nvidia-nvjitlink by a range), so PyPI's build brings them and" \
	"\# a CPU build none. \`make check-install\` resolves this file against PyPI alone."
lock: ## regenerate requirements.lock from pyproject.toml (UPGRADE=1: newest versions)
	@test -x $(UV) || { p=$$($(PICK_PYTHON)) && "$$p" -m venv build/uv && \
		build/uv/bin/pip install --quiet uv==$(UV_VERSION); }
	env -u UV_INDEX -u UV_INDEX_URL -u UV_DEFAULT_INDEX -u UV_EXTRA_INDEX_URL -u UV_FIND_LINKS \
		-u UV_CONSTRAINT -u UV_OVERRIDE -u UV_EXCLUDE_NEWER -u UV_TORCH_BACKEND -u UV_NO_INDEX \
		$(UV) --no-config --quiet pip compile --universal --python-version $(firstword $(PYTHON_VERSIONS)) \
		--index-url $(PYPI) --extra test --extra lab $(if $(UPGRADE),--upgrade) \
		$(addprefix --no-emit-package ,$(LOCK_NO_EMIT)) --custom-compile-command "make lock" \
		--output-file requirements.lock pyproject.toml
	@{ head -n 2 requirements.lock; printf '%s\n' $(LOCK_NOTE); tail -n +3 requirements.lock; } \
		> requirements.lock.tmp && mv requirements.lock.tmp requirements.lock

# Resolves requirements.lock as a machine whose pip reaches PyPI alone would: this
# machine's pip configuration (its files and PIP_ variables: a local wheel folder,
# extra indexes, constraints) set aside, nothing installed, .venv not used; for the
# interpreter `make setup` picks (PYTHON=python3.12: for 3.12). The resolving pip is
# PyPI's newest, in a venv of its own under build/ (a system's pip may lack --report,
# or be missing). tools/check_install.py reads pip's report: the packages, torch's
# build and its CUDA libraries, any version that is not the lock's, the download size
# (from PyPI's index); it fails if one differs.
CHECK_DIR := build/check-install
PYPI_ONLY := env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT \
	-u PIP_NO_INDEX PIP_CONFIG_FILE=/dev/null
check-install: ## resolve requirements.lock against PyPI alone, as a new machine would (installs nothing)
	@p=$$($(PICK_PYTHON)) || exit 1; \
	v=$$("$$p" -c 'import sys; print("python%d.%d" % sys.version_info[:2])'); \
	venv=$(CHECK_DIR)/$$v-pip; report=$(CHECK_DIR)/$$v.json; \
	mkdir -p $(CHECK_DIR) && rm -f "$$report" && \
	{ test -x "$$venv/bin/python" || "$$p" -m venv "$$venv"; } && \
	$(PYPI_ONLY) "$$venv/bin/python" -m pip install --isolated --quiet --index-url $(PYPI) \
		--upgrade pip && \
	echo "pip install --dry-run -r requirements.lock with $$p" \
		"(pip $$("$$venv/bin/python" -m pip --version | cut -d' ' -f2)), from $(PYPI) alone" && \
	$(PYPI_ONLY) "$$venv/bin/python" -m pip install --dry-run --isolated --ignore-installed \
		--disable-pip-version-check --quiet --index-url $(PYPI) --report "$$report" \
		-r requirements.lock && \
	"$$p" tools/check_install.py "$$report" requirements.lock --index $(PYPI)

report: $(STAMP) ## run every study for PROFILE into outputs/PROFILE/ (index.html)
	$(PY) -m fwcompare report --profile $(PROFILE)

# The tiers (docs/contributing.md#the-tests): every test, or the fast ones (no process
# started, no notebook run), the 15 slowest named; then the few tests marked serial, in
# one process. Both parts run; either failing fails the target. The first part runs in
# one test process per core (pytest-xdist, at most 4, each pinned to its own cores by
# tests/tiers.py; a file's tests share one, so each smoke build runs once);
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder --durations 15
# $(call TIERS,EXPR): the tests EXPR selects (empty: all), the serial ones after the rest
TIERS = $(PYTEST) -m "$(1)not serial"; a=$$?; $(PY) -m pytest -p no:xdist -m "$(1)serial"; \
	b=$$?; test $$a = 0 && test $$b = 0
test: $(STAMP) browser ## run the test suite (unit, notebook contract, smoke profile end to end, the report in headless Chromium)
	@$(call TIERS,)

test-fast: $(STAMP) ## the fast tier: no process started, no notebook run (under 3 minutes on 2 cores)
	@$(call TIERS,not slow and not report and not gpu and )

# The report's browser test opens index.html in Debian's Chromium through chromedriver
# (Playwright's own browser download does not work offline). Installed when missing
# and run as root (CI); otherwise the command to run is printed and the test skips.
browser: ## install Debian's chromium and chromium-driver if missing (needs root)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "browser test needs: sudo apt-get install chromium chromium-driver"; fi

# Resolves the pins with the gpu group against PyPI alone, as a GPU machine would
# (this machine's pip configuration and local CPU wheel of torch set aside), every
# package the lock pins held at its locked version; installs nothing.
gpu-deps: $(STAMP) ## check that the pins, the lock and the gpu group (CUDA builds) resolve together
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT -u PIP_NO_INDEX \
		PIP_CONFIG_FILE=/dev/null $(PY) -m pip install --dry-run --isolated --ignore-installed \
		--disable-pip-version-check --quiet --index-url $(PYPI) -c requirements.lock \
		--report $(VENV)/gpu-resolution.json -e ".[gpu]"
	$(PY) -c "import json; r = json.load(open('$(VENV)/gpu-resolution.json'))['install']; \
		print(len(r), 'packages:', ', '.join(sorted(i['metadata']['name'] + ' ' + \
		i['metadata']['version'] for i in r if i['metadata']['name'] in \
		('torch', 'jax', 'jax-cuda13-plugin', 'tensorflow', 'nvidia-cublas', 'nvidia-cublas-cu12'))))"

validate: $(STAMP) ## check every params file
	$(PY) -m fwcompare validate

env: $(STAMP) ## print the environment and fairness manifest
	$(PY) -m fwcompare env

lab: $(STAMP) ## open JupyterLab on the notebooks (kernel "fwcompare"; results go to outputs/lab/)
	$(PY) -c "from fwcompare.suite.report import ensure_kernel; print('kernel:', ensure_kernel())"
	$(VENV)/bin/jupyter lab notebooks/

clean: ## remove generated outputs and caches (keeps .venv)
	rm -rf outputs .cache .pytest_cache
