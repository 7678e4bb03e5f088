# The two commands a new user needs: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 4873
# Two stamps: running needs only the runtime dependencies (`make run` stays small); the tests
# add their extras (playwright, moto, schemathesis, boto3...) on top, in the same venv.
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-fast e2e build check bench venv clean demo system-deps corpus

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME_STAMP)

# One pip resolution for a new venv (the runtime install first, then the extras, resolved and built
# the editable package twice: ~15 s of CPU on a clean checkout); the extras include the runtime set.
$(TEST_STAMP): pyproject.toml
	test -x $(BIN)/pip || { $(PYTHON) -m venv $(VENV) && $(BIN)/pip install --quiet --upgrade pip; }
	$(BIN)/pip install --quiet -e '.[test,s3,docs]'
	touch $(RUNTIME_STAMP) $(TEST_STAMP)

## The development environment: runtime and test dependencies.
venv: $(TEST_STAMP)

## Debian packages the tests drive for real (nginx, PostgreSQL, Chromium, Varnish + xkey, wrk); a no-op when present.
system-deps:
	bash .ci/install-system-deps

## Build content/ into public/ and serve the registry and the API on $(HOST):$(PORT).
run: $(RUNTIME_STAMP)
	$(BIN)/registry-gen serve --host $(HOST) --port $(PORT)

## Run every test (unit, API, and the real npm/pnpm/yarn, nginx, PostgreSQL and Chromium ones), then
## Verdaccio's client suite (the e2e target). Two workers: most real-process tests wait on a client
## or a server more than they compute, so two keep a 2-core machine busy (TEST_WORKERS=0: one process).
## Each worker takes whole modules (a module's fixtures, e.g. the real-world tree and its installs, are
## made once), the longest first (tests/conftest.py LONGEST_FIRST), so no long one runs alone at the end.
TEST_WORKERS ?= 2
TEST_DIST := --dist loadscope --no-loadscope-reorder
test: $(TEST_STAMP) system-deps
	$(MAKE) --no-print-directory docs
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(TEST_DIST) $(PYTEST_ARGS)
	$(BIN)/python -m tests.e2e_cli.run $(E2E_ARGS)

## The inner loop: the pure and in-process tests (no real client, server or browser), on two
## workers; under a minute here. `make test` runs them too, with everything else.
FAST_TESTS := tests/core tests/generator tests/signing tests/check/test_lint_rules.py tests/importers/test_parsers.py tests/user_api/test_units.py
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m "not slow" $(FAST_TESTS) $(PYTEST_ARGS)

## Verdaccio's client suite @verdaccio/e2e-cli with npm 11, npm 10, pnpm and yarn 4 (docs/compatibility.md).
e2e: $(TEST_STAMP)
	$(BIN)/python -m tests.e2e_cli.run $(E2E_ARGS)

## Build the documentation site (docs/, Sphinx + MyST) into docs/_build/html, strictly: any warning, a
## broken link or anchor, or a command, option, key or route without a description fails it.
.PHONY: docs
DOCS_SOURCE ?= docs
DOCS_OUT ?= docs/_build/html
docs: $(TEST_STAMP)
	$(BIN)/python -m sphinx -W --keep-going -n -E -q -b html $(DOCS_SOURCE) $(DOCS_OUT)

## Fetch the real-world corpus's tarballs into ~/.cache/registry-gen-tests/ (tests/realworld/README.md).
corpus: $(TEST_STAMP)
	$(BIN)/python -m tests.realworld.corpus fetch

build: $(RUNTIME_STAMP)
	$(BIN)/registry-gen build

check: $(RUNTIME_STAMP)
	$(BIN)/registry-gen check

bench: $(TEST_STAMP) system-deps
	$(BIN)/python -m bench $(BENCH_ARGS)

## Regenerate the demo archives in content/ from tests/demo_packages.py.
demo: $(TEST_STAMP)
	$(BIN)/python -m tests.demo_packages content

## Remove what can be made again: the built tree and the venv. data/ (the accounts and tokens) and
## public.state/ (whose ledger.sqlite3 holds the pinned versions and first-seen times, irreplaceable) are kept: delete them by hand.
clean:
	rm -rf public $(VENV)
