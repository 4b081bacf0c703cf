from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# `ci` (default): reproducible examples, no deadline (an example may run Spark jobs). `soak` (make soak):
# many random examples; the Spark-backed properties (tests/test_properties.py) scale up with it.
settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "soak", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("REPLICATOR_SHARED", REPO.parent / "shared"))
FIXTURES = REPO / "tests" / "fixtures"


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
def shared() -> Path:
    if not SHARED.exists():
        pytest.fail(f"the shared/ folder with seeds, vectors and schemas is expected at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One Apache Kafka broker (KRaft, from the jars `replicator jars` fetched) on 127.0.0.1 for the run;
    tests make their own topics (tests/kafka_helpers.py). Stopped by its process group at the end."""
    from replicator.broker import kafka_broker
    from tests.kafka_helpers import Kafka

    with kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield Kafka(broker)
