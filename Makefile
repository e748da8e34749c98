# distgnn — `make help` lists the targets.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXP     ?= products_homo

.DEFAULT_GOAL := help
.PHONY: help install run test test-fast test-long test-gpu lint typecheck format bench bench-products bench-papers bench-gpu ui ui-check clean clean-data chaos compat-pyg

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the CPU build of 2.13.0 (a bare `torch` would pull CUDA).
	$(BIN)/pip install -q torch==2.13.0
	# compat mode's "will be removed" banner is setuptools' notice to us, not to the user.
	PYTHONWARNINGS="ignore:Compat editable installs" \
	$(BIN)/pip install -q -e '.[dev]' --config-settings editable_mode=compat
	# hydra/sweeper=optuna: the plugin pins optuna<3, whose sqlite storage fails on SQLAlchemy 2
	# (pyproject.toml): installed without its pins, against optuna 5.0
	$(BIN)/pip install -q --no-deps hydra-optuna-sweeper==1.3.0
	# Editable installs hide namespace packages from Hydra's plugin scan (hydra#2359):
	# a plain path entry makes launchers/hydra_plugins visible as a regular directory.
	$(BIN)/python -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'distgnn_launchers.pth').write_text('$(CURDIR)/launchers\\n')"
	# numba kernels, compiled once per machine into ~/.cache/distgnn (DISTGNN_CACHE_DIR): jobs start warm
	$(BIN)/python -m app.jit
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install the project with pinned versions

run: install  ## the main job: python -m app +experiment=$(EXP)
	$(BIN)/python -m app +experiment=$(EXP)

lint: install  ## ruff lint + format check
	$(BIN)/ruff check app launchers tests bench tools
	$(BIN)/ruff format --check app launchers tests bench tools

typecheck: install  ## mypy on app/ against .mypy-baseline.txt, which only shrinks (tools/typecheck.py; --update after fixing)
	$(BIN)/python tools/typecheck.py

format: install  ## ruff autofix + format
	$(BIN)/ruff check --fix app launchers tests bench tools
	$(BIN)/ruff format app launchers tests bench tools

test: lint typecheck  ## lint, type check, then the test suite but the `long` tests (unit + multi-process: docs/testing.md)
	$(BIN)/python -m pytest tests -m "not long" --durations=25

test-fast: install  ## the tests that start no process (not dist, long or gpu): under 2 minutes
	$(BIN)/python -m pytest tests -m "not dist and not long and not gpu"

test-long: install  ## the `long` tests: minute-long fault scenarios and the variants make test leaves out
	$(BIN)/python -m pytest tests -m long --durations=15

test-gpu: install  ## the CUDA tests (models, layer-wise inference, 1- and 2-trainer jobs on a GPU); skipped, visibly, without CUDA
	$(BIN)/python -m pytest tests -m gpu -rs

CHAOS_N ?= 30
# SIGSTOP trials: a stopped child is named when its heartbeat stops (app.launch.heartbeat).
CHAOS_SIGNALS ?= KILL,STOP,TERM
chaos: install  ## fault injection: CHAOS_N random CHAOS_SIGNALS (KILL,STOP,TERM) on a 2-node job, then the long fault scenarios
	DISTGNN_CHAOS_TRIALS=$(CHAOS_N) DISTGNN_CHAOS_SIGNALS=$(CHAOS_SIGNALS) \
	DISTGNN_CHAOS_REPORT=outputs/chaos/trials.json $(BIN)/python -m pytest tests/chaos -s
	$(MAKE) --no-print-directory test-long

# PyG's own tests of torch_geometric.distributed (test/distributed at PYG_COMMIT, taken from a
# bare clone PYG_GIT into a temp dir, never into this repo) with their imports rewritten to
# app.distributed. METIS gate forced: our Partitioner brings its own METIS (pymetis). Tests
# that use pyg-lib as their reference sampler fail without it (docs/pyg-compat.md).
# PYG_TESTS="test_rpc.py test_partition.py" runs only those files.
PEER_HARNESS ?= $(CURDIR)/tools/compat/run_peer_dist_tests.sh
PYG_COMMIT   ?= 5c6461b2305ad068a6d61165b3c55852a11aaa41
compat-pyg: install  ## opt-in: PyG's test/distributed against app.distributed (needs PYG_GIT=<bare clone of pytorch_geometric>; PYG_LIB_WHEEL=<pyg-lib wheel> installs PyG's reference sampler first; PYG_TESTS=<files> runs a subset)
	@test -n "$(PYG_GIT)" || { echo "compat-pyg: set PYG_GIT to a bare clone: git clone --bare https://github.com/pyg-team/pytorch_geometric"; exit 2; }
	@test -r "$(PEER_HARNESS)" || { echo "compat-pyg: harness not found: $(PEER_HARNESS) (set PEER_HARNESS)"; exit 2; }
	@if [ -n "$(PYG_LIB_WHEEL)" ]; then \
	  test -r "$(PYG_LIB_WHEEL)" || { echo "compat-pyg: PYG_LIB_WHEEL=$(PYG_LIB_WHEEL) is not a readable file (build it: docs/pyg-compat.md)"; exit 2; }; \
	  $(BIN)/pip install -q --no-deps "$(PYG_LIB_WHEEL)"; \
	fi
	@$(BIN)/python -c "import pyg_lib" 2>/dev/null || echo "compat-pyg: pyg-lib cannot be imported (not installed, or built for another torch / C++ ABI): the 39 sampler tests will fail on PyG's reference sampler (set PYG_LIB_WHEEL=, see docs/pyg-compat.md)"
	PYG_GIT=$(abspath $(PYG_GIT)) PEER_METIS_GATE=force PEER_PATCH_LOAD=1 \
	PEER_TIMEOUT=$${PEER_TIMEOUT:-90} PEER_CLEAN=$${PEER_CLEAN:-1} PEER_FILES="$(PYG_TESTS)" \
	bash $(PEER_HARNESS) $(abspath $(BIN)/python) app.distributed $(PYG_COMMIT)

bench: install  ## benchmarks: table on stdout, records in outputs/bench/results.json
	$(BIN)/python -m bench

bench-products: install  ## opt-in: ogbn-products scale (2.45M nodes): partitioning, then the 2-node training job measured per process
	$(BIN)/python -m bench.partition --products
	$(BIN)/python -m bench.products_job --repeat=3

bench-papers: install  ## opt-in, root + netns: papers100M's shape at 1/10 (11.1M nodes) on 4 testbed hosts: generation, stream partition, 1 epoch + evaluation; table in docs/benchmarks.md
	$(BIN)/python -m bench.papers

bench-gpu: install  ## opt-in, needs CUDA: products scale, [10,5] 2x128 and [15,10,5] 3x256, CPU vs GPU sampler side by side (BENCH_GPU_ARGS: bench/gpu.py's)
	$(BIN)/python -m bench.gpu $(BENCH_GPU_ARGS)

ui: install  ## MLflow UI over the default store; prints http://127.0.0.1:5000 once it answers
	$(BIN)/python -m app.tracking.ui serve --store $(CURDIR)/outputs/mlflow.db --port 5000

ui-check: install  ## opt-in, needs chromium: the newest experiment's chart view opens on loss and train.monitor, above the fold (docs/mlflow.md); screenshot in outputs/ui-check/
	$(BIN)/python -m app.tracking.ui check --store $(CURDIR)/outputs/mlflow.db --out $(CURDIR)/outputs/ui-check

clean:  ## remove outputs (runs, partitions, benches, MLflow store); keeps data/ and .venv
	rm -rf outputs/* && touch outputs/.gitkeep
	@if [ -d data ]; then echo "kept data/ ($$(du -sh data | cut -f1) of datasets: make clean-data removes them) and .venv"; \
	else echo "kept .venv (no data/ to keep)"; fi

clean-data:  ## remove downloaded and generated datasets (data/)
	rm -rf data
