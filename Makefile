# The two README commands: `make demo` and `make test`. Each sets up .venv from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q -c constraints.txt
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: demo test bench lint schemas clean mutation

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --upgrade pip "setuptools>=77" wheel

# core + torch (the runner) ; dev tools ; benchmarks: one stamp each, redone when the inputs change
$(VENV)/.core: $(PY) pyproject.toml constraints.txt
	$(PIP) --no-build-isolation -e ".[torch]"
	@touch $@

$(VENV)/.dev: $(VENV)/.core
	$(PIP) -e ".[dev,dvc,web,tensorboard,hf,lightning,sign,export]" nvidia-ml-py pyyaml megatron-core
	@touch $@

$(VENV)/.bench: $(VENV)/.core
	$(PIP) -e ".[bench,web]"
	@touch $@

$(VENV)/.demo: $(VENV)/.core
	$(PIP) -e ".[dvc,web]"
	@touch $@

demo: $(VENV)/.demo
	bash scripts/demo.sh

# Debian's chromium renders the HTML report in a test (skipped there only when it cannot be installed)
$(VENV)/.system: | $(PY)
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
		|| echo "warning: could not install chromium; the HTML report test will not run"
	@touch $@

# Two workers (the CI machine has 2 cores; most tests wait on subprocesses), each test file on one worker so
# its module fixtures are built once; TEST_JOBS=0 runs everything in this process.
TEST_JOBS ?= 2
test: $(VENV)/.dev $(VENV)/.system
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

$(VENV)/.mutation: $(VENV)/.dev
	$(PIP) -e ".[mutation]"
	@touch $@

# Not in CI (slow): the hand-planted bugs of issue 23, each caught by a test, then mutation testing of the
# core modules (per-module kill rates as JSON lines; docs/mutation.md). MUTATION_ARGS: e.g. --only stats --sample 10
mutation: $(VENV)/.mutation
	$(PY) scripts/mutation/plants.py; planted=$$?; $(PY) scripts/mutation/run.py $(MUTATION_ARGS) && exit $$planted

bench: $(VENV)/.bench
	bash bench/run_all.sh

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check schemas ledger runners tests bench
	$(VENV)/bin/mypy

schemas: $(VENV)/.core
	$(PY) -m schemas.generate

clean:
	rm -rf $(VENV) receipts demo pipeline .pytest_cache
