"""Sources: Spark readStream builders, and what each micro-batch's decode tasks read.

Spark Structured Streaming owns what a batch is (the file source's file lists, Kafka offset ranges) and the
checkpoint that makes a restart resume exactly there. The decode tasks (replicator.decode, on the
executors) then turn a batch into raw records (:func:`raw_schema`: ``raw`` bytes, the Kafka ``key``,
``source``, ``partition``, ``offset``):

- files: Spark lists the batch's files; each task reads its files' bytes with pyarrow's file systems
  (local, S3, GCS, HDFS, Azure), which measured 10x faster than shipping them through ``binaryFile``
  content rows. A path no pyarrow file system opens on the executor fails the batch, naming the path.
- kafka: ``value`` bytes and the record ``key`` (where Debezium puts the primary key) with topic,
  partition and offset, straight from Spark's Kafka source.
"""

from __future__ import annotations

import base64
import binascii
import mmap
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from replicator.jsonl import json_lines
from replicator.kafka_reader import FETCH_MAX_WAIT_MS

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from replicator.config import JobConfig, KafkaOptions

# *.jsonl (or *.ndjson): one message per line; *.json: one document (a message or an array of messages);
# *.avro: one Avro object container file (a record of its own); *.b64: one base64 Avro datum per line
# (a dump of Kafka values). Any letter case (X.JSONL): Hadoop's glob is case-sensitive, hence the classes.
# See docs/configuration.md.
FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".avro", ".b64")


def _any_case(suffix: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in suffix)


FILE_GLOB = "*.{" + ",".join(_any_case(s[1:]) for s in FILE_SUFFIXES) + "}"
# A batch of many small files packs several into one decode task.
MAX_FILE_TASKS = 64


def binary_file_schema() -> StructType:
    """Spark's binaryFile source's columns."""
    import pyarrow as pa

    from replicator.spark import struct

    fields = [("path", pa.string()), ("modificationTime", pa.timestamp("us", tz="UTC"))]
    return struct(pa.schema([*fields, ("length", pa.int64()), ("content", pa.binary())]))


def raw_schema() -> pa.Schema:
    """A raw record: its bytes (a line, a file, a Kafka value), the Kafka record key (NULL for files), and
    its coordinates."""
    import pyarrow as pa

    return pa.schema(
        [
            ("raw", pa.binary()),
            ("key", pa.binary()),
            ("source", pa.string()),
            ("partition", pa.int64()),
            ("offset", pa.int64()),
        ]
    )


# ---- files -------------------------------------------------------------------------------------------------


def split_file(path: str, content: bytes | mmap.mmap) -> tuple[pa.Array, Sequence[int] | np.ndarray]:
    """One file's raw records (a binary array) and their offsets (line numbers, 1-based; 1 for a
    whole-file record). ``content``: the file's bytes, or the file mapped (:func:`map_file`).

    Lines are split on the byte 0x0A alone (:mod:`replicator.jsonl`) and keep their exact bytes (invalid
    UTF-8 included) for the decoder and for dead letters; a trailing CR is dropped; blank lines (JSON
    whitespace alone) are not records. The usual file is split
    by Arrow (:func:`_split_plain`); the others line by line (``bytes.split`` and one ``join`` measured 6x
    faster than NumPy masks over the bytes).
    """
    import pyarrow as pa

    kind = path.rsplit(".", 1)[-1].lower()  # X.JSONL is a .jsonl file
    b64 = kind == "b64"
    plain = None if b64 or kind in ("json", "avro") else _split_plain(content)
    if plain is not None:
        return plain
    content = content if type(content) is bytes else bytes(content)
    if kind in ("json", "avro"):
        if kind == "json" and not content.strip():
            return pa.array([], pa.binary()), []
        return pa.array([content], pa.binary()), [1]
    lines: list[bytes] = []
    numbers: list[int] = []
    for number, line in json_lines(content):
        if b64:
            try:
                line = base64.b64decode(line.strip())
            except (binascii.Error, ValueError):
                pass  # kept as it is: the decoder reports it with the record's bytes
        lines.append(line)
        numbers.append(number)
    return _binary_array(lines), numbers


# What ``bytes.isspace`` calls whitespace: a line starting with one may be blank.
_SPACE_BYTES = tuple(b" \t\n\r\x0b\x0c")


def _split_plain(content: bytes | mmap.mmap) -> tuple[pa.Array, np.ndarray] | None:
    """The usual file (LF line ends, no blank line, no line starting with whitespace) split by Arrow in
    one pass, with no Python step per line (measured 1.5 -> 0.3 µs per line). Anything else: None, and
    the general loop decides line by line."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if content.find(b"\r") >= 0 or not len(content):
        return None
    whole = pa.Array.from_buffers(
        pa.large_binary(),
        1,
        [None, pa.py_buffer(np.array([0, len(content)], np.int64)), pa.py_buffer(content)],
    )
    lines = pc.split_pattern(whole, b"\n").flatten()
    if content[-1:] == b"\n":
        lines = lines.slice(0, len(lines) - 1)
    n = len(lines)
    if n == 0 or pc.min(pc.binary_length(lines)).as_py() == 0:
        return None
    offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset : lines.offset + n]
    first = np.frombuffer(lines.buffers()[2], np.uint8)[offsets]  # each line's first byte
    if np.isin(first, _SPACE_BYTES).any():
        return None
    return lines.cast(pa.binary()), np.arange(1, n + 1, dtype=np.int64)  # the cast raises over 2 GiB


def _binary_from(offsets: np.ndarray, data: bytes) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    n = len(offsets) - 1
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
        )
    large = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return large.cast(pa.binary())  # raises for a record over 2 GiB


def _binary_array(values: list[bytes]) -> pa.Array:
    """A binary array from one joined buffer and its offsets (no per-value Arrow appends)."""
    import numpy as np

    lengths = np.fromiter(map(len, values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _binary_from(offsets, b"".join(values))


def _local_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return None


def read_file(uri: str) -> bytes | None:
    """A file's bytes by the URI Spark listed (None when no pyarrow file system can open it)."""
    local = _local_path(uri)
    if local is not None:
        with open(local, "rb") as f:
            return f.read()
    try:
        from replicator.storage import ObjectPath

        # Through the process's one file system per scheme (the job's storage settings, made once): a new
        # one per file cost a client setup each, and ignored storage.endpoint. (Spark's URIs are encoded.)
        return ObjectPath(unquote(uri.replace("s3n://", "s3a://", 1))).read_bytes()
    except Exception:
        return None


def map_file(uri: str) -> bytes | mmap.mmap | None:
    """A file's bytes for decoding: a local file is memory-mapped, its pages read from the page cache
    where they are. (Reading it copied every page into fresh memory, one page fault each: 0.5-0.7 µs of
    a line's ~16 µs, measured on the benchmark's files.) Landed files do not change (the file source's
    own assumption); others are read (:func:`read_file`)."""
    local = _local_path(uri)
    if local is None:
        return read_file(uri)
    with open(local, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def linked(uri: str, root: str) -> bool:
    """Whether a file the stream listed under the landing folder ``root`` is reached through a symbolic
    link (the file, or a folder between it and ``root``): Spark's file source follows links, and a link
    may point anywhere (``x.jsonl -> /etc/passwd``). Paths outside ``root`` (a bootstrap's snapshot) and
    remote ones are not checked."""
    local = _local_path(uri)
    if local is None:
        return False
    path, top = os.path.normpath(local), os.path.normpath(root)
    if not path.startswith(top + os.sep):
        real = os.path.realpath(top)  # Spark may name the files under the folder's real path
        if not path.startswith(real + os.sep):
            return False
        top = real
    while path != top:
        if os.path.islink(path):
            return True
        path = os.path.dirname(path)
    return False


def file_chunk(path: str, mtime: int, content: bytes | mmap.mmap) -> pa.Table:
    """One file's raw records; partition = the file's modification time (ms), offset = line number."""
    import numpy as np
    import pyarrow as pa

    raw, numbers = split_file(path, content)
    n = len(raw)
    return pa.table(
        [
            raw,
            pa.nulls(n, pa.binary()),
            pa.array([path], pa.string()).take(pa.array(np.zeros(n, np.int32))),
            pa.array(np.full(n, mtime, np.int64)),
            pa.array(np.asarray(numbers, np.int64)),
        ],
        schema=raw_schema(),
    )


def file_records(files: list[tuple[str, int]]) -> pa.Table:
    """Raw records of (path, mtime ms) files, in the given order."""
    import pyarrow as pa

    chunks = []
    for path, mtime in files:
        content = read_file(path)
        if content is None:
            raise OSError(f"cannot read {path}: no file system for it (pyarrow.fs)")
        chunks.append(file_chunk(path, mtime, content))
    return pa.concat_tables(chunks) if chunks else raw_schema().empty_table()


def listing_frame(spark: SparkSession, files: list[tuple[str, int]]) -> DataFrame:
    """A batch's files ((uri, mtime ms)) as a DataFrame of one file per task (up to ``MAX_FILE_TASKS``):
    the executors open and decode them (replicator.decode)."""
    import pyarrow as pa

    from replicator.spark import local_frame

    tasks = max(1, min(len(files), MAX_FILE_TASKS))
    rows = sorted(files, key=lambda f: (f[1], f[0]))
    schema = pa.schema([("path", pa.string()), ("mtime", pa.int64())])
    return local_frame(spark, rows, schema, tasks)


def files_inputs(frame: DataFrame) -> DataFrame:
    """A files micro-batch (binaryFile rows) -> its listing, with the content column pruned away (no
    file's bytes go through the JVM or the driver). Spark's file partitions are the decode tasks: a file
    is never split, small files are packed together (``spark.sql.files.maxPartitionBytes``)."""
    from pyspark.sql import functions as F

    return frame.select("path", F.unix_millis("modificationTime").alias("mtime"))


def files_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    reader = (
        spark.readStream.format("binaryFile").schema(binary_file_schema()).option("pathGlobFilter", FILE_GLOB)
    )
    reader = reader.option("recursiveFileLookup", "true")
    if config.source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(config.source.max_files_per_trigger))
    # Selected here, in the streaming plan: a micro-batch reaches foreachBatch as rows already read, so a
    # projection there would not keep Spark from reading every file's content into the JVM (measured:
    # the content column of a 1M-event batch, 775 MB, went through the JVM for nothing).
    return reader.load(str(config.source.path)).select("path", "modificationTime")


def read_path(path: str) -> pa.Table:
    """The raw records of a file or a folder (recursively, the source's file patterns), read at once (for
    ``decode``, ``bootstrap`` and tests), files in path order."""
    return file_records(file_list(message_files(Path(path))))


def message_files(root: Path) -> list[Path]:
    """A file, or a folder's message files (recursively, FILE_SUFFIXES in any case) in path order."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in FILE_SUFFIXES and p.is_file())


def hidden(name: str) -> bool:
    """A name Spark's file index leaves out (InMemoryFileIndex.shouldFilterOutPathName): ``_x`` (not a
    ``_k=v`` partition folder), ``.x`` and ``x._COPYING_`` -- the conventions for files being written."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


@dataclass
class Landing:
    """A landing folder's files as the stream reads them, and the entries it skips, by reason:
    ``links`` (symbolic links, unless source.follow_symlinks), ``hidden`` (:func:`hidden`), ``other``
    (not a message file: another suffix, not a regular file)."""

    files: list[Path] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=lambda: {"links": [], "hidden": [], "other": []})

    def counts(self) -> dict[str, int]:
        return {reason: len(names) for reason, names in self.skipped.items()}

    def report(self, examples: int = 5) -> dict[str, object]:
        """Counts and a few names (relative to the landing folder) per reason: the log line and status."""
        return {
            "skipped": sum(self.counts().values()),
            **{reason: len(names) for reason, names in self.skipped.items()},
            "examples": {r: sorted(n)[:examples] for r, n in self.skipped.items() if n},
        }


def scan_landing(root: Path, follow_symlinks: bool = False) -> Landing:
    """Walk a landing folder as the stream reads it (:class:`Landing`); a hidden or linked folder counts
    as one skipped entry, its contents are not walked."""
    from replicator.storage import ObjectPath

    found = Landing()
    if isinstance(root, ObjectPath):  # an object store: keys, no links; a hidden part hides what is under it
        for path, _size, _mtime in root.walk_files():
            relative = path.relative_to(root)
            parts = relative.split("/")
            if any(hidden(part) for part in parts):
                found.skipped["hidden"].append(relative)
            elif path.suffix.lower() not in FILE_SUFFIXES:
                found.skipped["other"].append(relative)
            else:
                found.files.append(path)  # type: ignore[arg-type]
        found.files.sort()
        return found
    if not root.is_dir():
        return found
    for folder, dirs, names in os.walk(root, followlinks=follow_symlinks):
        base = Path(folder)
        for name in list(dirs):
            path = base / name
            reason = (
                "hidden" if hidden(name) else "links" if path.is_symlink() and not follow_symlinks else None
            )
            if reason:
                dirs.remove(name)
                found.skipped[reason].append(str(path.relative_to(root)) + "/")
        for name in names:
            path = base / name
            relative = str(path.relative_to(root))
            if hidden(name):
                found.skipped["hidden"].append(relative)
            elif path.is_symlink() and not follow_symlinks:
                found.skipped["links"].append(relative)
            elif path.suffix.lower() not in FILE_SUFFIXES or not path.is_file():
                found.skipped["other"].append(relative)
            else:
                found.files.append(path)
    found.files.sort()
    return found


def file_list(files: list[Path]) -> list[tuple[str, int]]:
    """Files as the stream lists them: ``file:`` URI and modification time (ms), the records' coordinates."""
    return [(f"file:{p.resolve()}", int(p.stat().st_mtime * 1000)) for p in files]


# ---- kafka -------------------------------------------------------------------------------------------------


# The executors' Kafka consumers' fetch.max.wait.ms is kafka_reader.FETCH_MAX_WAIT_MS (Kafka's default:
# 500). Spark's connector reads a partition's range, then asks the broker for the partition's earliest and
# latest offsets on the same connection, where the consumer's own read-ahead fetch waits first: with 500 ms
# every partition read at the head of the log paid up to 500 ms: measured, one task reading the newest 250
# records of 4 partitions took a median 2,464 ms, 484 ms with 10 ms.
# Consumer settings of ours that the admin client (kafka_latest_offsets) does not take.
_CONSUMER_ONLY = ("kafka.fetch.max.wait.ms", "kafka.max.poll.records")


def kafka_options(options: KafkaOptions) -> dict[str, str]:
    """The ``format("kafka")`` options a job file asks for (testable without the connector jars)."""
    built = {
        "kafka.bootstrap.servers": options.bootstrap_servers,
        "startingOffsets": options.starting_offsets,
        "failOnDataLoss": str(options.fail_on_data_loss).lower(),
        "includeHeaders": "false",
        "kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,  # kafka_reader's
    }
    if options.topics:
        built["subscribe"] = ",".join(options.topics)
    else:
        built["subscribePattern"] = str(options.topic_pattern)
    if options.max_offsets_per_trigger:
        built["maxOffsetsPerTrigger"] = str(options.max_offsets_per_trigger)
    built.update(KAFKA_CONSUMER_DEFAULTS)
    built.update(options.options)
    return built


# The executors' Kafka consumers, unless the job file sets them. Spark's consumer asks the broker for the
# partition's earliest and latest offsets (two ListOffsets round trips) after every poll
# (InternalKafkaConsumer.fetch), and a poll returns at most max.poll.records (500): 2,000 takes a whole
# default fetch (max.partition.fetch.bytes, 1 MB: ~1,250 records of 800 bytes) in one poll, with no more
# memory held. Measured on 1M canal-json records (benchmarks/LOG.md, "Kafka catch-up"): Spark's JVM
# -1.7 CPU-s, the broker -1.9 CPU-s. Larger fetches (8 MB) cost more in young collections than they saved.
KAFKA_CONSUMER_DEFAULTS = {"kafka.max.poll.records": "2000"}


# Records of a small Kafka batch per decode task: a batch of fewer records than its partitions would give
# tasks has its partitions read together by fewer tasks. Measured on the latency benchmark's batches (1,000
# records over 4 partitions, 2 shared cores, read where the records are there): 4 tasks took a median
# 406 ms, 2 tasks 338 ms, 1 task 291 ms: a task's fixed part (its turn in a Python worker, its change-log and
# event files, its results) outweighs decoding its 250 records (~8 ms on a quiet core).
KAFKA_RECORDS_PER_TASK = 2_000


def kafka_inputs(frame: DataFrame, records: int | None = None, partitions: int | None = None) -> DataFrame:
    """A Kafka micro-batch as it is (value, key, topic, partition, offset): Spark's Kafka partitions are
    the decode tasks, or, for a batch of ``records`` (planned, over ``partitions`` Kafka partitions) too few
    for them, one task per :data:`KAFKA_RECORDS_PER_TASK` reads several partitions in turn (Spark's
    ``coalesce``: no shuffle, each record read once)."""
    # The connector's columns as they are (key and value binary, partition int, offset bigint): the decode
    # tasks cast them (decode._kafka). Columns by name, not expressions: a cast built through py4j cost the
    # driver ~20 ms of every batch.
    selected = frame.select("value", "key", "topic", "partition", "offset")
    if records is None or partitions is None:
        return selected
    tasks = max(1, -(-records // KAFKA_RECORDS_PER_TASK))
    return selected.coalesce(tasks) if tasks < partitions else selected


def kafka_range_frame(spark: SparkSession, ranges: dict[tuple[str, int], tuple[int, int]]) -> DataFrame:
    """A Kafka batch's offset ranges (topic, partition) -> (start, end exclusive) as the decode tasks' input
    when they read the records themselves (replicator.kafka_reader): a range larger than the batch's share
    of a core is split (a one-partition topic still decodes on every core), small ones go together, one task
    per :data:`KAFKA_RECORDS_PER_TASK` records at least."""
    from replicator.kafka_reader import range_schema
    from replicator.spark import local_frame

    live = [(t, p, start, end) for (t, p), (start, end) in sorted(ranges.items()) if end > start]
    total = sum(end - start for _t, _p, start, end in live)
    piece = max(KAFKA_RECORDS_PER_TASK, -(-total // max(1, spark.sparkContext.defaultParallelism)))
    pieces = [(t, p, a, min(a + piece, end)) for t, p, start, end in live for a in range(start, end, piece)]
    tasks = max(1, min(len(pieces), -(-total // KAFKA_RECORDS_PER_TASK)))
    return local_frame(spark, pieces, range_schema(), tasks)


def kafka_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    """Needs Spark's Kafka connector on the classpath: ``spark-submit --packages
    org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``."""
    assert config.source.kafka is not None
    return spark.readStream.format("kafka").options(**kafka_options(config.source.kafka)).load()


def kafka_range_options(options: KafkaOptions, ranges: pa.Table) -> dict[str, str]:
    """The ``format("kafka")`` batch options that read these offset ranges again (state.MANIFEST rows:
    topic, partition, the first and the last offset read): the job's connection options, the partitions
    assigned, each from its first offset to the one after its last."""
    import json

    built = {
        k: v
        for k, v in kafka_options(options).items()
        if k not in ("subscribe", "subscribePattern", "startingOffsets", "maxOffsetsPerTrigger")
    }
    assign: dict[str, list[int]] = {}
    first: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for r in ranges.to_pylist():
        assign.setdefault(r["source"], []).append(r["partition"])
        first.setdefault(r["source"], {})[str(r["partition"])] = r["first"]
        end.setdefault(r["source"], {})[str(r["partition"])] = r["last"] + 1  # exclusive
    built.update(assign=json.dumps(assign), startingOffsets=json.dumps(first), endingOffsets=json.dumps(end))
    return built


def pending_inputs(spark: SparkSession, config: JobConfig, source: str, inputs: pa.Table) -> DataFrame:
    """A noted batch's inputs (state.MANIFEST) as the decode tasks read them: its files' listing, or its
    Kafka ranges read again."""
    if source == "files":
        return listing_frame(
            spark, list(zip(inputs["source"].to_pylist(), inputs["partition"].to_pylist(), strict=True))
        )
    if source == "kafka":
        assert config.source.kafka is not None
        if config.source.kafka.direct_settings() is not None:
            ranges = zip(inputs["source"].to_pylist(), inputs["partition"].to_pylist(),
                         inputs["first"].to_pylist(), inputs["last"].to_pylist(), strict=True)  # fmt: skip
            return kafka_range_frame(spark, {(t, p): (first, last + 1) for t, p, first, last in ranges})
        options = kafka_range_options(config.source.kafka, inputs)  # Spark's Kafka connector
        return kafka_inputs(spark.read.format("kafka").options(**options).load())
    raise ValueError(f"a {source!r} batch is never noted as pending")


def range_inputs(
    spark: SparkSession, config: JobConfig, ranges: dict[tuple[str, int], tuple[int, int]]
) -> DataFrame:
    """Kafka ranges other than the ones Spark planned (a re-created topic's from its start:
    replicator.kafka_topics), read as a noted batch's are (:func:`pending_inputs`)."""
    import pyarrow as pa

    live = sorted((t, p, start, end - 1) for (t, p), (start, end) in ranges.items() if end > start)
    names = ("source", "partition", "first", "last")
    schema = pa.schema([(n, pa.string() if n == "source" else pa.int64()) for n in names])
    inputs = pa.table({n: [r[i] for r in live] for i, n in enumerate(names)}, schema)
    return pending_inputs(spark, config, "kafka", inputs)


def build_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    builders = {"files": files_stream, "kafka": kafka_stream}
    return builders[config.source.type](spark, config)


def batch_inputs(
    source: str, frame: DataFrame, planned: dict[tuple[str, int], tuple[int, int]] | None = None
) -> tuple[str, DataFrame]:
    """A streaming micro-batch -> (decode reader name, the DataFrame the decode tasks read). ``planned``: a
    Kafka batch's offset ranges (:func:`kafka_batch_ranges`), which size its decode tasks."""
    if source == "kafka" and planned is not None:
        ranges = [end - start for start, end in planned.values() if end > start]
        return source, kafka_inputs(frame, sum(ranges), len(ranges))
    builders = {"files": files_inputs, "kafka": kafka_inputs}
    return source, builders[source](frame)


# ---- kafka: what a batch read, per partition ---------------------------------------------------------------


def partitions_schema() -> pa.Schema:
    """A Kafka batch's account per partition (the state's ``kafka_partitions`` table, ``replicator status``):
    the range Spark planned (``start`` to ``end``, exclusive; its checkpoint's offsets), the first and last
    offset read, the newest offset the broker had (``latest``, exclusive: lag = latest - end) and the offsets
    of the range that could not be read (``lost_from`` to ``lost_to``, exclusive: deleted by retention
    before the job read them, read past under ``fail_on_data_loss: false``)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("batch_id", pa.int64()),
            ("topic", pa.string()),
            ("partition", pa.int64()),
            ("start", pa.int64()),
            ("end", pa.int64()),
            ("first_read", pa.int64()),
            ("last_read", pa.int64()),
            ("latest", pa.int64()),
            ("lost_from", pa.int64()),
            ("lost_to", pa.int64()),
        ]
    )


def _offsets_file(uri: str) -> dict[str, dict[str, int]] | None:
    """The Kafka offsets in one of Spark's checkpoint offset files (its last line: topic -> partition ->
    offset); None when the file is not there."""
    import json

    try:
        content = read_file(uri)
    except FileNotFoundError:  # a batch the stream did not plan (Engine.process), or one Spark forgot
        return None
    if content is None:
        return None
    lines = json_lines(content.decode("utf-8", "replace"))
    return json.loads(lines[-1][1]) if lines else None


def kafka_batch_ranges(checkpoint: str, batch_id: int) -> dict[tuple[str, int], tuple[int, int]] | None:
    """The offset ranges Spark planned for a batch, from its checkpoint: the previous batch's end (the
    source's initial offsets for the first batch) to this one's. A partition new in this batch starts at 0
    (Spark reads an added partition from its earliest offset). None when the files are gone."""
    end = _offsets_file(f"{checkpoint}/offsets/{batch_id}")
    start = _offsets_file(f"{checkpoint}/offsets/{batch_id - 1}" if batch_id else f"{checkpoint}/sources/0/0")
    if end is None or start is None:
        return None
    return {
        (topic, int(p)): (start.get(topic, {}).get(p, 0), offset)
        for topic, partitions in end.items()
        for p, offset in partitions.items()
    }


def kafka_partition_rows(
    batch_id: int,
    ranges: dict[tuple[str, int], tuple[int, int]],
    manifest: pa.Table,
    latest: dict[tuple[str, int], int],
) -> pa.Table:
    """The batch's account per partition (:func:`partitions_schema`). Offsets of a range before the first
    one read (or the whole range, none read) are lost: Kafka no longer had them. (A range never starts on a
    transaction marker: Spark's ranges end at the offset after a committed transaction's marker.)"""
    import pyarrow as pa

    read = {(r["source"], r["partition"]): (r["first"], r["last"]) for r in manifest.to_pylist()}
    rows = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        if end <= start:
            continue
        first, last = read.get((topic, partition), (None, None))
        lost_to = end if first is None else first
        rows.append(
            {
                "batch_id": batch_id,
                "topic": topic,
                "partition": partition,
                "start": start,
                "end": end,
                "first_read": first,
                "last_read": last,
                "latest": latest.get((topic, partition)),
                "lost_from": start if lost_to > start else None,
                "lost_to": lost_to if lost_to > start else None,
            }
        )
    return pa.Table.from_pylist(rows, partitions_schema())


def kafka_latest_offsets(
    spark: SparkSession, options: KafkaOptions, topics: list[str]
) -> dict[tuple[str, int], int]:
    """Each partition's newest offset (exclusive) now, asked of the brokers with the Kafka client Spark's
    connector brings (the job's connection options, ``kafka.``-prefixed ones without the prefix).

    The admin client is kept for the job's next batches (one per connection settings): making one and
    closing it again took ~0.2 s of every Kafka batch (its connections, its metadata). Java collections
    are read by index, not iterated: the end of a py4j iteration is an exception, which PySpark converts
    at ~50 ms each (a dozen JVM calls)."""
    return _asked(spark, options, _latest, topics)


def kafka_topic_ids(spark: SparkSession, options: KafkaOptions, topics: list[str]) -> dict[str, str]:
    """Each existing topic's ID (a UUID Kafka gives a topic when it is created: replicator.kafka_topics),
    asked as :func:`kafka_latest_offsets` asks; a topic that does not exist now is left out."""
    return _asked(spark, options, _topic_ids, topics)


def _asked(spark: SparkSession, options: KafkaOptions, ask: Any, topics: list[str]) -> Any:
    """``ask(jvm, admin, topics)`` with the job's kept admin client (:func:`kafka_latest_offsets`)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    built = {k: v for k, v in kafka_options(options).items() if k not in _CONSUMER_ONLY}
    settings = {k.removeprefix("kafka."): v for k, v in built.items() if k.startswith("kafka.")}
    settings.update({"request.timeout.ms": "10000", "default.api.timeout.ms": "10000"})
    key = tuple(sorted(settings.items()))
    with _ADMINS_LOCK:
        admin = _ADMINS.pop(key, None)
    kept = admin is not None
    if admin is None:
        admin = _admin(jvm, settings)
    try:
        answer = ask(jvm, admin, topics)
    except Exception:
        _close(admin)
        if not kept:
            raise
        admin = _admin(jvm, settings)  # a kept client that fails (its JVM gone): a new one, once
        try:
            answer = ask(jvm, admin, topics)
        except BaseException:
            _close(admin)
            raise
    with _ADMINS_LOCK:
        _ADMINS[key] = admin
        while len(_ADMINS) > 4:
            _close(_ADMINS.pop(next(iter(_ADMINS))))
    return answer


def _topic_ids(jvm: Any, admin: Any, topics: list[str]) -> dict[str, str]:
    ids = {}
    for topic in topics:  # one by one: a topic that does not exist fails only its own future
        future = admin.describeTopics(jvm.java.util.ArrayList([topic])).topicNameValues().get(topic)
        try:
            ids[topic] = str(future.get().topicId().toString())
        except Exception as exc:
            if "UnknownTopicOrPartition" not in str(exc):
                raise
    return ids


def _admin(jvm: Any, settings: dict[str, str]) -> Any:
    props = jvm.java.util.Properties()
    for name, value in settings.items():
        props.put(name, value)
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def _latest(jvm: Any, admin: Any, topics: list[str]) -> dict[tuple[str, int], int]:
    described = admin.describeTopics(jvm.java.util.ArrayList(topics)).allTopicNames().get()
    wanted = jvm.java.util.HashMap()
    latest = jvm.org.apache.kafka.clients.admin.OffsetSpec.latest()
    asked = []
    for topic in topics:
        infos = described.get(topic).partitions()
        for i in range(infos.size()):
            tp = jvm.org.apache.kafka.common.TopicPartition(topic, infos.get(i).partition())
            wanted.put(tp, latest)
            asked.append(tp)
    found = admin.listOffsets(wanted).all().get()
    return {(tp.topic(), tp.partition()): found.get(tp).offset() for tp in asked}


def _close(admin: Any) -> None:
    try:
        admin.close()
    except Exception:  # a client whose JVM is gone: nothing left to close
        pass


# Kafka admin clients (JVM objects) kept between batches, by connection settings (kafka_latest_offsets).
_ADMINS: dict[tuple[tuple[str, str], ...], Any] = {}
_ADMINS_LOCK = threading.Lock()


def close_kafka_clients() -> None:
    """The driver's kept Kafka clients closed (before Spark's JVM stops): the admin clients of
    :func:`kafka_latest_offsets` and any librdkafka consumer kafka_reader keeps."""
    from replicator.kafka_reader import close_idle

    with _ADMINS_LOCK:
        admins = list(_ADMINS.values())
        _ADMINS.clear()
    for admin in admins:
        _close(admin)
    close_idle()


_DATA_LOST = re.compile(r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+)-(\d+)")


def data_loss_message(error: BaseException) -> str | None:
    """Spark's Kafka data-loss failure (offsets deleted before the job read them, ``failOnDataLoss``) as
    one line naming topic, partition and offsets, and the option that goes on; None for other errors."""
    found = _DATA_LOST.search(str(error))
    if found is None:
        return None
    first, end, topic, partition = found.groups()
    return (
        f"Kafka no longer has offsets {first} to {int(end) - 1} of topic {topic!r} partition "
        f"{partition} (deleted by retention before this job read them): nothing was applied from them. "
        "To go on without them, set source.kafka.fail_on_data_loss: false (`replicator status` shows the gap)"
    )
