# Two commands: `make repro` (run the pipeline) and `make test` (run the tests).
# Both create .venv with pip when missing, install the project, make Fashion-MNIST
# available, and are fast no-ops when nothing changed.
SHELL := /bin/bash
VENV := .venv
STAMP := $(VENV)/.installed
FASHION := /usr/share/datasets/fashion-mnist
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup data repro test test-fast bench sweep check-repro clean-venv exp show diff plots audit-example grid fullscale frontier dp memreg

setup: $(STAMP) data

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,dask,dp]'
	@touch $(STAMP)

data:
	@if [ ! -f $(FASHION)/train-images-idx3-ubyte.gz ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's dataset-fashion-mnist"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  else \
	    echo "Fashion-MNIST missing: run 'sudo apt-get install dataset-fashion-mnist'," \
	         "or set data.root in params.yaml to a torchvision root holding FashionMNIST/raw/"; \
	    exit 1; \
	  fi; \
	fi

repro: setup
	dvc repro

# Tests run in a fresh random order each time (pytest-random-order: modules shuffled, and
# the tests inside each), so none may depend on another's leftovers; the first line names
# the seed, and `make test TEST_SEED=N TEST_WORKERS=0` replays that order in one process.
ifndef TEST_SEED
TEST_SEED := $(shell od -An -N3 -tu4 /dev/urandom | tr -d ' ')
endif
RANDOM_ORDER = -p random_order --random-order-bucket=module --random-order-seed=$(TEST_SEED)
# one pytest-xdist worker per core (tests/conftest.py keeps each module with a minute-long
# shared fixture on one worker); `make test TEST_WORKERS=0` runs them in this process
TEST_WORKERS ?= auto
PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
test: setup
	@echo "test order: seed $(TEST_SEED) (make test TEST_SEED=$(TEST_SEED) TEST_WORKERS=0 replays it in one process)"
	python -m pytest -q --durations=10 $(PARALLEL) $(RANDOM_ORDER) $(PYTEST_ARGS)

# the edit loop: every test but the slow ones (DVC pipelines, clusters, wheels, simulations)
test-fast: setup
	@echo "test order: seed $(TEST_SEED) (make test-fast TEST_SEED=$(TEST_SEED) TEST_WORKERS=0 replays it in one process)"
	python -m pytest -q -m "not slow" $(PARALLEL) $(RANDOM_ORDER) $(PYTEST_ARGS)

bench: setup
	python bench/run_all.py

check-repro: setup
	python tools/check_repro.py

clean-venv:
	rm -rf $(VENV)

sweep: setup
	python tools/sweep.py reg_strength 0 0.01 0.1 1 --out plots/sweep_reg
	python tools/sweep.py noise_rate 0 0.01 0.05 --out plots/sweep_noise

# Everyday DVC commands with the venv's dvc and python (no `source .venv/bin/activate` needed):
#   make exp ARGS="-S noise_rate=0.01"   make show   make diff REV=main   make plots
exp: setup
	dvc exp run $(ARGS)

# the headline metrics and the knobs people change (58 columns instead of ~150)
SHOW_KEEP := Experiment|(none|batchnorm|batchnorm_reg|groupnorm|layernorm)\..*|.*_minus_.*|(dataset|arch|arms|noise_rate|ood_rate|reg_strength|seed|seeds|pool_size|train\.epochs|train\.lr|shadow\.n_models)
show: setup
	dvc exp show --md --drop '.*' --keep '$(SHOW_KEEP)' $(ARGS)

diff: setup
	dvc metrics diff $(REV) $(ARGS)

plots: setup
	dvc plots show $(ARGS)

# the worked audit of your own model and data (README "Audit your own model")
audit-example: setup
	cd examples/audit && dvc repro

# the results grid over the zoo (README "The zoo"); resumes: finished cells are kept
grid: setup
	python tools/grid.py

# the full-scale Fashion-MNIST protocol (README "Full-scale Fashion-MNIST"): fullscale.yaml
# over params.yaml, run in a worktree of HEAD, outputs and stage timings to results/fullscale/
fullscale: setup
	python tools/fullscale.py

# the denser, longer privacy-utility frontier (README "Privacy-utility frontier"):
# frontier.yaml over params.yaml, run in a worktree of HEAD, outputs to results/frontier_dense/
frontier: setup
	python tools/fullscale.py --config frontier.yaml --out results/frontier_dense --workdir /tmp/bnmem-frontier

# what to use instead of BN (README "What to use instead of BN"): dp.yaml's arms (GroupNorm
# and DP-SGD at two epsilons beside the default three) over params.yaml, run in a worktree
# of HEAD, outputs to results/dp/
dp: setup
	python tools/fullscale.py --config dp.yaml --out results/dp --workdir /tmp/bnmem-dp

# the memorization regime at 64 shadows (README "The memorization regime"): memreg.yaml over
# params.yaml (pool 10 000, 64 shadows per arm, 3 annealed endpoints), outputs to results/memreg/
memreg: setup
	python tools/fullscale.py --config memreg.yaml --out results/memreg --workdir /tmp/bnmem-memreg
