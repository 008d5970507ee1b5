# Stagedoor jobs. `make run` runs the worker, `make test` passes the tests;
# each creates or refreshes .venv itself (uv, installed into .tools/ from PyPI).
PYTHON ?= python3
UV := .tools/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Compile bytecode at install time and let Python cache it: without .pyc files every
# worker, test process and notebook kernel compiles redis-py, pandas... from source
# at each start (about 0.5 s per worker start here, where PYTHONDONTWRITEBYTECODE=1).
export UV_COMPILE_BYTECODE := 1
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test lint typecheck bench profile lab clean venv container-test compose-test chromium audit fault-episode-60 k8s-check k8s-queues \
	test-redis-floor fault-network-90 faketime

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv

$(VENV)/.synced: pyproject.toml uv.lock Makefile | $(UV)
	$(UV) sync --frozen --all-extras --python $(PYTHON) --quiet
	touch $@

venv: $(VENV)/.synced

run: venv
	WORKER_KINDS=stagedoor.kinds WORKER_QUEUES=critical:6,default:3,bulk:1 METRICS_NAMESPACE=stagedoor $(PY) -m stagedoor.demo

# The tests, then the analysts' notebooks, each against a fresh demo night with its outputs
# compared by nbval (the panel notebook is run by the browser test instead).
test: venv chromium faketime k8s-check
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q
	$(PY) -m pytest -q -p tests.notebooks.nbval_stack --nbval --nbval-current-env \
		--nbval-sanitize-with notebooks/sanitize.cfg --ignore=notebooks/dead_letter_panel.ipynb notebooks

# deploy/k8s/ validated offline: Kubernetes' kinds against kubernetes-validate's schemas (strict), each
# ScaledObject against KEDA's CRD schema kept in deploy/k8s/schemas/ (check-jsonschema), the kustomization
# against the folder, the per-queue files against their templates (docs/operations.md, "On Kubernetes").
k8s-check: venv
	$(PY) scripts/k8s_check.py

# Each queue's worker Deployment and ScaledObject written from deploy/k8s/templates/ (after editing one).
k8s-queues: venv
	$(PY) scripts/k8s_queues.py

# Debian's chromium for the panel's browser test, where this can install it (root with apt-get);
# elsewhere that test skips and says why (under CI=true it fails instead).
chromium:
	@[ -x /usr/bin/chromium ] || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
		echo "could not install chromium: the panel's browser test will skip"

# Debian's faketime (libfaketime) for the skewed-clock tests, where this can install it (root with apt-get);
# elsewhere those tests skip and say why.
faketime:
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends faketime >/dev/null; } || \
		echo "could not install faketime: the skewed-clock tests will skip"

# JupyterLab on notebooks/, against the stack `make run` started (opslib finds it: no URL to type).
lab: venv
	$(PY) -m jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 --no-browser \
		$(if $(filter 0,$(shell id -u)),--allow-root)

lint: venv
	$(PY) -m ruff check worker opslib stagedoor tests benchmarks
	$(PY) -m ruff format --check worker opslib stagedoor tests benchmarks
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# The peers run in virtual environments of their own under benchmarks/.venv/
# (benchmark-only dependencies: benchmarks/requirements/*.txt) and BullMQ in
# benchmarks/bullmq/node_modules (npm); `make bench` installs them itself.
BENCH_PEERS := arq saq rq dramatiq celery

bench: venv $(foreach p,$(BENCH_PEERS),benchmarks/.venv/$(p)/.installed) benchmarks/bullmq/node_modules/.installed
	$(PY) benchmarks/bench.py
	$(PY) benchmarks/producer_bench.py
	$(PY) benchmarks/hot_path.py --flow-cost
	$(PY) benchmarks/hot_path.py --tracing compare --jobs 30000 --runs 15
	$(PY) benchmarks/cluster_bench.py
	$(PY) benchmarks/queues_bench.py
	$(PY) benchmarks/fair_cost.py

# Where one worker process spends its CPU on 20,000 no-op jobs: cProfile's top entries and a
# py-spy flame graph (py-spy, benchmark-only, in benchmarks/.venv/profile) in benchmarks/results/.
profile: venv benchmarks/.venv/profile/.installed
	$(PY) benchmarks/profile_noop.py

benchmarks/.venv/%/.installed: benchmarks/requirements/%.txt | $(UV)
	$(UV) venv --quiet --allow-existing benchmarks/.venv/$* --python $(PYTHON)
	$(UV) pip install --quiet --python benchmarks/.venv/$*/bin/python -r $<
	touch $@

benchmarks/bullmq/node_modules/.installed: benchmarks/bullmq/package.json benchmarks/bullmq/package-lock.json
	cd benchmarks/bullmq && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Known vulnerabilities in uv.lock's pins (pip-audit, PyPI's advisories) and in the benchmark's BullMQ
# (npm audit); says which packages could not be checked when an advisory service does not answer
# (exit 3), rather than reporting them clean.
audit: | $(UV)
	$(PYTHON) scripts/audit.py

# Builds the worker image with podman and runs it against servers of its own,
# offline (root; a few minutes): see the steps in scripts/container-test.sh.
container-test: venv
	scripts/container-test.sh

# Brings up compose.yaml's whole stack with podman-compose (Debian's) on images built here,
# offline (root; a few minutes): see the steps in scripts/compose-test.sh. Not part of `make test`.
compose-test: venv
	scripts/compose-test.sh

# The refused-writes fault tests with 60 s episodes (maxmemory and MISCONF; about 3 minutes); `make test` runs
# them with 6 s episodes. Prints each recovery time (docs/reliability.md).
fault-episode-60: venv
	REFUSAL_EPISODE_S=60 $(PY) -m pytest -q -s tests/faults/test_redis_refuses.py -k "full_redis or snapshot"

# The core queue tests and the network faults again at the lowest redis-py that pyproject.toml allows, in a venv of
# its own (.venv-floor: the locked packages, but that redis); .ci/run runs it after `make test` (about 2 minutes;
# the whole of tests/queue there took 7 minutes on a loaded 2-core machine: FLOOR_TESTS=tests/queue for it).
FLOOR_TESTS ?= tests/queue/test_worker.py tests/queue/test_moves.py tests/queue/test_fence.py \
	tests/queue/test_enqueue.py tests/queue/test_reconnect.py tests/queue/test_refusals.py tests/faults/test_network.py
REDIS_FLOOR := $(shell sed -n 's/.*"redis>=\([0-9.]*\)".*/\1/p' pyproject.toml)
test-redis-floor: | $(UV)
	$(UV) venv --quiet --allow-existing .venv-floor --python $(PYTHON)
	$(UV) export --quiet --frozen --all-extras --no-hashes --no-emit-project | grep -v '^redis==' > .venv-floor/requirements.txt
	$(UV) pip install --quiet --python .venv-floor/bin/python -r .venv-floor/requirements.txt "redis==$(REDIS_FLOOR)"
	.venv-floor/bin/python -c 'import redis; assert redis.__version__ == "$(REDIS_FLOOR)", redis.__version__'
	.venv-floor/bin/python -m pytest -q -p no:cacheprovider $(FLOOR_TESTS)

# The network fault episode of docs/reliability.md: resets every 0.5-3 s for 90 s with two workers (about 2
# minutes); `make test` runs it for 12 s.
fault-network-90: venv
	NETWORK_EPISODE_S=90 $(PY) -m pytest -q -s tests/faults/test_network.py -k resets

clean:
	rm -rf $(VENV) .venv-floor .tools .data
