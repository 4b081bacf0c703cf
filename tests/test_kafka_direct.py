"""The decode tasks read a Kafka batch's offset ranges themselves (replicator.kafka_reader, ``source.kafka.
reader``): the records Spark's Kafka source would give, with the real broker. The other Kafka tests run
through this reader (``auto``); here what differs from Spark's source: transaction markers and aborted
records at a range's end, the same mirror through both readers, the ranges split into tasks, and which job
options it takes."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st

from replicator import kafka_reader
from tests.helpers import canal, job, order
from tests.kafka_helpers import kafka_source, run_job
from tests.test_kafka import mirrored_ids, state_rows

pytestmark = pytest.mark.kafka


def _insert(i: int) -> bytes:
    return json.dumps(canal("INSERT", [order(i)], es=1_700_000_000_000 + i)).encode()


def test_transactions_markers_and_aborted_records_end_a_range(spark, kafka, tmp_path):
    """A transactional producer: each commit leaves a control marker at an offset of its own (never
    delivered), an abort leaves its records (read under read_uncommitted, the Java client's default, as by
    Spark's source) and its marker. The topic ends on a marker, so the batch's range ends there: the task
    must see the range done, not wait for a record that never comes."""
    topic = kafka.topic("tx", 1)
    producer = Producer({"bootstrap.servers": kafka.servers, "transactional.id": f"{topic}-p"})
    producer.init_transactions(30)
    for ids, commit in (([1, 2], True), ([3], False), ([4, 5], True)):
        producer.begin_transaction()
        for i in ids:
            producer.produce(topic, _insert(i), partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    assert kafka.end_offsets(topic) == {0: 8}  # 5 records and 3 markers

    uncommitted = job(tmp_path / "u", source=kafka_source(kafka, "canal-json", [topic]))
    run_job(spark, uncommitted)
    assert mirrored_ids(tmp_path / "u") == [1, 2, 3, 4, 5]
    committed = job(
        tmp_path / "c",
        source=kafka_source(
            kafka, "canal-json", [topic], options={"kafka.isolation.level": "read_committed"}
        ),
    )
    run_job(spark, committed)
    assert mirrored_ids(tmp_path / "c") == [1, 2, 4, 5]
    for root, n in ((tmp_path / "u", 5), (tmp_path / "c", 4)):
        batches = state_rows(root / "state", "batches")
        assert sum(b["records_in"] for b in batches) == n


@pytest.mark.parametrize("reader", ["direct", "spark"])
def test_both_readers_give_the_same_mirror_and_account(spark, kafka, tmp_path, reader):
    """Three partitions, several batches (max_offsets_per_trigger), updates and deletes across batches, a
    NULL-value record: each reader's mirror and per-partition account equal the model."""
    topic = kafka.topic(f"both-{reader}", 3)
    records = [(None, _insert(i), i % 3) for i in range(60)]
    records += [(None, json.dumps(canal("DELETE", [order(i)], es=1_700_000_001_000 + i)).encode(), i % 3)
                for i in range(0, 60, 7)]  # fmt: skip
    records.append((b"k", None, 1))
    kafka.produce(topic, records)
    config = job(
        tmp_path,
        source=kafka_source(kafka, "canal-json", [topic], max_offsets_per_trigger=20, reader=reader),
        trigger={"interval": "100ms"},
    )
    run_job(spark, config)
    assert mirrored_ids(tmp_path) == [i for i in range(60) if i % 7]
    batches = state_rows(tmp_path / "state", "batches")
    assert len(batches) >= 4
    assert sum(b["records_in"] for b in batches) == len(records)
    assert sum(b["filtered"] for b in batches) == 1  # the NULL value
    ends = kafka.end_offsets(topic)
    parts = state_rows(tmp_path / "state", "kafka_partitions")
    for p, end in ends.items():
        mine = sorted((r for r in parts if r["partition"] == p), key=lambda r: r["start"])
        assert mine[0]["start"] == 0 and mine[-1]["end"] == end
        assert all(a["end"] == b["start"] for a, b in itertools.pairwise(mine))
        assert all(r["lost_from"] is None for r in mine)


def test_ranges_are_split_and_packed_into_tasks(spark):
    from replicator.sources import KAFKA_RECORDS_PER_TASK, kafka_range_frame

    def tasks(ranges):  # type: ignore[no-untyped-def]
        frame = kafka_range_frame(spark, ranges)
        rows = frame.collect()
        return frame.rdd.getNumPartitions(), sorted((r.topic, r.partition, r.start, r.end) for r in rows)

    parallelism = spark.sparkContext.defaultParallelism
    big = KAFKA_RECORDS_PER_TASK * parallelism * 3
    n, rows = tasks({("t", 0): (100, 100 + big)})  # one partition: still a task per core
    assert n == parallelism and rows[0][2] == 100 and rows[-1][3] == 100 + big
    assert all(a[3] == b[2] for a, b in itertools.pairwise(rows))  # contiguous, no overlap
    n, rows = tasks({("t", p): (0, 10) for p in range(4)} | {("t", 9): (5, 5)})  # small: one task
    assert n == 1 and rows == [("t", p, 0, 10) for p in range(4)]  # the empty range left out
    n, rows = tasks({})
    assert rows == []


def test_which_job_options_a_direct_read_takes():
    from pydantic import ValidationError

    from replicator.config import KafkaOptions
    from replicator.kafka_reader import client_settings

    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p w";'
    settings = client_settings(
        {
            "kafka.bootstrap.servers": "b:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": jaas,
            "kafka.max.poll.records": "2000",
            "failOnDataLoss": "true",
        }
    )
    assert settings is not None
    assert (settings["sasl.username"], settings["sasl.password"]) == ("u", "p w")
    assert settings["security.protocol"] == "SASL_SSL" and "max.poll.records" not in settings
    assert settings["isolation.level"] == "read_uncommitted"
    jks = {"kafka.ssl.truststore.location": "/etc/kafka/trust.jks"}
    assert client_settings(jks) is None
    assert client_settings({"kafka.sasl.jaas.config": "com.example.Custom required;"}) is None
    # auto: read through Spark's source where librdkafka has no equivalent; direct: refused with the name
    assert KafkaOptions(bootstrap_servers="b", topics=["t"], options=jks).direct_settings() is None
    with pytest.raises(ValidationError, match=r"ssl\.truststore\.location"):
        KafkaOptions(bootstrap_servers="b", topics=["t"], options=jks, reader="direct")


@given(st.lists(st.one_of(st.none(), st.binary(max_size=64)), max_size=50))
def test_records_bytes_become_the_binary_column_they_were(items):
    """The reader's record values and keys as Arrow (one joined buffer, or pa.array where one is NULL):
    every byte and every NULL as the consumer gave them."""
    column = kafka_reader._binary(items)
    column.validate(full=True)
    assert column.type == pa.binary()
    assert column.to_pylist() == items


def test_a_workers_consumer_reads_one_range_after_another(kafka):
    """A Python worker keeps its consumer between tasks (kafka_reader._take): ranges of other partitions
    and of the same one, read one after another by the kept consumer, give exactly their own records; a
    read stopped before its end closes the consumer instead of keeping it half-read."""
    topic = kafka.topic("kept", 2)
    values = [_insert(i) if i != 7 else None for i in range(40)]
    kafka.produce(topic, [(b"k%d" % i, values[i], i % 2) for i in range(40)])
    settings = kafka_reader.client_settings({"kafka.bootstrap.servers": kafka.servers})

    def ranges(*rows: tuple[int, int, int]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(
            [{"topic": topic, "partition": p, "start": s, "end": e} for p, s, e in rows],
            schema=kafka_reader.range_schema(),
        )

    def read(*rows: tuple[int, int, int]) -> list[tuple[int, int, bytes | None, bytes | None]]:
        return [(r.partition, o, k, v) for r in kafka_reader.read_records(settings, ranges(*rows), True, 4)
                for o, k, v in zip(r.offsets, r.keys, r.values, strict=True)]  # fmt: skip

    def expected(partition: int, start: int, end: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
        ids = [i for i in range(40) if i % 2 == partition][start:end]
        return [(partition, start + n, b"k%d" % i, values[i]) for n, i in enumerate(ids)]

    kafka_reader._IDLE.clear()
    assert read((0, 3, 11)) == expected(0, 3, 11)
    (kept,) = kafka_reader._IDLE[tuple(sorted(settings.items()))]
    assert read((1, 0, 6), (0, 0, 2)) == expected(1, 0, 6) + expected(0, 0, 2)  # NULL value at 1/3
    assert read((1, 2, 20)) == expected(1, 2, 20)
    assert kafka_reader._IDLE[tuple(sorted(settings.items()))] == [kept]  # the one consumer throughout
    records = kafka_reader.read_records(settings, ranges((0, 0, 20)), True, 4)
    first = next(records)
    assert first.with_values().batch().column("value").to_pylist() == [v for *_, v in expected(0, 0, 4)]
    records.close()  # a task stopped mid-range: its consumer is not kept
    assert kafka_reader._IDLE[tuple(sorted(settings.items()))] == []
