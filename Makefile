# Every target bootstraps .venv itself: a fresh machine needs only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test soak test-stateful test-browser test-clients lint typecheck check clean reliability-doc bench bench-peers redis

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: play the seed document's exchange through proxai (no network, no API key)
demo: $(STAMP)
	$(BIN)/proxai demo

## test: the whole test suite (what CI runs)
test: $(STAMP)
	$(BIN)/python -m pytest

## soak: the pools' churn on a real proxai serve (10 s, sampled in real time: out of `make test`)
soak: $(STAMP)
	$(BIN)/python -m pytest tests/soak -p no:cacheprovider --override-ini addopts=-ra

## test-stateful: the no-hang machine's long profile (docs/cancellation.md): new examples each run,
## PROXAI_STATEFUL_EXAMPLES per start state (24 of them)
PROXAI_STATEFUL_EXAMPLES ?= 500
test-stateful: $(STAMP)
	HYPOTHESIS_PROFILE=explore PROXAI_STATEFUL_EXAMPLES=$(PROXAI_STATEFUL_EXAMPLES) \
		$(BIN)/python -m pytest tests/faults/test_stateful.py -p no:cacheprovider -q

## redis: Debian's redis-server, which tests/state starts for the Redis state backend's tests
## (they skip without it)
redis:
	command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)

## test-browser: the live view page and cross-site pages in headless chromium (installs Debian's chromium)
test-browser: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python -m pytest tests/browser -p no:cacheprovider --override-ini addopts=-ra
	@echo "screenshot: tests/artifacts/live-view.png"

## test-clients: real clients against proxai: the Vercel AI SDK (npm: ai, @ai-sdk/openai), Codex
## (@openai/codex) and Claude Code (@anthropic-ai/claude-code); needs node + npm, ~700 MB of packages
test-clients: $(STAMP)
	cd tests/clients && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; \
		else npm install --no-audit --no-fund; fi
	@vercel=PASS; agents=PASS; \
	$(BIN)/python tests/clients/run_clients.py || vercel=FAIL; \
	$(BIN)/python tests/clients/run_agents.py || agents=FAIL; \
	echo "test-clients: Vercel AI SDK $$vercel; Codex + Claude Code $$agents"; \
	[ $$vercel = PASS ] && [ $$agents = PASS ]

## bench: the per-event regime (issue 16), the Responses WebSocket (issue 22), conversation state
## (issue 23), telemetry (issue 26), [limits] (issue 24) and issue 7's one-read benchmarks vs a direct
## connection, nginx and the stack's floor, every cell watched for other work, and the counted
## instructions per event (issue 34), then docs/bench.md and docs/bench.png (about 36 minutes;
## installs nginx, wrk, redis-server and valgrind
## from Debian, matplotlib and py-spy from the bench extra)
$(VENV)/.bench-installed: pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

## bench-peers: the gateways the per-event bench runs beside proxai (issue 34): LiteLLM's proxy
## (PyPI litellm[proxy], in its own venv: it pins many packages) and Portkey's gateway (npm, with
## the @hono/node-server pin of bench/peers/package.json); installs Debian's nodejs and npm if missing
PEERS := bench/peers
LITELLM_VERSION := 1.108.7
$(PEERS)/.venv-litellm/.installed:
	$(PYTHON) -m venv $(PEERS)/.venv-litellm
	$(PEERS)/.venv-litellm/bin/python -m pip install --quiet 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $@

$(PEERS)/node_modules/.installed: $(PEERS)/package.json $(PEERS)/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	cd $(PEERS) && npm ci --no-audit --no-fund
	touch $@

bench-peers: $(PEERS)/.venv-litellm/.installed $(PEERS)/node_modules/.installed

bench: $(VENV)/.bench-installed redis bench-peers
	command -v nginx >/dev/null && command -v wrk >/dev/null && command -v valgrind >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq nginx wrk valgrind)
	$(BIN)/python -m bench.run_all

## reliability-doc: regenerate docs/reliability.md from the fault matrix
reliability-doc: $(STAMP)
	$(BIN)/python -m tests.faults.render --write

## lint / typecheck: ruff and mypy --strict
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict proxai

check: lint typecheck test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
