# Every target builds .venv from nothing when it is missing or stale.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test test-fast bench lint venv clean

$(STAMP): setup.py constraints.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-input -c constraints.txt -e '.[test,beam]'
	$(BIN)/pip check
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlds-reverb demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy  # mypy.ini: the public API and tests/typing/public_api.py

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

test-fast: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" tests

bench: $(STAMP)
	@for name in disk convert push adders sample beam export cli; do \
	  if [ -f benchmarks/$$name.py ]; then $(BIN)/python -m benchmarks.$$name; fi; \
	done

clean:
	rm -rf $(VENV) build *.egg-info
