# bdlkit development commands. `make test` and `make demo` work on a fresh machine:
# they create .venv and install the package with the pinned development lock.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# bdlkit reads data only where it is told: the data files next to the checkout, unless set
export BDLKIT_DATA ?= $(abspath ../shared/data)

.PHONY: test test-slow lint docs demo install clean

$(STAMP): pyproject.toml requirements/dev.lock requirements/peers-nodeps.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c requirements/dev.lock torch==2.13.0
	$(PY) -m pip install --quiet -c requirements/dev.lock -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps -r requirements/peers-nodeps.txt
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests tutorials docs/conf.py

# CI: lint, the strict docs build, then the tests (the tutorials' small sizes among them)
test: lint docs
	$(PY) -m pytest -n 2 -q $(PYTEST_ARGS)

# the site, offline, strict: any warning or unresolved cross-reference fails the build
docs: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/sphinx-build -E -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs: site written to docs/_build/html/index.html"

# the long statistical and end-to-end tests (marked slow), which `make test` leaves out
test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -q -m slow $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/bdlkit demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build docs/_build src/*.egg-info
