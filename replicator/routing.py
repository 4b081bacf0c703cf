"""Table routing: many source tables (shards) -> one mirror, as an event rewrite in Spark.

A ``tables.route`` rule matches ``database.table`` (``database.schema.table`` where the source has
schemas) with a regex; matching events are renamed to the rule's mirror before keys, barriers and fold, so
the rest of the engine sees one table. The source identity is kept in the row images as
``_cdc_source_database`` / ``_cdc_source_table`` (and in ``meta`` for barrier events); ``source_in_key``
adds both to the primary key when shards reuse the same keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from replicator.config import RouteRule

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SOURCE_DATABASE = "_cdc_source_database"
SOURCE_TABLE = "_cdc_source_table"
SOURCE_COLUMNS = (SOURCE_DATABASE, SOURCE_TABLE)
SOURCE_TYPE = "varchar(255)"
META_DATABASE = "source_database"
META_TABLE = "source_table"


def source_name() -> Column:
    from pyspark.sql import functions as F

    return F.concat_ws(".", "database", "schema", "table")


def route(events: DataFrame, rules: Sequence[RouteRule]) -> DataFrame:
    """Rewrite events of routed source tables to their mirror; other events pass unchanged."""
    from pyspark.sql import functions as F

    if not rules:
        return events
    rule_index: Column = F.lit(None).cast("int")
    for i, rule in reversed(list(enumerate(rules))):  # the first matching rule wins
        rule_index = F.when(source_name().rlike(f"^(?:{rule.match})$"), F.lit(i)).otherwise(rule_index)
    usable = F.col("table").isNotNull()
    if "error" in events.columns:
        usable = usable & F.col("error").isNull()  # dead letters keep the identity they arrived with
    routed = events.withColumn("_route", F.when(usable, rule_index))

    def pick(values: list[Column | None], fallback: str) -> Column:
        result: Column = F.col(fallback)
        for i, value in enumerate(values):
            if value is not None:
                result = F.when(F.col("_route") == i, value).otherwise(result)
        return result

    source = F.create_map(F.lit(SOURCE_DATABASE), F.col("database"), F.lit(SOURCE_TABLE), F.col("table"))
    source_types = F.create_map(
        F.lit(SOURCE_DATABASE), F.lit(SOURCE_TYPE), F.lit(SOURCE_TABLE), F.lit(SOURCE_TYPE)
    )
    meta = F.create_map(F.lit(META_DATABASE), F.col("database"), F.lit(META_TABLE), F.col("table"))
    empty = F.create_map().cast("map<string,string>")
    is_routed = F.col("_route").isNotNull()
    with_source = {
        "after": F.when(F.col("after").isNotNull(), F.map_concat("after", source)),
        "before": F.when(F.col("before").isNotNull(), F.map_concat("before", source)),
        "source_types": F.map_concat(F.coalesce("source_types", empty), source_types),
        "meta": F.map_concat(F.coalesce("meta", empty), meta),
    }
    key_columns = F.array(*[F.lit(c) for c in SOURCE_COLUMNS])
    extended_key = F.when(F.size("primary_key") > 0, F.array_union("primary_key", key_columns)).otherwise(
        F.col("primary_key")
    )
    targets = [rule.target() for rule in rules]
    replaced: dict[str, Column] = {
        **{name: F.when(is_routed, value).otherwise(F.col(name)) for name, value in with_source.items()},
        "database": pick([F.lit(t[0]) for t in targets], "database"),
        "schema": pick([F.lit(t[1]).cast("string") for t in targets], "schema"),
        "table": pick([F.lit(t[2]) for t in targets], "table"),
        "primary_key": pick([extended_key if r.source_in_key else None for r in rules], "primary_key"),
    }
    return routed.select(*[replaced[n].alias(n) if n in replaced else F.col(n) for n in events.columns])
