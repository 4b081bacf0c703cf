"""The SQL workload of the PostgreSQL end-to-end tests (issue 51) and the check that a mirror equals its
table: ``SELECT *`` of PostgreSQL (psycopg's Python values) against the mirror (read with delta-rs), value
by value, through the type table of docs/how-to/postgresql-debezium.md (``expected``)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import psycopg.types.datetime
import psycopg.types.string

PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's for an unchanged TOASTed value
ZONE = "Asia/Kolkata"  # the writers' session zone (timestamptz is an instant: the mirror holds it in UTC)
BIG = 12_000  # characters of a TOASTed value (PostgreSQL moves a row's values out of line past ~2 KB)
INFINITE_DATES = (5, 6)  # keys of the types table whose row is a dead letter

# column -> PostgreSQL type of the types table
TYPES = {
    "si": "smallint",
    "i": "integer",
    "bi": "bigint",
    "n38": "numeric(38,10)",
    "nu": "numeric",
    "r": "real",
    "d": "double precision",
    "b": "boolean",
    "t": "text",
    "vc": "varchar(20)",
    "c": "char(6)",
    "ba": "bytea",
    "u": "uuid",
    "j": "json",
    "jb": "jsonb",
    "dt": "date",
    "tm": "time",
    "ttz": "timetz",
    "ts": "timestamp",
    "tstz": "timestamptz",
    "iv": "interval",
    "m": "money",
    "ip": "inet",
    "cd": "cidr",
    "mood": "mood",
    "ia": "integer[]",
    "ta": "text[]",
    "dom": "positive_amount",
}
# Rows of the types table, as SQL literals (None: NULL); key -> column -> literal
TYPE_ROWS: dict[int, dict[str, str | None]] = {
    1: {
        "si": "-32768",
        "i": "2147483647",
        "bi": "-9223372036854775808",
        "n38": "1234567890123456789012345678.0123456789",
        "nu": "1.5",
        "r": "3.25",
        "d": "'NaN'",
        "b": "true",
        "t": "'小春 😀 text'",
        "vc": "'varchar'",
        "c": "'ab'",
        "ba": "'\\x00ff00'::bytea",
        "u": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
        "j": """'{"a": [1, 2.50, "x"]}'""",
        "jb": """'{"k": "小春", "n": null}'""",
        "dt": "'2024-02-29'",
        "tm": "'23:59:59.123456'",
        "ttz": "'10:00:00+05:30'",
        "ts": "'2024-01-02 03:04:05.123456'",
        "tstz": "'2024-01-02 03:04:05.5+05:30'",
        "iv": "'1 year 2 mons 3 days 04:05:06.5'",
        "m": "'12.34'",
        "ip": "'192.168.0.1/24'",
        "cd": "'10.0.0.0/8'",
        "mood": "'happy'",
        "ia": "'{1,NULL,3}'",
        "ta": """'{"a b",NULL,"c"}'""",
        "dom": "'99.000'",
    },
    2: {
        "si": "0",
        "i": "-1",
        "bi": "9223372036854775807",
        "n38": "-0.0000000001",
        "nu": "99.000",
        "r": "'Infinity'",
        "d": "'-Infinity'",
        "b": "false",
        "t": "''",
        "vc": "' pad '",
        "c": "'x  '",
        "ba": "''::bytea",
        "u": None,
        "j": "'null'",
        "jb": "'[]'",
        "dt": "'1970-01-01'",
        "tm": "'00:00:00'",
        "ttz": "'00:00:00-08:00'",
        "ts": "'1970-01-01 00:00:00'",
        "tstz": "'1999-12-31 23:59:59.999999-08:00'",
        "iv": "'-3 days -00:00:01'",
        "m": "'-1.00'",
        "ip": "'::1'",
        "cd": "'2001:db8::/32'",
        "mood": "'sad'",
        "ia": "'{}'",
        "ta": "'{NULL}'",
        "dom": "'0.5'",
    },
    3: dict.fromkeys(TYPES) | {"nu": "'NaN'", "r": "'NaN'", "d": "'Infinity'"},
    4: dict.fromkeys(TYPES) | {"nu": "-12345678901234567890.123456789012345678901234567890"},
    # Dates PostgreSQL has and Delta has not: dead letters naming the column and value (INFINITE_DATES)
    5: dict.fromkeys(TYPES) | {"dt": "'infinity'", "ts": "'infinity'", "tstz": "'infinity'"},
    6: dict.fromkeys(TYPES) | {"dt": "'-infinity'", "ts": "'-infinity'", "tstz": "'-infinity'"},
    # Before 1582-10-15: the snapshot (key 7) publishes timestamps on the Julian calendar (year 1 two days
    # off, year 1000 six), streaming (key 8) right; both mirrored as PostgreSQL holds them
    7: dict.fromkeys(TYPES)
    | {"dt": "'0001-01-01'", "ts": "'0001-01-01 00:00:00'", "tstz": "'1000-06-01 12:30:00+00'"},
    8: dict.fromkeys(TYPES)
    | {"dt": "'0001-01-01'", "ts": "'0001-01-01 00:00:00'", "tstz": "'1000-06-01 12:30:00+00'"},
}


def create_schema(connection) -> None:
    """The tables: the types, a TOAST table, names that differ by case and schema, a marker."""
    for statement in (
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
        "CREATE DOMAIN positive_amount AS numeric(10,3) CHECK (VALUE >= 0)",
        "CREATE TABLE types (id integer PRIMARY KEY, "
        + ", ".join(f"{name} {kind}" for name, kind in TYPES.items())
        + ")",
        # REPLICA IDENTITY DEFAULT: an UPDATE that leaves a TOASTed value alone does not send it
        "CREATE TABLE toasty (id integer PRIMARY KEY, n integer, big text, doc jsonb, blob bytea)",
        "CREATE TABLE full_identity (id integer PRIMARY KEY, v text, big text)",
        "ALTER TABLE full_identity REPLICA IDENTITY FULL",
        'CREATE TABLE "Orders" (id integer PRIMARY KEY, v text)',
        "CREATE TABLE orders (id integer PRIMARY KEY, v text)",
        "CREATE SCHEMA other",
        "CREATE TABLE other.orders (id integer PRIMARY KEY, v text)",
        "CREATE TABLE evolving (id integer PRIMARY KEY, c integer, vc varchar(10), n numeric(10,2))",
        "CREATE TABLE doomed (id integer PRIMARY KEY, v integer)",
        "CREATE TABLE wiped (id integer PRIMARY KEY, v integer)",
        "CREATE TABLE marker (id integer PRIMARY KEY, token text)",
    ):
        connection.execute(statement)


def insert_types(connection, keys) -> None:
    for key in keys:
        row = TYPE_ROWS[key]
        values = ", ".join("NULL" if row[n] is None else row[n] for n in TYPES)
        connection.execute(f"INSERT INTO types (id, {', '.join(TYPES)}) VALUES ({key}, {values})")


def big_text(seed: int) -> str:
    # Not compressible below the TOAST threshold: PostgreSQL compresses before it moves a value out of line.
    return "".join(chr(0x4E00 + (seed * 7919 + k * 104729) % 20000) for k in range(BIG))


def big_bytes(seed: int) -> bytes:
    return random.Random(seed).randbytes(BIG) + b"\x00"  # incompressible: stored out of line


def seed(connection) -> None:
    connection.execute(f"SET TIME ZONE '{ZONE}'")
    insert_types(connection, (1, 2, 7))
    for key in range(1, 4):
        connection.execute(
            "INSERT INTO toasty VALUES (%s, %s, %s, %s, %s)",
            [key, key, big_text(key), json.dumps({"k": big_text(key + 10)}), big_bytes(key)],
        )
        connection.execute(
            "INSERT INTO full_identity VALUES (%s, %s, %s)", [key, f"v{key}", big_text(key + 20)]
        )
    for table in ('"Orders"', "orders", "other.orders"):
        connection.execute(f"INSERT INTO {table} VALUES (1, %s), (2, 'b')", [table])
    connection.execute("INSERT INTO evolving VALUES (1, 1, 'a', 1.25), (2, NULL, NULL, NULL)")
    connection.execute("INSERT INTO doomed VALUES (1, 1)")
    connection.execute("INSERT INTO wiped VALUES (1, 1), (2, 2), (3, 3)")


def stream(connection) -> None:
    """Inserts, updates, deletes and TOAST: updates that leave the large values alone (Debezium sends its
    placeholder for them), then that change them, a key change, deletes under both replica identities."""
    connection.execute(f"SET TIME ZONE '{ZONE}'")
    insert_types(connection, (3, 4, 5, 6, 8))
    connection.execute("UPDATE types SET si = si + 1 WHERE id = 1")
    # TOAST: other columns change (placeholders), twice in one transaction and once alone
    with connection.transaction():
        connection.execute("UPDATE toasty SET n = n + 100")
        connection.execute("UPDATE toasty SET n = n + 1 WHERE id = 1")
    connection.execute("UPDATE toasty SET big = %s WHERE id = 2", [big_text(99)])
    connection.execute("UPDATE toasty SET n = -2 WHERE id = 2")  # after its own change: the new value kept
    connection.execute("UPDATE toasty SET id = 30 WHERE id = 3")  # a key change of a TOASTed row
    connection.execute("DELETE FROM toasty WHERE id = 1")
    connection.execute("INSERT INTO toasty VALUES (5, 5, %s, NULL, NULL)", [big_text(5)])
    connection.execute("UPDATE toasty SET n = 55 WHERE id = 5")
    connection.execute("UPDATE full_identity SET v = 'changed' WHERE id = 1")
    connection.execute("UPDATE full_identity SET id = 10 WHERE id = 2")
    connection.execute("DELETE FROM full_identity WHERE id = 3")
    connection.execute("UPDATE orders SET v = 'lower' WHERE id = 1")
    connection.execute("""UPDATE "Orders" SET v = 'upper' WHERE id = 2""")
    connection.execute("DELETE FROM other.orders WHERE id = 1")
    with connection.transaction():  # rolled back: nothing of it reaches the mirror
        connection.execute("INSERT INTO orders VALUES (99, 'rolled back')")
        raise psycopg.Rollback()


def mark(connection, token: str) -> None:
    connection.execute(
        "INSERT INTO marker VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token", [token]
    )


# ---- the check ------------------------------------------------------------------------------------------


def tables(connection) -> dict[tuple[str, str], tuple[list[str], dict[str, str]]]:
    """(schema, table) -> (primary key columns, column -> type) of the database's user tables."""
    rows = connection.execute(
        """
        SELECT c.table_schema, c.table_name, c.column_name,
               format_type(a.atttypid, a.atttypmod), coalesce(k.is_key, false)
        FROM information_schema.columns c
        JOIN pg_attribute a ON a.attrelid = format('%I.%I', c.table_schema, c.table_name)::regclass
             AND a.attname = c.column_name
        LEFT JOIN (
            SELECT i.indrelid, unnest(i.indkey) AS attnum, true AS is_key FROM pg_index i WHERE i.indisprimary
        ) k ON k.indrelid = a.attrelid AND k.attnum = a.attnum
        WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema')
        ORDER BY 1, 2, c.ordinal_position
        """
    ).fetchall()
    out: dict[tuple[str, str], tuple[list[str], dict[str, str]]] = {}
    for schema, table, column, kind, key in rows:
        keys, types = out.setdefault((schema, table), ([], {}))
        types[column] = kind
        if key:
            keys.append(column)
    return out


def snapshot(connection) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``SELECT *`` of every table (timestamptz read in UTC)."""
    from psycopg.rows import dict_row

    connection.adapters.register_loader("date", _DateLoader)
    connection.adapters.register_loader("timestamp", _TimestampLoader)
    connection.adapters.register_loader("timestamptz", _TimestamptzLoader)
    connection.adapters.register_loader("interval", psycopg.types.string.TextLoader)
    connection.execute("SET TIME ZONE 'UTC'")
    out = {}
    with connection.cursor(row_factory=dict_row) as cursor:
        for schema, table in tables(connection):
            money = [c for c, kind in tables(connection)[(schema, table)][1].items() if kind == "money"]
            extra = "".join(f', "{c}"::numeric AS "{c}"' for c in money)  # its text has a currency sign
            cursor.execute(f'SELECT *{extra} FROM "{schema}"."{table}"')
            out[(schema, table)] = list(cursor.fetchall())
    connection.execute(f"SET TIME ZONE '{ZONE}'")
    return out


class _DateLoader(psycopg.types.datetime.DateLoader):
    """``date 'infinity'`` and ``'-infinity'`` as their text (psycopg's own loader refuses them)."""

    def load(self, data):
        text = bytes(data).decode()
        return text if text.endswith("infinity") else super().load(data)


class _TimestampLoader(psycopg.types.datetime.TimestampLoader):
    def load(self, data):
        text = bytes(data).decode()
        return text if text.endswith("infinity") else super().load(data)


class _TimestamptzLoader(psycopg.types.datetime.TimestamptzLoader):
    def load(self, data):
        text = bytes(data).decode()
        return text if text.endswith("infinity") else super().load(data)


def _clock(value: dt.time) -> str:
    text = value.replace(tzinfo=None).isoformat()
    return text.rstrip("0").rstrip(".") if "." in text else text


_INTERVAL = re.compile(
    r"^(?:(?P<y>-?\d+) years? ?)?(?:(?P<mo>-?\d+) mons? ?)?(?:(?P<d>-?\d+) days? ?)?"
    r"(?:(?P<sign>[-+]?)(?P<h>\d+):(?P<mi>\d+):(?P<s>\d+(?:\.\d+)?))?$"
)


def interval_micros(text: str) -> int:
    """An interval's text (IntervalStyle postgres) as Debezium's default ``interval.handling.mode=numeric``
    publishes it: microseconds, a month counted as 365.25 / 12 days (io.debezium.time.MicroDuration)."""
    found = _INTERVAL.match(text)
    assert found, text
    part = {k: v or "0" for k, v in found.groupdict().items()}
    months = int(part["y"]) * 12 + int(part["mo"])
    clock = (int(part["h"]) * 3600 + int(part["mi"]) * 60) * 10**6 + int(Decimal(part["s"]) * 10**6)
    clock = -clock if part["sign"] == "-" else clock
    return int(months * 30.4375 * 86400 * 10**6) + int(part["d"]) * 86400 * 10**6 + clock


def expected(value: Any, kind: str) -> Any:
    """A PostgreSQL value (psycopg) as the mirror stores it (docs/how-to/postgresql-debezium.md)."""
    if value is None:
        return None
    base = kind.split("(")[0]
    if kind == "numeric":  # unconstrained: the exact number as text (Debezium drops trailing zeros)
        # NaN: Debezium's decimal.handling.mode=precise publishes NULL (docs/how-to/postgresql-debezium.md)
        return None if value.is_nan() else value  # compared as a Decimal (mirrored)
    if base in ("real", "double precision"):
        return "nan" if math.isnan(value) else float(f"{value:.7g}") if base == "real" else value
    if base == "timestamp with time zone":
        return value.astimezone(dt.UTC)
    if base == "time without time zone":
        return _clock(value)
    if base == "time with time zone":
        utc = dt.datetime.combine(dt.date(2000, 1, 1), value).astimezone(dt.UTC)
        return _clock(utc.time()) + "Z"
    if base == "interval":
        return str(interval_micros(value))
    if base == "money":
        return format(value, "f")
    if base in ("uuid", "inet", "cidr"):
        return str(value)
    return value


def mirrored(value: Any, kind: str) -> Any:
    if value is None:
        return None
    base = kind.split("(")[0]
    if base in ("real", "double precision") and isinstance(value, float) and math.isnan(value):
        return "nan"
    if base == "real":
        return float(f"{value:.7g}")
    if kind == "numeric":
        return Decimal(value)
    if base in ("json", "jsonb") or kind.endswith("[]"):
        return json.loads(value)
    return value


def mirror_rows(lake: Path, database: str, schema: str, table: str) -> list[dict[str, Any]] | None:
    from deltalake import DeltaTable

    path = lake / database / schema / table
    if not DeltaTable.is_deltatable(str(path)):
        return None
    data = DeltaTable(str(path)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c.startswith("_cdc_")])
    return data.to_pylist()


def differences(lake: Path, database: str, rows, schema, skip: dict[str, tuple] | None = None) -> list[str]:
    """Every mismatch between the mirrors under ``lake`` and the database's rows (``snapshot``)."""
    problems = []
    skip = skip or {}
    for (namespace, table), (keys, types) in schema.items():
        label = f"{namespace}.{table}"
        mirror = mirror_rows(lake, database, namespace, table)
        if mirror is None:
            problems.append(f"{label}: no mirror table")
            continue
        columns = set(mirror[0]) if mirror else set(types)
        if mirror and columns != set(types):
            problems.append(f"{label}: mirror columns {sorted(columns)} != {sorted(types)}")
        by_key = {tuple(r[k] for k in keys): r for r in mirror}
        source_keys = set()
        for row in rows[(namespace, table)]:
            key = tuple(row[k] for k in keys)
            if key in skip.get(table, ()):
                continue
            source_keys.add(key)
            got = by_key.get(key)
            if got is None:
                problems.append(f"{label} key {key}: missing in the mirror")
                continue
            for column, kind in types.items():
                want, have = expected(row[column], kind), mirrored(got.get(column), kind)
                if not (want == have and (type(want) is type(have) or want is None)):
                    problems.append(
                        f"{label} key {key} column {column} ({kind}): "
                        f"database {_short(want)}, mirror {_short(have)}"
                    )
        for key in by_key.keys() - source_keys - set(skip.get(table, ())):
            problems.append(f"{label} key {key}: in the mirror, not in the database")
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else f"{text[:100]}... ({len(text)} characters)"
