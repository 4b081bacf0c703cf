"""Decode on Spark's executors: a batch's source rows -> raw records -> change events (``mapInArrow``).

Each task reads its share of the batch (files it opens itself, or Kafka rows), decodes it with the dialect
classes in slices, writes the change log's Parquet files for its events, and returns payload rows
(replicator.payload): rows naming the Arrow files its events went to (in the batch's folder, for the
fold) and the batch's small results beside them: summary counts, barrier events, decode dead letters
(with their own bytes), type maps and the change-log files written. The driver collects those rows; no
event passes through it.

Everything here runs in Spark's Python workers: imports stay inside functions or light.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from replicator import payload
from replicator.dialects.base import DecodeOptions, Decoder
from replicator.model import BARRIER_OPS, DML_OPS, keep

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from replicator.config import RouteRule
    from replicator.kafka_reader import Records

# Records decoded at once: a slice's events stay a few tens of MB in the worker.
SLICE_ROWS = 10_000
DEAD_COLUMNS = ("dialect", "database", "table", "error", "raw", "coordinates")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# What the fold (and the few lookups after it) read of a DML event. Not ``seq_text``: ~150 characters an
# event, made by the fold for the winners alone (fold.arrow.fold_table); measured 0.7 µs an event to make.
FOLD_COLUMNS = (
    "database",
    "schema",
    "table",
    "op",
    "primary_key",
    "after",
    "before",
    "seq",
    "event_time",
    "position",
    "meta",
    "coordinates",
)


@dataclass(frozen=True)
class DecodePlan:
    """What a decode task needs (pickled to the executors with the function)."""

    source: str  # files | kafka | records | events (see READERS)
    dialect: str
    options: DecodeOptions
    batch_id: int
    spill: str  # the batch's folder: the events' files (exchange), results read from files
    routes: tuple[RouteRule, ...] = ()
    changelog: str | None = None  # the change-log table's folder, when this batch writes it
    buckets: int = 1  # the fold's buckets (exchange.split): FoldPlan.buckets
    slice_rows: int = SLICE_ROWS
    # The files source's landing folder, whose files reached through symbolic links are not read (None:
    # source.follow_symlinks, or no landing folder: a bootstrap's files, records made on the driver).
    landing: str | None = None
    wanted: frozenset[tuple[Any, ...]] = field(
        default_factory=frozenset
    )  # raw lookups: (source, partition, offset)
    # librdkafka's settings when the tasks read Kafka offset ranges themselves (replicator.kafka_reader)
    kafka_client: tuple[tuple[str, str], ...] = ()
    fail_on_data_loss: bool = True


# ---- raw records of one input batch, per source -----------------------------------------------------------


def _slices(table: pa.Table, size: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, size):
        yield table.slice(start, size)


def _files(batch: pa.RecordBatch, plan: DecodePlan) -> Iterator[pa.Table]:
    """Listing rows (path, mtime) -> each file's raw records (replicator.sources.file_chunk). A file the
    listing reached through a symbolic link under the landing folder is not opened (unless
    source.follow_symlinks): the driver's scan of the folder reports it (sources.scan_landing)."""
    from replicator.sources import file_chunk, linked, map_file

    for path, mtime in zip(batch.column("path").to_pylist(), batch.column("mtime").to_pylist(), strict=True):
        if plan.landing is not None and linked(path, plan.landing):
            continue
        content = map_file(path)
        if content is None:
            raise OSError(f"cannot read {path}: no pyarrow file system opens it on this executor")
        yield from _slices(file_chunk(path, mtime, content), plan.slice_rows)


def _kafka(batch: pa.RecordBatch | Records, plan: DecodePlan) -> Iterator[pa.Table | Records]:
    """Kafka rows (value, key, topic, partition, offset) -> raw records; null values (tombstones after
    Debezium deletes) are not records (decode_partition counts them as filtered). Records the task read
    itself (kafka_reader.Records, at most a slice's) stay the client's Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(batch, pa.RecordBatch):
        yield batch.with_values()
        return

    from replicator.sources import raw_schema

    table = pa.Table.from_batches([batch])
    if table["value"].null_count:  # a filter copies every value, so only where there is a NULL
        table = table.filter(pc.is_valid(table["value"]))
    renamed = {"raw": "value", "key": "key", "source": "topic", "partition": "partition", "offset": "offset"}
    schema = raw_schema()
    columns = [
        table[renamed[f.name]].cast(f.type)
        if renamed[f.name] in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    yield from _slices(pa.table(columns, schema=schema), plan.slice_rows)


def _input_batches(
    plan: DecodePlan, batches: Iterable[pa.RecordBatch], arrow: bool = False
) -> Iterator[pa.RecordBatch | Records]:
    """A task's input batches; Kafka offset ranges (kafka_reader.range_schema) become the records in them,
    read here: kafka_reader.Records, or with ``arrow`` the columns Spark's Kafka source gives."""
    for batch in batches:
        if plan.source == "kafka" and "end" in batch.schema.names:
            from replicator.kafka_reader import read_records

            if not plan.kafka_client:
                raise ValueError("Kafka offset ranges to read, but no Kafka client settings in the plan")
            read = read_records(dict(plan.kafka_client), batch, plan.fail_on_data_loss, plan.slice_rows)
            yield from (r.batch() for r in read) if arrow else read
        else:
            yield batch


def _payloads(batch: pa.RecordBatch, plan: DecodePlan) -> Iterator[pa.Table]:
    """Payload rows made on the driver (replicator.payload): records, or already decoded events."""
    for table in payload.tables([batch]):
        if table.num_rows:
            yield from _slices(table, plan.slice_rows)


READERS: dict[str, Callable[[Any, DecodePlan], Iterator[pa.Table | Records]]] = {
    "files": _files,
    "kafka": _kafka,
    "records": _payloads,
    "events": _payloads,
}


# ---- decoding and the batch's small results ----------------------------------------------------------------


def decoded_events(plan: DecodePlan, records: pa.Table | Records, decoder: Decoder | None = None) -> pa.Table:
    """One slice of raw records -> its routed events (already decoded slices pass through). ``decoder``:
    the task's, for every slice (see :func:`decode_partition`)."""
    from replicator.dialects.base import decode
    from replicator.routing import route

    if plan.source == "events":  # replayed change-log events: decoded and routed when first applied
        assert not isinstance(records, tuple)  # (payload tables, never kafka_reader.Records)
        for name, empty in (("error", "string"), ("raw", "binary")):
            if name not in records.column_names:
                import pyarrow as pa

                records = records.append_column(name, pa.nulls(records.num_rows, empty))
        return records
    events = decode(
        records, plan.dialect, plan.options, plan.batch_id, sort_keys=True, seq_text=False, decoder=decoder
    )
    metadata = events.schema.metadata
    routed = route(events, list(plan.routes))
    return routed.replace_schema_metadata(metadata) if metadata else routed


def notice_rows(events: pa.Table) -> pa.Table | None:
    """The dialect's notices of a decoded slice (events.NOTICES) as rows: database, schema, table, notice."""
    import orjson
    import pyarrow as pa

    from replicator.dialects.events import NOTICES

    text = (events.schema.metadata or {}).get(NOTICES)
    if not text:
        return None
    rows = orjson.loads(text)
    return pa.table(
        {name: pa.array([r[i] for r in rows], pa.string()) for i, name in enumerate(NOTICE_COLUMNS)}
    )


NOTICE_COLUMNS = ("database", "schema", "table", "notice")


def merge_notices(parts: list[pa.Table]) -> dict[tuple[tuple[str | None, str | None, str | None], str], None]:
    """The tasks' notices, each (table, text) once (a table may have several)."""
    notices = {}
    for part in parts:
        for r in part.to_pylist():
            notices[((r["database"], r["schema"], r["table"]), r["notice"])] = None
    return notices


def kafka_coordinates(batch: pa.RecordBatch | Records) -> pa.Table:
    """A Kafka input batch's (source, partition, offset) columns, every record (NULL values included)."""
    import pyarrow as pa

    if not isinstance(batch, pa.RecordBatch):
        return pa.table(
            {
                "source": pa.repeat(pa.scalar(batch.topic, pa.string()), batch.num_rows),
                "partition": pa.repeat(pa.scalar(batch.partition, pa.int64()), batch.num_rows),
                "offset": pa.array(batch.offsets, pa.int64()),
            }
        )

    return pa.table(
        {
            "source": batch.column("topic").cast(pa.string()),
            "partition": batch.column("partition").cast(pa.int64()),
            "offset": batch.column("offset").cast(pa.int64()),
        }
    )


def null_values(batch: pa.RecordBatch | Records) -> int:
    """A Kafka input batch's records with a NULL value (tombstones)."""
    import pyarrow as pa

    return batch.column("value").null_count if isinstance(batch, pa.RecordBatch) else batch.values.count(None)


def tombstone_counts(n: int) -> pa.Table:
    """``n`` Kafka records with a NULL value (the tombstone Debezium writes after each delete, for log
    compaction) as :func:`group_counts` rows: ``n`` records, ``n`` filtered events of no table."""
    import pyarrow as pa

    return pa.table(
        {
            "database": pa.nulls(1, pa.string()),
            "schema": pa.nulls(1, pa.string()),
            "table": pa.nulls(1, pa.string()),
            "op": pa.array(["filtered"]),
            "ok": pa.array([True]),
            "pk": pa.nulls(1, pa.string()),
            "first_sum": pa.array([n], pa.int64()),
            "first_count": pa.array([n], pa.int64()),
        }
    )


def group_counts(events: pa.Table) -> pa.Table:
    """Per (table, op, ok, key names): events and records (a record's first event is index 0, row 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    coords = events["coordinates"]
    first = pc.and_(
        pc.equal(pc.struct_field(coords, "index"), 0), pc.equal(pc.struct_field(coords, "row"), 0)
    )
    frame = pa.table(
        {
            "database": events["database"],
            "schema": events["schema"],
            "table": events["table"],
            "op": events["op"],
            "ok": pc.is_null(events["error"]),
            "pk": pc.binary_join(events["primary_key"], "\x1f"),
            "first": pc.cast(pc.fill_null(first, False), pa.int64()),
        }
    )
    keys = ["database", "schema", "table", "op", "ok", "pk"]
    return frame.group_by(keys, use_threads=False).aggregate([("first", "sum"), ("first", "count")])


def compact_groups(parts: list[pa.Table]) -> list[pa.Table]:
    """A task's :func:`group_counts` parts summed into one (a row per table, op, ok and key names): each
    slice of 10,000 events adds a row per table in it, and a task over many tables would hand the driver
    every slice's."""
    keys = ["database", "schema", "table", "op", "ok", "pk"]
    return _compacted(parts, keys, [("first_sum", "sum"), ("first_count", "sum")])


def compact_types(parts: list[pa.Table]) -> list[pa.Table]:
    """A task's :func:`type_counts` parts as one (a row per table and type map, its first and last seq):
    what :func:`merge_types` reads of them, a row per table and slice fewer."""
    keys = ["database", "schema", "table", "type_key"]
    return _compacted(parts, keys, [("seq_text_min", "min"), ("seq_text_max", "max")])


def _compacted(parts: list[pa.Table], keys: list[str], aggregates: list[tuple[str, str]]) -> list[pa.Table]:
    """Parts as one table, a row per ``keys``, each column of ``aggregates`` aggregated under its name."""
    if len(parts) < 2:
        return parts
    done = payload.concat(parts).group_by(keys, use_threads=False).aggregate(aggregates)
    return [done.rename_columns([*keys, *(column for column, _how in aggregates)])]


# Slices' small results a task keeps before it compacts them (compact_groups, compact_types).
COMPACT_PARTS = 64
# A task's small results larger than this go to the driver as a file in the batch's folder
# (payload.to_files), not through Spark's result collection: the executor's JVM puts a task's result rows
# in one Arrow batch whose buffer doubles as it grows, in direct memory (512 MB by default; a 1M-event
# task over 10,000 tables failed allocating 512 MB for its 260 MB of type maps, measured).
RESULT_BYTES = 32 << 20


def type_counts(dml: pa.Table) -> pa.Table:
    """Per (table, type map): the first and last seq that carried it (engine.merge_types merges them).

    Where every seq has the same length (the usual batch), the rows are ranked in seq order with NumPy and
    only each group's first and last rows' seq texts are made."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.dialects.events import seq_texts, with_seq_text

    keys = type_keys(dml)
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    names = ["database", "schema", "table", "type_key"]
    columns = {"database": dml["database"], "schema": dml["schema"], "table": dml["table"]}
    columns["type_key"] = keys.cast(pa.string())
    seq = dml["seq"].combine_chunks()
    lengths = pc.list_value_length(seq)
    out = [*names, "seq_text_min", "seq_text_max"]
    if "seq_text" in dml.column_names or seq.null_count or pc.min(lengths).as_py() != pc.max(lengths).as_py():
        frame = pa.table({**columns, "seq_text": with_seq_text(dml)["seq_text"]})
        groups = frame.group_by(names, use_threads=False)
        return groups.aggregate([("seq_text", "min"), ("seq_text", "max")]).select(out)
    # seq_text's order: the parts compared as numbers, a NULL or negative part as 0 (model.seq_text)
    parts = np.maximum(pc.fill_null(pc.list_flatten(seq), 0).to_numpy(), 0).reshape(len(seq), -1)
    rows = pa.table({**columns, "_row": np.arange(len(seq))}).group_by(names, use_threads=False)
    ends = rows.aggregate([("_row", "list")])
    lists = ends["_row_list"].combine_chunks()
    flat, bounds = lists.flatten().to_numpy(), lists.offsets.to_numpy()  # each group's rows
    if ends.num_rows <= _WALKED_GROUPS:  # the usual slice: a type map or a few
        members = [flat[a:b] for a, b in itertools.pairwise(bounds)]
        firsts = [_extreme(parts, m, np.min) for m in members]
        lasts = [_extreme(parts, m, np.max) for m in members]
    else:  # each group's lowest and highest rank in one lexsort of the slice
        order = np.lexsort(parts.T[::-1])
        rank = np.empty(len(seq), np.int64)
        rank[order] = np.arange(len(seq))
        firsts = order[np.minimum.reduceat(rank[flat], bounds[:-1])]
        lasts = order[np.maximum.reduceat(rank[flat], bounds[:-1])]
    first, last = seq.take(pa.array(firsts, pa.int64())), seq.take(pa.array(lasts, pa.int64()))
    return pa.table([*(ends[n] for n in names), seq_texts(first), seq_texts(last)], names=out)


# Groups of a slice whose first and last seq are found by walking the parts (:func:`_extreme`); more are
# ranked by one lexsort of the slice (measured on 10,000 seven-part seqs: type_counts 0.73 -> 0.16 µs an
# event; the lexsort alone 4.8 ms, the walk 0.04 ms).
_WALKED_GROUPS = 16


def _extreme(parts: np.ndarray, rows: np.ndarray, pick: Callable[[np.ndarray], Any]) -> int:
    """The row of ``rows`` whose parts are the lowest (``pick`` np.min) or the highest (np.max) in their
    order: part by part, keeping the rows that hold the extreme value."""
    for j in range(parts.shape[1]):
        column = parts[rows, j]
        rows = rows[column == pick(column)]
        if len(rows) == 1:
            break
    return int(rows[0])


# How the change log's Parquet is written. Dictionaries only for the columns that repeat (row images and
# seqs hardly do), statistics only for the columns a reader filters a change log by, zstd: measured on the
# benchmark's events, 3.2 -> 2.0 µs per event of a decode task's CPU, and 37 -> 16 MB per 200k events.
# Larger write batches and pages (a slice is 10,000 events): 2.60 -> 2.36 µs per event, the same size.
CHANGELOG_PARQUET = {
    "compression": "zstd",
    "use_dictionary": ["dialect", "schema", "op", "primary_key", "source_types", "meta"],
    "write_statistics": ["batch_id", "event_time"],
    "write_batch_size": 65_536,
    "data_page_size": 8 << 20,
}


# A table's change-log file whose first write holds fewer events than this is written with snappy.
SMALL_CHANGELOG_ROWS = 1_000
SMALL_CHANGELOG_PARQUET = {**CHANGELOG_PARQUET, "compression": "snappy"}


class ChangelogFiles:
    """The change log's Parquet files of one task: one open file per (database, table), committed by the
    driver in one Delta transaction (state.State.commit_changelog)."""

    def __init__(
        self,
        root: str,
        batch_id: int,
        flush_rows: int = 30_000,
        rows_per_table: int = 100,
        flush_bytes: int = 256 << 20,
    ) -> None:
        from pyarrow import fs

        self.filesystem, self.base = fs.FileSystem.from_uri(payload.folder_uri(root))
        self.batch_id = batch_id
        # (writer, relative path, rows, its output stream: closed after the writer, which leaves a stream it
        # was given open; an object store's upload completes only when the stream closes)
        self.writers: dict[tuple[str | None, str | None], tuple[Any, str, list[int], Any]] = {}
        # Slices kept until they hold ``flush_rows`` events, then written a table at a time: each write is
        # a row group of ~20 columns, ~3 ms whatever its rows, and a slice of 10,000 events over 1,000
        # tables made 1,000 of them (30 of a decode task's 64 CPU-s; benchmarks/LOG.md, "A thousand
        # tables").
        self.flush_rows = flush_rows
        # ... and ``rows_per_table`` events a table on average, or ``flush_bytes`` of them (the bound on a
        # task's memory): a row group costs ~0.4 ms however few its rows, and a task of 1M events over
        # 10,000 tables wrote 340,000 of them (190 of its 225 CPU-s, measured); one flush at 100 events a
        # table writes 10,000. One table's slices are written every ``flush_rows`` events, as before.
        self.rows_per_table = rows_per_table
        self.flush_bytes = flush_bytes
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._pending_tables: set[tuple[str | None, str | None]] = set()

    def write(self, events: pa.Table) -> None:
        import pyarrow as pa

        from replicator.state import CHANGELOG_SCHEMA

        if events.num_rows == 0:
            return
        kept = [f for f in CHANGELOG_SCHEMA if f.name != "batch_id"]  # (in one schema: concatenated later)
        rows = pa.table([events[f.name].cast(f.type) for f in kept], schema=pa.schema(kept))
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        pairs = rows.select(["database", "table"]).group_by(["database", "table"], use_threads=False)
        pairs = pairs.aggregate([])
        names = (pairs["database"].to_pylist(), pairs["table"].to_pylist())
        self._pending_tables.update(zip(*names, strict=True))
        if self._pending_rows >= self.flush_rows and (
            self._pending_rows >= self.rows_per_table * len(self._pending_tables)
            or self._pending_bytes >= self.flush_bytes
        ):
            self._flush()

    def _flush(self) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from replicator.state import CHANGELOG_SCHEMA

        if not self._pending:
            return
        events = pa.concat_tables(self._pending)
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        self._pending_tables = set()
        data_schema = pa.schema([f for f in CHANGELOG_SCHEMA if f.name not in ("database", "table")])
        # One file per (database, table) pair, grouped by value: names may hold any character (a NUL, a
        # newline), so no joined text key. The rows in pair order by one take of the grouping's indexes
        # (each pair's in their order), then a slice per pair: a filter of the events per pair cost the
        # square of the tables.
        pairs = pa.table(
            {
                "database": events["database"],
                "table": events["table"],
                "_row": pa.array(np.arange(events.num_rows)),
            }
        )
        parts = pairs.group_by(["database", "table"], use_threads=False).aggregate([("_row", "list")])
        if parts.num_rows > 1:
            events = events.take(pc.list_flatten(parts["_row_list"]))
        lengths = pc.list_value_length(parts["_row_list"]).to_pylist()
        start = 0
        for database, table, length in zip(
            parts["database"].to_pylist(), parts["table"].to_pylist(), lengths, strict=True
        ):
            rows, start = events.slice(start, length), start + length
            entry = self.writers.get((database, table))
            if entry is None:
                relative = "/".join(
                    [
                        f"database={_partition_folder(database)}",
                        f"table={_partition_folder(table)}",
                        f"part-{self.batch_id:06d}-{uuid.uuid4()}.parquet",
                    ]
                )
                if self.filesystem.type_name == "local":  # (an object store has no folders: a marker
                    # object per level, 5 PUTs and 2 HEADs a table each batch on S3, measured)
                    self.filesystem.create_dir(os.path.dirname(f"{self.base}/{relative}"), recursive=True)
                sink = self.filesystem.open_output_stream(f"{self.base}/{relative}")
                # zstd's context costs ~0.26 ms a column chunk: a file of a few rows is written with snappy
                # (0.43 -> 0.17 ms a row group, measured), a few bytes larger
                options = CHANGELOG_PARQUET if length >= SMALL_CHANGELOG_ROWS else SMALL_CHANGELOG_PARQUET
                entry = (pq.ParquetWriter(sink, data_schema, **options), relative, [0], sink)
                self.writers[(database, table)] = entry
            writer, _relative, count, _sink = entry
            batch_ids = pa.repeat(pa.scalar(self.batch_id, pa.int64()), rows.num_rows)
            columns = [batch_ids if f.name == "batch_id" else rows[f.name] for f in data_schema]
            writer.write_table(pa.table(columns, schema=data_schema))
            count[0] += rows.num_rows

    def close(self) -> pa.Table:
        """The files written: relative path, size, partition values, rows (the add actions' facts)."""
        import pyarrow as pa

        self._flush()
        out: dict[str, list[Any]] = {k: [] for k in ("path", "size", "database", "table", "rows", "mtime")}
        for (database, table), (writer, relative, count, sink) in self.writers.items():
            writer.close()
            sink.close()
            info = self.filesystem.get_file_info(f"{self.base}/{relative}")
            out["path"].append(relative)
            out["size"].append(info.size)
            out["database"].append(database)
            out["table"].append(table)
            out["rows"].append(count[0])
            out["mtime"].append(int(info.mtime_ns // 1_000_000) if info.mtime_ns else 0)
        return pa.table(out, schema=CHANGELOG_FILES)


def _partition_folder(name: str | None) -> str:
    """A change-log partition folder: the name encoded as a mirror's folder is (replicator.paths), so a
    name never leaves the change log nor makes a file name too long. The partition values the reader
    uses are the add actions' (State.commit_changelog), so the folder needs no inverse."""
    from replicator.paths import component

    return component(name) if name else HIVE_NULL


def _changelog_files_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("path", pa.string()),
            ("size", pa.int64()),
            ("database", pa.string()),
            ("table", pa.string()),
            ("rows", pa.int64()),
            ("mtime", pa.int64()),
        ]
    )


CHANGELOG_FILES = _changelog_files_schema()


def manifest_rows(source: str, batch: pa.RecordBatch, records: list[pa.Table]) -> pa.Table | None:
    """The part of a batch's manifest (state.MANIFEST) one input batch of a task holds (None for
    driver-made records)."""
    import pyarrow as pa

    from replicator.state import MANIFEST

    if source == "files":
        n = batch.num_rows
        return pa.table(
            [batch.column("path"), batch.column("mtime"), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())],
            schema=MANIFEST,
        )
    if source != "kafka" or not records:
        return None
    rows = pa.concat_tables(records)
    ranges = rows.group_by(["source", "partition"], use_threads=False).aggregate(
        [("offset", "min"), ("offset", "max")]
    )
    return pa.table(
        [ranges["source"], ranges["partition"], ranges["offset_min"], ranges["offset_max"]], schema=MANIFEST
    )


def merge_manifest(parts: list[pa.Table]) -> pa.Table:
    """The tasks' manifest rows as one: each file once, a Kafka partition's range from the first to the
    last offset any task read."""
    import pyarrow as pa

    from replicator.state import MANIFEST

    rows = payload.concat(parts, MANIFEST)
    if rows.num_rows == 0 or rows["first"].null_count == rows.num_rows:  # files
        return rows
    ranges = rows.group_by(["source", "partition"], use_threads=False).aggregate(
        [("first", "min"), ("last", "max")]
    )
    return pa.table([ranges[c] for c in ("source", "partition", "first_min", "last_max")], schema=MANIFEST)


def decode_partition(plan: DecodePlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: its input rows -> payload rows (events per slice, then the task's small results)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator import exchange
    from replicator.dialects.base import gc_paused
    from replicator.dialects.events import with_seq_text

    payload.freeze_heap()
    # One decoder for the task's slices: a dialect's per-table caches (canal's type map parsed and its
    # facts derived once per table) were made again for every 10,000-record slice, which over 10,000
    # tables was every slice's ~6,000 tables each time (558,000 type maps for 1M events).
    decoder = None if plan.source == "events" else Decoder(plan.dialect, plan.options)
    groups: list[pa.Table] = []
    types: list[pa.Table] = []
    barriers: list[pa.Table] = []
    dead: list[pa.Table] = []
    changelog = ChangelogFiles(plan.changelog, plan.batch_id) if plan.changelog else None
    cached = exchange.EventFile(plan.spill)  # the events for the fold, bucketed, in the batch's folder
    wanted_ops = pa.array([*DML_OPS, *BARRIER_OPS])
    manifest: list[pa.Table] = []  # what the task read (Engine.recover)
    notices: list[pa.Table] = []
    with gc_paused():
        for batch in _input_batches(plan, batches):
            read: list[pa.Table] = []
            if plan.source == "kafka":
                # Every record read, NULL values too: the manifest's ranges cover them (Engine.recover reads
                # the same ones again) and a tombstone is counted as filtered, not dropped unseen.
                read.append(kafka_coordinates(batch))
                nulls = null_values(batch)
                if nulls:
                    groups.append(tombstone_counts(nulls))
            for records in READERS[plan.source](batch, plan):
                events = decoded_events(plan, records, decoder)
                if events.num_rows == 0:
                    continue
                noticed = notice_rows(events)
                if noticed is not None:
                    notices.append(noticed)
                groups.append(group_counts(events))
                if len(groups) >= COMPACT_PARTS:
                    groups = compact_groups(groups)
                ok = pc.is_null(events["error"])
                if not pc.all(ok).as_py():
                    dead.append(events.filter(pc.invert(ok)).select(list(DEAD_COLUMNS)))
                kept = keep(events, pc.and_(ok, pc.is_in(events["op"], wanted_ops)))
                kept = kept.drop_columns(["raw", "error"])
                is_barrier = pc.and_(pc.is_in(kept["op"], pa.array(BARRIER_OPS)), pc.is_valid(kept["table"]))
                if pc.any(is_barrier).as_py():
                    rows = with_seq_text(kept.filter(is_barrier))  # (the decoder made none)
                    barriers.append(
                        rows.drop_columns([c for c in ("type_key", "batch_id") if c in rows.column_names])
                    )
                dml = keep(kept, pc.is_in(kept["op"], pa.array(DML_OPS)))
                if dml.num_rows:
                    types.append(type_counts(dml))
                    if len(types) >= COMPACT_PARTS:
                        types = compact_types(types)
                if changelog is not None:
                    changelog.write(kept)
                if dml.num_rows:
                    # Kept for the fold: the columns it reads (type maps, DDL text and barrier events are
                    # in the small results already).
                    events_for_fold = dml.select(list(FOLD_COLUMNS))
                    for bucket, secondary, rows in exchange.split(events_for_fold, plan.buckets):
                        cached.write(bucket, secondary, rows)
            part = manifest_rows(plan.source, batch, read)
            if part is not None:
                manifest.append(part)
    yield from payload.rows([("events", 0, cached.close())])  # the index of the task's event file
    small = [
        ("groups", compact_groups(groups)),
        ("types", compact_types(types)),
        ("barriers", barriers),
        ("manifest", manifest),
        ("notices", notices),
    ]
    results = [(kind, 0, payload.concat(parts)) for kind, parts in small if parts]
    if sum(table.nbytes for _kind, _bucket, table in results) > RESULT_BYTES:
        yield from payload.to_files(plan.spill, results)
    else:
        yield from payload.rows(results)
    if dead:  # with their raw bytes: a batch of bad records is as large as the batch
        items = [("dead", 0, payload.concat(dead))]
        yield from payload.to_files(plan.spill, items)
    if changelog is not None:
        yield from payload.rows([("changelog", 0, changelog.close())])
    del groups, types, barriers, dead
    payload.release_memory()  # the worker is reused for the batch's next task


def warm(dialect: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task that only loads what a decode task of ``dialect`` loads, so that the first decode tasks find
    their Python workers ready: a new worker's imports (pyspark, pyarrow, pandas, NumPy, msgspec, the
    dialects) made its first task ~2.6 s longer than the others on the 5M catch-up (Spark's event log);
    run while the driver starts its query (replicator.commands.runner), they cost no wall time."""
    import msgspec  # noqa: F401
    import pyarrow as pa
    import pyarrow.compute
    import pyarrow.parquet

    from replicator import exchange  # noqa: F401

    Decoder(dialect, DecodeOptions())
    pa.array([{"k": "v"}], pa.map_(pa.string(), pa.string()))  # the first conversion imports pandas
    for _batch in batches:
        pass
    yield from ()


def raw_lookup(plan: DecodePlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The raw records at ``plan.wanted`` coordinates (dead letters of events that failed after decoding)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = pa.array(sorted({o for _s, _p, o in plan.wanted}), pa.int64())
    for batch in _input_batches(plan, batches, arrow=True):
        for records in READERS[plan.source](batch, plan):
            assert not isinstance(records, tuple)  # (Arrow batches read: Arrow tables)
            near = records.filter(pc.is_in(records["offset"], value_set=offsets))
            if near.num_rows == 0:
                continue
            keys = zip(*(near[n].to_pylist() for n in ("source", "partition", "offset")), strict=True)
            mask = pa.array([k in plan.wanted for k in keys], pa.bool_())
            if pc.any(mask).as_py():
                yield from payload.rows([("records", 0, near.filter(mask))])


# ---- the driver's half: merging the tasks' small results ---------------------------------------------------


def type_keys(events: pa.Table) -> pa.Array | pa.ChunkedArray:
    """Per row, its type map as events.type_key_text writes it (the decoder gives it; else read here)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "type_key" in events.column_names:
        return events["type_key"]
    types = events["source_types"].combine_chunks()
    # offsets index the map's whole child arrays, as keys/items are (sliced or not)
    names = pc.binary_join(pa.ListArray.from_arrays(types.offsets, types.keys), "\x1f")
    values = pc.binary_join(pa.ListArray.from_arrays(types.offsets, pc.fill_null(types.items, "")), "\x1f")
    return pc.binary_join_element_wise(names, values, "\x1e")


def merge_groups(parts: list[pa.Table]) -> list[dict[str, Any]]:
    """The tasks' group counts -> the batch summary per (table, op, ok): events, records, longest key."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in parts:
        for r in part.to_pylist():
            ident = (r["database"], r["schema"], r["table"], r["op"], r["ok"])
            g = merged.setdefault(
                ident,
                {
                    **dict(zip(("database", "schema", "table", "op", "ok"), ident, strict=True)),
                    "n": 0,
                    "records": 0,
                    "primary_key": [],
                },
            )
            g["n"] += r["first_count"]
            g["records"] += r["first_sum"] or 0
            key = r["pk"].split("\x1f") if r["pk"] else []
            if len(key) > len(g["primary_key"]):
                g["primary_key"] = key
    return list(merged.values())


def merge_types(parts: list[pa.Table]) -> dict[tuple[str, str | None, str], dict[str, str]]:
    """Each table's column types: first-seen column order, the latest type of each column wins.

    A table's type map rarely changes inside a batch: the tasks count them per distinct map's text (a few
    per table), merged here in seq order."""
    by_table: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for part in parts:
        for r in part.to_pylist():
            if r["type_key"] is None:
                continue
            maps = by_table.setdefault((r["database"], r["schema"], r["table"]), {})
            seen = maps.get(r["type_key"])
            if seen is None:
                maps[r["type_key"]] = dict(r)
            else:
                seen["seq_text_min"] = min(seen["seq_text_min"], r["seq_text_min"])
                seen["seq_text_max"] = max(seen["seq_text_max"], r["seq_text_max"])
    result: dict[tuple[Any, ...], dict[str, str]] = {}
    for table, maps in by_table.items():
        rows = []
        for text, r in maps.items():
            names, types = text.split("\x1e")
            rows.append((r, names.split("\x1f") if names else [], types.split("\x1f") if names else []))
        merged: dict[str, str] = {}
        for _r, names, _types in sorted(rows, key=lambda x: x[0]["seq_text_min"]):  # first-seen order
            for column in names:
                merged.setdefault(column, "")
        for _r, names, types in sorted(rows, key=lambda x: x[0]["seq_text_max"]):  # latest type wins
            merged.update(zip(names, types, strict=True))
        result[table] = {c: t for c, t in merged.items() if t}
    return result


def column_sets(parts: list[pa.Table]) -> dict[tuple[str, str | None, str], int]:
    """Each table's distinct column sets among its rows' type maps (type_counts): more than one when a
    column appeared or went away within the batch (a row schema changed without a DDL, Debezium's
    PostgreSQL connector), which Engine._typing leaves to the driver for a new table."""
    sets: dict[tuple[Any, ...], set[frozenset[str]]] = {}
    for part in parts:
        for r in part.select(["database", "schema", "table", "type_key"]).to_pylist():
            names = r["type_key"].split("\x1e")[0] if r["type_key"] is not None else ""
            if names:  # (a row typing no column says nothing of its columns)
                table = (r["database"], r["schema"], r["table"])
                sets.setdefault(table, set()).add(frozenset(names.split("\x1f")))
    return {table: len(names) for table, names in sets.items()}


def barrier_rows(parts: list[pa.Table]) -> list[dict[str, Any]]:
    """The tasks' barrier events as dicts (maps as dicts), in seq order."""
    rows = [r for part in parts for r in part.to_pylist()]
    for r in rows:
        for name in ("after", "before", "source_types", "meta"):
            if r.get(name) is not None:
                r[name] = dict(r[name])
    return sorted(rows, key=lambda r: r["seq_text"])


class DecodedBatch:
    """A micro-batch decoded by the executors: its events stay in the tasks' files (for the fold and the few
    lookups after it), its small results are here. One Spark job decodes every record."""

    def __init__(self, inputs: DataFrame, plan: DecodePlan) -> None:
        from collections import defaultdict
        from functools import partial

        from replicator import exchange
        from replicator.dialects.events import decoded_schema

        self.inputs = inputs
        self.plan = plan
        self.frame = inputs.mapInArrow(partial(decode_partition, plan), payload.spark_schema())
        # One Spark job; the events stay in the tasks' files (their index comes here, exchange.EventFile)
        by_kind: dict[str, list[pa.Table]] = defaultdict(list)
        for kind, _bucket, table in payload.items(self.frame.toArrow().to_batches()):
            by_kind[kind].append(table)
        self.index = payload.concat(by_kind["events"], exchange.index_schema())
        self.groups = merge_groups(by_kind["groups"])
        self.types = merge_types(by_kind["types"])
        self.column_sets = column_sets(by_kind["types"])
        self.barriers = barrier_rows(by_kind["barriers"])
        dead_schema = decoded_schema()
        self.dead = payload.concat(by_kind["dead"], pa_schema(dead_schema, DEAD_COLUMNS))
        self.changelog_files = payload.concat(by_kind["changelog"], CHANGELOG_FILES)
        self.manifest = merge_manifest(by_kind["manifest"])
        self.notices = merge_notices(by_kind["notices"])

    def select(self, tables: Iterable[tuple[str, str | None, str]], columns: list[str]) -> pa.Table:
        """Some columns of the events of some tables (e.g. the coordinates of DML without a key)."""
        from functools import partial

        import pyarrow as pa
        import pyarrow.compute as pc

        from replicator.spark import local_frame

        listing = self.index.filter(pc.invert(self.index["secondary"]))  # each event once
        files = [
            ("listing", 0, payload.to_ipc(listing.filter(pc.equal(listing["uri"], uri))))
            for uri in pc.unique(listing["uri"]).to_pylist()
        ]
        spark = self.frame.sparkSession
        frame = local_frame(spark, files, payload.payload_schema()).mapInArrow(
            partial(_select, tuple(tables), tuple(columns)), payload.spark_schema()
        )
        parts = list(payload.tables(frame.toArrow().to_batches()))
        return pa.concat_tables(parts) if parts else pa.table({c: [] for c in columns})

    def raw(self, wanted: set[tuple[Any, ...]]) -> dict[tuple[Any, ...], bytes]:
        """The raw records at (source, partition, offset) coordinates, read again from the source."""
        from dataclasses import replace
        from functools import partial

        if not wanted or self.plan.source == "events":
            # Decoded events (replay reads the change log): there are no raw records to read again; the
            # dead letters keep their coordinates (the original record's, as the change log stores them).
            return {}
        plan = replace(self.plan, wanted=frozenset(wanted), changelog=None)
        frame = self.inputs.mapInArrow(partial(raw_lookup, plan), payload.spark_schema())
        found: dict[tuple[Any, ...], bytes] = {}
        for table in payload.tables(frame.toArrow().to_batches()):
            for r, s, p, o in zip(
                *(table.column(n).to_pylist() for n in ("raw", "source", "partition", "offset")), strict=True
            ):
                found[(s, p, o)] = r
        return found


def pa_schema(schema: pa.Schema, names: Iterable[str]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([schema.field(n) for n in names])


def _select(
    tables: tuple[tuple[str, str | None, str], ...],
    columns: tuple[str, ...],
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.exchange import read
    from replicator.model import DML_OPS, table_label, table_labels

    wanted = pa.array([table_label(t) for t in tables], pa.string())
    for listing in payload.tables(batches):
        for _bucket, events in read(listing):
            mask = pc.and_(
                pc.is_in(table_labels(events), value_set=wanted), pc.is_in(events["op"], pa.array(DML_OPS))
            )
            rows = events.filter(pc.fill_null(mask, False))
            if rows.num_rows:
                yield from payload.rows([("selected", 0, rows.select(list(columns)))])
