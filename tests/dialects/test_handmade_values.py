"""The hand-made fixtures (messages written for this project in a vendor's documented shape, not copied from
a vendor), each event written here by hand from the message and the vendor's documented rules, not read from
the ``.expected.json`` snapshots (the code's own output).

CloudCanal «MQ 消息同步格式说明» (CloudCanal format): ``action`` INSERT/UPDATE/DELETE, one event per row of
``data``; an UPDATE's ``before`` holds the previous rows, parallel to ``data``; a DELETE's row is in ``data``,
or in ``before`` when ``data`` is empty; ``pks`` names the key; ``dbValType`` types the columns (bigint ->
int, decimal(10,2) -> Decimal of scale 2, datetime(3) -> a wall-clock datetime, varchar/text -> str);
``execTs`` (ms) orders and times an event, then ``bid``; ``isDdl`` with ``sql`` is a DDL event
(``tableChanges`` gives a CREATE's key); ``entryType: TRANSACTIONEND`` changes no table.

Huawei DRS «Kafka消息格式» (MySQL source): one event per row; a DELETE's rows are in ``old`` (``data`` null or
empty), an UPDATE's previous rows too; the DRS sequence ``id`` then ``es`` order an event, ``es`` (ms) times
it; ``mysqlType`` types the columns: ``varbinary`` as a list of signed bytes, ``timestamp`` as epoch seconds
(0: MySQL's zero TIMESTAMP, NULL), ``datetime`` as wall-clock text, bare ``decimal`` kept as its exact text.
PostgreSQL/GaussDB and Oracle sources type by ``columnType`` (boolean, bytea as \\x hex, timestamp with time
zone with its offset, numeric(p,s); a range or jsonb stays its text); an Oracle message's ``database`` is
empty and its ``schema`` names it. JSON-C (its field table in the same document) differs: a DELETE's row
is in ``data``, and ``timestamp`` is wall-clock text in the source's zone (source.timezone: UTC here).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from tests.dialects.golden import FIXTURES
from tests.dialects.test_seed_values import at, check, same, typed_events

ORDERS = {"database": "shop", "table": "orders", "primary_key": ["id"]}
CREATED = dt.datetime(2023, 11, 14, 22, 13, 20, 123000)  # "2023-11-14 22:13:20.123", datetime(3)
CREATED_0 = dt.datetime(2023, 11, 14, 22, 13, 20)  # "2023-11-14 22:13:20.000"
PEN = {"id": 1, "name": "pen", "price": Decimal("1.50"), "created": CREATED, "note": None}
INK = {"id": 2, "name": "ink", "price": Decimal("-0.05"), "created": CREATED_0, "note": "blue"}
PEN_ON_SALE = {**PEN, "price": Decimal("1.75"), "note": "sale"}
INK_POT = {**INK, "name": "ink pot"}


def exec_ts(ms: int, bid: int) -> dict[str, Any]:
    """execTs then bid order an event; execTs (ms since the epoch) is its time."""
    time = at(1970, 1, 1) + dt.timedelta(milliseconds=ms)
    return {"seq": [ms, bid], "event_time": time, "position": f"execTs={ms} bid={bid}"}


CLOUDCANAL: dict[str, list[dict[str, Any]]] = {
    "handmade-dml.jsonl": [
        # a two-row INSERT: an event per row, both at the message's execTs and bid
        *({"op": "insert", **ORDERS, "after": row} | exec_ts(1700000000000, 1) for row in (PEN, INK)),
        # a two-row UPDATE: before[i] is data[i]'s previous row
        {"op": "update", **ORDERS, "before": PEN, "after": PEN_ON_SALE} | exec_ts(1700000001000, 2),
        {"op": "update", **ORDERS, "before": INK, "after": INK_POT} | exec_ts(1700000001000, 2),
        # a DELETE's row in data, then one with data empty and the row in before
        {"op": "delete", **ORDERS, "before": PEN_ON_SALE} | exec_ts(1700000002000, 3),
        {"op": "delete", **ORDERS, "before": INK_POT} | exec_ts(1700000003000, 4),
        # the transaction's end: no table, counted as filtered
        {"op": "filtered", "database": "shop", "primary_key": []} | exec_ts(1700000003000, 4),
    ],
    "handmade-ddl.jsonl": [
        # CREATE TABLE: its key from tableChanges.table.primaryKeyColumnNames
        {"op": "ddl", "database": "shop", "table": "t2", "primary_key": ["id"]} | exec_ts(1700000100000, 10),
        {"op": "truncate", "database": "shop", "table": "t2", "primary_key": []} | exec_ts(1700000101000, 11),
        {"op": "ddl", "database": "shop", "table": "t2", "primary_key": []} | exec_ts(1700000102000, 12),
    ],
}


@pytest.mark.parametrize("fixture", sorted(CLOUDCANAL))
def test_cloudcanal_handmade_messages(fixture):
    check("cloudcanal-json", f"cloudcanal-json/{fixture}", CLOUDCANAL[fixture])


def test_cloudcanal_handmade_values():
    """Value encodings: binary columns (varbinary, blob, or jdbcType BINARY where dbValType lacks the column)
    are written one character per byte (ISO-8859-1), so "Ã©" is the two bytes c3 a9, not "é"; timestamp(6)
    is wall-clock text in source.timezone (UTC here); bigint unsigned needs a decimal; a column a row does
    not carry is absent from its image, not NULL."""
    vals = {"database": "lab", "schema": "public", "table": "vals", "primary_key": ["id"]}
    first = {"id": 2147483647, "b": b"\xff\x00A\xe9", "bl": b"", "t": "中文 ü", "n": None}
    first |= {"ts": at(2023, 11, 14, 22, 13, 20) + dt.timedelta(microseconds=1)}
    first |= {"u": Decimal(2**64 - 1), "raw": b"\x80\x7f"}
    second = {"id": -2147483648, "b": None, "bl": b"\xc3\xa9", "t": "", "ts": at(1970, 1, 1, 0, 0, 1)}
    check(
        "cloudcanal-json",
        "cloudcanal-json/handmade-values.jsonl",
        [{"op": "insert", **vals, "after": row} | exec_ts(1700000200000, 20) for row in (first, second)],
    )


def test_cloudcanal_handmade_ddl_kinds_and_statements():
    """What each DDL event carries for the schema step: its kind (DROP TABLE is canal's ERASE) and its SQL."""
    from replicator.commands.inspect import decode_path, event_records

    path = FIXTURES / "cloudcanal-json" / "handmade-ddl.jsonl"
    events = event_records(decode_path(path, "cloudcanal-json"), ("ddl_kind", "ddl_sql"))
    assert events == [
        {"ddl_kind": "CREATE", "ddl_sql": "CREATE TABLE t2 (id int primary key, v varchar(8))"},
        {"ddl_kind": "TRUNCATE", "ddl_sql": "truncate table t2"},
        {"ddl_kind": "ERASE", "ddl_sql": "DROP TABLE t2"},
    ]


def test_cloudcanal_handmade_bad_messages():
    """One fault per line, each a dead letter naming its cause and its table, but the UPDATE whose ``pks``
    is null: an event without key columns, keyed by the engine (tables.keys) or dead-lettered there."""
    events = typed_events("cloudcanal-json", "cloudcanal-json/handmade-bad.jsonl")
    errors = [(e.get("database"), e.get("table"), e["error"]) for e in events if "error" in e]
    assert errors == [
        ("shop", "orders", 'unknown op action ["MERGE"]'),  # not an action CloudCanal writes
        ("", "orders", "missing database (db)"),  # db "" (schema shop does not stand in for it)
        ("shop", None, "missing table"),  # table null
        ("shop", "orders", "no rows in 'data'"),  # an INSERT with data []
        ("shop", "orders", 'NULL or absent primary key column in ["id"]'),  # id null, pks [id]
        ("shop", "orders", "wrong shape: no 'action' in the message"),  # the last line: no action at all
    ]
    [update] = [e for e in events if "error" not in e]
    expected = {
        "dialect": "cloudcanal-json",
        "op": "update",
        "database": "shop",
        "table": "orders",
        "primary_key": [],
        "before": PEN,
        "after": PEN,
    } | exec_ts(1700000000000, 1)
    assert same(update, expected), update
    assert [e.get("op") for e in events].index("update") == 5  # the sixth line, in order


# ---- Huawei DRS: constructed-mysql-dml.jsonl -------------------------------------------------------------
T1 = {"database": "shop", "table": "t1", "primary_key": ["id"]}
ROW_1 = {
    "id": 1,
    "b": b"\x00\x7f\x80\xff",  # [0, 127, -128, -1]
    "ts": at(1969, 12, 31, 23, 59, 58) + dt.timedelta(milliseconds=500),  # -1.5 s
    "dt": dt.datetime(2021, 6, 25, 17, 51, 53, 500000),
    "d": "-12.3400",
    "f": 12510357.0,  # 1.2510357E7
    "t": "多字节 text",
}
ROW_2 = {"id": 2, "b": b"", "ts": None, "dt": None, "d": "0", "f": -0.0, "t": ""}  # [], 0, null, "-0.0"


def drs_at(id_: int, es: int) -> dict[str, Any]:
    """The DRS sequence id then es order an event; es (ms since the epoch) is its time."""
    time = at(1970, 1, 1) + dt.timedelta(milliseconds=es)
    return {"seq": [id_, es], "event_time": time, "position": f"id={id_} es={es}"}


def test_drs_constructed_mysql_dml():
    # the update changes ts to 1624614713.000201
    updated = {**ROW_1, "ts": at(2021, 6, 25, 9, 51, 53) + dt.timedelta(microseconds=201)}
    expected = [
        *({"op": "insert", **T1, "after": row} | drs_at(10, 1700000000010) for row in (ROW_1, ROW_2)),
        {"op": "update", **T1, "before": ROW_1, "after": updated} | drs_at(11, 1700000000011),
        {"op": "delete", **T1, "before": ROW_1} | drs_at(12, 1700000000012),  # data null, the row in old
        *({"op": "delete", **T1, "before": row} | drs_at(13, 1700000000013) for row in (ROW_1, ROW_2)),
    ]
    check("drs-json", "drs-json/constructed-mysql-dml.jsonl", expected)


def test_drs_json_c_constructed_dml():
    row = {**ROW_1, "ts": at(2021, 6, 25, 17, 51, 53) + dt.timedelta(milliseconds=201)}
    check(
        "drs-json-c",
        "drs-json-c/constructed-dml.jsonl",
        [
            {"op": "insert", **T1, "after": row} | drs_at(60, 1700000000060),
            {"op": "update", **T1, "before": row, "after": {**row, "t": "new"}} | drs_at(61, 1700000000061),
            {"op": "delete", **T1, "before": row} | drs_at(62, 1700000000062),
            # the row only in old, data null: JSON-C's DELETE carries it in data, so nothing to delete
            {"database": "shop", "table": "t1", "error": "no rows in 'data'"},
            {"op": "truncate", "database": "shop", "table": "t1", "primary_key": []}
            | drs_at(64, 1700000100064),
        ],
    )


def test_drs_constructed_postgresql_and_oracle():
    row = {"id": 7, "flag": True, "payload": b"\xde\xad\xbe\xef", "tz": at(2010, 1, 1, 6, 30)}  # 14:30+08
    row |= {"r": "[11,20)", "j": '{"k": [1, 2]}', "n": Decimal("-0.50")}
    pg = {"database": "database01", "schema": "schema01", "table": "table01", "primary_key": ["id"]}
    oracle = {**pg, "database": "HR", "schema": "HR"}  # database "" in the message
    check(
        "drs-json",
        "drs-json/constructed-pg-oracle.jsonl",
        [
            {"op": "insert", **pg, "after": row} | drs_at(40, 1639626187040),
            {"op": "delete", **pg, "before": row} | drs_at(41, 1639626187041),  # the row in old
            {"op": "insert", **oracle, "after": {**row, "id": 8}} | drs_at(42, 1639626187042),
        ],
    )
