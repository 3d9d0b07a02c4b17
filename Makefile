# Two commands on a fresh machine:  make demo  (train + translate the built-in task)
#                                   make test  (lint, format check, tests)
# Each creates .venv if it is missing and installs the package with what it needs.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

# Some machines (this project's CI among them) offer a CPU-only torch wheel through pip's
# find-links folder. When one is there we install exactly that wheel first, so no later step
# pulls the multi-GB CUDA build from the registry. Elsewhere torch resolves as usual.
FIND_LINKS := $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
CPU_TORCH_WHEEL := $(firstword $(foreach d,$(FIND_LINKS),$(wildcard $(d)/torch-*+cpu-*.whl)))

.PHONY: demo test lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
ifneq ($(CPU_TORCH_WHEEL),)
	$(BIN)/python -m pip install --quiet "$(CPU_TORCH_WHEEL)"
endif
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/transformer demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q --durations=10

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) runs
