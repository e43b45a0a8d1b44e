# floodmark: `make demo` runs the main job, `make test` the whole suite. Both set up what they
# need (the .venv and the Debian zookeeper package) and are idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ZK_JAR := /usr/share/java/zookeeper.jar

.PHONY: setup zookeeper docker-compose fuse kcat test test-fast demo bench lint format clean

setup: $(STAMP) zookeeper docker-compose fuse kcat

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

zookeeper:
	@if [ ! -f $(ZK_JAR) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Debian zookeeper package (its jars run our ZooKeeper)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null) || \
	      { echo "error: apt-get install zookeeper failed; install the Debian package 'zookeeper' (ZooKeeper 3.8 jars in /usr/share/java)"; exit 1; }; \
	  else \
	    echo "error: ZooKeeper jars missing ($(ZK_JAR)); run as root: apt-get install -y zookeeper"; exit 1; \
	  fi; \
	fi
	@command -v java >/dev/null || { echo "error: java not found; install Java 17 (apt-get install -y openjdk-17-jre-headless)"; exit 1; }

# Debian's docker-compose validates docker-compose.yml in the tests (no Docker engine is needed for that).
docker-compose:
	@if ! command -v docker-compose >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Debian docker-compose package (the tests validate docker-compose.yml with it)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null) || \
	      { echo "error: apt-get install docker-compose failed; install the Debian package 'docker-compose'"; exit 1; }; \
	  else \
	    echo "error: docker-compose missing; run as root: apt-get install -y docker-compose"; exit 1; \
	  fi; \
	fi

# FUSE (Debian fuse3: fusermount3; libfuse3-3: the library mfusepy loads) runs devcluster/faulty_fs.py,
# the disk-error fault of `floodmark cluster up --disk-faults`; its tests mount it for real.
fuse:
	@if ! command -v fusermount3 >/dev/null || ! ldconfig -p | grep -q 'libfuse3\.so\.3 '; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Debian fuse3 and libfuse3-3 packages (the disk-error fault's FUSE filesystem)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse3-3 >/dev/null) || \
	      { echo "error: apt-get install fuse3 libfuse3-3 failed; install the Debian packages 'fuse3' and 'libfuse3-3'"; exit 1; }; \
	  else \
	    echo "error: FUSE 3 missing (fusermount3, libfuse3.so.3); run as root: apt-get install -y fuse3 libfuse3-3"; exit 1; \
	  fi; \
	fi

# kcat (Debian; librdkafka inside) is one of the Kafka clients the Kafka listener's tests use as oracles.
kcat:
	@if ! command -v kcat >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Debian kcat package (a Kafka client the Kafka listener's tests run)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null) || \
	      { echo "error: apt-get install kcat failed; install the Debian package 'kcat'"; exit 1; }; \
	  else \
	    echo "error: kcat missing; run as root: apt-get install -y kcat"; exit 1; \
	  fi; \
	fi

# The suite in two runs (docs/design.md "The test suite on two workers"): first the unit,
# simulator, scenario and integration tests on XDIST_WORKERS pytest-xdist workers, a whole test
# file per worker at a time (a module's cluster stays in one process; each worker starts its own
# ZooKeeper), then, one at a time, the rest: chaos runs, the compose cluster and the Spark
# verification, which hold machine-wide things (network namespaces, the Docker engine, a JVM) and
# load the machine on their own.
XDIST_WORKERS ?= 2
PARALLEL_TESTS := tests/unit tests/sim tests/scenarios tests/integration

test: setup
	$(PY) -m pytest -q -p no:cacheprovider -n $(XDIST_WORKERS) --dist loadfile --durations=15 $(PARALLEL_TESTS)
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests $(addprefix --ignore=,$(PARALLEL_TESTS))

test-fast: setup
	$(PY) -m pytest -q -x tests/unit

demo: setup
	$(VENV)/bin/floodmark demo

bench: setup
	$(PY) bench/run_all.py

# A long sweep of the deterministic simulator (docs/operations.md "Simulation"): SIM_SEEDS
# schedules of SIM_STEPS steps on every core; a failure prints the command that replays it.
SIM_SEEDS ?= 0..4999
SIM_STEPS ?= 200
.PHONY: simulate
simulate: $(STAMP)
	$(VENV)/bin/floodmark simulate --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --jobs $$(nproc)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info

# --- the compose cluster on a real engine (docs/docker.md) ----------------------------------------
# compose-up: the Docker engine (docker/engine.sh: Debian's docker.io started by hand), the images
# (docker/images.sh: local Debian-based stand-ins when no registry answers), the cluster, waiting
# for every broker's healthcheck; ends with "bootstrap servers: ...". compose-down: the cluster with
# its volumes, and the engine if compose-up started it. Both idempotent; both need root.
.PHONY: compose-up compose-down compose-images compose-engine-status

compose-up:
	@docker/compose.sh up

compose-down:
	@docker/compose.sh down

compose-images:
	@docker/engine.sh start
	@docker/images.sh

compose-engine-status:
	@docker/engine.sh status
