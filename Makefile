# The obvious verbs. `make demo` and `make test` are the README's quick start; CI runs
# `make lint` and then `make test`. `make check` is the fast loop while working.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8443

.PHONY: install dev demo test test-unit check lint format docs bench bench-e2e lock clean

$(BIN)/policy-webhook: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

install: $(BIN)/policy-webhook  ## a virtualenv with the webhook, its tests and tools

demo: install  ## serve the bundled examples without a cluster; see README for requests to send
	@echo "Serving examples/cluster on https://127.0.0.1:$(PORT); CA certificate in .demo/ca.crt."
	@echo "In another terminal:"
	@echo "  curl -s --cacert .demo/ca.crt -H 'Content-Type: application/json' \\"
	@echo "       --data @examples/reviews/create-broken-policy.json https://127.0.0.1:$(PORT)/validate"
	$(BIN)/policy-webhook serve --manifests examples/cluster --port $(PORT) --self-signed-dir .demo

test: install  ## the whole suite: unit, HTTPS, and end-to-end on a real kube-apiserver
	$(BIN)/python tests/e2e/provision.py
	$(BIN)/python -m pytest

test-unit: install  ## everything but the end-to-end suite, with the full property budgets
	$(BIN)/python -m pytest tests/core tests/shell tests/deploy tests/bench

check: lint  ## the fast loop: lint, then the tests without an API server on a fifth of the budgets
	HYPOTHESIS_PROFILE=dev $(BIN)/python -m pytest -q tests/core tests/shell tests/deploy tests/bench

lint: install  ## style, types (strict, tests included), the layers, dead code
	$(BIN)/ruff check webhook tests bench
	$(BIN)/ruff format --check webhook tests bench
	$(BIN)/mypy webhook bench tests
	$(BIN)/lint-imports
	$(BIN)/vulture webhook .ci/dead_code_allowlist.py --min-confidence 60

format: install
	$(BIN)/ruff check --fix webhook tests bench
	$(BIN)/ruff format webhook tests bench

docs: install  ## regenerate the pages made from code (rules table, configuration reference)
	$(BIN)/python -m webhook.shell.cli.docgen

bench: install  ## every benchmark figure of docs/performance.md
	$(BIN)/python -m bench

bench-e2e: install  ## bulk writes and convergence on a real kube-apiserver (about 15 minutes here; its own page section)
	$(BIN)/python tests/e2e/provision.py
	$(BIN)/python -m bench e2e

lock: install  ## requirements.lock: the image's dependencies, pinned with their hashes, from pyproject.toml
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --build-deps-for=wheel \
	  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
	  --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
