# Every target builds .venv from nothing when it is missing or stale.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test test-fast bench lint docs venv clean

# Debian packages some tests need: envlogger's riegeli links libgmp; the report test drives
# headless Chromium. Installed with apt-get when missing (CI runs as root); elsewhere the
# tests that need them say so and skip.
DEBIAN_PACKAGES := libgmp10 libgmpxx4ldbl chromium

$(STAMP): setup.py constraints.txt
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "apt-get install $$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y -q $$missing >/dev/null; }; \
	fi
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-input -c constraints.txt -e '.[test,beam,docs]'
	$(BIN)/pip check
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlds-reverb demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy  # mypy.ini: the whole package, the adders and tests/typing/public_api.py

# The suite on PYTEST_WORKERS pytest-xdist workers; tests that must share a worker carry an
# xdist group (tests/conftest.py, docs/architecture.md "Tests").
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup

test: $(STAMP) lint
	$(PYTEST) tests

test-fast: $(STAMP) lint
	$(PYTEST) -m "not slow" tests

# The docs site (mkdocs.yml: docs/ and the docstrings) into site/; warnings are errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	@for name in disk convert push adders sample beam export cli d4rl_read minari_read save_rlds report statistics lerobot; do \
	  if [ -f benchmarks/$$name.py ]; then $(BIN)/python -m benchmarks.$$name; fi; \
	done

clean:
	rm -rf $(VENV) build site *.egg-info
