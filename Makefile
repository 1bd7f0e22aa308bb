# bdlkit development commands. `make test` and `make demo` work on a fresh machine:
# they create .venv and install the package with the pinned development lock.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: test test-slow lint demo install clean

$(STAMP): pyproject.toml requirements/dev.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c requirements/dev.lock torch==2.13.0
	$(PY) -m pip install --quiet -c requirements/dev.lock -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

test: lint
	$(PY) -m pytest -n 2 -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/bdlkit demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build src/*.egg-info
