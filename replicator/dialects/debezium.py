"""debezium: the Debezium change-event envelope written by Kafka Connect's JsonConverter (CloudCanal
«MQ 消息同步格式说明» "Debezium
Envelope"; debezium.io connector docs, data type mappings).

A message is either ``{"schema": ..., "payload": ...}`` (``schemas.enable=true``) or the bare payload. A
payload is a row change (``op`` c/u/d/r/t, ``before``/``after``, ``source``), a PostgreSQL logical-decoding
message (``op`` m), or a schema-change event (``ddl``, ``databaseName``, ``tableChanges``). Heartbeats,
transaction metadata and tombstones (``payload: null``) carry no change and are counted as ``filtered``.

Values: without a schema they are JSON scalars and keep their JSON text. With a schema, each column's
Connect type and logical name (``org.apache.kafka.connect.data.Decimal``, ``io.debezium.time.*`` ...) drive
the conversion to canonical text (replicator.dialects.debezium_values): base64 two's-complement decimals of
any length are decoded exactly, epoch days/ms/us/ns become date and wall-clock text with integer arithmetic
(no time zone involved).

Keys: a Debezium *value* names no key columns (the key travels as the Kafka message key, and files carry
values only), so row events have ``primary_key = []``; the decode pipeline fills it from the Kafka record
key (record_keys.py), else the engine takes keys from the mirror or from ``tables.keys``. Schema-change
events carry ``tableChanges[].table.primaryKeyColumnNames``.
"""

from __future__ import annotations

import re
from typing import Any

from replicator.dialects.base import Dialect
from replicator.dialects.debezium_values import (
    NULL_DEFAULTS,
    SCHEMALESS,
    Columns,
    ColumnsCache,
    bigint,
    structs,
)
from replicator.dialects.events import At, Events, Image, epoch_micros
from replicator.dialects.jsontext import INT64, image, json_integer, string, text, to_json
from replicator.dialects.pg_dates import doubtful_notice, infinity_reason, snapshot_calendar
from replicator.dialects.row_defaults import row_defaults
from replicator.dialects.unavailable import leave_out, unavailable

OPS = {
    "c": "insert",
    "i": "insert",
    "u": "update",
    "d": "delete",
    "r": "snapshot",
    "t": "truncate",
    "m": "filtered",
    "a": "ddl",
}  # "i" and "a" as written in CloudCanal «MQ 消息同步格式说明»; "m" = PG logical message
DML = frozenset({"insert", "update", "delete", "snapshot"})
WITH_AFTER = frozenset({"insert", "update", "snapshot"})
WITH_BEFORE = frozenset({"update", "delete"})

KEY_MESSAGE = "a Debezium message key (schema name ends with 'Key'), not a value: decode the topic's values"
# The connector's own schema history topic (schema.history.internal.kafka.topic): bare JSON with
# ``source.server`` and a binlog ``position`` object, no ``source.connector`` (seen with Debezium 3.5's
# MariaDB connector, tests/test_e2e.py). Its DDL has no binlog order of its own: never applied.
HISTORY_MESSAGE = (
    "a Debezium schema history record (the connector's internal topic), not a change event: "
    "leave that topic out of the job's subscription"
)
NO_BEFORE = (
    "delete without a 'before' image: the row cannot be identified (PostgreSQL: the table needs a "
    "primary key with REPLICA IDENTITY DEFAULT, or REPLICA IDENTITY FULL)"
)

_LEADING_COMMENTS = re.compile(r"^\s*(/\*.*?\*/\s*)*", re.S | re.A)
_DDL_STATEMENTS = tuple(
    (kind, re.compile(pattern, re.A))
    for kind, pattern in (
        ("RENAME", r"RENAME\s+TABLE"),
        ("TRUNCATE", r"TRUNCATE"),
        ("CINDEX", r"CREATE\s+(UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX"),
        ("DINDEX", r"DROP\s+INDEX"),
        ("CREATE", r"CREATE\s+(TEMPORARY\s+)?TABLE"),
        ("ALTER", r"ALTER\s+TABLE"),
        ("ERASE", r"DROP\s+TABLE"),
    )
)
_TABLE_OF_ID = re.compile(r'"([^"]*)"\s*$', re.A)  # tableChanges[].id: "db"."table" or "db"."schema"."table"
_FILE_NUMBER = re.compile(r"([0-9]+)$")  # mysql-bin.000003 -> 3
_HEX = {c: int(c, 16) for c in "0123456789abcdefABCDEF"}


def ddl_kind_from_text(ddl: str | None) -> str:
    """The contract's ddl_kind of a statement (leading /* comments */ skipped)."""
    statement = _LEADING_COMMENTS.sub("", ddl or "", count=1).upper()
    return next((kind for kind, pattern in _DDL_STATEMENTS if pattern.match(statement)), "QUERY")


def first_table_change(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Schema-change events: tableChanges is an array (Debezium) or one object (CloudCanal
    «MQ 消息同步格式说明»). Returns its first
    entry and the ``table_changes`` text: that entry's JSON, or the whole array's when it has several."""
    if value is None:
        return None, None
    if type(value) is list:
        if not value:
            return None, None
        first = value[0]
        return (first if type(first) is dict else None), (text(value) if len(value) > 1 else string(first))
    if type(value) is dict:
        return value, text(value)
    return None, string(value).strip(" ")  # type: ignore[union-attr]


def ddl_types(columns: list[dict[str, Any]] | None) -> Image:
    """Column -> lower-cased ``typeExpression`` when it has parameters (``varchar(22)``), else
    ``typeName(length[,scale])`` or the bare type."""
    types: Image = {}
    for column in columns or ():
        name = string(column.get("name"))
        if name is None:
            continue
        expression, type_name = string(column.get("typeExpression")), string(column.get("typeName"))
        length, scale = json_integer(column.get("length")), json_integer(column.get("scale"))
        base = expression if expression is not None else type_name
        if expression is not None and "(" in expression:
            kind: str | None = expression
        elif length is not None:
            kind = None if base is None else f"{base}({length}{'' if scale is None else f',{scale}'})"
        else:
            kind = base
        types[name] = None if kind is None else kind.lower()
    return types


def hex_number(part: str | None) -> int | None:
    """Spark ``try_cast(conv(part, 16, 10) AS BIGINT)``: hex digits up to the first other character
    (surrounding spaces trimmed); ``None`` when empty, negative or beyond BIGINT."""
    if part is None:
        return None
    digits = part.strip(" ")
    if not digits:
        return None
    negative = digits[0] == "-"
    number = 0
    for c in digits[1:] if negative else digits:
        digit = _HEX.get(c)
        if digit is None:
            break
        number = number * 16 + digit
    if negative and number:
        return None  # conv gives the unsigned 64-bit complement: beyond BIGINT
    return number if number in INT64 else None


def lsn_parts(lsn: str | None) -> tuple[int, int]:
    """A SQL Server LSN ``VLF:block:slot`` (hex) -> (VLF, block * 2^16 + slot); 0 for a missing part."""
    if lsn is None:
        return 0, 0
    parts = [hex_number(p) for p in lsn.split(":")[:3]] + [None] * 3
    vlf, block, slot = parts[:3]
    offset = block * 65536 + slot if block is not None and slot is not None else 0
    if offset not in INT64:
        raise OverflowError(f"SQL Server LSN {lsn!r} is beyond BIGINT")
    return vlf or 0, offset


class Debezium(Dialect):
    name = "debezium"
    partial_updates = True  # PostgreSQL's unchanged TOAST values (replicator.dialects.unavailable)

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.columns_cache = ColumnsCache()

    def matches(self, keys: Any) -> bool:
        """``{"schema", "payload"}`` (JsonConverter with schemas), or a bare payload: ``op`` + ``source`` +
        ``before``/``after``, or a schema-change event ``source`` + ``ddl`` +
        ``databaseName``/``tableChanges``."""
        keys = keys if isinstance(keys, set | frozenset) else set(keys)
        enveloped = "schema" in keys and "payload" in keys
        row = "op" in keys and "source" in keys and ("before" in keys or "after" in keys)
        ddl = "source" in keys and "ddl" in keys and ("databaseName" in keys or "tableChanges" in keys)
        return enveloped or row or ddl

    # ---- decoding ----------------------------------------------------------------------------------------
    def decode(self, message: dict[str, Any], at: At, out: Events) -> None:
        name = self.name
        enveloped = "payload" in message
        payload = message["payload"] if enveloped else message
        if payload is not None and type(payload) is not dict:
            out.fail(at, name, "wrong shape: 'payload' is not a JSON object")
            return
        schema = message.get("schema") if enveloped else None
        schema = schema if type(schema) is dict else None
        p: dict[str, Any] = payload or {}
        source = p.get("source")
        src: dict[str, Any] = source if type(source) is dict else {}
        op_code = string(p.get("op"))
        is_ddl = p.get("ddl") is not None or p.get("tableChanges") is not None or op_code == "a"
        schema_name = string(schema.get("name")) if schema else None
        op = self.op(payload, op_code, is_ddl, schema_name)
        change, change_text = first_table_change(p.get("tableChanges")) if op == "ddl" else (None, None)
        ident = self.identity(p, src, op, change or {})
        if op == "ddl" and not ident["database"] and ident["table"] is None and change is None:
            # A session statement of no database: the MariaDB/MySQL connector's snapshot opens with
            # ``SET character_set_server=...`` (databaseName "", tableChanges []): nothing to apply.
            op = "filtered"

        if schema_name is not None and schema_name.endswith("Key") and op_code is None and not is_ddl:
            out.fail(at, name, KEY_MESSAGE, **ident)
            return
        if is_ddl and not enveloped and type(p.get("position")) is dict and "connector" not in src:
            out.fail(at, name, HISTORY_MESSAGE, **ident)
            return
        error = None
        if op == "filtered":
            pass
        elif op_code is None and not is_ddl:
            error = "wrong shape: the Debezium payload has no 'op' (nor 'ddl')"
        elif op is None:
            error = f"unknown op {to_json([op_code])}"
        elif not ident["database"]:
            error = "missing database (source.db)"
        elif (op in DML or op == "truncate") and ident["table"] is None:
            error = "missing table (source.table)"
        columns = self.columns(schema) if error is None and op != "ddl" else None
        after = before = None
        if error is None and op in DML:
            after, before, error = self.images(p, columns, op, op_code)
        if error is not None:
            out.fail(at, name, error, **ident)
            return
        if op_code == "r" and columns is not None and string(src.get("connector")) == "postgresql":
            after, doubtful = snapshot_calendar(after, columns.types, src)  # (JDBC's Julian calendar)
            if doubtful:
                out.notice(ident["database"], ident["schema"], ident["table"], doubtful_notice(doubtful))

        ts = self.timestamp(p, src)
        position = self.position(src)
        if position is None and ts is not None:
            position = f"ts_ms:{ts}"
        event_time = epoch_micros(ts)
        if event_time is not None and event_time not in INT64:
            raise OverflowError(f"event time {ts} is beyond the timestamp range")
        order = self.order_key(src)
        if op == "ddl" and order and string(src.get("snapshot")) not in (None, "false"):
            order = self.before_snapshot_rows(order)
        meta = self.meta(p, src)
        if op in ("insert", "update"):  # PostgreSQL's unchanged TOASTed values: a partial update
            after = leave_out(after, unavailable(p.get("after")), meta)
            row_defaults(schema, meta, string(src.get("connector")))  # ADD COLUMN .. DEFAULT without a DDL
        common: dict[str, Any] = {
            **ident,
            "order": order or (ts or 0, 0, 0),
            "event_time": event_time,
            "position": position,
            "meta": meta,
        }
        if op == "ddl":
            out.add(at, name, op, **self.schema_change(p, change or {}), table_changes=change_text, **common)
            return
        if op in DML:
            if columns is None:
                out.notice(ident["database"], ident["schema"], ident["table"], SCHEMALESS)
            elif columns.defaults:
                text = NULL_DEFAULTS.format(columns=to_json(columns.defaults))
                out.notice(ident["database"], ident["schema"], ident["table"], text)
        types = columns.types if columns is not None else {}
        out.add(at, name, op, primary_key=[], after=after, before=before, source_types=types, **common)

    @staticmethod
    def op(
        payload: dict[str, Any] | None, op_code: str | None, is_ddl: bool, schema_name: str | None
    ) -> str | None:
        """The contract op; ``filtered`` for tombstones (``payload: null``), heartbeats (schema name with
        ``Heartbeat``, or a payload with only ``ts_ms``) and transaction metadata (``status`` BEGIN/END)."""
        p = payload or {}
        heartbeat = (schema_name is not None and "Heartbeat" in schema_name) or (
            op_code is None
            and not is_ddl
            and type(p.get("source")) is not dict
            and p.get("ts_ms") is not None
            and p.get("before") is None
            and p.get("after") is None
        )
        tx_marker = string(p.get("status")) in ("BEGIN", "END") and op_code is None
        if payload is None or heartbeat or tx_marker:
            return "filtered"
        return "ddl" if is_ddl else OPS.get(op_code)  # type: ignore[arg-type]

    @staticmethod
    def identity(
        p: dict[str, Any], src: dict[str, Any], op: str | None, change: dict[str, Any]
    ) -> dict[str, Any]:
        """MySQL db.table; PostgreSQL / SQL Server / Oracle db.schema.table. Schema-change events read
        ``databaseName``/``schemaName`` first, and the table from ``tableChanges[0].id`` when the source
        names none."""
        database, schema = string(src.get("db")), string(src.get("schema"))
        table = string(src.get("table")) or None
        if op == "ddl":
            database = _coalesce(string(p.get("databaseName")), database)
            schema = _coalesce(string(p.get("schemaName")), schema)
            if table is None:
                found = _TABLE_OF_ID.search(string(change.get("id")) or "")
                table = (found.group(1) or None) if found else None
        return {"database": database, "schema": schema or None, "table": table}

    def images(
        self, p: dict[str, Any], columns: Columns | None, op: str, op_code: str | None
    ) -> tuple[Image | None, Image | None, str | None]:
        """The row images an op carries (``after`` for insert/update/snapshot, ``before`` for update/delete),
        or why the event cannot be applied."""
        after, lost_after = self.image(p.get("after"), columns)
        before, lost_before = self.image(p.get("before"), columns)
        if op in WITH_AFTER and after is None:
            return None, None, f"no 'after' image for op {to_json([op_code])}"
        if op == "delete" and before is None:
            return None, None, NO_BEFORE
        lost = sorted({*lost_after, *lost_before})
        if lost:
            reasons = sorted({columns.reasons[c] for c in lost if c in columns.reasons}) if columns else []
            reasons += infinities(lost, columns, p)
            why = "".join(f": {r}" for r in reasons)
            return None, None, f"values do not decode as their schema types: columns {to_json(lost)}{why}"
        return (after if op in WITH_AFTER else None), (before if op in WITH_BEFORE else None), None

    @staticmethod
    def schema_change(p: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
        """ddl_kind, ddl_sql, primary key and column types of a schema-change event. ddl_kind: RENAME for
        ``RENAME TABLE ...``, else ``tableChanges[0].type`` (DROP -> ERASE), else from the statement."""
        table = change.get("table")
        table = table if type(table) is dict else {}
        keys = table.get("primaryKeyColumnNames")
        ddl = string(p.get("ddl"))
        kind: str | None = ddl_kind_from_text(ddl)
        if kind != "RENAME":
            change_type = string(change.get("type"))
            kind = change_type.upper() if change_type is not None else (kind if ddl is not None else None)
        return {
            "ddl_kind": "ERASE" if kind == "DROP" else kind,
            "ddl_sql": ddl,
            "primary_key": [string(k) for k in keys] if type(keys) is list else [],
            "source_types": ddl_types(structs(table.get("columns"))),
        }

    def columns(self, schema: dict[str, Any] | None) -> Columns | None:
        """Field schemas of the row columns: ``schema.fields[field=after].fields``, else ``[before]``."""
        if schema is None:
            return None
        fields = structs(schema.get("fields")) or ()
        for image_name in ("after", "before"):
            entry = next((f for f in fields if string(f.get("field")) == image_name), None)
            columns = self.columns_cache.get(entry.get("fields")) if entry is not None else None
            if columns is not None:
                return columns
        return None

    @staticmethod
    def image(row: Any, columns: Columns | None) -> tuple[Image | None, list[str]]:
        """A row image as canonical text (``before: {}`` is no image) and the columns whose JSON value was
        not NULL but did not convert (bad base64, bad number)."""
        if type(row) is not dict or not row:
            return None, []
        if columns is None or not columns.convert:
            return image(row), []
        return columns.image(row)

    @staticmethod
    def timestamp(p: dict[str, Any], src: dict[str, Any]) -> int | None:
        """``source.ts_ms`` (commit time); 0 (MySQL snapshot rows in Debezium 1.x) and the very old
        ``ts_sec`` fall back to the payload ``ts_ms`` (connector processing time)."""
        for value in (src.get("ts_ms"), src.get("ts_sec")):
            number = bigint(value)
            if number:
                return number
        return bigint(p.get("ts_ms"))

    def order_key(self, src: dict[str, Any]) -> tuple[int, ...]:
        """The dialect's part of ``seq`` (empty when the source has no position):
        MySQL [binlog file number, pos, row]; PostgreSQL [lsn, 0, 0]; SQL Server [commit_lsn, change_lsn,
        event_serial_no] with each LSN split into (VLF, block * 2^16 + slot); Oracle [commit_scn, scn, 0]."""
        file = string(src.get("file"))
        if file:
            found = _FILE_NUMBER.search(file)
            file_no = bigint(found.group(1)) if found else None
            return (file_no or 0, bigint(src.get("pos")) or 0, bigint(src.get("row")) or 0)
        lsn = bigint(src.get("lsn"))
        if lsn is not None:
            return (lsn, 0, 0)
        commit_lsn, change_lsn = string(src.get("commit_lsn")), string(src.get("change_lsn"))
        if commit_lsn is not None or change_lsn is not None:
            serial = bigint(src.get("event_serial_no")) or 0
            return (*lsn_parts(commit_lsn), *lsn_parts(change_lsn), serial)
        scn = bigint(src.get("scn"))
        if scn is not None:
            return (_coalesce(bigint(src.get("commit_scn")), scn), scn, 0)
        return ()

    @staticmethod
    def before_snapshot_rows(order: tuple[int, ...]) -> tuple[int, ...]:
        """A snapshot's schema events (``DROP TABLE IF EXISTS`` then ``CREATE TABLE`` of each captured
        table, ``source.snapshot`` true/first/last) carry the same binlog position as the snapshot's rows,
        but travel on another topic, so no delivery order ranks them: a row could come before the CREATE
        and be lost with the DROP (seen with Debezium 3.5's MariaDB connector, tests/test_e2e.py). They
        describe the schema the rows were read in, so they rank one binlog byte earlier: after every event
        before the snapshot's position (none is ever published), before its rows and the stream after."""
        if len(order) == 3 and order[1] > 0:
            return (order[0], order[1] - 1, order[2])
        return order

    def position(self, src: dict[str, Any]) -> str | None:
        file = string(src.get("file"))
        if file:
            gtid = string(src.get("gtid"))
            pos = string(src.get("pos"))
            return None if pos is None else f"{file}:{pos}{f' gtid={gtid}' if gtid else ''}"
        lsn = string(src.get("lsn"))
        if lsn is not None:
            return f"lsn:{lsn}"
        commit_lsn, change_lsn = string(src.get("commit_lsn")), string(src.get("change_lsn"))
        if commit_lsn is not None or change_lsn is not None:
            return _join(("commit_lsn:", commit_lsn), ("change_lsn:", change_lsn))
        scn = string(src.get("scn"))
        if scn is not None:
            return _join(("scn:", scn), ("commit_scn:", string(src.get("commit_scn"))))
        return None

    def meta(self, p: dict[str, Any], src: dict[str, Any]) -> Image:
        transaction = p.get("transaction")
        transaction_id = string(transaction.get("id")) if type(transaction) is dict else None
        pairs = {
            "connector": string(src.get("connector")),
            "snapshot": string(src.get("snapshot")),
            "ts_ms": string(p.get("ts_ms")),
            "transaction_id": _coalesce(transaction_id, string(src.get("txId"))),
            "query": string(src.get("query")),
            "server_id": string(src.get("server_id")),
        }
        return {k: v for k, v in pairs.items() if v is not None}


def infinities(lost: list[str], columns: Columns | None, p: dict[str, Any]) -> list[str]:
    """Why lost date/time values are none: PostgreSQL's infinities (pg_dates), each named."""
    if columns is None or not columns.dates:
        return []
    raw = [r for r in (p.get("after"), p.get("before")) if type(r) is dict]
    found = {infinity_reason(c, columns.dates[c], r.get(c)) for c in lost if c in columns.dates for r in raw}
    return sorted(r for r in found if r is not None)


def _coalesce(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value


def _join(*labelled: tuple[str, str | None]) -> str:
    """``concat_ws(' ', label || value, ...)``: the labels of absent values are left out."""
    return " ".join(label + value for label, value in labelled if value is not None)
