"""Order and fold: decoded events -> one net change per (table, segment, primary key).

Barriers (DDL, TRUNCATE) split a table's events into segments applied in source order; inside a segment
the event with the newest ``seq`` wins (``max_by``, one aggregate, no window sort). An update that changes
the primary key becomes a delete of the old key and an upsert of the new one. Document patches
(drs-mongo ``$set``/``$unset``, carried in ``meta['mongo_update']``) are collected in order instead of
being folded away, because each one applies on top of the previous state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replicator.model import BARRIER_OPS, DML_OPS, seq_text_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TableId = tuple[str, str | None, str]  # database, schema, table
PATCH_META = "mongo_update"


@dataclass(frozen=True)
class Barrier:
    table: TableId
    seq: tuple[int, ...]


def table_match(table: TableId) -> Column:
    from pyspark.sql import functions as F

    database, schema, name = table
    cond = (F.col("database") == database) & (F.col("table") == name)
    return cond & (F.col("schema").isNull() if schema is None else F.col("schema") == schema)


def with_keys(events: DataFrame, keys: Mapping[TableId, Sequence[str]]) -> DataFrame:
    """Fill ``primary_key`` where the message carried none, from the resolved keys per table."""
    from pyspark.sql import functions as F

    resolved: Column = F.lit(None).cast("array<string>")
    for table, key in keys.items():
        resolved = F.when(table_match(table), F.array(*[F.lit(k) for k in key])).otherwise(resolved)
    return events.withColumn(
        "primary_key", F.when(F.size("primary_key") > 0, F.col("primary_key")).otherwise(resolved)
    )


def _key_of(image: str) -> Column:
    from pyspark.sql import functions as F

    return F.transform("primary_key", lambda k: F.col(image)[k])


def split_key_changes(events: DataFrame) -> DataFrame:
    """An update whose key differs between before and after -> delete(old key) + upsert(new key)."""
    from pyspark.sql import functions as F

    changed = (
        (F.col("op") == "update")
        & F.col("before").isNotNull()
        & F.forall("primary_key", lambda k: F.map_contains_key("before", k))
        & (_key_of("before") != _key_of("after"))
    )
    deletes = events.where(changed).withColumn("op", F.lit("delete")).withColumn("after", F.lit(None))
    return events.unionByName(deletes)


def assign_segments(events: DataFrame, barriers: Sequence[Barrier]) -> DataFrame:
    """``segment`` = how many of the table's barriers in this batch precede the event."""
    from pyspark.sql import functions as F

    segment: Column = F.lit(0)
    by_table: dict[TableId, list[tuple[int, ...]]] = {}
    for barrier in barriers:
        by_table.setdefault(barrier.table, []).append(barrier.seq)
    for table, seqs in by_table.items():
        count = sum(
            (
                F.when(F.col("seq") > F.array(*[F.lit(x).cast("bigint") for x in s]), 1).otherwise(0)
                for s in seqs
            ),
            F.lit(0),
        )
        segment = F.when(table_match(table), count).otherwise(segment)
    return events.withColumn("segment", segment.cast("int"))


def fold(events: DataFrame) -> DataFrame:
    """DML events (with ``segment``) -> one row per (database, schema, table, segment, key)."""
    from pyspark.sql import functions as F

    dml = split_key_changes(events.where(F.col("op").isin(*DML_OPS)))
    is_delete = F.col("op") == "delete"
    patch = F.col("meta")[PATCH_META]
    keyed = dml.select(
        "database",
        "schema",
        "table",
        "segment",
        "seq",
        F.when(is_delete, _key_of("before")).otherwise(_key_of("after")).alias("key"),
        F.struct(
            "op",
            "seq",
            "event_time",
            "position",
            "coordinates",
            "primary_key",
            F.when(is_delete, F.col("before")).otherwise(F.col("after")).alias("image"),
        ).alias("event"),
        F.when(patch.isNotNull() & ~is_delete, F.struct("seq", patch.alias("patch"))).alias("patch"),
        F.when(patch.isNull() | is_delete, F.col("seq")).alias("full_seq"),
    )
    folded = keyed.groupBy("database", "schema", "table", "segment", "key").agg(
        F.max_by("event", "seq").alias("last"),
        F.max("full_seq").alias("full_seq"),
        F.max_by("event", "full_seq").alias("last_full"),
        F.array_sort(F.collect_list("patch")).alias("patches"),
    )
    # The newest full image (or delete) is the base; patches newer than it apply on top, in order.
    pending = F.filter("patches", lambda p: F.col("full_seq").isNull() | (p["seq"] > F.col("full_seq")))
    base = F.when(F.size(pending) > 0, F.col("last_full")).otherwise(F.col("last"))
    return folded.select(
        "database",
        "schema",
        "table",
        "segment",
        "key",
        F.col("last.op").alias("op"),
        F.coalesce(base["image"], F.col("last.image")).alias("image"),
        F.col("last.primary_key").alias("primary_key"),
        F.col("last.seq").alias("seq"),
        F.expr(seq_text_sql("last.seq")).alias("seq_text"),
        F.col("last.event_time").alias("event_time"),
        F.col("last.position").alias("position"),
        F.col("last.coordinates").alias("coordinates"),
        F.transform(pending, lambda p: p["patch"]).alias("patches"),
        (F.size(pending) > 0).alias("has_patches"),
        F.col("last_full.op").alias("base_op"),
    )


def barrier_events(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return events.where(F.col("op").isin(*BARRIER_OPS))
