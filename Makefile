# Stagedoor jobs. `make run` runs the worker, `make test` passes the tests;
# each creates or refreshes .venv itself (uv, installed into .tools/ from PyPI).
PYTHON ?= python3
UV := .tools/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: run test lint typecheck bench lab clean venv

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --extra dev --python $(PYTHON) --quiet
	touch $@

venv: $(VENV)/.synced

run: venv
	$(PY) -m worker

test: venv
	$(PY) -m pytest -q

lint: venv
	$(PY) -m ruff check worker opslib tests benchmarks
	$(PY) -m ruff format --check worker opslib tests benchmarks
	$(PY) -m mypy

bench: venv
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .tools .data
