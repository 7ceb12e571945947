# The README's two commands: `make drill` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --quiet --no-input

.PHONY: setup drill test plan clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# torch first and pinned: the on-disk CPU build; a range would pull GBs of CUDA wheels.
	$(PIP) install "torch==2.13.0" 2>&1 | grep -v "is ignored: it is neither" || true
	$(PIP) install -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import torch, etcd, pulumi, lab.jobspec; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

setup: $(STAMP)

drill: $(STAMP)
	$(BIN)/elastic-lab drill

test: $(STAMP)
	$(BIN)/python -m pytest

plan: $(STAMP)
	$(BIN)/elastic-lab plan --stack aks-dev

clean:
	rm -rf $(VENV) runs build *.egg-info
