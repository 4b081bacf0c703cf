"""ckafka: Tencent CKafka connector's MySQL subscription messages (Tencent CKafka
«MySQL 订阅消息官方格式说明»; docs/dialects.md (ckafka)).

A topic of this connector carries three shapes, routed per message by its keys:

* "official format one" (官方格式一) DML: BINLOG_NAME, BINLOG_POS, DATABASE, TABLE, TYPE (I/U/D; the doc's
  field table writes insert as ``l``), TIME ``yyyyMMddHHmmss``, GLOBAL_ID (GTID), NEW_VALUES / OLD_VALUES
  (JSON objects: full after / before rows). No column types, no primary key.
* canal-shaped DDL ("DDL 消息格式与 canal 格式一致", Tencent CKafka «MySQL 订阅消息官方格式说明»;
  ``es``/``ts`` in seconds, in ms for RENAME):
  decoded by the canal-json dialect's code (:class:`CanalJson`).
* Tencent's "Canal 格式" DML (tencent-ckafka-canal-json vectors): values as JSON numbers, ``old`` is the full
  before row, a DELETE has its row in ``old`` and ``data: null``, ``pkNames``/``mysqlType`` null, ``es`` may
  be 0. Alibaba canal DML read by these rules decodes the same, so any canal-shaped DML is accepted.

Tencent's canal DML writes numbers: every value goes through jsontext, which keeps a number exactly as
written (a decimal never passes through a double: 12345678901234567890.12 stays as it is).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from replicator.dialects.canal_json import CanalJson, overlay, rows_of
from replicator.dialects.events import SEQ_SYSTEM, At, Events, Image, epoch_micros, epoch_millis
from replicator.dialects.jsontext import cast_bigint, image, json_integer, string, to_json

FORMAT_ONE_KEYS = ("BINLOG_NAME", "BINLOG_POS", "NEW_VALUES", "OLD_VALUES", "GLOBAL_ID")
CANAL_KEYS = ("type", "isDdl", "data", "old", "es")
WRONG_SHAPE = (
    "wrong shape: neither CKafka official format one (BINLOG_NAME, BINLOG_POS, TYPE, ...) "
    "nor canal-shaped (type, isDdl, data, ...)"
)
NO_ROWS = "no rows in 'data' (nor in 'old' for a DELETE)"
NO_TYPES: Image = {}  # format one has no column types: one shared empty map
JAVA_SPACE = " \t\n\x0b\f\r"  # Java regex \s
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MICROSECOND = dt.timedelta(microseconds=1)


def binlog_number(name: str | None) -> int | None:
    """mysql-bin.000003 -> 3: the digits after the last dot, blanks after them allowed (Spark's regex was
    ``\\.(\\d+)\\s*$``)."""
    if name is None:
        return None
    _, dot, tail = name.rpartition(".")
    digits = tail.rstrip(JAVA_SPACE)
    return cast_bigint(digits) if dot and digits.isascii() and digits.isdigit() else None


def is_time_text(value: str | None) -> bool:
    """TIME is ``yyyyMMddHHmmss``: 14 ASCII digits."""
    return value is not None and len(value) == 14 and value.isascii() and value.isdigit()


class CKafka(CanalJson):
    """Subclasses CanalJson to reuse its DDL decoding (and hooks) for the canal-shaped messages."""

    name = "ckafka"
    # Detection (`auto`) covers format one only: canal-shaped messages are detected as canal-json.
    required_keys: ClassVar[frozenset[str]] = frozenset(
        {"BINLOG_NAME", "BINLOG_POS", "TYPE", "TABLE", "DATABASE"}
    )
    any_keys: ClassVar[frozenset[str]] = frozenset()
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset()
    # TYPE of format one; the doc's field table writes insert as `l` (lower-case L; Tencent CKafka
    # «MySQL 订阅消息官方格式说明»), its examples
    # write `I`. Matched case-insensitively.
    format_one_ops: ClassVar[dict[str, str]] = {"I": "insert", "L": "insert", "U": "update", "D": "delete"}

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.zone = ZoneInfo(self.options.timezone)
        self.canal_kinds = self.ddl_set | frozenset(self.ignored_types)

    # ---- routing ---------------------------------------------------------------------------------------
    def decode(self, m: dict[str, Any], at: At, out: Events) -> None:
        if any(k in m for k in FORMAT_ONE_KEYS):
            self.format_one(m, at, out)
        elif any(k in m for k in CANAL_KEYS):
            # DDL (and the kinds canal-json filters) go to the canal-json code; canal-shaped DML to ours.
            if m.get("isDdl") is True or self.kind(m) in self.canal_kinds:
                super().decode(m, at, out)
            else:
                self.canal_dml(m, at, out)
        else:
            out.fail(at, self.name, WRONG_SHAPE)

    # ---- official format one -----------------------------------------------------------------------------
    def format_one(self, m: dict[str, Any], at: At, out: Events) -> None:
        type_text = string(m.get("TYPE"))
        op = None if type_text is None else self.format_one_ops.get(type_text.strip(" ").upper())
        database = string(m.get("DATABASE"))
        table = string(m.get("TABLE")) or None
        binlog_name = string(m.get("BINLOG_NAME"))
        binlog_pos = string(m.get("BINLOG_POS"))
        time = string(m.get("TIME"))
        file_no = binlog_number(binlog_name)
        pos = cast_bigint(binlog_pos)
        after = image(m.get("NEW_VALUES")) if op in ("insert", "update") else None
        before = image(m.get("OLD_VALUES")) if op in ("update", "delete") else None
        if type_text is None:
            error: str | None = "wrong shape: no 'TYPE' in the message"
        elif op is None:
            error = f"unknown TYPE {to_json([type_text])} (expected I, U or D)"
        elif not database:
            error = "missing DATABASE"
        elif not table:
            error = "missing TABLE"
        elif file_no is None:
            error = (
                f"malformed BINLOG_NAME {to_json([binlog_name])}: "
                "expected a binlog file name ending in its number (mysql-bin.000003)"
            )
        elif pos is None:
            error = f"malformed BINLOG_POS {to_json([binlog_pos])}: expected an integer"
        elif time is not None and not is_time_text(time):
            error = f"malformed TIME {to_json([time])}: expected yyyyMMddHHmmss"
        elif op in ("insert", "update") and after is None:
            error = "no NEW_VALUES (absent, null or not a JSON object)"
        elif op in ("update", "delete") and before is None:
            error = "no OLD_VALUES (absent, null or not a JSON object)"
        else:
            error = None
        if error is not None:
            out.fail(at, self.name, error, database=database, table=table)
            return
        meta = {
            "gtid": string(m.get("GLOBAL_ID")),
            "time": time,
            "event_server_id": string(m.get("EVENT_SERVER_ID")),
            "group_id": string(m.get("GROUP_ID")),
        }
        out.add(
            at,
            self.name,
            op,
            database=database,
            table=table,
            # Format one carries no key: the engine resolves it per table (Engine._process: tables.keys, the
            # mirror's registered key, or a key declared by the table's DDL).
            primary_key=[],
            after=after,
            before=before,
            # No types either: the engine types columns from the mirror table, else as string.
            source_types=NO_TYPES,
            order=(file_no, pos),  # type: ignore[arg-type]  (both checked above)
            event_time=self.wall_clock(time) if time is not None else None,
            position=f"{binlog_name.strip(' ')}:{pos}",  # type: ignore[union-attr]
            # (file, pos) is not comparable with the canal-shaped DDL's (es, id) of the same topic: stating
            # the system makes the engine order the two by delivery (fold.arrow._segments).
            meta={SEQ_SYSTEM: "binlog-file-pos", **{k: v for k, v in meta.items() if v is not None}},
        )

    def wall_clock(self, text: str) -> int | None:
        """TIME ``yyyyMMddHHmmss`` is the MySQL server's wall clock (Tencent CKafka
        «MySQL 订阅消息官方格式说明» writes epoch 0 as
        "19700101080000", a UTC+8 server): read it in ``source.timezone``, as epoch microseconds.

        As Spark's ``try_make_timestamp``: a date or time that does not exist is NULL, second 60 is the next
        minute; a local time skipped by a DST change moves forward by the gap, a repeated one is the earlier.
        """
        second = int(text[12:14])
        try:
            local = dt.datetime(
                int(text[0:4]),
                int(text[4:6]),
                int(text[6:8]),
                int(text[8:10]),
                int(text[10:12]),
                0 if second == 60 else second,
            )
            if second == 60:
                local += dt.timedelta(minutes=1)
        except (ValueError, OverflowError):
            return None
        # fold=0: the offset before a DST change, which is Java's rule for both a gap and an overlap.
        return (local.replace(tzinfo=self.zone) - EPOCH) // MICROSECOND

    # ---- Tencent canal-shaped DML ------------------------------------------------------------------------
    def canal_dml(self, m: dict[str, Any], at: At, out: Events) -> None:
        name = self.name
        database = self.database(m)
        table = string(m.get("table")) or None
        kind = self.kind(m)
        op = None if kind is None else self.row_ops.get(kind)
        ident = {"database": database, "table": table}
        if kind is None:
            out.fail(at, name, "wrong shape: no 'type' in the message", **ident)
            return
        if op is None:
            out.fail(at, name, f"unknown op type {to_json([kind])}", **ident)
            return
        if not database:
            out.fail(at, name, "missing database", **ident)
            return
        if not table:
            out.fail(at, name, "missing table", **ident)
            return
        # Read as Spark's from_json read BIGINT fields: anything but a whole number is NULL.
        order = {"es": json_integer(m.get("es")), "id": json_integer(m.get("id"))}
        common = {
            "database": database,
            "table": table,
            "order": self.order_key(m, order),
            "event_time": epoch_micros(self.execute_time(m, order)),
            "position": self.position(m, order),
            "meta": self.meta(m),
        }
        types, facts = self.type_cache.derived(
            (database, None, table), self.types_key(m), lambda: self.build_types(m), self.column_facts
        )
        pk = self.primary_key(m)
        old = rows_of(m.get("old"))
        # Tencent puts a deleted row in `old` with `data: null`; canal puts it in `data`.
        rows = old if op == "delete" and old else rows_of(m.get("data"))
        for index, raw_row in enumerate(rows or [None]):
            row = self.normalize(image(raw_row), types, facts)
            if row is None:
                out.fail(at, name, NO_ROWS, row=index, **ident)
                continue
            after = row if op in ("insert", "update", "snapshot") else None
            before: Image | None = None
            if op == "update":
                # Tencent's `old` is the full before row, canal's the changed columns: overlay serves both.
                # A short `old` has no entry for this row (the Spark decoder failed the whole batch).
                changed = image(old[index]) if old is not None and index < len(old) else None
                before = overlay(row, self.normalize(changed, types, facts))
            elif op == "delete":
                before = row
            key_image = after if after is not None else before
            if any(key_image.get(k) is None for k in pk):  # type: ignore[union-attr]
                out.fail(at, name, f"NULL or absent primary key column in {to_json(pk)}", row=index, **ident)
                continue
            out.add(
                at,
                name,
                op,
                primary_key=pk,
                after=after,
                before=before,
                source_types=types,
                row=index,
                **common,
            )

    def execute_time(self, m: dict[str, Any], order: dict[str, int | None]) -> int | None:
        """``es``, or ``ts`` (processing time) when ``es`` is 0 or absent: the Tencent INSERT example writes
        ``"es": 0`` next to a real ``ts``."""
        return order["es"] or json_integer(m.get("ts"))

    def order_key(self, m: dict[str, Any], order: dict[str, int | None]) -> tuple[int, ...]:
        """canal's (es, id), with es falling back to ts like the event time (see :meth:`execute_time`).
        Also used by the inherited DDL decoding, whose es is never 0 in Tencent CKafka
        «MySQL 订阅消息官方格式说明»."""
        return (epoch_millis(self.execute_time(m, order)) or 0, order["id"] or 0)
