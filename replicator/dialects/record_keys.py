"""Primary-key column names from a Kafka record key, for formats whose value names no key.

Debezium puts a row's primary key in the Kafka record key, not in the value (Debezium MySQL connector
docs, "Change event keys"): ``{"id": 1}``, or with Kafka Connect's JsonConverter schemas enabled
``{"schema": {...}, "payload": {"id": 1}}``. The key's field names, in order, are the key columns. A key
that is not such a JSON object (a canal partition hash, an Avro key, a plain string) says nothing.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from replicator.dialects.events import Events

ROW_OPS = frozenset({"insert", "update", "delete", "snapshot"})


@lru_cache(maxsize=4096)
def key_columns(key: bytes) -> tuple[str, ...] | None:
    """The key's column names, or None when the key is not a JSON object of columns."""
    try:
        parsed: Any = orjson.loads(key)
    except orjson.JSONDecodeError:
        return None
    if type(parsed) is dict and "payload" in parsed and "schema" in parsed:
        parsed = parsed["payload"]
    if type(parsed) is not dict or not parsed:
        return None
    return tuple(str(name) for name in parsed)


def keys_from_record_key(key: bytes, out: Events, mark: int) -> None:
    """Rows decoded since ``mark`` that name no key columns take them from the record's key."""
    from replicator.dialects.events import _OP, _PK

    rows = out.rows
    names: list[str] | None = None
    for i in range(mark, len(rows)):
        row = rows[i]
        if not row[_PK] and row[_OP] in ROW_OPS:
            if names is None:
                found = key_columns(bytes(key))
                if found is None:
                    return
                names = list(found)
            rows[i] = (*row[:_PK], names, *row[_PK + 1 :])
