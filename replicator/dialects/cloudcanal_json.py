"""cloudcanal-json: CloudCanal's default "CloudCanal Json" message (CloudCanal «MQ 消息同步格式说明», section
"CloudCanal Json").

One message holds 1..n rows of one table: ``data`` ("当前操作的数据", the rows of this operation) and, for
UPDATE, ``before`` (the previous rows, a parallel array; the seed's example holds the whole previous row).
``action`` names the operation (INSERT / UPDATE / DELETE, or the DDL kind with ``isDdl: true``);
``entryType`` says what the message is (only ROWDATA carries rows; TRANSACTIONEND etc. are filtered).
Column types: ``dbValType`` (type text) and ``jdbcType`` (java.sql.Types codes, CloudCanal
«MQ 消息同步格式说明»'s appendix).
Order: ``execTs`` (ms) then ``bid``. CloudCanal's "Canal Json" output is plain canal-json.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from replicator.dialects.base import Dialect
from replicator.dialects.canal_json import BINARY_TYPE, TypeCache, binary_as_hex, overlay, rows_of
from replicator.dialects.events import At, Events, Image, epoch_micros, epoch_millis
from replicator.dialects.jsontext import image, json_integer, loads_exact, string, text, to_json

ROW_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
# CloudCanal writes the DDL kind into `action` (CloudCanal «MQ 消息同步格式说明»: "ALTER"); DROP is named
# ERASE in the contract.
DDL_ALIASES = {"DROP": "ERASE"}
# java.sql.Types codes of byte columns (CloudCanal «MQ 消息同步格式说明» appendix): BINARY, VARBINARY,
# LONGVARBINARY, BLOB.
BINARY_JDBC = (-2, -3, -4, 2004)

_binary_type = re.compile(BINARY_TYPE).search


class CloudCanalJson(Dialect):
    name = "cloudcanal-json"
    # `execTs`, `action` and `entryType` are CloudCanal's own names (canal writes es/type, Debezium ts_ms/op).
    required_keys: ClassVar[frozenset[str]] = frozenset({"execTs"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"action", "entryType"})
    row_entry: ClassVar[str] = "ROWDATA"  # the only entryType carrying rows or DDL

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.type_cache = TypeCache()

    def source_types(self, m: dict[str, Any]) -> tuple[Image, frozenset[str]]:
        """``dbValType`` text, else ``jdbc:<code>`` from ``jdbcType``; and the byte columns among them."""
        sent = (m.get("dbValType"), m.get("jdbcType"))
        names = sent[0] if type(sent[0]) is dict else {}
        codes = sent[1] if type(sent[1]) is dict else {}

        def build() -> Image:
            types: Image = {k: None if v is None else f"jdbc:{text(v)}" for k, v in codes.items()}
            types.update(image(names) or {})
            return types

        return self.type_cache.derived(
            (string(m.get("db")), string(m.get("schema")), string(m.get("table"))),
            sent,
            build,
            lambda _: frozenset(k for k in {**codes, **names} if self.is_binary(names.get(k), codes.get(k))),
        )

    def is_binary(self, name: Any, code: Any) -> bool:
        """Byte columns -> hex. Assumption (the doc is silent): bytes travel as ISO-8859-1 text, as in
        canal-json (canal's LogEventConvert); the column is binary by ``dbValType``, else by ``jdbcType``."""
        if name is not None:
            return bool(_binary_type(text(name) or ""))
        return type(code) is int and code in BINARY_JDBC

    def primary_key(self, m: dict[str, Any], is_ddl: bool) -> list[str | None]:
        """``pks``; a DDL without them takes ``tableChanges.table.primaryKeyColumnNames``."""
        names = m.get("pks")
        pks = list(dict.fromkeys(string(n) for n in names)) if type(names) is list else []
        if is_ddl and not pks:
            ddl_pk = _table_changes_pk(m.get("tableChanges"))
            if ddl_pk is not None:
                return ddl_pk
        return pks

    def decode(self, m: dict[str, Any], at: At, out: Events) -> None:
        name = self.name
        action = string(m.get("action"))
        action = None if action is None else action.strip(" ").upper()
        entry = string(m.get("entryType"))
        entry = self.row_entry if entry is None else entry.upper()
        is_ddl = m.get("isDdl") is True
        kind = None if action is None else DDL_ALIASES.get(action, action)
        if entry != self.row_entry:
            op: str | None = "filtered"
        elif is_ddl:
            op = "truncate" if kind == "TRUNCATE" else "ddl"
        else:
            op = None if action is None else ROW_OPS.get(action)
        is_dml = not is_ddl and entry == self.row_entry

        database = string(m.get("db"))
        schema = string(m.get("schema"))
        table = string(m.get("table"))
        # MySQL has no schema level; CloudCanal repeats the database name there (CloudCanal
        # «MQ 消息同步格式说明»).
        ident: dict[str, Any] = {
            "database": database,
            "schema": schema if schema and schema != (database or "") else None,
            "table": table or None,
        }
        if op == "filtered":
            error = None
        elif action is None:
            error = "wrong shape: no 'action' in the message"
        elif op is None:
            error = f"unknown op action {to_json([action])}"
        elif not database:
            error = "missing database (db)"
        elif not table and (is_dml or op == "truncate"):
            error = "missing table"
        else:
            error = None

        data, before_rows = rows_of(m.get("data")), rows_of(m.get("before"))
        # A DELETE's row is in `data` (the doc: "当前操作的数据"); `before` is read when `data` is empty.
        if is_dml and data:
            rows: list[Any] = data
        elif is_dml and op == "delete" and before_rows:
            rows = before_rows
        else:
            rows = [None]

        types, binary = self.source_types(m)
        pk = self.primary_key(m, is_ddl)
        exec_ts, bid = json_integer(m.get("execTs")), json_integer(m.get("bid"))
        exec_ms = epoch_millis(exec_ts)
        position = " ".join(
            part
            for part in (
                None if exec_ms is None else f"execTs={exec_ms}",
                None if bid is None else f"bid={bid}",
            )
            if part is not None
        )
        send_ts = json_integer(m.get("sendTs"))
        meta = {"sendTs": None if send_ts is None else str(send_ts), "entryType": string(m.get("entryType"))}
        common: dict[str, Any] = {
            **ident,
            "ddl_kind": kind if is_ddl else None,
            "ddl_sql": string(m.get("sql")) if is_ddl else None,
            "table_changes": string(m.get("tableChanges")) if is_ddl else None,
            "primary_key": pk,
            "source_types": types,
            "order": (exec_ms or 0, bid or 0),
            "event_time": epoch_micros(exec_ts),
            "position": position,
            "meta": meta,
        }
        for index, raw_row in enumerate(rows):
            row = binary_as_hex(image(raw_row), binary)
            after: Image | None = None
            before: Image | None = None
            if op in ("insert", "update"):
                after = row
            if op == "update":
                # `before` of an UPDATE holds the whole previous row (CloudCanal «MQ 消息同步格式说明»);
                # overlaying it on `data` also
                # gives the whole row if a producer sends changed columns only.
                old = before_rows[index] if before_rows is not None and index < len(before_rows) else None
                before = overlay(row, binary_as_hex(image(old), binary))
            elif op == "delete":
                before = row
            failure = error
            if failure is None and is_dml:
                key_image = after if after is not None else before
                if row is None:
                    failure = "no rows in 'data'"
                elif pk and any(key_image.get(k) is None for k in pk):  # type: ignore[union-attr, arg-type]
                    failure = f"NULL or absent primary key column in {to_json(pk)}"
            if failure is not None:
                out.fail(at, name, failure, row=index, **ident)
                continue
            out.add(at, name, op, after=after, before=before, row=index, **common)


def _table_changes_pk(changes: Any) -> list[str | None] | None:
    """``tableChanges`` (an object, or its JSON text) -> ``table.primaryKeyColumnNames``; None when it has
    none."""
    if type(changes) is str:
        try:
            changes = loads_exact(changes)
        except ValueError:
            return None
    table = changes.get("table") if type(changes) is dict else None
    names = table.get("primaryKeyColumnNames") if type(table) is dict else None
    return [string(n) for n in names] if type(names) is list else None
