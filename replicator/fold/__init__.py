"""Fold on Spark's executors: one net change per (table, barrier segment, primary key).

The decode tasks wrote every DML event into a bucket of their Arrow file by a hash of (table, key)
(``replicator.exchange``); here one Spark stage folds the buckets: a task reads the record batches of its
buckets (those equal to its number modulo the tasks, :func:`fold_tasks`) from every decode task's file,
folds them at once (``fold.arrow.fold``, barriers and keys from the driver) and keeps the net changes of
the keys that hash to its buckets (the other half of a key change belongs to its old key's bucket, which
has a copy of the update). The net changes go to the batch's folder, and only they reach the driver. A
batch of up to ``small_batch`` events, or one :func:`fold_tasks` gives a single task, is folded by one
task that reads each event once; one of up to ``driver_batch`` events (a 1 s trigger's) is folded by the
driver itself, the same way, without a Spark job.

The JVM carries the listings and the files' names, never an event: a Spark shuffle of the events (as
payload rows, and a partial fold per task before it) cost the JVM ~7 s of CPU per 1M events, and the
partial fold read and wrote most events twice (benchmarks/LOG.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from replicator import exchange, payload
from replicator.fold import mirror_files

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from replicator.fold.arrow import Barrier
    from replicator.model import TableId

TABLE_COLUMNS = ("database", "schema", "table")

# Events one task folds alone, each once, without buckets.
SMALL_BATCH = 50_000
# Events the driver folds itself, each once, from the decode tasks' files (a 1 s trigger's batch): no Spark
# job. Measured on the latency benchmark's 1,000-event batches: the fold's Spark job (a local frame, a
# task, its results) took ~100-150 ms of a batch, the fold itself ~5 ms; the driver folds ~3-4 µs per event,
# so 10,000 events cost it less than the job's fixed part.
DRIVER_BATCH = 10_000
# A bucketed batch's fold tasks: about this many events per task, and no fewer per table in a task
# (fold_tasks).
EVENTS_PER_TASK = 125_000
EVENTS_PER_TABLE = 5_000
# Untyped net changes a fold task sends together (fold_buckets), of one table or many.
FOLDED_ROWS = 50_000


@dataclass(frozen=True)
class FoldPlan:
    keys: tuple[tuple[TableId, tuple[str, ...]], ...]  # the tables folded and their key columns
    barriers: tuple[Barrier, ...]
    buckets: int  # as the decode tasks bucketed the events (DecodePlan.buckets)
    events: int = 0  # the batch's DML events (the decode's counts)
    # A folder (path or pyarrow file-system URI) the fold writes the net changes to, for the driver to read
    # (payload.to_files); None: they travel back through Spark's result collection.
    spill: str | None = None
    small_batch: int = SMALL_BATCH  # up to this many events, one task
    driver_batch: int = DRIVER_BATCH  # up to this many events, the driver (no Spark job)
    tasks: int = 0  # fold tasks of a bucketed batch (0: fold_tasks chooses)
    # Tables whose net changes the fold tasks type (replicator.types.type_images) against their mirror's
    # schema as the driver read it, so that typed columns, not text maps, reach the driver.
    typing: tuple[tuple[TableId, pa.Schema], ...] = ()
    # Tables of ``typing`` created for this batch, with their folder's URI: their upserts are written there
    # as Parquet files (replicator.fold.mirror_files), not sent to the driver.
    writes: tuple[tuple[TableId, str], ...] = ()
    # Tables of ``typing`` whose upserts are staged the same way in a folder of the batch (URI), for a writer
    # that MERGEs from files on the executors (MirrorWriter.merges_staged): the rows stay off the driver.
    stages: tuple[tuple[TableId, str], ...] = ()
    timezone: str = "UTC"
    zero_dates: str = "null"


def _events(events: pa.Table, plan: FoldPlan) -> pa.Table | None:
    """The DML events of the folded tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import DML_OPS, keep, table_label, table_labels

    labels = pa.array([table_label(t) for t, _k in plan.keys], pa.string())
    mask = pc.and_(
        pc.is_in(events["op"], pa.array(DML_OPS)), pc.is_in(table_labels(events), value_set=labels)
    )
    events = keep(events, mask)
    return events if events.num_rows else None


def _mine(buckets: pa.Array | pa.ChunkedArray, group: int, tasks: int) -> np.ndarray:
    """Which of these buckets the fold task ``group`` of ``tasks`` folds: those equal to it modulo
    ``tasks`` (NULL, no bucket: not its)."""
    import numpy as np
    import pyarrow.compute as pc

    values = np.asarray(pc.fill_null(buckets, -1))
    return (values >= 0) & (values % tasks == group)


def _group_events(plan: FoldPlan, group: int, listing: pa.Table) -> pa.Table | None:
    """A fold task's events: its buckets' rows, and the unbucketed events whose key (the driver's) lands in
    one of its buckets.

    A key-changing update is in its new key's bucket and, as a secondary copy, in its old key's. A task
    that folds both reads it twice, which folds to the same net changes (the same event, the same seq).
    ``group`` UNBUCKETED: the one task of the batch, whose listing has no copies, reads every event."""
    import pyarrow as pa

    from replicator.model import table_label

    keys = {table_label(t): list(k) for t, k in plan.keys}
    parts = []
    for where, rows in exchange.read(listing):
        if group != exchange.UNBUCKETED and where == exchange.UNBUCKETED:
            current, old, _needed = exchange.routes(rows, plan.buckets, keys)
            rows = rows.filter(pa.array(_mine(current, group, plan.tasks) | _mine(old, group, plan.tasks)))
        if rows.num_rows:
            parts.append(rows)
    if not parts:
        return None
    return _events(pa.concat_tables(parts, promote_options="permissive"), plan)


def fold_buckets(plan: FoldPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: its buckets' events, folded at once -> the net changes of the keys in its buckets, with
    their table's identity (written to the batch's folder when it has one).

    The untyped net changes of many tables go out together, a file (or payload row) per ``FOLDED_ROWS``
    of them, not a file per table (measured: 100,000 events over 1,000 tables, the fold 2.7-3.0 -> 1.9 s;
    over 10,000 tables, 87 -> 79 s; then 79 -> 16 s once a table's key columns were read from its own
    slice of the batch, model._uniform_layout)."""
    payload.freeze_heap()

    def out(kind: str, net: pa.Table) -> Iterator[pa.RecordBatch]:
        if plan.spill is None or kind in ("written", "keyless"):  # small: Spark's results carry them
            return payload.rows([(kind, 0, net)])
        return payload.to_files(plan.spill, [(kind, 0, net)])

    pending: list[pa.Table] = []  # folded net changes of tables, not yet sent
    rows = 0
    for kind, net in fold_listings(plan, ((group, listing) for _k, group, listing in payload.items(batches))):
        if kind != "folded":
            yield from out(kind, net)
            continue
        pending.append(net)
        rows += net.num_rows
        if rows >= FOLDED_ROWS:
            yield from out(kind, payload.concat(pending))
            pending, rows = [], 0
    if pending:
        yield from out("folded", payload.concat(pending))
    del pending
    payload.release_memory()  # the worker is reused for the batch's next task


def fold_listings(plan: FoldPlan, listings: Iterable[tuple[int, pa.Table]]) -> Iterator[tuple[str, pa.Table]]:
    """(group, listing) -> ``(kind, rows)`` with their table's identity: ``folded`` net changes (images as
    maps), ``typed`` (plan.typing's tables), ``written`` (the files written for plan.writes' tables) or
    ``keyless`` (events left out for lack of a key value, fold.arrow.keyless)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.fold.arrow import fold

    keys = {t: list(k) for t, k in plan.keys}
    typing = dict(plan.typing)
    writes = {**dict(plan.stages), **dict(plan.writes)}
    for group, listing in listings:
        events = _group_events(plan, group, listing)
        if events is None:
            continue
        # Events read from another bucket (old-key copies, unbucketed events) may win a key of another
        # task; else only the delete half of a key change can (its old key's bucket folds it too).
        borrowed = (
            pc.any(listing["secondary"]).as_py()
            or pc.any(pc.equal(listing["bucket"], exchange.UNBUCKETED)).as_py()
        )
        rejected: list[tuple[TableId, pa.Table]] = []
        for table, folded in fold(events, keys, plan.barriers, rejected):
            if group != exchange.UNBUCKETED:  # the other half of a key change is its own bucket's
                mine = _winners_mine(folded, table, group, plan, borrowed)
                if not mine.all():
                    folded = folded.filter(pa.array(mine))
            kind = "folded"
            out = []
            if table in typing:
                folded, kind = typed(folded, typing[table], plan), "typed"
                if table in writes:
                    upserts, folded = mirror_files.split(folded)
                    if upserts.num_rows:
                        rows = mirror_files.mirror_rows(upserts, typing[table], keys[table])
                        del upserts
                        out.append(("written", mirror_files.write(rows, writes[table], keys[table])))
                        del rows
            if folded.num_rows or not out:
                out.append((kind, folded))
            for kind, part in out:
                identity = [pa.repeat(pa.scalar(name, pa.string()), part.num_rows) for name in table]
                yield kind, pa.table([*identity, *part.columns], names=[*TABLE_COLUMNS, *part.column_names])
        for table, lacking in rejected:  # events without a key value: the driver's dead letters
            identity = [pa.repeat(pa.scalar(name, pa.string()), lacking.num_rows) for name in table]
            names = [*TABLE_COLUMNS, *lacking.column_names]
            yield "keyless", pa.table([*identity, *lacking.columns], names=names)
        del events


def _winners_mine(folded: pa.Table, table: TableId, group: int, plan: FoldPlan, borrowed: bool) -> np.ndarray:
    """Which net changes are of keys in the task's buckets: hashed for every row when the task read events
    of other buckets (``borrowed``), else only for the deletes (the old-key half of a key change is one;
    hashing each key cost ~0.4 µs per net change)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import table_label

    suspects = np.ones(folded.num_rows, bool) if borrowed else np.asarray(pc.equal(folded["op"], "delete"))
    mine = np.ones(folded.num_rows, bool)
    at = np.flatnonzero(suspects)
    if len(at):
        keys = exchange.list_key_text(folded["key"].take(pa.array(at)))
        label = pa.repeat(pa.scalar(table_label(table)), len(at))
        mine[at] = _mine(exchange.bucket_of(label, keys, plan.buckets), group, plan.tasks)
    return mine


def typed(folded: pa.Table, schema: pa.Schema, plan: FoldPlan) -> pa.Table:
    """A table's net changes with their images typed against its mirror's ``schema``: the image column
    becomes ``TYPED`` (a struct of the mirror's columns), ``TYPE_ERROR`` (a value that does not fit) and
    ``REST`` (the entries of columns the mirror does not have, empty maps as a rule: the applier adds or
    ignores those columns as schema evolution says, and types them on the driver)."""
    import pyarrow as pa

    from replicator.columns import source_name
    from replicator.model import CDC_COLUMNS, map_without
    from replicator.types import REST, TYPE_ERROR, TYPED, type_images

    fields = [f for f in schema if f.name not in CDC_COLUMNS]
    images = folded["image"].combine_chunks()
    columns, bad = type_images(images, fields, timezone=plan.timezone, zero_dates=plan.zero_dates)
    errors: list[str | None] = [None] * folded.num_rows
    for row, message in bad.items():
        errors[row] = message
    at = folded.column_names.index("image")
    return (
        folded.remove_column(at)
        .append_column(TYPED, pa.StructArray.from_arrays(columns, fields=fields))
        .append_column(TYPE_ERROR, pa.array(errors, pa.string()))
        .append_column(REST, map_without(images, [source_name(f) for f in fields]))
    )


def fold_tasks(plan: FoldPlan) -> int:
    """How many tasks fold a bucketed batch (each the buckets equal to its number modulo this): up to one
    per bucket, one per ``EVENTS_PER_TASK`` events (measured on the 1M catch-up: 2, 4 and 8 tasks of one
    table folded in 2.7-3.0, 2.0-2.8 and 2.3 s, the larger tasks with 0.6 GB more in the workers), and
    fewer where a table's share of a task would be under ``EVENTS_PER_TABLE`` events (a table's fold is
    ~20 Arrow calls whatever its events: 100k events of 200 tables, folded per bucket in 8 buckets, took
    2.2 s; in one task 1.0 s)."""
    by_size = -(-plan.events // EVENTS_PER_TASK)
    by_tables = plan.events // (max(1, len(plan.keys)) * EVENTS_PER_TABLE)
    return max(1, min(plan.buckets, by_size, by_tables))


def fold_batch(
    spark: SparkSession, index: pa.Table, plan: FoldPlan
) -> tuple[dict[TableId, pa.Table], dict[TableId, pa.Table], pa.Table | None]:
    """The driver's half: a Spark task per group of buckets folds them from the decode tasks' files (the
    ``index`` of their record batches, exchange.EventFile), and the net changes are collected per table
    (the only rows of the batch that reach the driver), with the files written for ``plan.writes``'
    tables (mirror_files.files_schema()), per table, and the events left out for lack of a key value
    (``database``, ``schema``, ``table``, ``coordinates``, ``error``: fold.arrow.keyless), or None. A batch
    of up to ``plan.driver_batch`` events, none typed on the executors, is folded here instead, from the
    same files (the driver reads the batch's folder: payload.to_files)."""
    from functools import partial

    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.spark import local_frame

    if not plan.keys or index.num_rows == 0:
        return {}, {}, None
    parts: dict[str, list[pa.Table]] = {"folded": [], "typed": [], "written": [], "keyless": []}
    # Folded here, each event once, as the one task below would; not when tables are typed on the executors
    # (plan.typing: large tables, whose typing and writing the driver is spared).
    if plan.events <= plan.driver_batch and not plan.typing:
        whole = index.filter(pc.invert(index["secondary"]))
        for kind, table in fold_listings(plan, [(exchange.UNBUCKETED, whole)]):
            parts[kind].append(table)
        return _by_table(parts)
    rows = []
    tasks = 1 if plan.events <= plan.small_batch else plan.tasks or fold_tasks(plan)
    if tasks == 1:  # one task folds it all, each event once (no old-key copies, nothing to route)
        listing = index.filter(pc.invert(index["secondary"]))
        rows.append(("listing", exchange.UNBUCKETED, payload.to_ipc(listing)))
    else:
        plan = replace(plan, tasks=tasks)
        unbucketed = index.filter(pc.equal(index["bucket"], exchange.UNBUCKETED))
        for group in range(plan.tasks):
            mine = index.filter(pa.array(_mine(index["bucket"], group, plan.tasks)))
            listing = pa.concat_tables([mine, unbucketed])
            if listing.num_rows:
                rows.append(("listing", group, payload.to_ipc(listing)))
    frame = local_frame(spark, rows, payload.payload_schema())  # a task per listing
    folded = frame.mapInArrow(partial(fold_buckets, plan), payload.spark_schema())
    for kind, _bucket, table in payload.items(folded.toArrow().to_batches()):  # or from their files
        parts[kind].append(table)
    return _by_table(parts)


def _by_table(
    parts: dict[str, list[pa.Table]],
) -> tuple[dict[TableId, pa.Table], dict[TableId, pa.Table], pa.Table | None]:
    """The fold's outputs by kind -> net changes per table, the files written per table, the keyless
    events (or None)."""
    import pyarrow as pa

    from replicator.fold.arrow import split_by_table

    out: dict[TableId, pa.Table] = {}
    # Typed rows have their table's own columns: concatenated per table (a task's part is one table's).
    typed: dict[TableId, list[pa.Table]] = {}
    for part in parts["typed"]:
        if part.num_rows:
            database, schema, name = (part[c][0].as_py() for c in TABLE_COLUMNS)
            typed.setdefault((database, schema, name), []).append(part)
    for table, tables in typed.items():
        out[table] = pa.concat_tables(tables).drop_columns(list(TABLE_COLUMNS))
    if parts["folded"]:
        for table, rows in split_by_table(payload.concat(parts["folded"])):
            out[table] = rows.drop_columns(list(TABLE_COLUMNS))
    files: dict[TableId, list[pa.Table]] = {}
    for part in parts["written"]:
        database, schema, name = (part[c][0].as_py() for c in TABLE_COLUMNS)
        files.setdefault((database, schema, name), []).append(part.drop_columns(list(TABLE_COLUMNS)))
    keyless = _distinct_events(pa.concat_tables(parts["keyless"])) if parts["keyless"] else None
    return out, {table: pa.concat_tables(tables) for table, tables in files.items()}, keyless


def _distinct_events(rows: pa.Table) -> pa.Table:
    """Rows of events, each once: a key-changing update is read by its new and its old key's task."""
    import pyarrow as pa

    seen: set[tuple] = set()
    keep = []
    for c in rows["coordinates"].to_pylist():
        at = tuple(sorted(c.items()))
        keep.append(at not in seen)
        seen.add(at)
    return rows if all(keep) else rows.filter(pa.array(keep))
