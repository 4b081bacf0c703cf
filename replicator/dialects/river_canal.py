"""river-canal: KafkaRiverCanal's message («Kafka消息 Specification», GSON-encoded).

One message is one row change of one table: ``binlog`` "offset@binlog-file", ``time`` (binlog event time,
ms), ``canalTime`` (arrival at KafkaRiverCanal, ms), ``db``, ``table``, ``event`` 'i'/'u'/'d', ``keys`` and
``columns`` [{n, t, v, null, updated, origin_val}]. ``v`` is the new value (insert, update) or the deleted
value (delete); ``origin_val`` is the value before an update, only on columns with ``updated`` true.
Order: binlog file number, then offset. See docs/dialects.md (river-canal).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from replicator.dialects.base import Dialect
from replicator.dialects.canal_json import TypeCache, binary_as_hex, binary_columns
from replicator.dialects.events import At, Events, Image, epoch_micros
from replicator.dialects.jsontext import cast_bigint, string, to_json

# "6816@mysql-bin.000070" (KafkaRiverCanal «Kafka消息 Specification»): offset, then the binlog file whose name
# ends in its number. Java
# regex semantics, as the Spark decoder had them: ASCII \d and \s, `.` stops at every line terminator, `$`
# is the end or before a final line terminator.
BINLOG_RE = re.compile(
    r"^\s*(\d+)@([^\n\r\u0085\u2028\u2029]*\.(\d+))\s*(?:\r\n|[\n\r\u0085\u2028\u2029])?\Z", re.ASCII
)
EPOCH_LIMIT = 10**14  # larger |ms| values are not times


def flag(value: Any) -> bool:
    """A column object's ``null`` / ``updated`` flag: absent (or not a JSON boolean) is false."""
    return value is True


class RiverCanal(Dialect):
    name = "river-canal"
    required_keys: ClassVar[frozenset[str]] = frozenset({"binlog", "db", "table", "event", "columns"})
    ops: ClassVar[dict[str, str]] = {"i": "insert", "u": "update", "d": "delete"}

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.type_cache = TypeCache()

    def decode(self, m: dict[str, Any], at: At, out: Events) -> None:
        name = self.name
        db = string(m.get("db"))
        table = string(m.get("table")) or None
        ident: dict[str, Any] = {"database": db, "table": table}
        event = string(m.get("event"))
        op = None if event is None else self.ops.get(event.strip(" ").lower())
        binlog = string(m.get("binlog"))
        found = BINLOG_RE.match(binlog) if binlog is not None else None
        offset = cast_bigint(found.group(1)) if found else None
        file_no = cast_bigint(found.group(3)) if found else None
        # A null column has no name; a column that is neither null nor an object voids `columns`.
        columns = m.get("columns")
        if type(columns) is not list or any(c is not None and type(c) is not dict for c in columns):
            columns = []
        columns = [c if c is not None else {} for c in columns]
        names = [string(c.get("n")) for c in columns]
        keys = m.get("keys")
        pk = list(dict.fromkeys(string(k) for k in keys)) if type(keys) is list else []
        if event is None:
            out.fail(at, name, "wrong shape: no 'event' in the message", **ident)
            return
        if op is None:
            out.fail(at, name, f"unknown event {to_json([event])} (expected i, u or d)", **ident)
            return
        if not db:
            out.fail(at, name, "missing db", **ident)
            return
        if not table:
            out.fail(at, name, "missing table", **ident)
            return
        if offset is None or file_no is None:
            error = f"malformed binlog {to_json([binlog])}: expected offset@file.NNNNNN"
            out.fail(at, name, error, **ident)
            return
        if not columns:
            out.fail(at, name, "no columns in 'columns'", **ident)
            return
        if not all(names) or len(set(names)) != len(names):
            out.fail(at, name, "a column in 'columns' has no name or a duplicate name ('n')", **ident)
            return
        named: dict[str, dict[str, Any]] = dict(zip(names, columns, strict=True))  # type: ignore[arg-type]
        types, binary = self.type_cache.derived(
            (db, table),
            [(n, c.get("t")) for n, c in named.items()],
            lambda: self.types(named),
            binary_columns,
        )
        after, before = self.images(op, named, binary)
        # Empty keys (a table without a primary key): resolved by the engine (tables.keys, ...), as for
        # canal-json's empty pkNames.
        key_image = after if after is not None else before
        if pk and any(key_image.get(k) is None for k in pk):  # type: ignore[union-attr, arg-type]
            out.fail(at, name, f"NULL or absent primary key column in {to_json(pk)}", **ident)
            return
        time_ms = cast_bigint(string(m.get("time")))
        canal_ms = cast_bigint(string(m.get("canalTime")))
        meta = {"canalTime": None if canal_ms is None else str(canal_ms), "binlog": binlog}
        out.add(
            at,
            name,
            op,
            primary_key=pk,  # type: ignore[arg-type]
            after=after,
            before=before,
            source_types=types,
            order=(file_no, offset),
            event_time=epoch_micros(time_ms if time_ms is not None and abs(time_ms) <= EPOCH_LIMIT else None),
            position=f"{found.group(2)}:{offset}",  # type: ignore[union-attr]
            meta={k: v for k, v in meta.items() if v is not None},
            **ident,
        )

    @staticmethod
    def types(named: dict[str, dict[str, Any]]) -> Image:
        """``t`` of every column that has one, verbatim (``bigint(20) unsigned``)."""
        types = {n: string(c.get("t")) for n, c in named.items()}
        return {n: t for n, t in types.items() if t is not None}

    @staticmethod
    def images(op: str, named: dict[str, dict[str, Any]], binary: frozenset[str]) -> tuple[Image | None, ...]:
        """(after, before) of the row; binary columns' ISO-8859-1 text as hex (canal's encoding)."""
        # After image: `v`, or SQL NULL when the column's `null` flag is set.
        new = {n: None if flag(c.get("null")) else string(c.get("v")) for n, c in named.items()}
        image = binary_as_hex(new, binary)
        if op == "insert":
            return image, None
        if op == "delete":
            # on delete, `v` is the deleted row (KafkaRiverCanal «Kafka消息 Specification», table
            # 2)
            return None, image
        # Before image of an update: `origin_val` on updated columns (absent = NULL: GSON omits null
        # fields), the unchanged value elsewhere.
        old = {n: string(c.get("origin_val")) if flag(c.get("updated")) else new[n] for n, c in named.items()}
        return image, binary_as_hex(old, binary)
