"""Column types declared in the job file (``tables.types``), for what messages leave untyped.

Some formats carry no column type (CKafka format one, Debezium without schemas) or a bare one (Huawei DRS
``mysqlType: "decimal"``, no precision: Huawei DRS «Kafka消息格式»); without help such a column becomes a
string column. A
declared type (source type text as in DDL) is used where the message gives no type for the column, or only
the declared type's bare name (``decimal`` for ``decimal(12,2)``); a type the message states in full wins.
Values then parse strictly against it, and one that does not fit is a dead letter naming the column
(types.parse_values), as for any typed column.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replicator.config import TablesConfig

TableId = tuple[str | None, str | None, str | None]  # database, schema, table


def bare_of(declared: str, given: str) -> bool:
    """Is ``given`` the bare name of ``declared`` (``decimal`` of ``decimal(12,2)``)?"""
    given = given.strip().lower()
    return "(" not in given and declared.split("(", 1)[0].strip().lower() == given


def with_declared_types(
    types: dict[TableId, dict[str, str]], tables: Iterable[TableId], config: TablesConfig
) -> dict[TableId, dict[str, str]]:
    """The batch's per-table type maps (column -> source type) with the job file's declared types
    filled in, for ``tables`` (the batch's tables, typed by their messages or not)."""
    if not config.types:
        return types
    result = dict(types)
    for table in tables:
        declared = config.types_for(f"{table[0]}.{table[2]}")
        if not declared:
            continue
        merged = dict(types.get(table, {}))
        for column, source_type in declared.items():
            given = merged.get(column)
            if not given or bare_of(source_type, given):
                merged[column] = source_type
        result[table] = merged
    return result
