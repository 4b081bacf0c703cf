"""The tests' Kafka: one real broker for the session (replicator.testing.broker, conftest's
``kafka`` fixture),
topics per test, and records produced as the capture tools produce them (their record keys and partitions)."""

from __future__ import annotations

import itertools
import json
import shutil
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replicator.testing.broker import Broker

_topics = itertools.count(1)
# How the files source takes a fixture folder; the Kafka topic gets the same records in the same order.
# A fixture folder's files that are not golden inputs: the provenance notes and the script that made them.
NOT_INPUTS = ("_NOTES.json", "make_fixtures.py")


@dataclass
class Kafka:
    broker: Broker

    @property
    def servers(self) -> str:
        return self.broker.bootstrap_servers

    def admin(self):  # type: ignore[no-untyped-def]
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.servers, "log_level": 0})

    def topic(self, name: str = "t", partitions: int = 3, config: dict[str, str] | None = None) -> str:
        """A new topic (a unique name from ``name``) with ``partitions`` partitions, created and ready."""
        from confluent_kafka.admin import NewTopic

        topic = f"{name}-{next(_topics)}"
        admin = self.admin()  # kept while its futures run (a collected client cancels them)
        created = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        for future in created.values():
            future.result(timeout=30)
        return topic

    def recreate(self, topic: str, partitions: int) -> None:
        """``topic`` deleted and created again under its name (a new topic ID), empty and ready."""
        import time

        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        [described] = admin.describe_topics(TopicCollection([topic])).values()
        old_id = described.result(timeout=30).topic_id
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 60
        while True:  # the deletion completes in the background: the name is taken until it has
            try:
                for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
                    future.result(timeout=30)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        while True:  # and the new topic is in the broker's metadata (the old one's ID stays a while)
            try:
                [described] = admin.describe_topics(TopicCollection([topic])).values()
                if described.result(timeout=30).topic_id != old_id:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} re-created, but its new topic ID not described within 60 s")
            time.sleep(0.2)

    def add_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        admin = self.admin()
        for future in admin.create_partitions([NewPartitions(topic, total)]).values():
            future.result(timeout=30)

    def produce(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int | None]]
    ) -> list[tuple[str, int, int]]:
        """(key, value, partition or None) records, in order; returns each one's (topic, partition, offset).

        ``partition`` None: the Java client's default partitioner (murmur2 of the key), as Kafka Connect
        and the vendors' Java producers place a keyed record. Idempotent and acks=all: no record twice."""
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.servers,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 5,
                "log_level": 0,
            }
        )
        placed: list[tuple[str, int, int] | None] = []

        def report(index: int) -> Callable[[Any, Any], None]:
            def done(error: Any, message: Any) -> None:
                if error is not None:
                    raise RuntimeError(f"record {index} not produced into {topic}: {error}")
                placed[index] = (message.topic(), message.partition(), message.offset())

            return done

        for index, (key, value, partition) in enumerate(records):
            placed.append(None)
            extra = {} if partition is None else {"partition": partition}
            producer.produce(topic, value=value, key=key, on_delivery=report(index), **extra)
            producer.poll(0)
        if producer.flush(30):
            raise RuntimeError(f"records not delivered to {topic} within 30 s")
        assert all(p is not None for p in placed)
        return placed  # type: ignore[return-value]

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's next offset (the high watermark)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": "offsets", "log_level": 0})
        try:
            partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions
            }
        finally:
            consumer.close()


def kafka_source(kafka: Kafka, dialect: str, topics: list[str] | None = None, **options: Any) -> dict:
    """A job file's ``source`` for these topics (or ``topic_pattern=``) on the tests' broker."""
    subscription = {"topics": topics} if topics else {}
    return {
        "type": "kafka",
        "dialect": dialect,
        "kafka": {"bootstrap_servers": kafka.servers, **subscription, **options},
    }


def run_job(spark, config) -> None:  # type: ignore[no-untyped-def]
    """The mirror job as ``replicator mirror --available-now`` runs it, in this process's session."""
    from replicator.commands.runner import MirrorJob

    MirrorJob(config, spark).run(available_now=True)


# ---- a fixture folder as a stream, and as the capture tool puts it in a topic ---------------------------


def stream_folder(dialect: str, fixtures: Path, folder: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """The dialect's golden inputs copied into ``folder``, modification times in name order: the files
    source reads them in that order (one file after another), as the topic holds them."""
    folder.mkdir(parents=True)
    names = sorted(
        p.name
        for p in (fixtures / dialect).iterdir()
        if p.is_file() and ".expected." not in p.name and p.name not in (*NOT_INPUTS, *leave_out)
    )
    for n, name in enumerate(names):
        shutil.copy(fixtures / dialect / name, folder / name)
        stamp = 1_700_000_000 + n
        import os

        os.utime(folder / name, (stamp, stamp))
    return folder


def _message(raw: bytes) -> dict | None:
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if isinstance(document, list):
        document = document[0] if document and isinstance(document[0], dict) else None
    return document if isinstance(document, dict) else None


def table_name(raw: bytes) -> str:
    """``database.table`` of a message, by the names the formats use (canal, DRS: database/table; river,
    CloudCanal: db/table; DRS Mongo: db/coll; CKafka format one: DATABASE/TABLE)."""
    m = _message(raw) or {}
    database = next((m[k] for k in ("database", "db", "DATABASE") if isinstance(m.get(k), str)), "")
    table = next((m[k] for k in ("table", "coll", "TABLE") if isinstance(m.get(k), str)), "")
    return f"{database}.{table}"


def canal_placement(raw: bytes, partitions: int) -> tuple[bytes | None, int | None]:
    """Canal's MQ producer with ``canal.mq.partitionHash=.*\\..*`` (canal's MQ docs): a table's messages, DDL
    and DML alike, go to the partition its ``database.table`` hashes to, with no record key
    (CanalKafkaProducer sends ``null``): a table's order is kept, as the mirror needs."""
    return None, zlib.crc32(table_name(raw).encode()) % partitions


def named_placement(raw: bytes, partitions: int) -> tuple[bytes | None, int | None]:
    """DRS ("by hash of database.table", its Kafka partition policy) and CloudCanal: the table's name is
    the record key and its hash the partition."""
    name = table_name(raw)
    return name.encode(), zlib.crc32(name.encode()) % partitions


def debezium_placement(raw: bytes, partitions: int) -> tuple[bytes | None, int | None]:
    """Debezium (Kafka Connect, JsonConverter): the key is the row's primary key struct as JSON, and the
    producer's default partitioner (murmur2 of the key) places it; a table without a key: a NULL key. The
    fixtures' tables are keyed by ``id`` where they have one (Debezium's tutorial schema)."""
    m = _message(raw) or {}
    payload = m.get("payload", m) if isinstance(m.get("payload"), dict) else m
    image = payload.get("after") or payload.get("before")
    if isinstance(image, dict) and "id" in image:
        return json.dumps({"id": image["id"]}, separators=(",", ":")).encode(), None
    return None, 0  # no key: Connect's round robin; pinned here so that the order is the files'


def dts_placement(raw: bytes, partitions: int) -> tuple[bytes | None, int | None]:
    """DTS's Kafka delivery keeps a topic's records in partition 0 by default (its "deliver all data to
    partition 0" policy: the only one that keeps DDL and DML of every table in order); no key."""
    return None, 0


PLACEMENT: dict[str, Callable[[bytes, int], tuple[bytes | None, int | None]]] = {
    "canal-json": canal_placement,
    "ckafka": canal_placement,  # CKafka's connector writes canal's shape and placement
    "river-canal": canal_placement,  # go-mysql-river's canal-shaped messages
    "cloudcanal-json": named_placement,
    "drs-json": named_placement,
    "drs-json-c": named_placement,
    "drs-mongo": named_placement,
    "debezium": debezium_placement,
    "dts-avro": dts_placement,
}
