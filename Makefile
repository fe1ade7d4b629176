# Every target sets itself up: a fresh clone needs only python3 (3.11+) and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
comma  := ,

.PHONY: run plan simulate test lock image image-test lint typecheck imports docs docs-check unit fuzz journal-test cluster-test bench bench-sim bench-gpu bench-translate bench-preemption \
        bench-e2e bench-scale clean help \
        cluster-build cluster-up cluster-down cluster-status

help:  ## List the targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The virtualenv is installed from uv.lock, exactly (every package pinned with its hashes;
# uv removes what the lock no longer holds), and rebuilt only when the lock or pyproject.toml
# changes. uv itself is locked as a dev tool: a new .venv gets it first with pip, checked
# against the lock's own hashes (deploy/lock/uv-requirement.py). --locked fails when
# pyproject.toml changed without `make lock`.
$(STAMP): pyproject.toml uv.lock
	@test -x $(BIN)/uv || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && \
	  $(PYTHON) deploy/lock/uv-requirement.py > $(VENV)/uv-requirement.txt && \
	  $(BIN)/python -m pip install --quiet --no-deps --require-hashes -r $(VENV)/uv-requirement.txt; }
	$(BIN)/uv sync --quiet --locked --extra dev
	touch $(STAMP)

lock:  ## Bump uv.lock to the newest versions pyproject.toml allows (then make test, and commit it)
	@test -x $(BIN)/uv || $(MAKE) $(STAMP)
	$(BIN)/uv lock --upgrade

run: $(STAMP) cluster-build  ## The main job: local GPU cluster + controller (and KubeRay, the training-operator); example gangs queued and admitted
	deploy/local-cluster/operators/build.sh kuberay training-operator
	$(BIN)/queue-controller local-cluster demo

plan: $(STAMP)  ## Plan admission offline over the bundled example cluster dump
	$(BIN)/queue-controller plan

simulate: $(STAMP)  ## Replay the bundled GPU workload under three policies; report in ./simulation-report
	$(BIN)/queue-controller simulate

test: lint typecheck imports docs-check unit journal-test cluster-test image-test  ## The whole test suite (what .ci/run calls)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# The documentation site: docs/ and mkdocs.yml (MkDocs and Material come with the dev extras).
docs: $(STAMP)  ## Serve the documentation site at http://127.0.0.1:8000, rebuilt as pages change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Strict: a link to a missing page or anchor, or a page left out of mkdocs.yml's nav, fails.
# The site goes to ./site (git-ignored).
docs-check: $(STAMP)  ## Build the documentation site strictly into ./site
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

unit: $(STAMP)  ## Tests that need no cluster and no PostgreSQL server
	$(BIN)/pytest -q -m "not cluster and not postgres and not image"

# The fuzz property of issue 22 for long (the unit tests run it at a fixed budget):
# FUZZ_EXAMPLES examples per property, from a random seed (SEED=N replays one run);
# strict: a reader's own exception, even caught by the cycle's boundary, fails it.
FUZZ_EXAMPLES ?= 20000
fuzz: $(STAMP)  ## Fuzz every object of the real dumps for long (FUZZ_EXAMPLES, SEED)
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "fuzz seed: $$seed (make fuzz SEED=$$seed replays it)"; \
	QC_FUZZ_STRICT=1 QC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/fuzz/test_fuzz_objects.py \
	  --hypothesis-seed=$$seed --hypothesis-show-statistics

# The journal's tests on a throwaway PostgreSQL server (installed with apt-get if it is
# missing), stopped and removed whether the tests pass, fail or are interrupted.
journal-test: $(STAMP)  ## The journal's tests on a real PostgreSQL server
	@trap 'tests/journal/postgres.sh stop' EXIT; trap 'exit 130' INT TERM; \
	url=$$(tests/journal/postgres.sh start) && \
	QC_TEST_POSTGRES_URL="$$url" $(BIN)/pytest -q -m postgres

# The cluster tests start their own control plane (state in .cluster-test) and
# stop it when they finish, pass or fail; the tests of Ray and Kubeflow workloads start
# the real operators against it, so those are built too (once: cached behind their pins).
TEST_OPERATORS := kuberay training-operator
cluster-test: $(STAMP) cluster-build  ## Smoke tests on the real local control plane (with KubeRay and the training-operator)
	deploy/local-cluster/operators/build.sh $(TEST_OPERATORS)
	$(BIN)/pytest -q -m cluster

# The image: deploy/image/build.sh picks buildah, podman or docker (BUILDER=...), and makes a
# Debian base with mmdebstrap where the public base cannot be pulled. See docs/image.md.
image: $(STAMP)  ## Build the controller's image, queue-controller:<version>, from uv.lock, with no network inside
	deploy/image/build.sh

# The image built and run from it against its own local cluster with the chart's RBAC, and
# the chart helm-installed. Where no builder is found, buildah is installed from Debian (root
# with apt-get, as journal-test installs PostgreSQL); where that cannot be, the tests skip
# and pytest's summary says why.
image-test: $(STAMP) cluster-build  ## The image: built twice and compared, run with the chart's rights, helm-installed
	$(BIN)/pytest -q -m image

cluster-build:  ## Build the control plane from pinned Go modules (only when a pin changes); OPERATORS=kuberay,training-operator builds those too
	deploy/local-cluster/build.sh
	$(if $(OPERATORS),deploy/local-cluster/operators/build.sh $(subst $(comma), ,$(OPERATORS)))

cluster-up: $(STAMP) cluster-build  ## Start the local GPU cluster; SIZE="h100=800 l4=50" resizes pools; DRA=0 publishes no ResourceSlices; OPERATORS=kuberay,training-operator runs those
	$(BIN)/queue-controller local-cluster up $(foreach s,$(SIZE),--size $(s)) $(if $(filter 0,$(DRA)),--no-dra) $(if $(OPERATORS),--operators $(OPERATORS))

cluster-down: $(STAMP)  ## Stop the local cluster and remove its state
	$(BIN)/queue-controller local-cluster down

cluster-status: $(STAMP)
	$(BIN)/queue-controller local-cluster status

bench: $(STAMP)  ## Admission-cycle benchmarks: fast engine against the naive one; with topology against without; DRA claims against nvidia.com/gpu
	$(BIN)/python -m tests.bench.bench_cycle
	$(BIN)/python -m tests.bench.bench_topology
	$(BIN)/python -m tests.bench.bench_dra

bench-sim: $(STAMP)  ## Simulator benchmark: bundled 5,000 jobs, and 20,000 jobs on 500 nodes
	$(BIN)/python -m tests.bench.bench_simulate

bench-gpu: $(STAMP)  ## GPU health benchmark: one DCGM read for 100 to 5,000 nodes, admission with faults
	$(BIN)/python -m tests.bench.bench_gpuhealth

bench-translate: $(STAMP)  ## One controller cycle: translating the raw objects against the core's cycle
	$(BIN)/python -m tests.bench.bench_translate

bench-preemption: $(STAMP)  ## An admission cycle with preemption considered, against without, at 1,000 and 5,000 nodes, flat and in a three-level cohort tree
	$(BIN)/python -m tests.bench.bench_preemption

# Each system in turn on its own freshly started local cluster (state under the report
# folder, never .cluster), the cluster taken down after it; report in ./bench-e2e-report.
bench-e2e: $(STAMP) cluster-build  ## One GPU trace through queue-controller, Kueue and no queue, side by side; ARGS="--nodes 200 --jobs 400", SYSTEMS=queue-controller
	$(BIN)/python -m tests.bench.e2e $(ARGS) $(if $(SYSTEMS),--systems $(SYSTEMS))

# The controller alone at scale on its own local cluster; report in ./bench-e2e-scale.
bench-scale: $(STAMP) cluster-build  ## The controller's cycle at 2,000 nodes, 20,000 pods, 5,000 pending gangs: each phase, against the core; ARGS="--nodes 500"
	$(BIN)/python -m tests.bench.e2e.scale $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site

# deploy/: the plain manifests are rendered from the Helm chart with the helm that
# cluster-build builds (deploy/local-cluster/bin/helm); tests/deploy/ checks they are current.
.PHONY: manifests
manifests: cluster-build  ## Render deploy/manifests/{queue-controller,node-agent}.yaml from the Helm chart
	deploy/manifests/render.sh > deploy/manifests/queue-controller.yaml.tmp
	mv deploy/manifests/queue-controller.yaml.tmp deploy/manifests/queue-controller.yaml
	deploy/manifests/render.sh node-agent > deploy/manifests/node-agent.yaml.tmp
	mv deploy/manifests/node-agent.yaml.tmp deploy/manifests/node-agent.yaml

# The chart's unit tests (tests/deploy/) run helm, so `unit` builds it first (a no-op
# when no pin changed); a fresh clone's `make test` reaches unit before cluster-test.
unit: cluster-build
