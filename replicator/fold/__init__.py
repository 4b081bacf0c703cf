"""Fold on Spark's executors: one net change per (table, barrier segment, primary key).

The decode tasks wrote every DML event into a bucket of their Arrow file by a hash of (table, key)
(``replicator.exchange``); here one Spark stage folds the buckets: a task reads its buckets' record
batches from every decode task's file, folds each bucket (``fold.arrow.fold``, barriers and keys from the
driver) and keeps the net changes of the keys that hash to it (the other half of a key change belongs to
its old key's bucket, which has a copy of the update). The net changes go to the batch's folder, and only
they reach the driver. A batch of up to ``small_batch`` events is folded by one task, each event once.

The JVM carries the listings and the files' names, never an event: a Spark shuffle of the events (as
payload rows, and a partial fold per task before it) cost the JVM ~7 s of CPU per 1M events, and the
partial fold read and wrote most events twice (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replicator import exchange, payload

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from replicator.fold.arrow import Barrier
    from replicator.model import TableId

TABLE_COLUMNS = ("database", "schema", "table")

# Events one task folds alone, each once, without buckets (a 1 s trigger's batch: one small task).
SMALL_BATCH = 50_000


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


def _events(events: pa.Table, plan: FoldPlan) -> pa.Table | None:
    """The DML events of the folded tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import DML_OPS, table_label, table_labels

    labels = pa.array([table_label(t) for t, _k in plan.keys], pa.string())
    mask = pc.and_(
        pc.is_in(events["op"], pa.array(DML_OPS)), pc.is_in(table_labels(events), value_set=labels)
    )
    mask = pc.fill_null(mask, False)
    if pc.all(mask).as_py():  # the usual case: filtering would copy every image for nothing
        return events
    events = events.filter(mask)
    return events if events.num_rows else None


def _bucket_events(plan: FoldPlan, bucket: int, listing: pa.Table) -> pa.Table | None:
    """A bucket's events: its own rows, and the unbucketed events whose key (the driver's) lands here."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import table_label

    keys = {table_label(t): list(k) for t, k in plan.keys}
    parts = []
    for where, rows in exchange.read(listing):
        if where == exchange.UNBUCKETED and bucket != exchange.UNBUCKETED:
            current, old, _needed = exchange.routes(rows, plan.buckets, keys)
            mine = pc.or_(pc.equal(current, bucket), pc.fill_null(pc.equal(old, bucket), False))
            rows = rows.filter(mine)
        if rows.num_rows:
            parts.append(rows)
    if not parts:
        return None
    return _events(pa.concat_tables(parts, promote_options="permissive"), plan)


def fold_buckets(plan: FoldPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: each of its buckets' events -> the net changes of the keys in that bucket, with their
    table's identity (written to the batch's folder when it has one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.fold.arrow import fold
    from replicator.model import table_label

    keys = {t: list(k) for t, k in plan.keys}
    for _kind, bucket, listing in payload.items(batches):
        events = _bucket_events(plan, bucket, listing)
        if events is None:
            continue
        for table, folded in fold(events, keys, plan.barriers):
            n = folded.num_rows
            if bucket != exchange.UNBUCKETED:  # the other half of a key change is its own bucket's
                label = pa.repeat(pa.scalar(table_label(table)), n)
                mine = pc.equal(
                    exchange.bucket_of(label, exchange.list_key_text(folded["key"]), plan.buckets), bucket
                )
                if not pc.all(mine).as_py():
                    folded = folded.filter(mine)
                    n = folded.num_rows
            identity = [pa.repeat(pa.scalar(part, pa.string()), n) for part in table]
            net = pa.table([*identity, *folded.columns], names=[*TABLE_COLUMNS, *folded.column_names])
            if plan.spill is None:
                yield from payload.rows([("folded", 0, net)])
            else:
                yield from payload.to_files(plan.spill, [("folded", 0, net)])
        del events
    payload.release_memory()  # the worker is reused for the batch's next task


def fold_batch(spark: SparkSession, index: pa.Table, plan: FoldPlan) -> dict[TableId, pa.Table]:
    """The driver's half: one Spark task per few buckets folds them from the decode tasks' files (the
    ``index`` of their record batches, exchange.EventFile), and the net changes are collected per table
    (the only rows of the batch that reach the driver)."""
    from functools import partial

    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.fold.arrow import split_by_table

    if not plan.keys or index.num_rows == 0:
        return {}
    rows = []
    if plan.events <= plan.small_batch:  # one task folds it all (each event once: no old-key copies)
        listing = index.filter(pc.invert(index["secondary"]))
        rows.append(("listing", exchange.UNBUCKETED, payload.to_ipc(listing)))
    else:
        unbucketed = index.filter(pc.equal(index["bucket"], exchange.UNBUCKETED))
        for bucket in range(plan.buckets):
            listing = pa.concat_tables([index.filter(pc.equal(index["bucket"], bucket)), unbucketed])
            if listing.num_rows:
                rows.append(("listing", bucket, payload.to_ipc(listing)))
    frame = spark.createDataFrame(rows, payload.SCHEMA_DDL)
    folded = frame.mapInArrow(partial(fold_buckets, plan), payload.SCHEMA_DDL)
    parts = list(payload.tables(folded.toArrow().to_batches()))  # net changes, or their files' names
    if not parts:
        return {}
    return {
        table: rows.drop_columns(list(TABLE_COLUMNS)) for table, rows in split_by_table(payload.concat(parts))
    }
