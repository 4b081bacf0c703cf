"""canal-json's usual message, read fast: one row table message (INSERT/UPDATE/DELETE/INIT) whose values
are all text or NULL, with whole ``es``/``id`` and no extra keys.

Two readers, both for a dialect that keeps canal's own hooks (:func:`is_plain`; DRS JSON and CKafka
override them and never come here):

- :func:`read_records` reads each raw record with ``msgspec`` into a typed :class:`PlainMessage`: the type
  maps (``mysqlType``/``sqlType``, a third of a message, the same in message after message) and
  ``pkNames`` stay raw bytes, compared with the last ones and parsed only when they change; row values
  are checked to be text while parsing. Measured on the benchmark workload: 3.1 µs per message against
  orjson's 4.4 µs (benchmarks/LOG.md, "Decoding per message").
- :func:`read_message` reads an already parsed message (a record holding a JSON array of messages).

Anything else (DDL, a gtid, numbers as values, a missing field, a NULL primary key, an unknown key)
returns False before any row is appended, and the dialect reads the message the general way, whose rules
are the reference: the golden tests in tests/dialects run both ways (``test_canal_plain.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from replicator.dialects.events import MAX_MICROS, MIN_MICROS, At, Events, values_image
from replicator.dialects.jsontext import INT64, ORDER, TEXT_OR_NULL, image

if TYPE_CHECKING:
    from replicator.dialects.base import RawTuple
    from replicator.dialects.canal_json import CanalJson

PLAIN_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete", "INIT": "snapshot"}
# The dialect attributes the readers inline: a subclass overriding one reads every message the general way.
PLAIN_HOOKS = (
    "row_ops", "ignored_types", "delete_image", "ddl_types", "ordering_fields", "build_types", "types_key",
    "column_facts", "normalize", "position", "order_key", "event_time", "meta", "kind", "ddl_kind",
    "database", "schema", "primary_key",
)  # fmt: skip

Row = dict[str, str | None]
# Where a message's rows come from: batch id, source, partition, offset, index (as in At).
Where = tuple[int, str | None, int | None, int | None, int]


class PlainMessage(msgspec.Struct, forbid_unknown_fields=True):
    """canal's FlatMessage (canal «Data Type») as the usual row message writes it; any other key is
    refused."""

    # canal's own key names (camelCase)
    type: str
    database: str
    table: str
    es: int
    id: int
    data: msgspec.Raw  # read by its table's row reader (_RowReader), whose columns the table's type maps name
    pkNames: msgspec.Raw
    mysqlType: msgspec.Raw
    sqlType: msgspec.Raw
    isDdl: bool = False
    old: list[Row] | None = None
    ts: int | None = None
    sql: msgspec.Raw = msgspec.Raw(b"null")


_DECODER = msgspec.json.Decoder(PlainMessage)
_ABSENT = msgspec.UNSET  # a column a row does not hold (canal writes every column: rare)
astuple = msgspec.structs.astuple


class _RowReader:
    """A table's row decoder: ``data`` (a JSON array of row objects) -> a struct per row holding the values
    of the table's columns (its type maps' names) in their order, each text, NULL or :data:`_ABSENT`.
    Measured on the benchmark workload: the message with its rows as dicts 3.5 µs, with its rows as
    structs 2.0 µs; and the rows' values reach Arrow flat (Events._usual_arrow), not as dicts. A row with a
    column the table does not name, or a value that is not text, fails the decode: the general path."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = tuple(columns)
        self.index = {c: i for i, c in enumerate(self.columns)}
        fields = [(f"c{i}", str | None | msgspec.UnsetType, _ABSENT) for i in range(len(columns))]
        rename = {f"c{i}": c for i, c in enumerate(columns)}
        struct = msgspec.defstruct("Row", fields, rename=rename, forbid_unknown_fields=True)
        self.decode = msgspec.json.Decoder(list[struct]).decode  # type: ignore[valid-type]


def is_plain(dialect: CanalJson) -> bool:
    from replicator.dialects.canal_json import CanalJson

    return all(getattr(type(dialect), h) is getattr(CanalJson, h) for h in PLAIN_HOOKS)


def read_records(
    dialect: CanalJson, records: Iterable[RawTuple], batch_id: int, out: Events, general: Any
) -> None:
    """Raw records -> their rows in ``out``: a record holding one usual message is read here, any other
    goes to ``general(raw, at, out)`` (the general path) in its turn.

    One loop for the batch's records, the usual message's rows appended in it (``Events.usual``, a compact
    layout: images, op, the table's slot and the message's numbers; seq, position, event_time and meta are
    derived from those numbers in Arrow, not built per row here). The table, its type maps and ``pkNames``
    of the last message are kept in locals and compared as raw bytes. Measured against a call per message
    into a reader and an emitter (_emit's rules, which :func:`read_message` still follows): 2.4 -> ~1.5 µs
    per message besides msgspec's parse."""
    decode = _DECODER.decode
    usual = out.usual
    append = usual.append
    out.usual_batch = batch_id
    name = dialect.name
    normalize = dialect.normalize
    low, high = ORDER.start, ORDER.stop - 1  # a negative es / id: the general path refuses it
    pk_raw: Any = None
    pk: list[str] = []
    table_raw: Any = None  # (database, table, mysqlType, sqlType) of the last message, as read
    database = table = None
    types: Row = {}
    facts: frozenset[str] = frozenset()
    reader: _RowReader | None = None
    columns: tuple[str, ...] = ()
    index: dict[str, int] = {}
    pk_at: list[int] | None = None  # the key columns' places in the table's rows (None: one is not there)
    slot = -1  # the table's slot in ``out`` (-1: to look up, the table or its key changed)
    for raw, source, partition, offset, key in records:
        try:
            m = decode(raw)  # type: ignore[arg-type]
        except (ValueError, TypeError, RecursionError):  # DecodeError, ValidationError, bad UTF-8;
            m = None  # TypeError: no bytes; RecursionError: nested too deeply (the general path says so)
        if m is not None:
            op = PLAIN_OPS.get(m.type)
            es = m.es
            id_ = m.id
            if op is None or m.isDdl or not low <= es <= high or not low <= id_ <= high:
                m = None
            else:
                if m.pkNames != pk_raw:  # raw bytes compared: parsed only when they change
                    pk_raw, pk = _primary_key(dialect, m.pkNames)
                    slot = -1
                here = (m.database, m.table, m.mysqlType, m.sqlType)
                if here != table_raw:
                    found = _table(dialect, here)
                    table_raw = here if found is not None else None
                    if found is not None:
                        database, table, types, facts, reader = found
                        columns, index = reader.columns, reader.index
                    slot = -1
                if not pk or table_raw is None:
                    m = None
                elif slot < 0:
                    slot = out.slot(name, database, table, pk, types, columns)  # type: ignore[arg-type]
                    pk_at = [index[c] for c in pk] if all(c in index for c in pk) else None
                if m is not None:
                    try:
                        data = reader.decode(m.data)  # type: ignore[union-attr]
                    except (ValueError, TypeError, RecursionError):  # not text, another column, not JSON
                        data = None
                    if not data or pk_at is None:
                        m = None
        if m is None:
            out.general_follows()
            general(raw, At(batch_id, source, partition, offset, 0, raw, key), out)
            continue
        # the rows, as _emit makes them (the tests comparing both ways catch any drift)
        ts = m.ts
        if ts is not None and ts not in INT64:
            ts = None
        old = m.old if op == "update" and m.old is not None else ()
        first = len(usual)
        try:
            for at, struct in enumerate(data):
                values = astuple(struct)
                changed = old[at] if at < len(old) else None
                if facts:  # normalized as dicts (canal's binary columns: canal_json.binary_as_hex)
                    row = normalize(values_image(columns, values), types, facts)
                    if None in map(row.get, pk):  # type: ignore[union-attr]
                        raise _General
                    after, before = _images(op, row, changed, normalize, types, facts)  # type: ignore[arg-type]
                else:
                    for i in pk_at:  # type: ignore[union-attr]
                        if values[i] is None or values[i] is _ABSENT:
                            raise _General
                    after, before = _values(op, values, changed, index)
                append((after, before, op, slot, es, id_, ts, source, partition, offset, at))
        except Exception:  # _General (a NULL key) or the unforeseen: the general path says what
            del usual[first:]
            out.general_follows()
            general(raw, At(batch_id, source, partition, offset, 0, raw, key), out)


def _values(op: str, values: tuple[Any, ...], changed: Row | None, index: dict[str, int]) -> tuple[Any, Any]:
    """:func:`_images` for a row read as its table's values: an update's before image is its values with
    ``old``'s over them (a list; an ``old`` column the table does not name raises KeyError: the general
    path)."""
    if op == "update":
        if changed is None:
            return values, values
        before = list(values)
        for column, value in changed.items():
            before[index[column]] = value
        return values, before
    if op == "delete":
        return None, values
    return values, None


@functools.lru_cache(maxsize=1024)
def _row_reader(columns: tuple[str, ...]) -> _RowReader:
    """One reader per column list (a struct class each), however often a table's type maps change."""
    return _RowReader(list(columns))


class _General(Exception):
    """A message the general path reads (raised inside the rows' loop)."""


def _primary_key(dialect: CanalJson, raw: msgspec.Raw) -> tuple[msgspec.Raw, list[str]]:
    """A message's raw ``pkNames`` -> its key columns (empty where the general path must say what is wrong,
    e.g. a float name)."""
    try:
        return raw, dialect.primary_key_of(orjson.loads(bytes(raw)))
    except Exception:
        return raw, []


def _table(dialect: CanalJson, here: tuple[str, str, msgspec.Raw, msgspec.Raw]) -> tuple[Any, ...] | None:
    """A message's (database, table, raw mysqlType, raw sqlType) -> the shared names, the type map and its
    facts (parsed only when they change for the table), or None where the general path must read it."""
    database, table, mysql_types, sql_types = here
    if not database or not table:
        return None
    names = dialect.names
    database = names.setdefault(database, database)
    table = names.setdefault(table, table)
    hit = dialect.raw_types.get((database, table))
    if hit is None or hit[0] != mysql_types or hit[1] != sql_types:
        try:
            parsed = {
                "mysqlType": orjson.loads(bytes(mysql_types)),
                "sqlType": orjson.loads(bytes(sql_types)),
            }
            types, facts = dialect.type_cache.derived(
                (database, None, table),
                (parsed["mysqlType"], parsed["sqlType"]),
                lambda: dialect.build_types(parsed),
                dialect.column_facts,
            )
            # the table's columns in mysqlType's order, canal's column order (the rows' own, canal
            # «Data Type»)
            named = parsed["mysqlType"] if type(parsed["mysqlType"]) is dict else {}
            reader = _row_reader(tuple(dict.fromkeys([*named, *types])))
        except Exception:  # a float type code (Inexact) and the like: the general path says what
            return None
        hit = dialect.raw_types[(database, table)] = (mysql_types, sql_types, types, facts, reader)
    return database, table, hit[2], hit[3], hit[4]


def read_message(dialect: CanalJson, m: dict[str, Any], at: At, out: Events) -> bool:
    """One parsed usual message -> its rows in ``out`` (True), else False, nothing added."""
    op = PLAIN_OPS.get(m.get("type"))  # type: ignore[arg-type]
    database = m.get("database")
    table = m.get("table")
    es = m.get("es")
    id_ = m.get("id")
    rows = m.get("data")  # canal keeps a deleted row in `data` too
    if (
        op is None
        or type(database) is not str
        or not database
        or type(table) is not str
        or not table
        or type(es) is not int
        or es not in ORDER
        or type(id_) is not int
        or id_ not in ORDER
        or m.get("isDdl") is True
        or "gtid" in m
        or type(rows) is not list
        or not rows
    ):
        return False
    pk = dialect.primary_key(m)
    if not pk:
        return False
    names = dialect.names
    database = names.setdefault(database, database)
    table = names.setdefault(table, table)
    types, facts = dialect.type_cache.derived(
        (database, None, table), (m.get("mysqlType"), m.get("sqlType")), lambda: dialect.build_types(m),
        dialect.column_facts,
    )  # fmt: skip
    ts = m.get("ts")
    old = m.get("old") if op == "update" else None
    old = old if type(old) is list else ()
    where = (at.batch_id, at.source, at.partition, at.offset, at.index)
    return _emit(dialect, where, out, op, database, table, es, id_, ts, pk, types, facts, rows, old)


def _emit(
    dialect: CanalJson,
    where: Where,
    out: Events,
    op: str,
    database: str,
    table: str,
    es: int,
    id_: int,
    ts: Any,
    pk: list[str],
    types: Row,
    facts: frozenset[str],
    rows: list[Any],
    old: Any,
) -> bool:
    """The rows of a parsed message, as CanalJson.decode makes them with canal's hooks."""
    normalize = dialect.normalize  # binary columns as hex (canal_json.binary_as_hex)
    millis = es * 1000 if -100_000_000_000 < es < 100_000_000_000 else es  # epoch_millis
    micros = millis * 1000
    event_time = micros if MIN_MICROS <= micros <= MAX_MICROS else None  # epoch_micros
    meta = {"ts": str(ts) if type(ts) is int and ts in INT64 else None}
    position = f"es={es} id={id_}"
    # Rows go straight into the builder in its row layout (Events.row, without a call per row; the tests
    # comparing both ways catch any drift between the two).
    append = out.rows.append
    batch_id, source, partition, offset, at_index = where
    head = (millis, id_, batch_id, partition or 0, offset or 0, at_index)
    name = dialect.name
    for index, row in enumerate(rows):
        if type(row) is not dict:
            return _undo(out, index)
        if not TEXT_OR_NULL.issuperset(map(type, row.values())):
            row = image(row)
        if facts:
            row = normalize(row, types, facts)
        if None in map(row.get, pk):
            return _undo(out, index)
        changed = old[index] if index < len(old) else None
        after, before = _images(op, row, image(changed), normalize, types, facts)
        append(
            (
                name, database, None, table, op, position, pk, after, before, types, meta, (*head, index),
                event_time, source, partition, offset, at_index, index,
            )
        )  # fmt: skip
    return True


def _images(
    op: str, row: Row, changed: Row | None, normalize: Any, types: Row, facts: frozenset[str]
) -> tuple[Row | None, Row | None]:
    """A row's (after, before) images: an update's before is the row with ``old``'s values over it (canal
    writes only the changed columns there); a delete's row is its before image."""
    if op == "update":
        if changed is None:
            return row, row
        return row, {**row, **(normalize(changed, types, facts) if facts else changed)}
    if op == "delete":
        return None, row
    return row, None


def _undo(out: Events, rows: int) -> bool:
    """Leave a message to the general path: forget the ``rows`` rows appended for it."""
    out.rollback(len(out) - rows)
    return False
