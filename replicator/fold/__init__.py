"""Fold on Spark's executors: one net change per (table, barrier segment, primary key).

Two ``mapInArrow`` stages around one shuffle, the partial-then-final shape of a Spark aggregate:

1. every task folds its own events (``fold.arrow.fold``, barriers and keys from the driver) and turns the
   winners back into events, split into buckets by a hash of (table, key);
2. one shuffle brings each bucket's partial results together; a task folds them again.

With the batch's folder (``FoldPlan.spill``, as the engine runs it) the stages read and write Arrow files
there (payload.FileSink, payload.to_files): the decode tasks' events, each partial task's buckets, the net
changes; Spark's shuffle then moves the rows naming a bucket's files, and no JVM carries an event.

Folding is associative in this form: a partial winner re-enters as an event with its own ``seq``, and the
delete half of a key-changing update becomes its own event, so the final fold sees what one fold over all
events would have kept. Tables with document patches (drs-mongo ``$set``/``$unset``) skip the partial
fold, since every patch applies on top of the previous state; their events go to the shuffle as they are.
Only the final winners reach the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replicator import payload
from replicator.decode import FOLD_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from replicator.fold.arrow import Barrier
    from replicator.model import TableId

TABLE_COLUMNS = ("database", "schema", "table")


# Events one partial-fold task folds at most (a few hundred MB of Arrow in its Python worker).
TASK_EVENTS = 1_000_000
# Events one task folds alone, without a partial fold and a shuffle (a few tens of MB in one worker).
SMALL_BATCH = 50_000


@dataclass(frozen=True)
class FoldPlan:
    keys: tuple[tuple[TableId, tuple[str, ...]], ...]  # the tables folded and their key columns
    barriers: tuple[Barrier, ...]
    buckets: int
    events: int = 0  # the batch's DML events (the decode's counts): how many partial-fold tasks
    # A folder (path or pyarrow file-system URI) the final fold writes the net changes to, for the driver
    # to read (payload.to_files); None: they travel back through Spark's result collection.
    spill: str | None = None
    small_batch: int = SMALL_BATCH  # up to this many events, one task and no shuffle

    def tasks(self) -> int:
        """Partial-fold tasks: one per bucket (executor core), more only past ``TASK_EVENTS`` each. A
        decode task's events are merged with its neighbours' first (a narrow ``coalesce``): measured on
        1M events over 100k keys, ten decode tasks' partial folds kept 630k winners for the shuffle, two
        kept 200k."""
        if self.events <= self.small_batch:
            return 1  # one task folds it all: no shuffle stage (a 1 s trigger's batch, measured ~0.2 s less)
        return max(self.buckets, -(-self.events // TASK_EVENTS))


def _events(batches: Iterable[pa.RecordBatch], plan: FoldPlan) -> pa.Table | None:
    """The task's DML events of the folded tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import DML_OPS, table_label

    parts = list(payload.tables(batches))
    if not parts:
        return None
    events = payload.concat(parts)
    labels = pa.array([table_label(t) for t, _k in plan.keys], pa.string())
    ident = pc.binary_join_element_wise(
        events["database"], events["schema"], events["table"], ".", null_handling="skip"
    )
    mask = pc.and_(pc.is_in(events["op"], pa.array(DML_OPS)), pc.is_in(ident, value_set=labels))
    mask = pc.fill_null(mask, False)
    if pc.all(mask).as_py():  # the usual case: filtering would copy every image for nothing
        return events
    events = events.filter(mask)
    return events if events.num_rows else None


def _bucket(table: TableId, keys: pa.Array, buckets: int) -> pa.Array:
    """A bucket per key: a hash that is the same in every process (pandas' fixed-key SipHash; Python's
    own string hash is salted per process)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import table_label

    text = pc.binary_join_element_wise(
        pa.repeat(pa.scalar(table_label(table)), len(keys)), pc.binary_join(keys, "\x1f"), "\x1e"
    )
    hashed = pd.util.hash_array(np.asarray(text.to_numpy(zero_copy_only=False), dtype=object))
    return pa.array((hashed % np.uint64(buckets)).astype(np.int32))


def _as_events(table: TableId, folded: pa.Table) -> pa.Table:
    """Partial winners as events again: the image goes to ``after`` (``before`` for a delete), so that the
    final fold keeps what one fold would have kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.fold.arrow import IMAGE_TYPE

    n = folded.num_rows
    is_delete = pc.equal(folded["op"], "delete")
    nothing = pa.nulls(n, IMAGE_TYPE)
    return pa.table(
        {
            "database": pa.repeat(pa.scalar(table[0], pa.string()), n),
            "schema": pa.repeat(pa.scalar(table[1], pa.string()), n),
            "table": pa.repeat(pa.scalar(table[2], pa.string()), n),
            "op": folded["op"],
            "primary_key": folded["primary_key"],
            "after": pc.if_else(is_delete, nothing, folded["image"]),
            "before": pc.if_else(is_delete, folded["image"], nothing),
            "seq": folded["seq"],
            "seq_text": folded["seq_text"],
            "event_time": folded["event_time"],
            "position": folded["position"],
            "meta": folded["meta"],  # keeps meta.seq_system (fold.arrow._segments)
            "coordinates": folded["coordinates"],
        }
    )


def _pass_through(
    table: TableId, rows: pa.Table, key: tuple[str, ...], buckets: int
) -> Iterator[tuple[int, pa.Table]]:
    """Events of a table with patches, unfolded, bucketed by their key (a delete's from ``before``); an
    update that changes the key also sends the delete of the old key to the old key's bucket."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.fold.arrow import IMAGE_TYPE, _key_list, _key_values, _with_key

    rows = _with_key(rows, key).select(list(FOLD_COLUMNS)).combine_chunks()
    is_delete = pc.equal(rows["op"], "delete").combine_chunks()
    old = [v.combine_chunks() for v in _key_values(rows["before"], key)]
    new = [v.combine_chunks() for v in _key_values(rows["after"], key)]
    current = [pc.if_else(is_delete, o, a) for o, a in zip(old, new, strict=True)]
    changed = pc.equal(rows["op"], "update")
    differs = pa.repeat(pa.scalar(False), rows.num_rows)
    for o, a in zip(old, new, strict=True):
        changed = pc.and_(changed, pc.is_valid(o))
        differs = pc.or_(differs, pc.fill_null(pc.not_equal(o, a), False))
    changed = pc.fill_null(pc.and_(changed, differs), False)
    parts = [(rows, _key_list(current))]
    if pc.any(changed).as_py():
        moved = rows.filter(changed)
        n = moved.num_rows
        moved = moved.set_column(moved.schema.get_field_index("op"), "op", pa.repeat(pa.scalar("delete"), n))
        moved = moved.set_column(moved.schema.get_field_index("after"), "after", pa.nulls(n, IMAGE_TYPE))
        moved = moved.set_column(moved.schema.get_field_index("meta"), "meta", pa.nulls(n, IMAGE_TYPE))
        kept = rows.set_column(
            rows.schema.get_field_index("before"),
            "before",
            pc.if_else(changed, pa.nulls(rows.num_rows, IMAGE_TYPE), rows["before"]),
        )
        parts = [(kept, _key_list(current)), (moved, _key_list([o.filter(changed) for o in old]))]
    for part, keys in parts:
        yield from _split(part, _bucket(table, keys, buckets))


def _split(rows: pa.Table, bucket: pa.Array) -> Iterator[tuple[int, pa.Table]]:
    import pyarrow.compute as pc

    for b in pc.unique(bucket).to_pylist():
        yield b, rows.filter(pc.equal(bucket, b))


def _has_patches(rows: pa.Table) -> bool:
    import pyarrow.compute as pc

    from replicator.fold.arrow import PATCH_META

    patch = pc.map_lookup(rows["meta"], PATCH_META, "first")
    return patch.null_count < len(patch)


def partial_fold(plan: FoldPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 1: this task's events -> its winners per key, as events, in buckets."""
    import pyarrow as pa

    from replicator.fold.arrow import fold, split_by_table

    events = _events(batches, plan)
    if events is None:
        return
    keys = dict(plan.keys)
    out: dict[int, list[pa.Table]] = {}
    for table, rows in split_by_table(events):
        if _has_patches(rows):
            for b, part in _pass_through(table, rows, keys[table], plan.buckets):
                out.setdefault(b, []).append(part)
            continue
        for _t, folded in fold(rows, {table: list(keys[table])}, plan.barriers):
            bucket = _bucket(table, folded["key"], plan.buckets)
            for b, part in _split(_as_events(table, folded), bucket):
                out.setdefault(b, []).append(part)
    del events  # folded: only the winners are sent on
    items = (("part", b, pa.concat_tables(parts)) for b, parts in out.items())
    yield from payload.to_files(plan.spill, items) if plan.spill else payload.rows(items)
    del out
    payload.release_memory()  # the worker is reused for the batch's next task


def final_fold(plan: FoldPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 2: a shuffle partition's partial winners -> the net changes, with their table's identity."""
    import pyarrow as pa

    from replicator.fold.arrow import fold

    parts = list(payload.tables(batches))
    if not parts:
        return
    events = pa.concat_tables(parts, promote_options="permissive")
    keys = {t: list(k) for t, k in plan.keys}
    for table, folded in fold(events, keys, plan.barriers):
        n = folded.num_rows
        identity = [pa.repeat(pa.scalar(part, pa.string()), n) for part in table]
        net = pa.table([*identity, *folded.columns], names=[*TABLE_COLUMNS, *folded.column_names])
        if plan.spill is None:
            yield from payload.rows([("folded", 0, net)])
        else:
            yield from payload.to_files(plan.spill, [("folded", 0, net)])
    del events, parts
    payload.release_memory()


def fold_batch(events: DataFrame, plan: FoldPlan) -> dict[TableId, pa.Table]:
    """The driver's half: run both stages over the batch's events (payload rows, naming files) and collect
    the net changes,
    per table (the only rows of the batch that reach the driver)."""
    from functools import partial

    from replicator.fold.arrow import split_by_table

    if not plan.keys:
        return {}
    tasks = plan.tasks()
    partitions = events.rdd.getNumPartitions()
    if partitions > tasks:
        events = events.coalesce(tasks)
    elif partitions < tasks:  # more events than the cores' tasks should hold each
        events = events.repartition(tasks)
    if events.rdd.getNumPartitions() == 1:  # one task holds every event: its fold is the final one
        folded = events.mapInArrow(partial(final_fold, plan), payload.SCHEMA_DDL)
    else:
        folded = (
            events.mapInArrow(partial(partial_fold, plan), payload.SCHEMA_DDL)
            .repartition(plan.buckets, "bucket")
            .mapInArrow(partial(final_fold, plan), payload.SCHEMA_DDL)
        )
    parts = list(payload.tables(folded.toArrow().to_batches()))  # net changes, or their files' names
    if not parts:
        return {}
    return {
        table: rows.drop_columns(list(TABLE_COLUMNS)) for table, rows in split_by_table(payload.concat(parts))
    }
