# Everything installs into .venv from a clean machine; every target depends on the install stamp.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?=
comma := ,
STAMP := $(VENV)/.installed$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)),)
SUITE ?= robustness
SCALE ?= quick
DATASET ?=
FORMAT ?= markdown
OUT ?= leaderboards
BENCH_ARGS ?=

.PHONY: install test benchmark perf perf-paper lint ui leaderboards report site mutants clean

# `make install EXTRAS=postgres` adds install extras (comma-separated) to the dev install.
install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "fedarena needs Python >= 3.11, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev$(if $(EXTRAS),$(comma)$(EXTRAS),)]"
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest

benchmark: install
	$(BIN)/fedarena bench run $(SUITE) --scale $(SCALE) $(if $(DATASET),--dataset $(DATASET),) $(BENCH_ARGS)

leaderboards: install
	$(BIN)/fedarena leaderboard $(SUITE) --format $(FORMAT) --out $(OUT)

ui: install
	$(BIN)/fedarena ui $(if $(UI_SUITE),--suite $(UI_SUITE),)

# One self-contained HTML page (tables, figures, provenance): $(REPORT_OUT)/$(SUITE).html
REPORT_OUT ?= report
report: install
	$(BIN)/fedarena report $(SUITE) --out $(REPORT_OUT)

# The robustness leaderboard as a static site from the store `make benchmark` and `fedarena evaluate --builtin` fill
# (SUBMISSIONS=folder adds submissions, each rerun through the battery): $(SITE_OUT)/index.html
SITE_OUT ?= site
site: install
	$(BIN)/fedarena site --scale $(SCALE) --out $(SITE_OUT) $(if $(SUBMISSIONS),--submissions $(SUBMISSIONS),)

perf: install
	$(BIN)/python -m fedarena.perf

# Paper-scale Fashion-MNIST trial cost (ms per round, evaluation, checkpoints, peak memory, projected grid);
# PERF_ROUNDS timed rounds per method (a few on a CPU, more on a GPU).
PERF_ROUNDS ?= 3
perf-paper: install
	$(BIN)/python -m fedarena.perf.paper_scale --rounds $(PERF_ROUNDS)

# Mutation testing of one module, in a copy of the tree, against the tests tests/mutants.toml names for it:
# killed / survived / timed out and every surviving mutant (docs/testing.md). Installs mutmut (the extra
# `mutation`, from the package registry) on first use; never part of `make test`.
MODULE ?=
mutants:
	@test -n "$(MODULE)" || { echo "usage: make mutants MODULE=fedarena/privacy/noise.py (its tests: tests/mutants.toml)"; exit 2; }
	$(MAKE) install EXTRAS=mutation
	$(BIN)/python tests/mutants.py $(MODULE) $(if $(ONLY),--only $(ONLY),)

lint: install
	$(BIN)/ruff check fedarena tests

clean:
	rm -rf $(VENV) build *.egg-info
