# Lantau developer entry points: `make run` starts everything on this machine, `make test` runs the checks
# (`make lint`) and the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Touched after a successful install: reinstall only when pyproject.toml is newer, so reruns start at once.
STAMP := $(VENV)/.installed

.PHONY: run test lint install manage key bench

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python scripts/quickstart.py

# Settings refuse to start without SECRET_KEY (mypy's Django plugin imports them too): the suite and
# mypy get a throwaway one unless the caller sets it.
WITH_KEY := SECRET_KEY="$${SECRET_KEY:-test-only-$$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"

# Lint, formatting, types (pyproject [tool.mypy]), import rules (pyproject [tool.importlinter]) and no
# import circle among the project's modules (scripts/import_cycles.py).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(WITH_KEY) $(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/python scripts/import_cycles.py

# Unless both DATABASE_URL and REDIS_URL are given, the suite runs against private PostgreSQL/Redis
# started under var/ for its duration (only the missing one is started).
EMBEDDED := $(if $(and $(DATABASE_URL),$(REDIS_URL)),,$(BIN)/python -m console.embedded run --)

# `make lint`'s steps first (under a minute, so mistakes show before the long suite starts), then the suite
# in TEST_WORKERS pytest-xdist workers, a module per worker at a time (tests/conftest.py).
TEST_WORKERS ?= 2
test: lint
	bash scripts/ensure_browser.sh
	$(WITH_KEY) $(EMBEDDED) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# Run a manage.py command against the quick start's services, e.g. `make manage CMD="create_user --username ann --team ops"`.
manage: $(STAMP)
	$(EMBEDDED) $(BIN)/python manage.py $(CMD)

# Print a fresh inference API key for the quick start's admin user (the key alone is on the last line).
key: $(STAMP)
	@$(EMBEDDED) $(BIN)/python manage.py create_api_key --user admin --name "quick start $$(date +%F-%T)"

# Benchmark (docs/performance.md): raw onnxruntime vs the runner vs a plain server vs the gateway, one JSON
# line per scenario on stdout. `make bench BENCH_ARGS="--quick"` or `BENCH_ARGS="--scenarios raw,runner"`.
.PHONY: bench
bench: $(STAMP)
	$(EMBEDDED) $(BIN)/python -m bench $(BENCH_ARGS)
