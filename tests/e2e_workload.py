"""The SQL workload of the end-to-end tests (issue 31) and the check that a mirror equals its MariaDB table.

``seed_tables`` creates the tables and their first rows (Debezium's initial snapshot reads them, op ``r``);
``stream`` then changes them through the binlog: multi-row INSERT/UPDATE/DELETE, transactions, a primary key
update, a composite key, a table without a key, ADD/DROP/MODIFY COLUMN, RENAME, TRUNCATE, DROP and a CREATE
mid-stream. Values are drawn from a seeded ``random.Random`` over every MariaDB type the issue lists, with
NULLs in every nullable column. TIMESTAMP values are written in a session time zone other than UTC.

``differences`` compares a mirror (read with delta-rs) with ``SELECT *`` of the table through the type
mapping of docs/dialects.md and names table, key, column and both values of each mismatch."""

from __future__ import annotations

import datetime as dt
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

DATABASE = "shop"
ZONE = "+05:30"  # the writers' session time zone (TIMESTAMP is stored in UTC, shown in this zone)

TYPES_COLUMNS = {
    "ti": "TINYINT",
    "tiu": "TINYINT UNSIGNED",
    "si": "SMALLINT",
    "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT",
    "miu": "MEDIUMINT UNSIGNED",
    "i": "INT",
    "iu": "INT UNSIGNED",
    "bi": "BIGINT",
    "biu": "BIGINT UNSIGNED",
    "d38": "DECIMAL(38,10)",
    "d5": "DECIMAL(5,0)",
    "f": "FLOAT",
    "db": "DOUBLE",
    "dd": "DATE",
    "tm": "TIME(6)",
    "dtm": "DATETIME(6)",
    "ts": "TIMESTAMP(3) NULL",
    "y": "YEAR",
    "c": "CHAR(8)",
    "vc": "VARCHAR(64)",
    "tx": "TEXT",
    "bn": "BINARY(4)",
    "vb": "VARBINARY(16)",
    "bl": "BLOB",
    "b1": "BIT(1)",
    "b7": "BIT(7)",
    "e": "ENUM('red','green','blue')",
    "st": "SET('a','b','c')",
    "j": "JSON",
}
TEXTS = ["", "a", "小春", "😀 emoji", "日本語テキスト", 'it\'s "q" \\', " pad ", "ünïcödé", "한국어"]


def _ints(rng: random.Random, bits: int, unsigned: bool) -> int:
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return rng.choice([lo, hi, 0, 1, rng.randint(lo, hi), rng.randint(lo, hi)])


def _decimal(rng: random.Random, digits: int, scale: int) -> Decimal:
    whole = rng.choice([0, 1, 10 ** (digits - scale) - 1, rng.randrange(10 ** (digits - scale))])
    fraction = rng.randrange(10**scale) if scale else 0
    sign = rng.choice(["", "-"])
    text = f"{sign}{whole}" + (f".{str(fraction).rjust(scale, '0')}" if scale else "")
    return Decimal(text)


def value(rng: random.Random, column_type: str) -> Any:
    """A random value of a column type (None ~ 1 in 7)."""
    if rng.random() < 0.15:
        return None
    kind = column_type.split("(")[0].split(" ")[0]
    unsigned = "UNSIGNED" in column_type
    bits = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}
    if kind in bits:
        return _ints(rng, bits[kind], unsigned)
    if column_type == "DECIMAL(38,10)":
        return _decimal(rng, 38, 10)
    if column_type == "DECIMAL(5,0)":
        return _decimal(rng, 5, 0)
    if kind == "FLOAT":
        return rng.choice([0.0, 1.5, -3.25, 3.14, 1e-10, 123456.7, rng.uniform(-1e6, 1e6)])
    if kind == "DOUBLE":
        return rng.choice(
            [0.0, -0.5, 1.7976931348623157e308, 2.2250738585072014e-308, rng.uniform(-1e9, 1e9)]
        )
    if kind == "DATE":
        return (
            rng.choice([dt.date(1000, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31)])
            if rng.random() < 0.3
            else dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(80000))
        )
    if kind == "TIME":
        micros = rng.choice(
            [0, 1, -1, 838 * 3600 * 10**6, -838 * 3600 * 10**6, rng.randrange(-(10**11), 10**11)]
        )
        return dt.timedelta(microseconds=micros)
    if kind == "DATETIME":
        base = dt.datetime(1900, 1, 1) + dt.timedelta(seconds=rng.randrange(200 * 365 * 86400))
        return base.replace(microsecond=rng.choice([0, 1, 999999, rng.randrange(10**6)]))
    if kind == "TIMESTAMP":
        base = dt.datetime(1971, 1, 1) + dt.timedelta(seconds=rng.randrange(60 * 365 * 86400))
        return base.replace(microsecond=rng.choice([0, 1000, 999000, rng.randrange(1000) * 1000]))
    if kind == "YEAR":
        return rng.choice([1901, 2155, 2000, rng.randint(1901, 2155)])
    if kind == "CHAR":
        return rng.choice(TEXTS)[:8].rstrip(" ")  # CHAR drops trailing spaces
    if kind in ("VARCHAR", "TEXT"):
        return rng.choice(TEXTS) + ("x" * rng.randrange(4) if kind == "TEXT" else "")
    if kind == "BINARY":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 4))).ljust(4, b"\0")
    if kind in ("VARBINARY", "BLOB"):
        return rng.choice(
            [b"", b"\0", b"\0\xff", bytes(rng.randrange(256) for _ in range(rng.randint(0, 16)))]
        )
    if column_type == "BIT(1)":
        return rng.randint(0, 1)
    if kind == "BIT":
        return rng.randrange(128)
    if kind == "ENUM":
        return rng.choice(["red", "green", "blue"])
    if kind == "SET":
        return ",".join(x for x in "abc" if rng.random() < 0.5)
    if kind == "JSON":
        return rng.choice(['{"a": 1}', "[1, 2, 3]", '{"k": "小春😀", "n": null}', "null", "1.5", '"s"'])
    raise ValueError(column_type)


def types_row(rng: random.Random, key: int, columns: dict[str, str] = TYPES_COLUMNS) -> dict[str, Any]:
    return {"id": key, **{name: value(rng, kind) for name, kind in columns.items()}}


def insert(cursor, table: str, rows: list[dict[str, Any]]) -> None:
    """One multi-row INSERT."""
    columns = list(rows[0])
    values = ", ".join("(" + ", ".join(["%s"] * len(columns)) + ")" for _ in rows)
    sql = f"INSERT INTO {table} ({', '.join(f'`{c}`' for c in columns)}) VALUES {values}"
    cursor.execute(sql, [row[c] for row in rows for c in columns])


def session(connection) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SET time_zone = '{ZONE}'")


def seed_tables(connection, rng: random.Random, database: str = DATABASE, rows: int = 40) -> None:
    """The tables and rows Debezium's initial snapshot reads."""
    session(connection)
    with connection.cursor() as c:
        c.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        c.execute(f"USE `{database}`")
        columns = ", ".join(f"`{n}` {t}" for n, t in TYPES_COLUMNS.items())
        c.execute(f"CREATE TABLE types (id INT PRIMARY KEY, {columns})")
        c.execute(
            "CREATE TABLE pair (region CHAR(2), n INT, qty INT NOT NULL, note VARCHAR(40) DEFAULT 'none', "
            "PRIMARY KEY (region, n))"
        )
        c.execute("CREATE TABLE nokey (a INT, b VARCHAR(10))")
        c.execute("CREATE TABLE old_name (id INT PRIMARY KEY, v VARCHAR(20))")
        c.execute("CREATE TABLE doomed (id INT PRIMARY KEY, v INT)")
        c.execute("CREATE TABLE wiped (id INT PRIMARY KEY, v INT)")
        c.execute("CREATE TABLE marker (id INT PRIMARY KEY, token VARCHAR(40))")
        insert(c, "types", [types_row(rng, k) for k in range(1, rows + 1)])
        insert(c, "pair", [_pair(rng, r, n) for r in ("cn", "de") for n in range(5)])
        insert(c, "nokey", [{"a": n, "b": rng.choice(TEXTS)[:10]} for n in range(3)])
        insert(c, "old_name", [{"id": n, "v": f"v{n}"} for n in range(5)])
        insert(c, "doomed", [{"id": n, "v": n} for n in range(5)])
        insert(c, "wiped", [{"id": n, "v": n} for n in range(5)])


def _pair(rng: random.Random, region: str, n: int) -> dict[str, Any]:
    return {"region": region, "n": n, "qty": rng.randrange(100), "note": value(rng, "VARCHAR(40)")}


def stream(connection, rng: random.Random, database: str = DATABASE, steps: int = 3, start: int = 1000):
    """The binlog part of the workload. A generator: it yields after each transaction-sized step, so a
    test can act (kill a process, note the time) between two of them."""
    session(connection)
    key = start
    live = dict(TYPES_COLUMNS)  # the columns as the ALTERs leave them
    with connection.cursor() as c:
        c.execute(f"USE `{database}`")
        for step in range(steps):
            rows = [types_row(rng, key + n, live) for n in range(8)]
            key += 8
            insert(c, "types", rows)  # multi-row insert
            yield "insert"
            # A transaction of several statements: updates of several rows, a delete, an insert.
            connection.begin()
            ids = sorted(rng.sample(range(1, key), 6))
            column = rng.choice(list(live))
            c.execute(
                f"UPDATE types SET `{column}` = %s, vc = %s WHERE id IN ({', '.join(['%s'] * 6)})",
                [value(rng, live[column]), rng.choice(TEXTS), *ids],
            )
            c.execute("DELETE FROM types WHERE id IN (%s, %s)", rng.sample(range(1, key), 2))
            insert(c, "types", [types_row(rng, key, live)])
            key += 1
            c.execute("UPDATE pair SET qty = qty + 1, note = %s WHERE region = %s", [rng.choice(TEXTS), "cn"])
            connection.commit()
            yield "transaction"
            # A primary key update: the row changes its key (Debezium: a delete and a create).
            c.execute("UPDATE types SET id = %s WHERE id = (SELECT MIN(id) FROM types)", [key])
            key += 1
            c.execute("UPDATE pair SET n = n + 100 WHERE region = 'de' AND n = %s", [step])
            c.execute("INSERT INTO nokey VALUES (%s, 'x'), (%s, NULL)", [step, step + 10])
            c.execute("DELETE FROM nokey WHERE a = 0")
            yield "keys"
            if step == 0:
                # No DEFAULT: the rows already there hold NULL in it.
                c.execute("ALTER TABLE types ADD COLUMN extra VARCHAR(20) AFTER i")
                c.execute("UPDATE types SET extra = %s WHERE MOD(id, 3) = 0", ["小春😀"])
                live["extra"] = "VARCHAR(20)"
                # With a DEFAULT, or NOT NULL without one (the type's implicit default), or DEFAULT
                # CURRENT_TIMESTAMP (the ALTER's time): the rows already there take it without a binlog
                # event; the mirror gives it to them at the DDL (docs/schema-evolution.md).
                c.execute(
                    "ALTER TABLE types ADD COLUMN dv VARCHAR(20) DEFAULT 'it''s 小春😀'"
                    ", ADD COLUMN dd5 DECIMAL(5,0) NOT NULL DEFAULT -12345, ADD COLUMN nn INT NOT NULL"
                    ", ADD COLUMN ddt DATE DEFAULT '2024-02-29'"
                    ", ADD COLUMN db7 BIT(7) NOT NULL DEFAULT b'101'"
                    ", ADD COLUMN dbn BINARY(4) NOT NULL DEFAULT 'ab', ADD COLUMN de ENUM('x','y') NOT NULL"
                    ", ADD COLUMN dnow DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP"
                    ", ADD COLUMN dts TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP"
                )
                # Rows inserted from now on take the defaults in their row events; the two without one get one
                # (strict mode refuses an INSERT that leaves them out); the mirror has nothing to do for it.
                c.execute("ALTER TABLE types ALTER COLUMN nn SET DEFAULT 3, ALTER COLUMN de SET DEFAULT 'y'")
                live["dv"] = "VARCHAR(20)"
                c.execute("UPDATE types SET dv = NULL, nn = 7 WHERE MOD(id, 5) = 0")
                c.execute("RENAME TABLE old_name TO new_name")
                insert(c, "new_name", [{"id": 10, "v": "after rename"}])
                c.execute("UPDATE new_name SET v = 'moved' WHERE id = 1")
            elif step == 1:
                c.execute("ALTER TABLE types DROP COLUMN tx")
                del live["tx"]
                c.execute("ALTER TABLE types MODIFY COLUMN i BIGINT")
                live["i"] = "BIGINT"
                c.execute("UPDATE types SET i = %s WHERE MOD(id, 4) = 1", [2**40])
                c.execute("TRUNCATE TABLE wiped")
                insert(c, "wiped", [{"id": 3, "v": 33}, {"id": 7, "v": 77}])
                c.execute("DROP TABLE doomed")
            elif step == 2:
                c.execute("CREATE TABLE fresh (id BIGINT UNSIGNED PRIMARY KEY, note TEXT, at DATETIME(3))")
                insert(
                    c,
                    "fresh",
                    [
                        {"id": 2**64 - 1 - n, "note": rng.choice(TEXTS), "at": value(rng, "DATETIME")}
                        for n in range(3)
                    ],
                )
                c.execute("UPDATE fresh SET note = 'changed' WHERE id = %s", [2**64 - 1])
            yield "ddl"


def mark(connection, number: int, token: str, database: str = DATABASE) -> None:
    """A row the test waits for: Debezium publishes in binlog order, so all earlier changes came first."""
    with connection.cursor() as c:
        c.execute(f"REPLACE INTO `{database}`.marker VALUES (%s, %s)", [number, token])


# ---- the check ------------------------------------------------------------------------------------------


def tables(connection, database: str = DATABASE) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Table -> (primary key columns, column -> column type) of the database."""
    with connection.cursor() as c:
        c.execute(
            "SELECT table_name, column_name, column_type, column_key FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            [database],
        )
        out: dict[str, tuple[list[str], dict[str, str]]] = {}
        for table, column, kind, key in c.fetchall():
            keys, types = out.setdefault(table, ([], {}))
            types[column] = kind
            if key == "PRI":
                keys.append(column)
    return out


def snapshot(connection, database: str = DATABASE) -> dict[str, list[dict[str, Any]]]:
    """``SELECT *`` of every table, read in UTC (TIMESTAMP values as UTC wall clock)."""
    import pymysql.cursors

    with connection.cursor(pymysql.cursors.DictCursor) as c:
        c.execute("SET time_zone = '+00:00'")
        out = {}
        for table, (_keys, types) in tables(connection, database).items():
            # FLOAT as the float it stores (its text shows 6 digits; Debezium sends the float32 value).
            columns = ", ".join(
                f"CAST(`{n}` AS DOUBLE) AS `{n}`" if t.startswith("float") else f"`{n}`"
                for n, t in types.items()
            )
            c.execute(f"SELECT {columns} FROM `{database}`.`{table}`")
            out[table] = list(c.fetchall())
        c.execute(f"SET time_zone = '{ZONE}'")
    return out


def _time_text(value: dt.timedelta) -> str:
    micros = value // dt.timedelta(microseconds=1)
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    seconds, fraction = divmod(micros, 10**6)
    clock = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return clock + (f".{str(fraction).rjust(6, '0').rstrip('0')}" if fraction else "")


def _float6(value: float) -> float:
    """FLOAT to MariaDB's 6 significant digits: Debezium's snapshot reads FLOAT through JDBC's text protocol
    (``897192``), its binlog reader the float32 itself (``897191.625``); both are the one FLOAT value."""
    return float(f"{struct.unpack('f', struct.pack('f', value))[0]:.6g}")


def expected(value: Any, column_type: str) -> Any:
    """A MariaDB value (pymysql) as docs/dialects.md says the mirror stores it."""
    if value is None:
        return None
    kind = column_type.split("(")[0].split(" ")[0].lower()
    if kind == "bit":
        number = int.from_bytes(value, "big")
        return bool(number) if column_type == "bit(1)" else number
    if kind == "time":
        return _time_text(value)
    if kind == "timestamp":
        return value.replace(tzinfo=dt.UTC)
    if kind == "float":
        return _float6(value)
    if kind == "bigint" and "unsigned" in column_type:
        return Decimal(value)
    return value


def mirrored(value: Any, column_type: str) -> Any:
    if value is None:
        return None
    kind = column_type.split("(")[0].split(" ")[0].lower()
    if kind == "float":
        return _float6(value)
    if kind == "timestamp":
        return value.astimezone(dt.UTC)
    return value


def mirror_rows(lake: Path, database: str, table: str) -> list[dict[str, Any]] | None:
    from deltalake import DeltaTable

    path = lake / database / table
    if not DeltaTable.is_deltatable(str(path)):
        return None
    data = DeltaTable(str(path)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c.startswith("_cdc_")])
    return data.to_pylist()


def same(want: Any, have: Any) -> bool:
    """Equal values of the same kind (an int and a Decimal of one number are the same: unsigned BIGINT)."""
    if want is None or have is None:
        return want is have
    if isinstance(want, bool) or isinstance(have, bool):
        return type(want) is type(have) and want == have
    if isinstance(want, int | Decimal) and isinstance(have, int | Decimal):
        return want == have
    return type(want) is type(have) and want == have


def differences(
    lake: Path, database: str, rows: dict[str, list[dict[str, Any]]], schema, skip: tuple[str, ...] = ()
) -> list[str]:
    """Every mismatch between the mirrors under ``lake`` and the database's rows (``snapshot``)."""
    problems = []
    for table, (keys, types) in schema.items():
        if table in skip:
            continue
        mirror = mirror_rows(lake, database, table)
        if mirror is None:
            problems.append(f"{table}: no mirror table")
            continue
        columns = set(mirror[0]) if mirror else set(types)
        if mirror and columns != set(types):
            problems.append(f"{table}: mirror columns {sorted(columns)} != {sorted(types)}")
        by_key = {tuple(r[k] for k in keys): r for r in mirror}
        source_keys = set()
        for row in rows[table]:
            key = tuple(expected(row[k], types[k]) for k in keys)
            source_keys.add(key)
            got = by_key.get(key)
            if got is None:
                problems.append(f"{table} key {key}: missing in the mirror")
                continue
            for column, kind in types.items():
                want, have = expected(row[column], kind), mirrored(got.get(column), kind)
                if not same(want, have):
                    problems.append(f"{table} key {key} column {column}: database {want!r}, mirror {have!r}")
        for key in by_key.keys() - source_keys:
            problems.append(f"{table} key {key}: in the mirror, not in the database")
    return problems
