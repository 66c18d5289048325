# Two commands from a clean clone: `make demo` and `make test`.
# torch is not pinned in the package metadata: the Makefile installs torch==2.13.0 (a local CPU wheel on our CI
# machines, the CUDA build from PyPI elsewhere) and falls back to the newest torch. To use a torch you already
# have, create the venv yourself first: `python3 -m venv --system-site-packages .venv`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: sandbox-tool demo test venv install-dev bench bench-registry bench-evaluator bench-rag bench-tui clean wheels

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.torch: $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0 || $(BIN)/python -m pip install -q torch
	@touch $@

$(STAMP): $(VENV)/.torch pyproject.toml
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $@

venv: $(STAMP)

# Candidate code runs inside bubblewrap (evaluator/isolation/sandbox.py). Installed when missing and we can (root + apt-get);
# otherwise a loud line, and the evaluator falls back to unshare or no sandbox (`krl doctor` says which).
sandbox-tool:
	@command -v bwrap >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing bubblewrap (candidate-code sandbox)"; \
			(apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || \
				echo "!! could not install bubblewrap: candidate code runs with weaker isolation (see krl doctor)"; \
		else \
			echo "!! bubblewrap (bwrap) is missing and cannot be installed here: install it as root" \
				"(apt-get install bubblewrap); until then candidate code runs with weaker isolation (see krl doctor)"; \
		fi; }

# `krl` lives in the venv: the last lines say how to put it on PATH (the demo run is in ./runs, where `krl` looks).
demo: $(STAMP) sandbox-tool
	$(BIN)/krl demo $(DEMO_ARGS)
	@echo ""
	@echo "krl is installed in $(VENV)/bin. To use it as the README shows:"
	@echo "    . $(VENV)/bin/activate"
	@echo "    krl            # the TUI over ./runs, where the demo run is"

test: $(STAMP) sandbox-tool
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS)

bench-registry: $(STAMP)
	$(BIN)/python tests/bench/bench_registry.py

bench-evaluator: $(STAMP)
	$(BIN)/python tests/bench/bench_evaluator.py

bench-rag: $(STAMP)
	$(BIN)/python tests/bench/bench_rag.py

bench-tui: $(STAMP)
	$(BIN)/python tests/bench/bench_tui.py

bench: bench-registry bench-evaluator bench-rag bench-tui

# Wheels for an offline GPU machine (Python 3.12, x86_64) that lacks these pure-Python packages; see README Notes.
# linkify-it-py and uc-micro-py: textual asks for markdown-it-py[linkify], and without them pip on the GPU machine
# refused the whole install (ResolutionImpossible between its markdown-it-py and ours; session 19).
GPU_WHEELS := textual==8.2.8 mdit-py-plugins platformdirs linkify-it-py uc-micro-py \
	sqlite-utils==4.2.1 sqlite-fts4 click-default-group pydantic==2.14.3 pydantic-core==2.50.4 \
	annotated-types typing-inspection
# Ray and the service for the 2-GPU runs (issue 16): Ray's wheel is ~76 MiB; ~40.5 MiB without ray/jars/ (Java
# only), the dashboard's web client, RLlib and the LLM library, none of which the evaluator starts.
RAY_WHEELS := ray==2.60.0 starlette==1.10.0 uvicorn==0.54.0 jsonschema jsonschema-specifications referencing rpds-py
# Ray's own dependencies, installed on the GPU machine only where it lacks them (tests/bench/gpu_batch.sh).
RAY_DEPS_WHEELS := click filelock msgpack packaging protobuf pyyaml requests urllib3 idna charset-normalizer certifi attrs typing-extensions
WHEEL_PLATFORMS := --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any
wheels:
	mkdir -p .whl .whl/ray .whl/raydeps
	$(PY) -m pip download -q --no-deps $(WHEEL_PLATFORMS) -d .whl $(GPU_WHEELS)
	$(PY) -m pip download -q --no-deps $(WHEEL_PLATFORMS) -d .whl/ray $(RAY_WHEELS)
	$(PY) -m pip download -q --no-deps $(WHEEL_PLATFORMS) -d .whl/raydeps $(RAY_DEPS_WHEELS)
	$(PY) tests/bench/repack_wheel.py $$(ls .whl/ray/ray-*.whl) ray/jars/ ray/dashboard/client/ ray/rllib/ ray/llm/

clean:
	rm -rf $(VENV) build *.egg-info
