"""Randomized workloads (hypothesis strategies) and their encodings in the dialects' wire formats.

A workload is a list of :class:`tests.model.Statement` over one table ``shop.orders`` with the fixed typed
schema of :data:`tests.model.COLUMNS`, keys anywhere in int(11) (a deleted one re-inserted now and then)
and values from each column type's whole range, its edge values often. An :class:`Encoder` renders it the
way the real tool writes it (shapes follow the golden fixtures under ``tests/fixtures/<dialect>/`` and
``docs/dialects/``), returning one JSON text per Kafka record plus the keys each record touches, and maps a
mirror row back to logical values (untyped dialects leave text columns).

Every encoding here gives each statement a distinct ordering position (binlog offset, DRS id, canal id),
so the dialect part of ``seq`` is a total order per key and any reordering of records must converge.

Schema changes (``workloads(ddl=...)``: ADD COLUMN ``note``, DROP COLUMN, RENAME TABLE, at most two per
workload) are encoded only by the encoders whose format carries DDL in the row stream (``Encoder.ddl``).
A DDL record is a barrier for delivery plans (:func:`deliveries`): no record crosses it, because a schema
change cannot be undone by the sequence guard the way a stale row change is.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ClassVar

from hypothesis import strategies as st

from tests.model import DDL_KINDS, KEY, NAME, Op, Row, Statement, Table

T0 = 1_700_000_000_000  # ms
DATABASE, TABLE = "shop", NAME
RENAMED = "orders_v2"  # the table's name after a rename_table
ADDED = "note"  # the nullable column an add_column adds
MYSQL_TYPES = {
    "id": "int(11)",
    "name": "varchar(32)",
    "amount": "decimal(10,2)",
    "ts": "datetime(3)",
    "flag": "tinyint(4)",
    ADDED: "varchar(16)",
}
JDBC = {"id": 4, "name": 12, "amount": 3, "ts": 93, "flag": -6, ADDED: 12}
DDL_OPS = frozenset(DDL_KINDS)

# Edge values every run meets often (sampled half the time), then any value of the column's type.
NAMES = ["", None, "a", "小春😀", 'it\'s "q" \\ ', " x "]
AMOUNTS = [
    Decimal("0.00"),
    Decimal("-0.01"),
    Decimal("12.30"),
    Decimal("-99999999.99"),
    Decimal("99999999.99"),
    None,
]
TIMES = [
    dt.datetime(2024, 2, 29, 23, 59, 59, 999000),
    dt.datetime(1970, 1, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 500000),
    dt.datetime(2038, 1, 19, 3, 14, 8, 1000),
    None,
]
FLAGS = [0, 1, -128, 127, None]
NOTES = ["n", None, "", "ü"]
EDGES = {"name": NAMES, "amount": AMOUNTS, "ts": TIMES, "flag": FLAGS, ADDED: NOTES}
INT_MIN, INT_MAX = -(2**31), 2**31 - 1  # int(11): the key's whole range


def _milliseconds(value: dt.datetime) -> dt.datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


# Each column's whole range (MYSQL_TYPES): varchar(n) any n characters (surrogates aside: not text),
# decimal(10,2), datetime(3) from 1000-01-01 to 9999-12-31 in ms, tinyint.
WIDE: dict[str, st.SearchStrategy[Any]] = {
    "name": st.text(max_size=32),
    "amount": st.decimals(
        min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2, allow_nan=False
    ),
    "ts": st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999000)).map(
        _milliseconds
    ),
    "flag": st.integers(-128, 127),
    ADDED: st.text(max_size=16),
}
VALUES = {c: st.one_of(st.sampled_from(EDGES[c]), WIDE[c]) for c in EDGES}


# ---- strategies -------------------------------------------------------------------------------------------
def rows(key: int, columns: list[str] | None = None) -> st.SearchStrategy[Row]:
    """A full row image of ``key`` over ``columns`` (default: the initial schema)."""
    columns = columns or [c for c in MYSQL_TYPES if c != ADDED]
    return st.fixed_dictionaries({c: st.just(key) if c == KEY else VALUES[c] for c in columns})


def new_keys(table: Table, used: set[int], size: int) -> st.SearchStrategy[list[int]]:
    """Keys not in ``table``: one used before (a re-insert after a delete or a key change) or any int."""
    old = sorted(used - set(table.rows))
    fresh = st.integers(INT_MIN, INT_MAX)
    key = st.one_of(st.sampled_from(old), fresh) if old else fresh
    return st.lists(key.filter(lambda k: k not in table.rows), min_size=1, max_size=size, unique=True)


@st.composite
def workloads(
    draw: st.DrawFn,
    max_statements: int = 10,
    truncate: bool = True,
    ddl: frozenset[str] = frozenset(),
    max_ddl: int = 2,
) -> list[Statement]:
    """Valid statement sequences: inserts of absent keys (any int, or one used before), updates / deletes /
    key changes of present ones,
    now and then a TRUNCATE and, among the ``ddl`` kinds allowed, rarely (at most ``max_ddl``, each kind
    once) an ADD COLUMN ``note``, a DROP COLUMN or a RENAME TABLE. Commit times never go back but may
    repeat (same millisecond)."""
    table = Table()
    statements: list[Statement] = []
    used: set[int] = set()
    time = T0
    for _ in range(draw(st.integers(1, max_statements))):
        time += draw(st.sampled_from([0, 1, 1000]))
        present = sorted(table.rows)
        done = {s.kind for s in statements if s.ddl}
        schema = [k for k in sorted(ddl - done) if statements and len(done) < max_ddl]
        schema = [k for k in schema if k != "drop_column" or len(table.columns) > 2]
        # A small chance per statement (shrinks towards no DDL: 0 is the "no" end of the range).
        if schema and draw(st.integers(0, 9)) == 9:
            kind = draw(st.sampled_from(schema))
            if kind == "add_column":
                statement = Statement(kind, (), time, column=ADDED)
            elif kind == "drop_column":
                statement = Statement(kind, (), time, column=draw(st.sampled_from(table.columns[1:])))
            else:
                statement = Statement(kind, (), time, table=RENAMED)
            table.apply_statement(statement)
            statements.append(statement)
            continue
        kinds = ["insert"] + (["update", "delete", "key_change"] if present else [])
        kinds += ["truncate"] if truncate and present and statements else []
        kind = draw(st.sampled_from(kinds))
        ops: list[Op] = []
        # Copies: the model's rows change in place under later schema changes.
        if kind == "insert":
            for k in draw(new_keys(table, used, 3)):
                ops.append(Op("insert", after=draw(rows(k, table.columns))))
        elif kind == "update":
            for k in draw(st.lists(st.sampled_from(present), min_size=1, max_size=3, unique=True)):
                ops.append(Op("update", before=dict(table.rows[k]), after=draw(rows(k, table.columns))))
        elif kind == "delete":
            for k in draw(st.lists(st.sampled_from(present), min_size=1, max_size=2, unique=True)):
                ops.append(Op("delete", before=dict(table.rows[k])))
        elif kind == "key_change":
            old, [new] = draw(st.sampled_from(present)), draw(new_keys(table, used, 1))
            ops.append(Op("update", before=dict(table.rows[old]), after={**table.rows[old], KEY: new}))
        statement = Statement("truncate" if kind == "truncate" else ops[0].kind, tuple(ops), time)
        used |= {op.after[KEY] for op in ops if op.after is not None}
        table.apply_statement(statement)
        statements.append(statement)
    return statements


@st.composite
def deliveries(
    draw: st.DrawFn,
    n: int,
    reorder: bool = True,
    redeliver: bool = True,
    barriers: frozenset[int] = frozenset(),
) -> list[list[int]]:
    """Record indexes 0..n-1 -> micro-batches: a permutation (or the source order), some records delivered
    again later, cut into 1..3 consecutive batches. A ``barriers`` record (DDL) splits the stream: records
    are permuted and redelivered only within the stretch between two barriers, which keep their place."""
    order: list[int] = []
    bounds = [0, *sorted(b for b in barriers for b in (b, b + 1)), n]
    for a, b in itertools.pairwise(bounds):
        part = draw(st.permutations(range(a, b))) if reorder else list(range(a, b))
        if redeliver and b - a and not (b - a == 1 and a in barriers):
            for i in draw(st.lists(st.integers(a, b - 1), max_size=3 if not barriers else 1)):
                part.insert(draw(st.integers(part.index(i) + 1, len(part))), i)
        order += part
    cuts = sorted(draw(st.lists(st.integers(1, max(len(order) - 1, 1)), max_size=2, unique=True)))
    bounds = [0, *[c for c in cuts if c < len(order)], len(order)]
    return [order[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# ---- value text ------------------------------------------------------------------------------------------
def dt_text(value: dt.datetime, digits: int = 3) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{value.microsecond:06d}"[: len(text) + 1 + digits] if digits else text


def epoch_ms(value: dt.datetime) -> int:
    return (value - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1)


def mysql_text(column: str, value: Any) -> str | None:
    """The text canal-family tools write for a MySQL value (datetime(3): always three fraction digits)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return dt_text(value)
    if isinstance(value, Decimal):
        return f"{value:.2f}"
    return str(value)


def texts(row: Row | None, render: Callable[[str, Any], Any] = mysql_text) -> dict[str, Any] | None:
    return None if row is None else {c: render(c, v) for c, v in row.items()}


def _parse(column: str, value: Any, epoch: bool = False) -> Any:
    """Mirror value -> logical value, for columns a dialect leaves as text."""
    if value is None or not isinstance(value, str):
        return value
    if column in ("id", "flag"):
        return int(value)
    if column == "amount":
        return Decimal(value)
    if column == "ts":
        if epoch:
            return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(value))
        return dt.datetime.fromisoformat(value)
    return value


# ---- encoders ----------------------------------------------------------------------------------------------
class Encoder:
    """One dialect's rendering. ``encode`` -> [(record JSON text, keys it touches)]."""

    dialect: ClassVar[str]
    name: ClassVar[str] = ""  # test id (a dialect may have several renderings)
    truncate: ClassVar[bool] = True  # the tool emits TRUNCATE
    keyless: ClassVar[bool] = False  # messages carry no key: the job file names it (tables.keys)
    detectable: ClassVar[bool] = True  # decodes under ``dialect: auto`` (else the job pins the dialect)
    epoch_ts: ClassVar[bool] = False  # untyped ts column holds epoch ms
    # The schema changes the format carries in its row stream (``workloads(ddl=...)``); the others get
    # workloads without them.
    ddl: ClassVar[frozenset[str]] = frozenset()

    @property
    def database(self) -> str:
        """Each encoding mirrors into its own database, so that one job (``dialect: auto``) runs several."""
        return "shop_" + self.name.replace("-", "_")

    def encode(self, statements: list[Statement]) -> list[tuple[str, set[int]]]:
        return [(text, keys) for text, keys, _ddl in self.records(statements)]

    def barriers(self, statements: list[Statement]) -> frozenset[int]:
        """Indexes of the DDL records of ``encode(statements)`` (see :func:`deliveries`)."""
        return frozenset(i for i, (_t, _k, ddl) in enumerate(self.records(statements)) if ddl)

    def records(self, statements: list[Statement]) -> list[tuple[str, set[int], bool]]:
        out: list[tuple[str, set[int], bool]] = []
        table = Table()
        for i, s in enumerate(statements):
            assert not s.ddl or s.kind in self.ddl, (self.name, s.kind)
            if s.kind == "truncate" and not self.truncate:  # the same end state, as row deletes
                deletes = tuple(Op("delete", before=dict(r)) for r in table.sorted_rows())
                s = Statement("delete", deletes, s.time)
            keys = {k for op in s.ops for k in _keys(op)}
            out += [(json.dumps(m, ensure_ascii=False), keys, s.ddl) for m in self.messages(i, s, table)]
            table.apply_statement(s)
        return out

    def job_keys(self) -> dict[str, list[str]]:
        """``tables.keys`` entries for dialects whose messages carry no key."""
        return {f"{self.database}.{TABLE}": [KEY]} if self.keyless else {}

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        """The messages of statement ``i``; ``table`` is the source table before it (name, columns)."""
        raise NotImplementedError

    def logical(self, row: Row) -> Row:
        return {c: _parse(c, v, self.epoch_ts) for c, v in row.items()}


def _types(table: Table) -> dict[str, str]:
    return {c: MYSQL_TYPES[c] for c in table.columns}


def _jdbc(table: Table) -> dict[str, int]:
    return {c: JDBC[c] for c in table.columns}


def _ddl_sql(s: Statement, table: Table) -> str:
    """The statement text MySQL logs (and canal-family tools copy into ``sql``)."""
    if s.kind == "add_column":
        assert s.column is not None
        return f"ALTER TABLE `{table.name}` ADD COLUMN `{s.column}` {MYSQL_TYPES[s.column]} NULL"
    if s.kind == "drop_column":
        return f"ALTER TABLE `{table.name}` DROP COLUMN `{s.column}`"
    assert s.kind == "rename_table"
    return f"RENAME TABLE `{table.name}` TO `{s.table}`"


def _keys(op: Op) -> list[int]:
    return [r[KEY] for r in (op.before, op.after) if r is not None]


def _image(op: Op) -> Row:
    image = op.after if op.kind != "delete" else op.before
    assert image is not None
    return image


def _changed(op: Op) -> dict[str, Any]:
    """The old values of the columns an update changed (canal's ``old``)."""
    assert op.before is not None and op.after is not None
    return {
        c: mysql_text(c, v)
        for c, v in op.before.items()
        if op.after[c] != v or type(op.after[c]) is not type(v)
    }


class CanalJson(Encoder):
    dialect = name = "canal-json"
    ddl = DDL_OPS

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        base = {"database": self.database, "table": table.name, "es": s.time, "ts": s.time + 100, "id": i + 1}
        if s.kind == "truncate" or s.ddl:
            kind, sql = "TRUNCATE", f"TRUNCATE TABLE `{table.name}`"
            if s.ddl:
                kind, sql = ("RENAME" if s.kind == "rename_table" else "ALTER"), _ddl_sql(s, table)
            return [
                {
                    **base,
                    # canal names a RENAME by its new table (canal «Data Type»)
                    "table": s.table if s.kind == "rename_table" else table.name,
                    "data": None,
                    "isDdl": True,
                    "mysqlType": None,
                    "old": None,
                    "pkNames": None,
                    "sql": sql,
                    "sqlType": None,
                    "type": kind,
                }
            ]
        # canal: `data` holds the rows (the deleted rows for DELETE), `old` only the changed columns.
        old = [_changed(op) for op in s.ops] if s.kind == "update" else None
        return [
            {
                **base,
                "data": [texts(_image(op)) for op in s.ops],
                "isDdl": False,
                "mysqlType": _types(table),
                "old": old,
                "pkNames": [KEY],
                "sql": "",
                "sqlType": _jdbc(table),
                "type": s.kind.upper(),
            }
        ]


class CloudCanalJson(Encoder):
    dialect = name = "cloudcanal-json"
    # ALTER as in CloudCanal «MQ 消息同步格式说明» (the table's types after the change in dbValType, no
    # tableChanges); which name a
    # RENAME message carries is not documented, so no renames here.
    ddl = frozenset({"add_column", "drop_column"})

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        base = {
            "bid": i + 1,
            "db": self.database,
            "schema": self.database,
            "table": table.name,
            "entryType": "ROWDATA",
            "execTs": s.time,
            "sendTs": s.time + 120,
        }
        if s.kind == "truncate":
            return [
                {
                    **base,
                    "action": "TRUNCATE",
                    "before": [],
                    "data": [],
                    "dbValType": {},
                    "isDdl": True,
                    "jdbcType": {},
                    "pks": [],
                    "sql": f"truncate table {table.name}",
                }
            ]
        if s.ddl:
            after = Table(columns=list(table.columns), name=table.name)
            after.apply_statement(s)
            return [
                {
                    **base,
                    "action": "ALTER",
                    "before": [],
                    "data": [],
                    "dbValType": _types(after),
                    "isDdl": True,
                    "jdbcType": _jdbc(after),
                    "pks": [],
                    "sql": _ddl_sql(s, table).replace("`", ""),
                }
            ]
        before = [texts(op.before) for op in s.ops] if s.kind == "update" else []
        return [
            {
                **base,
                "action": s.kind.upper(),
                "before": before,
                "data": [texts(_image(op)) for op in s.ops],
                "dbValType": _types(table),
                "isDdl": False,
                "jdbcType": _jdbc(table),
                "pks": [KEY],
                "sql": "",
            }
        ]


def _drs_text(column: str, value: Any) -> str | None:
    # DRS writes MySQL datetime with the fraction's trailing zeros dropped (Huawei DRS «Kafka消息格式»:
    # "17:51:53.5").
    if isinstance(value, dt.datetime):
        return dt_text(value, 6).rstrip("0").rstrip(".")
    return mysql_text(column, value)


class DrsJson(Encoder):
    dialect = name = "drs-json"
    detectable = False  # incremental DRS MySQL DML cannot be told from canal-json (docs/dialects/drs-json.md)
    ddl = DDL_OPS

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        base = {
            "id": 1000 + i,
            "es": s.time,
            "ts": s.time + 500,
            "database": self.database,
            "table": table.name,
        }
        if s.kind == "truncate" or s.ddl:
            sql = f"TRUNCATE TABLE `{table.name}`"
            if s.ddl:  # DRS names a RENAME by the old table and writes it as ALTER TABLE .. RENAME TO
                sql = _ddl_sql(s, table)
                if s.kind == "rename_table":
                    sql = f"ALTER TABLE `{table.name}` RENAME TO `{s.table}`"
            return [
                {
                    **base,
                    "mysqlType": None,
                    "type": "DDL",
                    "isDdl": True,
                    "sql": sql,
                    "sqlType": None,
                    "data": None,
                    "old": None,
                    "pkNames": None,
                }
            ]
        bare = {c: t.split("(")[0] for c, t in _types(table).items()}
        data = None if s.kind == "delete" else [texts(op.after, _drs_text) for op in s.ops]
        old = None if s.kind == "insert" else [texts(op.before, _drs_text) for op in s.ops]  # DRS: full rows
        return [
            {
                **base,
                "mysqlType": bare,
                "type": s.kind.upper(),
                "isDdl": False,
                "sql": "",
                "sqlType": {**_jdbc(table), "ts": 94},
                "data": data,
                "old": old,
                "pkNames": [KEY],
            }
        ]


def _binlog(i: int) -> tuple[str, int]:
    """Binlog file and offset of statement ``i``: files rotate every 4 statements (offsets restart)."""
    return f"mysql-bin.{1 + i // 4:06d}", 4 + (i % 4) * 250


class RiverCanal(Encoder):
    dialect = name = "river-canal"
    truncate = False  # KafkaRiverCanal publishes row events only (KafkaRiverCanal «Kafka消息 Specification»)

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        file, pos = _binlog(i)
        out = []
        for op in s.ops:
            columns = []
            for c, v in _image(op).items():
                col: dict[str, Any] = {"n": c, "t": MYSQL_TYPES[c], "null": v is None}
                if v is not None:
                    col["v"] = mysql_text(c, v)
                if op.kind == "update":
                    assert op.before is not None
                    col["updated"] = c in _changed(op)
                    if col["updated"] and op.before[c] is not None:
                        col["origin_val"] = mysql_text(c, op.before[c])
                columns.append(col)
            out.append(
                {
                    "binlog": f"{pos}@{file}",
                    "time": s.time,
                    "canalTime": s.time + 300,
                    "db": self.database,
                    "table": table.name,
                    "event": op.kind[0],
                    "columns": columns,
                    "keys": [KEY],
                }
            )
        return out


class CKafka(Encoder):
    """Format one: no key, no types (the job names the key; every column is text)."""

    dialect = name = "ckafka"
    truncate = False  # format one carries DML only
    keyless = True

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        file, pos = _binlog(i)
        time = (dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=s.time)).strftime("%Y%m%d%H%M%S")
        return [
            {
                "BINLOG_NAME": file,
                "BINLOG_POS": pos,
                "DATABASE": self.database,
                "EVENT_SERVER_ID": None,
                "GLOBAL_ID": None,
                "GROUP_ID": None,
                "NEW_VALUES": texts(op.after),
                "OLD_VALUES": texts(op.before),
                "TABLE": table.name,
                "TIME": time,
                "TYPE": op.kind[0].upper(),
            }
            for op in s.ops
        ]


def _dbz_decimal(value: Decimal) -> str:
    unscaled = int(value.scaleb(2))
    return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()


_DBZ_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "amount",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "ts"},
    {"type": "int16", "optional": True, "field": "flag"},
]


class Debezium(Encoder):
    """MySQL connector, JSON converter with schemas: typed values (Decimal bytes, Timestamp ms)."""

    dialect = name = "debezium"
    schemas = True
    keyless = True  # the key is the Kafka message key, not in the value

    def value(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, dt.datetime):
            return epoch_ms(value)
        if isinstance(value, Decimal):
            return _dbz_decimal(value) if self.schemas else f"{value:.2f}"  # decimal.handling.mode=string
        return value

    def messages(self, i: int, s: Statement, table: Table) -> list[dict[str, Any]]:
        file, pos = _binlog(i)
        out = []
        for row, op in enumerate(s.ops or [None]):
            source = {
                "version": "2.5.0.Final",
                "connector": "mysql",
                "name": "dbserver1",
                "ts_ms": s.time,
                "snapshot": "false",
                "db": self.database,
                "table": table.name,
                "server_id": 223344,
                "gtid": None,
                "file": file,
                "pos": pos,
                "row": row,
                "thread": 7,
                "query": None,
            }
            payload: dict[str, Any] = {"source": source, "ts_ms": s.time + 50, "transaction": None}
            if op is None:
                payload["op"] = "t"
            else:
                payload.update(
                    op={"insert": "c", "update": "u", "delete": "d"}[op.kind],
                    before=texts(op.before, self.value),
                    after=texts(op.after, self.value),
                )
            out.append({"schema": self.schema(), "payload": payload} if self.schemas else payload)
        return out

    def schema(self) -> dict[str, Any]:
        image = {
            "type": "struct",
            "fields": _DBZ_FIELDS,
            "optional": True,
            "name": "dbserver1.shop.orders.Value",
        }
        return {
            "type": "struct",
            "name": "dbserver1.shop.orders.Envelope",
            "optional": False,
            "fields": [
                {**image, "field": "before"},
                {**image, "field": "after"},
                {
                    "type": "struct",
                    "optional": False,
                    "field": "source",
                    "name": "io.debezium.connector.mysql.Source",
                    "fields": [],
                },
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }


class DebeziumNoSchema(Debezium):
    """``value.converter.schemas.enable=false`` and ``decimal.handling.mode=string``: untyped text columns,
    DATETIME as epoch milliseconds."""

    name = "debezium-noschema"
    schemas = False
    epoch_ts = True


def job_overrides(encoders: list[Encoder]) -> dict[str, Any]:
    """Job-file overrides for one job that decodes all ``encoders`` (auto-detected unless just one)."""
    dialect = encoders[0].dialect if len(encoders) == 1 else "auto"
    assert dialect != "auto" or all(e.detectable for e in encoders)
    keys = {k: v for e in encoders for k, v in e.job_keys().items()}
    return {"source": {"dialect": dialect}, "tables": {"keys": keys}}


ENCODERS: list[Encoder] = [
    CanalJson(),
    CloudCanalJson(),
    DrsJson(),
    RiverCanal(),
    CKafka(),
    Debezium(),
    DebeziumNoSchema(),
]
