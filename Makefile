# Quickstart: `make demo` and `make test`. Both create .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.specsweep-installed
# On a machine with no GPU take the CPU build of torch (a plain `torch` requirement
# would pull a multi-GB CUDA build); override TORCH to choose another.
TORCH ?= torch==2.13.0

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# The embedded default sweep: local Ray, local MLflow store (.specsweep/mlflow.db), toy pairs.
demo: $(STAMP)
	$(VENV)/bin/specsweep run sweeps/demo.yaml --fresh

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
