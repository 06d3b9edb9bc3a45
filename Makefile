# One command before a push: `make quality` (lint, types, layer contracts, IR goldens, fast tests).
# Every target uses the project's .venv (bash scripts/setup.sh makes it).
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

.PHONY: help quality lint types layers goldens docs test-fast test test-slow test-gpu

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

quality: lint types layers goldens docs test-fast  ## everything a contributor runs before pushing

lint:  ## ruff: pyflakes, import order, pyupgrade, bugbear, simplify (pyproject.toml names what it leaves out)
	$(BIN)/ruff check .

types:  ## mypy over the product (pyproject.toml [tool.mypy]; no module exempt)
	$(BIN)/mypy

layers:  ## import-linter's layer contracts (.importlinter)
	$(BIN)/lint-imports

goldens:  ## the IR goldens of every lane, byte for byte
	$(BIN)/rocke-aot golden --check

docs:  ## every module, command and file the docs name exists
	$(PYTEST) tests/test_docs.py

test-fast:  ## the suite without the heavier fault tests (reliability), GPU and slow marks
	$(PYTEST) -n auto -m 'not gpu and not slow and not reliability'

test:  ## the README's test command: set up, lint, the whole CI suite
	bash scripts/run-tests.sh

test-slow:  ## the slow-marked tests (the whole grid), run by nobody else
	$(PYTEST) -n auto -m slow

test-gpu:  ## the gpu-marked tests (a GPU machine; docs/gpu.md)
	$(PYTEST) -m gpu
