# The obvious verbs. `make demo` and `make test` are the README's quick start; CI runs
# `make lint` and then `make test`. `make check` is the fast loop while working.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8443
# Where `make compiled` puts its copy of this tree with the core compiled, as the image has it.
COMPILED ?= build/compiled

.PHONY: install dev demo test test-unit test-compiled compiled check lint format docs bench bench-e2e lock clean

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

test: install  ## the whole suite: unit and HTTPS on the core as Python, then the core, HTTPS and end-to-end suites (on a real kube-apiserver) and the memory weighing on the compiled core
	$(BIN)/python tests/e2e/provision.py
	$(BIN)/python -m pytest tests/core tests/shell tests/deploy tests/bench
	$(MAKE) test-compiled

compiled: install  ## $(COMPILED): a copy of this tree (tracked and new files) with webhook/core compiled by mypyc
	rm -rf $(COMPILED) && mkdir -p $(COMPILED)
	git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C $(COMPILED)
	cd $(COMPILED) && POLICY_WEBHOOK_COMPILE=1 $(abspath $(BIN))/python setup.py --quiet build_ext --inplace

# The copy's end-to-end suite reads the upstream Gateway API CRDs from where this checkout's would.
GATEWAY_API_DIR_HERE = $(shell cd tests/e2e && $(abspath $(BIN))/python -c 'import cluster; print(cluster.gateway_api_dir())')

test-compiled: compiled  ## the core, HTTPS and end-to-end suites, the memory benchmark's weighing and a minute of fuzzing, against the compiled core (as the image ships it)
	cd $(COMPILED) && POLICY_WEBHOOK_EXPECT_CORE=compiled PYTHONPATH=$(abspath $(COMPILED)) \
	  GATEWAY_API_DIR="$(GATEWAY_API_DIR_HERE)" $(abspath $(BIN))/python -m pytest -m "not python_only" tests/core tests/shell tests/e2e \
	  tests/bench/test_memory.py
	cd $(COMPILED) && $(abspath $(BIN))/python tests/fuzz/run_fuzz.py --seconds 60 --seed 2026

test-unit: install  ## everything but the end-to-end suite, with the full property budgets
	$(BIN)/python -m pytest tests/core tests/shell tests/deploy tests/bench

check: lint  ## the fast loop: lint, then the tests without an API server on a fifth of the budgets
	HYPOTHESIS_PROFILE=dev $(BIN)/python -m pytest -q tests/core tests/shell tests/deploy tests/bench

lint: install  ## style, types (strict, tests included), the layers, dead code
	$(BIN)/ruff check webhook tests bench setup.py
	$(BIN)/ruff format --check webhook tests bench setup.py
	$(BIN)/mypy webhook bench tests setup.py
	$(BIN)/lint-imports
	$(BIN)/vulture webhook .ci/dead_code_allowlist.py --min-confidence 60

format: install
	$(BIN)/ruff check --fix webhook tests bench setup.py
	$(BIN)/ruff format webhook tests bench setup.py

docs: install  ## regenerate the pages made from code (rules table, configuration reference)
	$(BIN)/python -m webhook.shell.cli.docgen

bench: install  ## every benchmark figure of docs/performance.md
	$(BIN)/python -m bench

bench-e2e: install  ## bulk writes and convergence on a real kube-apiserver (about 20 minutes here; its own page section)
	$(BIN)/python tests/e2e/provision.py
	$(BIN)/python -m bench e2e

lock: install  ## requirements.lock: the image's dependencies, pinned with their hashes, from pyproject.toml
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --build-deps-for=wheel \
	  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
	  --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) $(COMPILED) .demo .pytest_cache .mypy_cache .ruff_cache
