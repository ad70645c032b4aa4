# Two entry points that do all set-up on a fresh machine:
#   make demo   -> a whole tuning study on the simulated SGLang server, into experiments.db
#   make test   -> installs what the tests need and runs them
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Test processes (pytest-xdist, a file per worker): most integration tests wait on simulated servers,
# so four share two cores well.
TEST_WORKERS ?= 4

.PHONY: demo test unit chaos lint venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# The demo needs the core alone (matplotlib included, for `tuner report`): no Jupyter, linters or drivers.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python -m tuner run --space search_spaces/glm5-nvfp4-sm120-sim.yaml --trials 12

lint: venv
	$(BIN)/ruff check tuner tests
	$(BIN)/mypy tuner
	$(BIN)/lint-imports

# The suite without the chaos storms (those run at full size in `make chaos`, which CI runs too), in
# TEST_WORKERS processes (TEST_WORKERS=0: one).
test: lint
	$(BIN)/python -m pytest -q -m "not chaos" -n $(TEST_WORKERS) --dist loadfile

# The unit tests alone (the pure core and the store, no server processes): the quick loop while editing.
unit: venv
	$(BIN)/python -m pytest -q tests/unit

# The chaos suite at full size (tests/chaos: 20 + 10 kills, 20 signals, workers, broken machines) and the
# multi-worker studies (eight PostgreSQL hosts, four parallel workers stopped and resumed) and the
# kill-and-resume studies, in TEST_WORKERS processes, file by file: ~6.5 min on two cores (~10 min in one).
# Test by test (worksteal) is ~20% faster on a quiet machine, but it runs the storms of one file at once:
# with a CPU hog beside it a stop then took 10.2 s (the bound is 10) and a two-worker study timed out.
chaos: venv
	TUNER_CHAOS=full $(BIN)/python -m pytest -q -m chaos tests/chaos tests/integration -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) experiments.db runs
