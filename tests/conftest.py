from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# `ci` (default): reproducible examples, no deadline (an example may run Spark jobs). `soak` (make soak):
# many random examples, new ones each run (the seed is printed); the Spark-backed properties
# (tests/test_properties.py and the replay and history ones) scale up with it.
settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "soak", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak"


def pytest_configure(config: pytest.Config) -> None:
    """Under soak, new random examples each run from one seed: HYPOTHESIS_SEED (or --hypothesis-seed) when
    given, else a fresh one; printed first and last, so a run that found something can be drawn again."""
    if not SOAK:
        return
    from hypothesis import core

    given = config.getoption("--hypothesis-seed", None) or os.environ.get("HYPOTHESIS_SEED")
    seed = int(given) if given else random.randrange(2**32)
    core.global_force_seed = seed  # what hypothesis' own --hypothesis-seed sets
    os.environ["HYPOTHESIS_SEED"] = str(seed)  # the crash tests' extra random seed (tests/test_crash.py)


def _seed_line() -> str:
    seed = os.environ["HYPOTHESIS_SEED"]
    return f"hypothesis seed {seed} (again: make soak HYPOTHESIS_SEED={seed})"


def pytest_report_header(config: pytest.Config) -> str | None:
    return _seed_line() if SOAK else None


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if SOAK:
        terminalreporter.write_line(_seed_line())


REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

# `make test` runs two workers (pytest-xdist, --dist loadfile): each work unit is a module (its module
# fixtures start once), handed out in the order below, longest first, so that the two workers end together
# (xdist's own order, most tests first, left the few long crash files for the end, on one worker). A `::`
# entry is a test (each of its parameters) made a work unit of its own: a long test of a module without
# module fixtures, whose parameters then run on both workers. Unlisted modules follow in collection order.
# The order is one run's durations (benchmarks/LOG.md, "make test's time"); measure again with --durations
# when it goes stale.
LONGEST = [
    "tests/test_crash.py::test_crash_points",  # each ~160 s on a quiet machine: six Spark starts
    "tests/test_mirror_job.py::test_killed_between_two_tables_commits_then_rerun_applies_once",
    "tests/test_mirror_job.py::test_available_now_twice_processes_only_new_files",
    "tests/test_mirror_job.py::test_killed_between_two_new_tables_file_commits_then_rerun_applies_once",
    "tests/test_crash.py",
    "tests/test_catalog.py",
    "tests/test_kafka_crash.py",
    "tests/test_history_crash.py",
    "tests/test_interrupts.py",
    "tests/test_clean_exit.py",
    "tests/test_mirror_job.py",
    "tests/test_cli_commands.py",
    "tests/test_writers.py",
    "tests/hostile/test_values.py",
    "tests/test_deletion_vectors.py",
    "tests/test_session.py",
    "tests/test_kafka.py",
    "tests/hostile/test_operator.py",
    "tests/test_engine.py",
    "tests/test_deadletters.py",
    "tests/test_history_documents.py",
    "tests/test_history.py",
    "tests/test_bootstrap.py",
    "tests/test_progress.py",
]


def _work_unit(nodeid: str) -> tuple[int, str]:
    """(rank in LONGEST, xdist work unit) of a test."""
    module = nodeid.split("::")[0]
    for rank, entry in enumerate(LONGEST):
        if "::" in entry and (nodeid == entry or nodeid.startswith(entry + "[")):
            return rank, nodeid  # a unit of its own
        if entry == module:
            return rank, module
    return len(LONGEST), module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _work_unit(item.nodeid)[0])  # stable: a module's tests keep their order


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """--dist loadfile's scheduler, its units those of LONGEST, handed out in collection order."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)[1]

    config.option.loadscopereorder = False  # xdist would put the units with most tests first
    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (2 threads, few shuffle partitions)."""
    os.environ.setdefault("REPLICATOR_SPARK_MASTER", "local[2]")
    # The Kafka connector and Delta Lake for Spark in the one session (replicator.jars; make install).
    os.environ.setdefault("REPLICATOR_SPARK_JARS", "all")
    from replicator.spark import get_spark

    session = get_spark()
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One Apache Kafka broker (KRaft, from the jars `replicator jars` fetched) on 127.0.0.1 for the run;
    tests make their own topics (tests/kafka_helpers.py). Stopped by its process group at the end."""
    from replicator.testing.broker import kafka_broker
    from tests.kafka_helpers import Kafka

    with kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield Kafka(broker)


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One SeaweedFS S3 server on 127.0.0.1 for the run (replicator.testing.s3server: built from the Go
    module proxy once, cached outside the work tree), with bucket ``lake``. The AWS variables that reach
    it are set in this process's environment, so the storage layer, delta-rs and the ``replicator``
    commands the tests start all use it; each test takes a prefix of its own. A test that also runs the
    engine in the session's Spark asks for ``s3`` before ``spark``: Spark's Python workers inherit the
    environment the session starts in."""
    from replicator import storage
    from replicator.testing.s3server import SeaweedServer, ServerUnavailable

    try:
        server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs")).start()
    except ServerUnavailable as exc:
        pytest.fail(str(exc))
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    storage.activate(storage.Storage())
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        storage.activate(storage.Storage())


@pytest.fixture
def in_process(spark, monkeypatch, tmp_path):
    """``replicator`` in this process on the tests' session (its ``main``); the command's frozen start
    (gc.freeze) given back after."""
    import gc

    import replicator.spark
    from replicator.commands.cli import main

    monkeypatch.setattr(replicator.spark, "get_spark", lambda config: spark)
    monkeypatch.chdir(tmp_path)
    yield main
    gc.unfreeze()
    gc.enable()
