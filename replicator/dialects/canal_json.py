"""canal-json: Alibaba canal's FlatMessage (canal «Data Type»; CloudCanal «MQ 消息同步格式说明» "Canal Json").

One message holds 1..n rows of one table: ``data`` (after images; for DELETE the deleted rows) and, for
UPDATE, ``old`` holding only the changed columns' previous values (canal MQMessageUtils). All values are
JSON strings, NULL is JSON null. Binary columns carry their bytes as ISO-8859-1 text (canal
LogEventConvert). Order: ``es`` (binlog execute time, ms) then ``id``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from replicator.dialects.base import Dialect
from replicator.dialects.canal_plain import is_plain, read_message, read_records
from replicator.dialects.events import At, Events, Image, epoch_micros, epoch_millis
from replicator.dialects.jsontext import INT64, ORDER, cast_bigint, image, json_integer, string, text, to_json

if TYPE_CHECKING:
    from replicator.dialects.base import RawTuple

DDL_KINDS = ("CREATE", "ALTER", "ERASE", "RENAME", "TRUNCATE", "CINDEX", "DINDEX", "QUERY", "INIT_DDL")
BINARY_TYPE = r"(?i)^\s*(binary|varbinary|tinyblob|blob|mediumblob|longblob)\b"


def is_binary_type(type_text: str | None) -> bool:
    """binary, varbinary, *blob (MySQL): plain substring tests."""
    if not type_text:
        return False
    lowered = type_text.lower()
    return "binary" in lowered or "blob" in lowered


def binary_columns(types: Image) -> frozenset[str]:
    """The columns of a type map whose type is binary (:func:`is_binary_type`)."""
    return frozenset(k for k, t in types.items() if is_binary_type(t))


def latin1_hex(value: str) -> str:
    """Canal's ISO-8859-1 byte text -> canonical hex (a character outside Latin-1 becomes ``?``, as
    Java's encoder does)."""
    return value.encode("latin-1", errors="replace").hex()


def binary_as_hex(row: Image | None, binary_columns: frozenset[str]) -> Image | None:
    """The image with the values of binary columns as hex."""
    if row is None or not binary_columns or not (binary_columns & row.keys()):
        return row
    return {k: latin1_hex(v) if v is not None and k in binary_columns else v for k, v in row.items()}


def parameterised(types: Any) -> bool:
    """A mysqlType map with a parameterised type (``int(11)``): canal writes them, DRS bare names. Never
    raises :class:`~replicator.dialects.jsontext.Inexact` (detection runs outside the decode guard)."""
    return type(types) is dict and any(
        t is not None and "(" in (t if type(t) is str else to_json(t)) for t in types.values()
    )


def head_text(value: Any) -> str | None:
    """A field read as text for detection (Spark read it as STRING): never raises Inexact, a number's text
    is only compared with names."""
    return value if type(value) is str or value is None else to_json(value)


def bigint(value: Any) -> int | None:
    """An ordering field read as text and cast to BIGINT: ``None`` when absent; ValueError when present but
    not a 64-bit whole number (it would order as 0, the oldest, or not fit ``seq``)."""
    if type(value) is int and value in INT64:
        return value  # type: ignore[no-any-return]
    number = None if value is None else cast_bigint(string(value))
    if number is None and value is not None:
        raise ValueError(value)
    return number


def d_text(value: int | None) -> str:
    """A nullable number as Spark's ``format_string('%d')`` wrote it (``null`` for NULL)."""
    return "null" if value is None else str(value)


def rows_of(value: Any) -> list[Any] | None:
    """``data`` / ``old`` / ``before``: a JSON array, else NULL."""
    return value if type(value) is list else None


def overlay(base: Image | None, changed: Image | None) -> Image | None:
    """``base`` with the keys of ``changed`` replacing its values (NULL values included)."""
    if changed is None or base is None:
        return base
    return {**base, **changed}


class TypeCache:
    """A table's type map is the same in message after message: keep one object per distinct map, so the
    Arrow builder converts it once (events._shared), and what is derived from it (its binary
    columns) computed once."""

    def __init__(self) -> None:
        self.last: dict[Any, tuple[Any, Image, Any]] = {}

    def derived(self, table: Any, raw: Any, build: Any, derive: Any) -> tuple[Image, Any]:
        """The type map (``build()``) and ``derive(types)``, made again only when ``raw`` changes."""
        hit = self.last.get(table)
        if hit is not None and hit[0] == raw:
            return hit[1], hit[2]
        types = build()
        facts = derive(types)
        self.last[table] = (raw, types, facts)
        return types, facts


class CanalJson(Dialect):
    name = "canal-json"
    required_keys: ClassVar[frozenset[str]] = frozenset({"database", "table", "type", "isDdl"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"data", "sql", "es", "pkNames"})
    # DRS JSON reuses canal's keys with other meanings (delete image in `old`, epoch timestamps).
    forbidden_keys: ClassVar[frozenset[str]] = frozenset(
        {"jobId", "shardId", "eventId", "columnType", "opType", "dbType"}
    )
    ambiguous_with: ClassVar[frozenset[str]] = frozenset({"drs-json", "drs-json-c"})
    # Values of `type` that are rows, mapped to contract ops.
    row_ops: ClassVar[dict[str, str]] = {
        "INSERT": "insert",
        "UPDATE": "update",
        "DELETE": "delete",
        "INIT": "snapshot",
    }
    # Messages that carry no change (TiCDC watermarks): counted as filtered.
    ignored_types: ClassVar[tuple[str, ...]] = ("TIDB_WATERMARK",)
    delete_image: ClassVar[str] = "data"  # DRS JSON puts the deleted row in `old`
    ddl_types: ClassVar[tuple[str, ...]] = ()  # more `type` values that are DDL (DRS: DDL, INIT_DDL)
    ordering_fields: ClassVar[tuple[str, ...]] = ("es", "id")
    required_ordering: ClassVar[tuple[str, ...]] = ("es",)  # an event without its time has no place

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.type_cache = TypeCache()
        self._pk_names: Any = None
        self._pk: list[str] = []
        self.ddl_set = frozenset((*DDL_KINDS, *self.ddl_types))
        self.names: dict[str | None, str | None] = {}
        # canal_plain reads the usual message (off: every message the general way, as
        # tests/dialects/test_canal_plain.py compares)
        self.plain = is_plain(self)
        # canal_plain.read_records' cache: raw type maps per table
        self.raw_types: dict[Any, tuple[Any, Any, Image, Any, Any]] = {}

    def disambiguate(self, message: dict[str, Any]) -> bool:
        """Canal, never DRS: a parameterised mysqlType (``int(11)``; DRS writes bare names, Huawei DRS
        «Kafka消息格式»), a
        canal DDL type (CREATE, ALTER, ...; DRS writes ``DDL``), or a ``gtid``/``_tidb`` key."""
        kind = head_text(message.get("type"))
        canal_ddl = kind is not None and kind.upper() in DDL_KINDS and kind.upper() != "INIT_DDL"
        return parameterised(message.get("mysqlType")) or canal_ddl or "gtid" in message or "_tidb" in message

    # ---- hooks for look-alike formats (DRS JSON, CKafka DDL) ---------------------------------------------
    def build_types(self, m: dict[str, Any]) -> Image:
        """mysqlType over ``jdbc:<sqlType>``."""
        out: Image = {}
        sql_types = m.get("sqlType")
        if type(sql_types) is dict:
            out.update({k: None if v is None else f"jdbc:{text(v)}" for k, v in sql_types.items()})
        mysql_types = m.get("mysqlType")
        if type(mysql_types) is dict:
            out.update(image(mysql_types) or {})
        return out

    def types_key(self, m: dict[str, Any]) -> Any:
        return (m.get("mysqlType"), m.get("sqlType"))

    def column_facts(self, types: Image) -> Any:
        """What :meth:`normalize` needs to know of a table's columns, derived once per type map (canal:
        its binary columns)."""
        return binary_columns(types)

    def normalize(self, row: Image | None, types: Image, facts: Any) -> Image | None:
        return binary_as_hex(row, facts)

    def position(self, m: dict[str, Any], order: dict[str, int | None]) -> str | None:
        gtid = string(m.get("gtid"))
        if gtid is not None:
            return gtid
        return f"es={d_text(order['es'])} id={d_text(order['id'])}"

    def order_key(self, m: dict[str, Any], order: dict[str, int | None]) -> tuple[int, ...]:
        """The dialect's part of ``seq`` (es then id)."""
        return (epoch_millis(order["es"]) or 0, order["id"] or 0)

    def event_time(self, m: dict[str, Any], order: dict[str, int | None]) -> int | None:
        return epoch_micros(order["es"])

    def meta(self, m: dict[str, Any]) -> Image | None:
        ts = json_integer(m.get("ts"))
        return {"ts": None if ts is None else str(ts)}

    def kind(self, m: dict[str, Any]) -> str | None:
        """The message's upper-case type (DRS falls back to ``opType``)."""
        kind = string(m.get("type"))
        return None if kind is None else kind.upper()

    def ddl_kind(self, m: dict[str, Any], kind: str) -> str | None:
        """The contract's ddl_kind of a DDL message (DRS reads it from the SQL text of type ``DDL``)."""
        return kind

    def database(self, m: dict[str, Any]) -> str | None:
        return string(m.get("database"))

    def schema(self, m: dict[str, Any]) -> str | None:
        return None

    # ---- decoding ----------------------------------------------------------------------------------------
    def decode(self, m: dict[str, Any], at: At, out: Events) -> None:
        if self.plain and read_message(self, m, at, out):
            return
        name = self.name
        names = self.names
        database = self.database(m)
        schema = self.schema(m)
        table = string(m.get("table")) or None
        # One object per distinct name, so the Arrow builder reads a table's name from memory it just
        # read (measured: converting a distinct object per row costs 5x a shared one).
        database = names.setdefault(database, database)
        table = names.setdefault(table, table)
        kind = self.kind(m)
        # The ordering fields must be whole numbers when present: one that is not would order as 0 (the
        # oldest) silently; it is refused instead.
        # Nor may one be negative, or ``es`` absent (ordered first, before every real event).
        order: dict[str, int | None] = {}
        malformed = []
        for field in self.ordering_fields:
            value = m.get(field)
            if type(value) is int and value in ORDER:
                order[field] = value
                continue
            try:
                number = order[field] = bigint(value)
            except ValueError:
                number = order[field] = None
                malformed.append(field)
                continue
            if (number is None and field in self.required_ordering) or (number is not None and number < 0):
                order[field] = None
                malformed.append(field)
        error = None
        is_ddl = False
        ddl_kind = None
        op: str | None = None
        if kind is None:
            error = "wrong shape: no 'type' in the message"
        else:
            is_ddl = m.get("isDdl") is True or kind in self.ddl_set
            ddl_kind = self.ddl_kind(m, kind) if is_ddl else None
            if kind in self.ignored_types:
                op = "filtered"
            elif is_ddl:
                op = "truncate" if ddl_kind == "TRUNCATE" else "ddl"
            else:
                op = self.row_ops.get(kind)
            if op is None:
                error = f"unknown op type {to_json([kind])}"
            elif malformed:
                error = (
                    f"malformed ordering field {to_json(malformed)}: not a whole number from 0 to 2^63-1 "
                    f"(got {to_json([m.get(f) for f in malformed])[:80]})"
                )
            elif op == "filtered":
                out.filtered(at, name, database=database, schema=schema, table=table)
                return
            elif not database:
                error = "missing database"
            elif not table and (op == "truncate" or not is_ddl):
                error = "missing table"
        if error is not None or op is None:
            out.fail(at, name, error or "", database=database, schema=schema, table=table)
            return
        types, facts = self.type_cache.derived(
            (database, schema, table), self.types_key(m), lambda: self.build_types(m), self.column_facts
        )
        seq = self.order_key(m, order)
        event_time = self.event_time(m, order)
        position = self.position(m, order)
        meta = self.meta(m)
        pk = self.primary_key(m)
        if is_ddl:
            out.add(
                at,
                name,
                op,
                database=database,
                schema=schema,
                table=table,
                ddl_kind=ddl_kind,
                ddl_sql=string(m.get("sql")),
                table_changes=string(m.get("tableChanges")),
                primary_key=pk,
                source_types=types,
                order=seq,
                event_time=event_time,
                position=position,
                meta=meta,
            )
            return
        source = self.delete_image if kind == "DELETE" else "data"
        rows = m.get(source)
        if type(rows) is not list or not rows:
            out.fail(at, name, f"no rows in '{source}'", database=database, schema=schema, table=table)
            return
        old = m.get("old")
        old = old if type(old) is list else ()
        normalize = self.normalize
        add = out.row
        for index, raw_row in enumerate(rows):
            row = normalize(image(raw_row), types, facts)
            # Empty or null pkNames (a source table without a primary key): primary_key [], resolved by the
            # engine like a keyless format's (the Kafka record key, tables.keys, the registry), else its
            # dead letter "no primary key known" (docs/dialects.md).
            if row is None or (pk and None in map(row.get, pk)):
                problem = (
                    f"no rows in '{source}'"
                    if row is None
                    else f"NULL or absent primary key column in {to_json(pk)}"
                )
                out.fail(at, name, problem, database=database, schema=schema, table=table, row=index)
                continue
            if op == "delete":
                after, before = None, row
            elif op == "update":
                changed = normalize(image(old[index]), types, facts) if index < len(old) else None
                after, before = row, row if changed is None else {**row, **changed}
            else:
                after, before = row, None
            add(
                at, name, op, database, schema, table, pk, after, before, types, seq, index, event_time,
                position, meta,
            )  # fmt: skip

    def read_records(
        self,
        records: Iterable[RawTuple],
        batch_id: int,
        out: Events,
        general: Callable[[Any, At, Events], None],
    ) -> None:
        if self.plain:
            read_records(self, records, batch_id, out, general)
        else:
            super().read_records(records, batch_id, out, general)

    def primary_key(self, m: dict[str, Any]) -> list[str]:
        return self.primary_key_of(m.get("pkNames"))

    def primary_key_of(self, names: Any) -> list[str]:
        """pkNames, distinct, in order; the same list object while the pkNames do not change."""
        if type(names) is not list:
            return []
        if names == self._pk_names:
            return self._pk
        pk = list(dict.fromkeys(n for n in (string(x) for x in names) if n is not None))
        self._pk_names, self._pk = names, pk
        return pk
