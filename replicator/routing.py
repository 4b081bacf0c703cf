"""Table routing: many source tables (shards) -> one mirror, as a rewrite of the decoded events (Arrow).

A ``tables.route`` rule matches ``database.table`` (``database.schema.table`` where the source has
schemas) with a regex; matching events are renamed to the rule's mirror before keys, barriers and fold, so
the rest of the engine sees one table. The source identity is kept in the row images as
``_cdc_source_database`` / ``_cdc_source_table`` (and in ``meta`` for barrier events); ``source_in_key``
adds both to the primary key when shards reuse the same keys.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.model import table_labels

if TYPE_CHECKING:  # not imported at run time: pydantic costs a decode worker ~0.15 s to import
    from replicator.config import RouteRule

SOURCE_DATABASE = "_cdc_source_database"
SOURCE_TABLE = "_cdc_source_table"
SOURCE_COLUMNS = (SOURCE_DATABASE, SOURCE_TABLE)
SOURCE_TYPE = "varchar(255)"
META_DATABASE = "source_database"
META_TABLE = "source_table"
REWRITTEN = ("database", "schema", "table", "primary_key", "after", "before", "source_types", "meta")


def _rule_of(name: str | None, patterns: list[re.Pattern[str]]) -> int | None:
    if name is None:
        return None
    return next((i for i, p in enumerate(patterns) if p.fullmatch(name)), None)


def route(events: pa.Table, rules: Sequence[RouteRule]) -> pa.Table:
    """Rewrite events of routed source tables to their mirror; other events pass unchanged (in order)."""
    if not rules or events.num_rows == 0:
        return events
    patterns = [re.compile(rule.match) for rule in rules]
    name = table_labels(events)
    # Dead letters keep the identity they arrived with; a table-less event (CREATE DATABASE) is not routed.
    usable = pc.and_(pc.is_valid(events["table"]), pc.is_null(events["error"]))
    encoded = pc.dictionary_encode(name).combine_chunks()
    per_name = pa.array([_rule_of(n, patterns) for n in encoded.dictionary.to_pylist()], pa.int32())
    rule_index = pc.if_else(usable, per_name.take(encoded.indices), pa.scalar(None, pa.int32()))
    routed_mask = pc.is_valid(rule_index)
    if isinstance(routed_mask, pa.ChunkedArray):
        routed_mask = routed_mask.combine_chunks()
    if not pc.any(routed_mask).as_py():
        return events
    positions = pa.array(range(events.num_rows), pa.int64())
    routed = events.filter(routed_mask)
    kept = events.filter(pc.invert(routed_mask))
    routed_at = positions.filter(routed_mask)
    kept_at = positions.filter(pc.invert(routed_mask))
    rewritten = _rewrite(routed, pc.filter(rule_index, routed_mask).to_pylist(), rules)
    merged = pa.concat_tables([kept, rewritten])
    if "type_key" in merged.column_names:  # the decoder's text of the type maps: stale for routed rows
        merged = merged.drop_columns(["type_key"])
    order = pc.sort_indices(pa.concat_arrays([kept_at, routed_at]))
    return merged.take(order)


def _rewrite(rows: pa.Table, rule_index: list[int], rules: Sequence[RouteRule]) -> pa.Table:
    """The routed rows, rewritten one by one (only they pay for it)."""
    columns: dict[str, list[Any]] = {c: rows[c].to_pylist() for c in REWRITTEN}
    for i, r in enumerate(rule_index):
        rule = rules[r]
        database, table = columns["database"][i], columns["table"][i]
        source = {SOURCE_DATABASE: database, SOURCE_TABLE: table}
        for image in ("after", "before"):
            if columns[image][i] is not None:
                columns[image][i] = _concat(columns[image][i], source)
        columns["source_types"][i] = _concat(
            columns["source_types"][i] or [], {SOURCE_DATABASE: SOURCE_TYPE, SOURCE_TABLE: SOURCE_TYPE}
        )
        columns["meta"][i] = _concat(columns["meta"][i] or [], {META_DATABASE: database, META_TABLE: table})
        key = columns["primary_key"][i]
        if rule.source_in_key and key:
            columns["primary_key"][i] = [*key, *(c for c in SOURCE_COLUMNS if c not in key)]
        columns["database"][i], columns["schema"][i], columns["table"][i] = rule.target()
    for name, values in columns.items():
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, name, pa.array(values, rows.schema.field(index).type))
    return rows


def _concat(pairs: list[tuple[str, Any]], extra: dict[str, Any]) -> list[tuple[str, Any]]:
    """map_concat with the last value of a key winning (Arrow maps are lists of pairs)."""
    merged = dict(pairs)
    merged.update(extra)
    return list(merged.items())
