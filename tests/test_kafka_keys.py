"""The Kafka record key gives the primary key where the value names none (Debezium; issue 14, item 2).

Through the Kafka batch path (sources.kafka_inputs, decoded by Spark tasks) with a DataFrame of the Kafka
schema, then the real engine; no connector needed."""

from __future__ import annotations

import json

import pytest

from replicator.dialects.record_keys import key_columns
from tests.helpers import Runner, job

KAFKA_SCHEMA = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"


def debezium(table: str, op: str, after: dict | None, before: dict | None, pos: int) -> bytes:
    source = {"connector": "mysql", "db": "shop", "table": table, "file": "mysql-bin.000003", "pos": pos}
    message = {
        "before": before,
        "after": after,
        "source": {**source, "row": 0},
        "op": op,
        "ts_ms": 1700000000000,
    }
    return json.dumps(message).encode()


def test_debezium_rows_take_their_key_from_the_kafka_record_key(spark, tmp_path):
    plain = [  # key {"id": ...}
        (b'{"id": 1}', debezium("orders", "c", {"id": 1, "name": "a"}, None, 10)),
        (b'{"id": 2}', debezium("orders", "c", {"id": 2, "name": "b"}, None, 11)),
        (b'{"id": 1}', debezium("orders", "u", {"id": 1, "name": "a2"}, {"id": 1, "name": "a"}, 12)),
        (b'{"id": 2}', debezium("orders", "d", None, {"id": 2, "name": "b"}, 13)),
        (b'{"id": 2}', None),  # the tombstone after a delete: not a record
    ]
    schema = {
        "type": "struct",
        "fields": [{"field": "sku", "type": "string"}, {"field": "n", "type": "int32"}],
    }
    enveloped = [  # Kafka Connect JsonConverter with schemas: {"schema": ..., "payload": {...}}
        (
            json.dumps({"schema": schema, "payload": {"sku": "x", "n": n}}).encode(),
            debezium("stock", "c", {"sku": "x", "n": n, "qty": 5 * n}, None, 20 + n),
        )
        for n in (1, 2)
    ]
    rows = [(k, v, "dbz", 0, offset, None) for offset, (k, v) in enumerate(plain + enveloped)]
    frame = spark.createDataFrame(rows, KAFKA_SCHEMA)
    config = job(
        tmp_path,
        source={
            "type": "kafka",
            "dialect": "debezium",
            "kafka": {"bootstrap_servers": "unused:9092", "topics": ["dbz"]},
        },
    )
    runner = Runner(spark, config)
    summary = runner.engine.process(frame, 0)
    assert runner.dead_letters() == []
    assert summary.dead_letters == 0
    assert (summary.records_in, summary.filtered) == (7, 1)  # the tombstone: read, filtered, counted
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [("1", "a2")]  # untyped (no schema): text
    stock = [(r["sku"], r["n"], r["qty"]) for r in runner.mirror(table="stock")]
    assert stock == [("x", "1", "5"), ("x", "2", "10")]


@pytest.mark.parametrize(
    ("key", "columns"),
    [
        (b'{"id": 1}', ("id",)),
        (b'{"a": 1, "b": "x"}', ("a", "b")),
        (b'{"schema": {"type": "struct"}, "payload": {"id": 7}}', ("id",)),
        (b'"orders"', None),  # a plain string key (a partition hash): no columns
        (b"\x00\x01avro", None),
        (b"{}", None),
    ],
)
def test_key_columns(key, columns):
    assert key_columns(key) == columns


def test_every_element_of_an_array_value_takes_the_record_key():
    """The key reaches each message of a value holding an array of them; a key-less record gives none."""
    import pyarrow as pa

    from replicator.dialects.base import decode
    from replicator.sources import raw_schema

    value = (
        b"["
        + debezium("orders", "c", {"id": 1}, None, 1)
        + b","
        + debezium("orders", "c", {"id": 2}, None, 2)
    )
    value += b"]"
    records = pa.table(
        [[value, value], [b'{"id": 1}', None], ["t", "t"], [0, 0], [1, 2]], schema=raw_schema()
    )
    events = decode(records, "debezium").to_pylist()
    assert [e["primary_key"] for e in events] == [["id"], ["id"], [], []]


def test_a_small_kafka_batch_is_read_by_fewer_tasks(spark, tmp_path):
    """A batch with fewer records than sources.KAFKA_RECORDS_PER_TASK per partition (the offsets Spark
    planned for it, in its checkpoint) is decoded by one task per that many records, each record once; a
    job that sets how Spark splits partitions (``minPartitions``) keeps its tasks."""
    from pathlib import Path

    from tests.helpers import canal, order

    rows = [
        (
            None,
            json.dumps(canal("INSERT", [order(10 * p + o)], es=1_700_000_000_000 + o)).encode(),
            "t",
            p,
            o,
            None,
        )
        for p in range(4)
        for o in range(3)
    ]
    frame = spark.createDataFrame(rows, KAFKA_SCHEMA).repartition(4, "partition")
    # Spark's Kafka source reads this frame (the decode tasks would read the ranges from a broker)
    kafka = {"bootstrap_servers": "unused:9092", "topics": ["t"], "reader": "spark"}

    def runner(folder: str, **options: str) -> Runner:
        config = job(
            tmp_path / folder,
            source={"type": "kafka", "dialect": "canal-json", "kafka": {**kafka, "options": options}},
        )
        run = Runner(spark, config)
        checkpoint = Path(run.engine.state.checkpoint)  # as Spark writes them: the last line is the offsets
        (checkpoint / "sources" / "0").mkdir(parents=True)
        (checkpoint / "sources" / "0" / "0").write_text('v1\n{"t":{"0":0,"1":0,"2":0,"3":0}}\n')
        (checkpoint / "offsets").mkdir()
        (checkpoint / "offsets" / "0").write_text(
            'v1\n{"batchWatermarkMs":0}\n{"t":{"0":3,"1":3,"2":3,"3":3}}\n'
        )
        return run

    small = runner("small")
    assert small.engine._inputs(frame, 0)[1].rdd.getNumPartitions() == 1
    summary = small.engine.process(frame, 0)
    assert (summary.records_in, summary.applied) == (12, 12)
    assert sorted(int(r["id"]) for r in small.mirror()) == sorted(
        10 * p + o for p in range(4) for o in range(3)
    )
    split = runner("split", minPartitions="4")
    assert split.engine._inputs(frame, 0)[1].rdd.getNumPartitions() == 4
    assert small.engine._inputs(frame, 1)[1].rdd.getNumPartitions() == 4  # a batch Spark did not plan
