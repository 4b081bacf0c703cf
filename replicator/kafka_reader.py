"""Kafka offset ranges read by the decode tasks themselves (librdkafka, through confluent-kafka).

Spark's Kafka source plans each micro-batch (the offset ranges, in its checkpoint) and still decides what a
batch is; with ``source.kafka.reader: direct`` (``auto``: wherever the job's options allow it) the decode
tasks read those ranges from the brokers themselves instead of receiving the records through Spark's JVM.
Measured on the 5M catch-up (benchmarks/LOG.md, "Kafka catch-up"): Spark's source copied each record five
times in the JVM (consumer, projections, the Arrow writer to the Python worker), +38 CPU-s over the files
source; here a record is fetched by librdkafka and handed to Arrow once.

The records are those Spark's source would have given: the same ranges (start inclusive, end exclusive),
every record in them (NULL values too), read uncommitted unless ``kafka.isolation.level`` says otherwise
(the Java consumer's default, which Spark keeps). Offsets the brokers no longer have (retention) fail the
task with Spark's own data-loss wording (sources.data_loss_message), or, under ``fail_on_data_loss:
false``, are skipped: the manifest's first offset read then shows the gap (``replicator status``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pyarrow as pa

# The consumers' fetch.max.wait.ms, Spark's (sources.kafka_options) and the decode tasks' own: at the head
# of the log the broker holds a fetch until new records come or this long passes (Kafka's 500 ms made every
# partition read of a streaming batch wait: benchmarks/LOG.md). Reads of records that are there never wait.
FETCH_MAX_WAIT_MS = "10"

# Kafka's Java client options (``kafka.``-prefixed in the job file, as Spark's source takes them) that mean
# the same to librdkafka under the same name. A job with any other ``kafka.`` option (a JKS trust store, a
# JAAS file, a callback class) is read through Spark's source, where the Java client understands it.
SAME_NAME = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "ssl.endpoint.identification.algorithm",
        "client.id",
        "isolation.level",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.min.bytes",
        "receive.buffer.bytes",
        "send.buffer.bytes",
        "request.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "client.rack",
        "sasl.kerberos.service.name",
    }
)
# Options of Spark's source, or Java-client tuning with no librdkafka meaning for a read of known ranges.
IGNORED = frozenset(
    {
        "max.poll.records",
        "fetch.max.wait.ms",  # (below: ours)
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "default.api.timeout.ms",
        "metadata.max.age.ms",
    }
)
# A JAAS line for the PLAIN and SCRAM mechanisms: its user name and password are librdkafka's settings.
_JAAS_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")  # fmt: skip
# How long a range may go without a record before the task gives up (the brokers unreachable, or the
# range's records gone in a way that no data-loss check saw): Spark's source waits as long per poll.
STALL_SECONDS = 120.0
FETCH = 10_000  # records per consume() call
# librdkafka's fetch-ahead queue per partition. Its default, up to 100,000 records or 64 MB, is past a
# range's end the next batch's data, fetched and parsed for nothing (1M records in ranges of half a
# partition: 3.0-3.4 -> 2.3-2.7 CPU-s with 4 MB). A queue smaller than a consume() call's records made
# every call wait for a fetch: 16 MB holds ~20,000 of the benchmark's 800-byte records (a decode task of
# 62,500 records, one core: 1.02-1.06 -> 0.95-1.00 s; the broker ~0.2 µs a record less, fewer fetches).
QUEUED_MESSAGES = FETCH
QUEUED_KBYTES = 16_384
WAIT = 0.05  # seconds a consume() call waits for FETCH records before it returns fewer


class RangeUnreadable(RuntimeError):
    pass


def unreadable_options(options: dict[str, str]) -> list[str]:
    """The job's ``kafka.`` options that stop a direct read (client_settings gives None for them)."""
    return [k for k in options if k.startswith("kafka.") and client_settings({k: options[k]}) is None]


def client_settings(options: dict[str, str]) -> dict[str, str] | None:
    """librdkafka's settings for the job's Kafka options (sources.kafka_options: ``kafka.``-prefixed), or
    None when one of them has no librdkafka equivalent here (the job reads through Spark's source)."""
    settings: dict[str, str] = {}
    for name, value in options.items():
        if not name.startswith("kafka."):
            continue
        key = name.removeprefix("kafka.")
        if key in SAME_NAME:
            settings[key] = value
        elif key == "sasl.jaas.config":
            credentials = _jaas(value)
            if credentials is None:
                return None
            settings.update(credentials)
        elif key == "ssl.truststore.location" and value.endswith((".pem", ".crt")):
            settings["ssl.ca.location"] = value
        elif key == "ssl.truststore.type" and value.upper() == "PEM":
            continue
        elif key not in IGNORED:
            return None
    settings.setdefault("isolation.level", "read_uncommitted")  # the Java client's default
    settings["fetch.wait.max.ms"] = options.get("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
    return settings


def _jaas(line: str) -> dict[str, str] | None:
    import shlex

    words = shlex.split(line.strip().rstrip(";"))
    if not words or words[0] not in _JAAS_MODULES:
        return None
    values = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    if "username" not in values or "password" not in values:
        return None
    return {"sasl.username": values["username"], "sasl.password": values["password"]}


def range_schema() -> pa.Schema:
    """A decode task's input row when it reads Kafka itself: one offset range of one partition."""
    import pyarrow as pa

    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("start", pa.int64()),
            ("end", pa.int64()),
        ]
    )


def records_schema() -> pa.Schema:
    """What Spark's Kafka source gives the decode tasks (the columns sources.kafka_inputs selects)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("value", pa.binary()),
            ("key", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
        ]
    )


class Records(NamedTuple):
    """Records of one partition as read: the Python objects librdkafka's client gave (the values as bytes,
    NULL for a tombstone), before any Arrow. The decoder reads them as they are: the values through an
    Arrow binary column and back cost ~0.7-1.1 µs a record, a third of the read (benchmarks/LOG.md)."""

    values: list[Any]
    keys: list[Any]
    topic: str
    partition: int
    offsets: list[int]

    @property
    def num_rows(self) -> int:
        return len(self.offsets)

    def tuples(self) -> Iterator[tuple[Any, str, int, int, Any]]:
        """(raw, source, partition, offset, key), as dialects.base.record_tuples gives a table's rows."""
        n = len(self.offsets)
        return zip(
            self.values,
            repeat(self.topic, n),
            repeat(self.partition, n),
            self.offsets,
            self.keys,
            strict=True,
        )

    def with_values(self) -> Records:
        """The records that have a value (a NULL value, Debezium's tombstone after a delete, is none)."""
        if None not in self.values:
            return self
        kept = [i for i, v in enumerate(self.values) if v is not None]
        return Records(
            [self.values[i] for i in kept],
            [self.keys[i] for i in kept],
            self.topic,
            self.partition,
            [self.offsets[i] for i in kept],
        )

    def batch(self) -> pa.RecordBatch:
        """As Spark's Kafka source gives records (records_schema)."""
        return _batch(self.values, self.keys, self.topic, self.partition, self.offsets)


def read_ranges(
    settings: dict[str, str], ranges: pa.RecordBatch, fail_on_data_loss: bool, rows: int
) -> Iterator[pa.RecordBatch]:
    """The records of each range (range_schema rows), in offset order, ``rows`` at most per batch."""
    for records in read_records(settings, ranges, fail_on_data_loss, rows):
        yield records.batch()


def read_records(
    settings: dict[str, str], ranges: pa.RecordBatch, fail_on_data_loss: bool, rows: int
) -> Iterator[Records]:
    """read_ranges' records as the client gave them (Records)."""
    consumer = _take(settings)
    try:
        for topic, partition, start, end in zip(
            *(ranges.column(n).to_pylist() for n in ("topic", "partition", "start", "end")), strict=True
        ):
            if end > start:
                yield from _read(consumer, topic, partition, start, end, fail_on_data_loss, rows)
    except BaseException:
        consumer.close()
        raise
    _give_back(settings, consumer)


# Consumers kept between a Python worker's tasks: a new one per task cost ~25 ms of a ~160 ms read of
# 62,500 records (its threads, the bootstrap connection, the metadata; benchmarks/LOG.md), on the task's
# core. Keyed by the settings (one job's brokers); taken by one read at a time, closed on any failure.
_IDLE: dict[tuple[tuple[str, str], ...], list[Any]] = {}
_IDLE_LOCK = threading.Lock()


def _take(settings: dict[str, str]) -> Any:
    key = tuple(sorted(settings.items()))
    with _IDLE_LOCK:
        others = [c for k in list(_IDLE) if k != key for c in _IDLE.pop(k)]  # another job's, or a test's
        idle = _IDLE.get(key)
        consumer = idle.pop() if idle else None
    for old in others:
        old.close()
    return consumer if consumer is not None else _consumer(settings)


def close_idle() -> None:
    """Every kept consumer closed (librdkafka's threads ended): a process that exits next has none left."""
    with _IDLE_LOCK:
        idle = [c for consumers in _IDLE.values() for c in consumers]
        _IDLE.clear()
    for consumer in idle:
        consumer.close()


def _give_back(settings: dict[str, str], consumer: Any) -> None:
    with _IDLE_LOCK:
        _IDLE.setdefault(tuple(sorted(settings.items())), []).append(consumer)


def _consumer(settings: dict[str, str]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **settings,
            "group.id": "replicator-direct",  # no group membership: ranges are assigned, nothing committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "max.partition.fetch.bytes": settings.get("max.partition.fetch.bytes", str(8 * 2**20)),
            # librdkafka fetches ahead of the application (QUEUED_KBYTES), refilled without the default
            # 1 s pause once the queue is full.
            "queued.min.messages": QUEUED_MESSAGES,
            "queued.max.messages.kbytes": QUEUED_KBYTES,
            "fetch.queue.backoff.ms": 5,
        }
    )


def _lost(topic: str, partition: int, start: int, end: int) -> RangeUnreadable:
    # Spark's wording (KafkaDataConsumer), which sources.data_loss_message turns into the job's error line.
    return RangeUnreadable(
        f"Could not read records in offset [{start}, {end}) for topic partition {topic}-{partition}: the "
        "brokers no longer have them (failOnDataLoss)"
    )


def _read(
    consumer: Any, topic: str, partition: int, start: int, end: int, fail_on_data_loss: bool, rows: int
) -> Iterator[Records]:
    from confluent_kafka import KafkaError, Message, TopicPartition

    # Unbound methods mapped over a poll's messages: no attribute lookup per record.
    value_of, key_of = Message.value, Message.key
    offset_of: Callable[[Any], int] = Message.offset  # type: ignore[assignment]  # (a record's: never None)
    gone = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
    position = _first(consumer, topic, partition, start, end, fail_on_data_loss)
    if position >= end:
        return
    consumer.assign([TopicPartition(topic, partition, position)])
    values: list[Any] = []
    keys: list[Any] = []
    offsets: list[int] = []
    last = position - 1
    stalled = time.monotonic()
    try:
        while last < end - 1:
            # No more than the range still holds: a call asking for more waits its whole WAIT at the head of
            # the log (each range of a small batch read ~50 ms longer than it took; benchmarks/LOG.md).
            messages = consumer.consume(min(FETCH, end - 1 - last), WAIT)
            if not messages:
                if time.monotonic() - stalled > STALL_SECONDS:
                    raise RangeUnreadable(
                        f"no record of topic {topic!r} partition {partition} after offset {last} in "
                        f"{STALL_SECONDS:.0f} s (its range in this batch: {start} to {end - 1})"
                    )
                continue
            stalled = time.monotonic()
            done = reset = False
            batch_values = list(map(value_of, messages))
            if None in batch_values:  # a NULL value (a tombstone), or an event: the partition's end, an error
                kept = []
                for m in messages:
                    error = m.error()
                    if error is None:
                        kept.append(m)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        done = done or m.offset() >= end  # (the offsets left: transaction markers)
                    elif error.code() in gone:  # deleted by retention while this task read them
                        reset = True
                        break
                    elif not error.retriable():
                        raise RangeUnreadable(f"reading {topic}-{partition} at {last + 1}: {error.str()}")
                messages = kept
                batch_values = list(map(value_of, messages))
            batch_offsets = list(map(offset_of, messages))  # (increasing within a poll)
            if batch_offsets and (batch_offsets[0] <= last or batch_offsets[-1] >= end):
                # Left out: records read again after a reset (each record once), and records past the
                # range's end, produced after Spark planned it (the next batch's).
                done = done or batch_offsets[-1] >= end
                inside = [i for i, o in enumerate(batch_offsets) if last < o < end]
                messages = [messages[i] for i in inside]
                batch_values = [batch_values[i] for i in inside]
                batch_offsets = [batch_offsets[i] for i in inside]
            if batch_offsets:
                values += batch_values
                keys += map(key_of, messages)
                offsets += batch_offsets
                last = batch_offsets[-1]
            if reset and not done:  # from the oldest offset the brokers still have after the last one read
                position = _first(consumer, topic, partition, last + 1, end, fail_on_data_loss)
                consumer.assign([TopicPartition(topic, partition, position)])
                done = position >= end
            while len(offsets) >= rows:
                if len(offsets) == rows:  # (the usual case: a consume() call's records) no copy
                    yield Records(values, keys, topic, partition, offsets)
                    values, keys, offsets = [], [], []
                    break
                yield Records(values[:rows], keys[:rows], topic, partition, offsets[:rows])
                del values[:rows], keys[:rows], offsets[:rows]
            if done:
                break
        if offsets:
            yield Records(values, keys, topic, partition, offsets)
    finally:
        consumer.unassign()


def _first(consumer: Any, topic: str, partition: int, start: int, end: int, fail_on_data_loss: bool) -> int:
    """Where to start reading: ``start``, unless the brokers no longer have it (deleted by retention): then
    the task fails (Spark's data-loss error), or with ``fail_on_data_loss: false`` reads from the oldest
    offset they have (the manifest's first offset read shows the gap)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:  # (librdkafka retries within the timeout: a broker restarting meanwhile is waited for)
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=STALL_SECONDS)
    except KafkaException as exc:
        raise RangeUnreadable(
            f"the brokers did not give the offsets of topic {topic!r} partition {partition} within "
            f"{STALL_SECONDS:.0f} s: {exc.args[0].str() if exc.args else exc}"
        ) from None
    if start >= low:
        return start
    if fail_on_data_loss:
        raise _lost(topic, partition, start, min(low, end))  # the offsets lost, not the whole range
    return low


def _batch(
    values: list[Any], keys: list[Any], topic: str, partition: int, offsets: list[int]
) -> pa.RecordBatch:
    import numpy as np
    import pyarrow as pa

    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            _binary(values),
            _binary(keys),
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([topic])).cast(
                pa.string()
            ),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(offsets, pa.int64()),
        ],
        schema=records_schema(),
    )


def _binary(items: list[Any]) -> pa.Array:
    """Python bytes as an Arrow binary array: joined into one buffer with their offsets beside, 0.12 µs a
    record against 0.7 for ``pa.array`` (which checks each object's type; 800-byte records, measured). A
    list holding a None (a NULL key or value) or over 2 GiB in all (int32 offsets) takes ``pa.array``."""
    import numpy as np
    import pyarrow as pa

    n = len(items)
    if None in items:  # all of them: records without a key (canal's, by default), 0.13 µs a record as a list
        return pa.nulls(n, pa.binary()) if items.count(None) == n else pa.array(items, pa.binary())
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, n), out=offsets[1:])
    if offsets[-1] > 2**31 - 1:
        return pa.array(items, pa.binary())
    data = b"".join(items)
    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )
