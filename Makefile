# replicator: `make demo` and `make test` are the whole set-up (Python 3.11+, Java 17+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo demo-live test test-fast test-cluster test-s3 s3-server e2e mariadb postgresql lint format docs reference bench soak fuzz clean

install: $(STAMP) ## create .venv with the `replicator` command and the dev tools

# Re-runs only when pyproject.toml changes; pyspark (~450 MB) is downloaded once and cached by pip.
$(STAMP): pyproject.toml replicator/jars/pom.xml
	@command -v java >/dev/null || { echo "Java 17+ is required by Spark (java not found on PATH)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# Bytecode written now: a driver and every Python worker otherwise compile the package on each start
	@# where PYTHONDONTWRITEBYTECODE is set (container images often set it); ~0.2 s per process.
	$(BIN)/python -m compileall -q replicator jobs
	@# The JVM parts from Maven Central (replicator/jars/pom.xml): the Kafka connector and Delta for Spark, the
	@# Kafka broker and Debezium the tests start. The embedded default (files, delta-rs) needs none of them.
	$(BIN)/replicator jars || echo "replicator: JVM parts not fetched (needs mvn); Kafka sources and delta-spark will say so"
	@# Spark's driver JVM starts ~4 s sooner from a class archive (docs/operations.md); ~45 s, once.
	$(BIN)/replicator jvm-archive || echo "replicator: no JVM class archive; Spark starts without it"
	touch $(STAMP)

demo: install ## mirror the bundled canal-json samples and print the tables
	rm -rf demo-out
	$(BIN)/replicator mirror --config conf/demo.yaml --available-now
	$(BIN)/replicator show --config conf/demo.yaml
	$(BIN)/replicator status --config conf/demo.yaml

# MariaDB from the system's packages where it is missing, as for `make e2e`.
demo-live: install mariadb ## watch a mirror follow a live MariaDB through Debezium and Kafka (Ctrl-C stops it all)
	$(BIN)/python -m replicator.testing.live_demo --folder demo-out/live

# Two test processes (pytest-xdist), each with its own Spark session, a module's tests in one of them
# (module fixtures such as a Kafka broker start once per process), the longest modules first
# (tests/conftest.py, LONGEST); TEST_WORKERS=0 runs them in this one.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: install ## the test suite (real Spark, real Delta tables, a Kafka broker) but the real-parts tiers below
	$(BIN)/python -m pytest -q $(XDIST) -m "not e2e and not s3 and not cluster"

# A master and a worker started from the pyspark package on 127.0.0.1 (replicator/cluster.py): the mirror
# job submitted to it, and `replicator jvm-archive`, whose sample run uses one; with them the other tests
# of Spark applications of their own (`spark-submit`, a second application reading the catalog).
test-cluster: install ## the tests against a real multi-process Spark standalone cluster
	$(BIN)/python -m pytest -q -m cluster

# SeaweedFS (Apache-2.0) built once from the Go module proxy (~10 min of 2 cores; needs Go 1.24+) into
# ~/.cache/replicator/seaweedfs/<version>/weed (replicator/testing/s3server.py), then the `s3` tests (one
# is the end-to-end pipeline's, with mirrors and state on S3: MariaDB too).
test-s3: install mariadb ## the tests against a real S3-compatible server (docs/object-storage.md)
	$(BIN)/python -c "from replicator.testing.s3server import ensure_binary; print(ensure_binary())"
	$(BIN)/python -m pytest -q -m s3

s3-server: install ## run a SeaweedFS S3 server in the foreground (prints its endpoint and AWS variables)
	$(BIN)/python -m replicator.testing.s3server $(S3_DIR)

test-fast: install ## skip the slow (subprocess / crash) tests
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

# MariaDB and PostgreSQL from the system's packages where missing (Debian/Ubuntu; as root, else through sudo).
mariadb:
	@command -v mariadbd >/dev/null || test -x /usr/sbin/mariadbd || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq mariadb-server; }

postgresql:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql; }

# The pipeline's test with mirrors and state on S3 (marked e2e and s3) runs once, in test-s3.
e2e: install mariadb postgresql ## end to end: MariaDB, PostgreSQL -> Debezium (Kafka Connect) -> Kafka -> replicator, mirrors = the database
	$(BIN)/python -m pytest -q -m "e2e and not s3"

lint: install
	$(BIN)/ruff check replicator tests benchmarks jobs fuzz
	$(BIN)/ruff format --check replicator tests benchmarks jobs fuzz

format: install
	$(BIN)/ruff format replicator tests benchmarks jobs fuzz
	$(BIN)/ruff check --fix replicator tests benchmarks jobs fuzz

# The site (mkdocs.yml): --strict fails on a broken link, a missing page or an anchor that is not there;
# the job-file reference must match replicator/config.py (`make reference` writes it again).
docs: install ## build the documentation site into site/ (mkdocs, strict)
	$(BIN)/python -m replicator.commands.reference --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

reference: install ## write docs/reference/job-file.md from the job file's models
	$(BIN)/python -m replicator.commands.reference

soak: install ## long randomized runs: many hypothesis examples through the real engine (not in `make test`)
	@# New random examples each run; the seed is printed (first and last): HYPOTHESIS_SEED=N repeats a run.
	HYPOTHESIS_PROFILE=soak HYPOTHESIS_SEED=$(HYPOTHESIS_SEED) REPLICATOR_EXIT_RUNS=20 $(BIN)/python -m pytest -q --timeout 7200 -o faulthandler_timeout=0 \
	  tests/test_properties.py tests/test_bad_input.py tests/test_crash.py tests/hostile/test_engine_properties.py tests/test_clean_exit.py
	$(BIN)/python benchmarks/soak.py $(SOAK_ARGS)

# Coverage-guided fuzzing (atheris) of the decode entry point, one target per dialect, `auto` and `ddl` (the
# DDL parser), each for FUZZ_SECONDS; work files and any failing input in fuzz-out/<dialect>/
# (docs/operations.md, "Fuzzing").
FUZZ_SECONDS ?= 60
fuzz: install ## fuzz every dialect's decoding, then the apply step, for FUZZ_SECONDS each (default 60)
	$(BIN)/python fuzz/decode.py --dialect all --seconds $(FUZZ_SECONDS)
	$(BIN)/python fuzz/apply.py --seconds $(FUZZ_SECONDS)

bench: install ## the benchmarks of benchmarks/LOG.md (about 100 minutes); results in bench-out/*/result.json
	$(BIN)/python -m compileall -q replicator jobs  # as installed: the bytecode of the current sources
	$(BIN)/python benchmarks/throughput.py
	$(BIN)/python benchmarks/throughput.py --events 5000000 --keys 500000 --per-file 50000 --files-per-trigger 10 --workdir bench-out/throughput-5m
	@# issue 32's catch-up after a bootstrap, and one decode task of it in one process
	$(BIN)/python benchmarks/throughput.py --events 5000000 --keys 500000 --per-file 50000 --files-per-trigger 10 --full --workdir bench-out/throughput-5m-full
	$(BIN)/python benchmarks/decode_task.py --workdir bench-out/throughput-5m-full
	$(BIN)/python benchmarks/uniform.py
	$(BIN)/python benchmarks/uniform_apply.py --lake bench-out/uniform/lake/shop/accounts
	$(BIN)/python benchmarks/cluster_cpu.py
	@# issue 54 item 5: light messages, the submitted driver with replicator's settings, then with the class archive's
	$(BIN)/python benchmarks/cluster_cpu.py --light --properties-file conf/spark-defaults.conf --workdir bench-out/cluster_cpu-light
	$(BIN)/python benchmarks/cluster_cpu.py --light --properties-file $(VENV)/share/replicator/spark-submit.conf --workdir bench-out/cluster_cpu-light-archive
	$(BIN)/python benchmarks/cluster_cpu.py --trivial --properties-file $(VENV)/share/replicator/spark-submit.conf --workdir bench-out/cluster_cpu-trivial
	$(BIN)/python benchmarks/cluster_cpu.py --workers 1 --cores 1 --properties-file $(VENV)/share/replicator/spark-submit.conf --workdir bench-out/cluster_cpu-1x1
	$(BIN)/python benchmarks/cluster_cpu.py --workers 2 --cores 1 --properties-file $(VENV)/share/replicator/spark-submit.conf --workdir bench-out/cluster_cpu-2x1
	$(BIN)/python benchmarks/cluster_cpu.py --workdir bench-out/cluster_cpu-driver-options "--driver-java-options=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1" --conf spark.sql.codegen.wholeStage=false
	$(BIN)/python benchmarks/cluster_cpu.py --workdir bench-out/cluster_cpu-class-archive "--driver-java-options=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1" --conf spark.sql.codegen.wholeStage=false --class-archive
	$(BIN)/python benchmarks/cluster_cpu.py --workdir bench-out/cluster_cpu-daemon "--driver-java-options=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1" --conf spark.sql.codegen.wholeStage=false --conf spark.python.daemon.module=replicator.worker_daemon --class-archive
	$(BIN)/python benchmarks/steady_state.py --keys hot
	$(BIN)/python benchmarks/steady_state.py --keys uniform
	$(BIN)/python benchmarks/deletion_vectors.py
	$(BIN)/python benchmarks/many_tables.py
	$(BIN)/python benchmarks/thousand_tables.py
	$(BIN)/python benchmarks/thousand_tables.py --tables 10000 --events 1000000 --only many --workdir bench-out/ten-thousand-tables
	$(BIN)/python benchmarks/latency.py
	$(BIN)/python benchmarks/latency.py --rate 10000 --tables 100 --workdir bench-out/latency-100-tables
	$(BIN)/python benchmarks/kafka_throughput.py
	$(BIN)/python benchmarks/kafka_latency.py
	$(BIN)/python benchmarks/memory.py
	$(BIN)/python benchmarks/decode_stages.py
	$(BIN)/python benchmarks/decode_instructions.py || echo "decode_instructions: needs valgrind"
	$(BIN)/python benchmarks/history.py --batches 4 --events 50000 --keys 20000
	@# delta-rs against delta-spark (issue 32): locally and on a standalone cluster of 1, then 2 workers of 1 core
	$(BIN)/python benchmarks/writers.py

clean:
	rm -rf demo-out bench-out fuzz-out site .pytest_cache spark-warehouse
