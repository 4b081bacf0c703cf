"""The constructed DDL, helper and bad-message fixtures of Huawei DRS (JSON and MongoDB), Debezium and Aliyun
DTS Avro, each event written here by hand from the message and the vendor's rules, not read from the
``.expected.json`` snapshots (the code's own output). A bad message is checked by its cause (which field, why)
through a stable part of the error text, not the whole text.

Huawei DRS «Kafka消息格式»: ``type`` INSERT/UPDATE/DELETE/DDL (INIT_DDL in a full sync); ``isDdl`` with
``sql`` is a DDL event named by ``database``/``table``; the sequence ``id`` then ``es`` (ms) order an
event; ``pkNames`` names the key (null: none). Its MongoDB messages: ``op``/``recordType``, the shell text
of ``value``/``where`` rewritten to Extended JSON, ``_id`` the key, ``clusterTime`` ("seconds:increment")
then ``id`` the order. Debezium (its connector documentation): ``op`` c/u/d/r, ``source.db``/``table``, a
create needs ``after``, a delete ``before``; heartbeats and transaction markers change no table. Aliyun DTS
«Record.avsc»: ``operation``, ``objectName`` db.table, ``fields`` parallel to the images, ``tags.pk_uk_info``
the key, ``id`` the order, ``sourcePosition`` the position.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from tests.dialects.test_handmade_values import ROW_1, drs_at
from tests.dialects.test_seed_values import at, check, same, typed_events


def causes(dialect: str, fixture: str) -> list[tuple[Any, ...]]:
    """Each event in order: an error as (database, table, error), a change as its op."""
    return [
        (e.get("database"), e.get("table"), e["error"]) if "error" in e else e["op"]
        for e in typed_events(dialect, fixture)
    ]


def assert_causes(actual: list[Any], expected: list[Any]) -> None:
    """``expected``: an op, or (database, table, a stable substring of the error)."""
    assert len(actual) == len(expected), actual
    for got, want in zip(actual, expected, strict=True):
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and got[:2] == want[:2] and want[2] in got[2], (got, want)
        else:
            assert got == want, (got, want)


# ---- Huawei DRS JSON: constructed-ddl.jsonl -------------------------------------------------------------
def test_drs_constructed_ddl():
    """Every DDL DRS writes is an event of its message's table, in id order; its kind from the statement
    (RENAME TABLE and ALTER ... RENAME TO rename; ALTER ... RENAME COLUMN alters); TRUNCATE empties the
    table; a statement without a table (CREATE DATABASE, table "") has none; INIT_DDL is the full sync's."""
    statements = [
        (20, "t2", "CREATE", "CREATE TABLE `t2` (`id` int NOT NULL, PRIMARY KEY (`id`))"),
        (21, "t1", "ALTER", "/* generated */ alter table `t1` add column `c9` int"),
        (22, "t1", "RENAME", "ALTER TABLE `t1` RENAME TO `t9`"),
        (23, "t1", "RENAME", "RENAME TABLE `t9` TO `t1`"),
        (24, "t1", "ALTER", "ALTER TABLE `t1` RENAME COLUMN `c9` TO `c8`"),
        (25, "t1", "CINDEX", "CREATE UNIQUE INDEX `ix` ON `t1` (`t`)"),
        (26, "t1", "DINDEX", "DROP INDEX `ix` ON `t1`"),
        (27, "t1", "TRUNCATE", "TRUNCATE TABLE `t1`"),
        (28, "t2", "ERASE", "DROP TABLE IF EXISTS `t2`"),  # canal's name for DROP TABLE
        (29, None, "QUERY", "CREATE DATABASE `shop2`"),
        (30, "t1", "INIT_DDL", "CREATE TABLE `t1` (`id` int NOT NULL, PRIMARY KEY (`id`))"),
    ]
    expected = []
    for id_, table, kind, _ in statements:
        event: dict[str, Any] = {"op": "truncate" if kind == "TRUNCATE" else "ddl", "database": "shop"}
        event |= {"table": table} if table else {}
        expected.append(event | {"primary_key": []} | drs_at(id_, 1700000100000 + id_))
    check("drs-json", "drs-json/constructed-ddl.jsonl", expected)

    from replicator.commands.inspect import decode_path, event_records
    from tests.dialects.golden import FIXTURES

    kinds = event_records(
        decode_path(FIXTURES / "drs-json/constructed-ddl.jsonl", "drs-json"), ("ddl_kind", "ddl_sql")
    )
    assert kinds == [{"ddl_kind": kind, "ddl_sql": sql} for _, _, kind, sql in statements]


# ---- Huawei DRS JSON: bad-messages.jsonl ----------------------------------------------------------------
def test_drs_bad_messages():
    assert_causes(
        causes("drs-json", "drs-json/bad-messages.jsonl"),
        [
            ("shop", None, "missing table"),  # table ""
            ("shop", "t1", "UPSERT"),  # not a type DRS writes
            "insert",  # pkNames null: a table without a key, keyed by the engine
            ("shop", "t1", 'primary key column in ["id"]'),  # id null, pkNames [id]
            ("shop", "t1", "'data'"),  # an INSERT with data null
            ("shop", "t1", "'old'"),  # a DELETE: its rows are in old, and old is null
            (None, "t1", "missing database"),  # database ""
            ("shop", "t1", "no 'type'"),  # no type at all
        ],
    )
    [insert] = [e for e in typed_events("drs-json", "drs-json/bad-messages.jsonl") if "error" not in e]
    expected = {"dialect": "drs-json", "op": "insert", "database": "shop", "table": "t1", "primary_key": []}
    assert same(insert, expected | {"after": ROW_1} | drs_at(52, 1700000000052)), insert


# ---- Huawei DRS MongoDB: constructed-helpers.jsonl and bad-messages.jsonl -------------------------------
def mongo_at(seconds: int, increment: int, id_: int, es: int) -> dict[str, Any]:
    time = at(1970, 1, 1) + dt.timedelta(milliseconds=es)
    return {"seq": [seconds, increment, id_], "event_time": time, "position": f"{seconds}:{increment}"}


def test_drs_mongo_constructed_helpers():
    """Shell helpers become relaxed Extended JSON (NumberLong/NumberInt plain exact numbers, ISODate $date,
    NumberDecimal $numberDecimal, BinData $binary, UUID $uuid; text inside strings untouched); a non-ObjectId
    ``_id`` is keyed by its JSON text (a string with its quotes, a document with sorted keys); an update's
    $set leaves the document absent; a DDL changes no column of the two-column mirror."""
    events = typed_events("drs-mongo", "drs-mongo/constructed-helpers.jsonl")
    documents = [json.loads(e["after"].pop("document")) for e in events[:2]]
    assert same(
        documents[0],
        {
            "_id": "a b",
            "n": 9007199254740993,
            "i": 5,
            "at": {"$date": "2023-05-17T09:18:31.439Z"},
            "price": {"$numberDecimal": "-12.50"},
            "bin": {"$binary": {"base64": "AQID", "subType": "00"}},
            "u": {"$uuid": "0123abcd-0000-4000-8000-000000000000"},
            "note": 'NumberLong(5) and ObjectId("x") stay text',
            "nested": {"z": 1, "a": [1.0, None]},
        },
    )
    assert same(documents[1], {"_id": 42, "c": "多字节"})
    ljx = {"dialect": "drs-mongo", "database": "ljx", "table": "ljx"}
    keyed = {**ljx, "primary_key": ["_id"]}
    expected = [
        {"op": "insert", **keyed, "after": {"_id": '"a b"'}} | mongo_at(1684344100, 2, 500, 1684315111939),
        {"op": "insert", **keyed, "after": {"_id": "42"}} | mongo_at(1684344100, 3, 501, 1684315111940),
        {"op": "update", **keyed, "after": {"_id": "42"}} | mongo_at(1684344100, 4, 502, 1684315111941),
        {"op": "delete", **keyed, "before": {"_id": '{"j":2,"k":1}'}}
        | mongo_at(1684344100, 5, 503, 1684315111942),
        {"op": "ddl", **ljx} | mongo_at(1684344100, 6, 504, 1684315111943),
    ]
    assert same(events, expected), events
    update = typed_events("drs-mongo", "drs-mongo/constructed-helpers.jsonl", meta=True)[2]
    assert json.loads(update["meta"]["mongo_update"]) == {"$set": {"a.b": 3}}


def test_drs_mongo_bad_messages():
    assert_causes(
        causes("drs-mongo", "drs-mongo/bad-messages.jsonl"),
        [
            ("ljx", "ljx", "missing _id"),  # an insert's value without _id
            ("ljx", "ljx", '["$inc"]'),  # only $set and $unset are replayable
            ("ljx", "ljx", "missing _id"),  # a $set update with where null
            ("ljx", "ljx", "'value' is not JSON"),  # Timestamp(1, 2): no Extended JSON rewrite
            ("ljx", "ljx", "clusterTime"),  # "1684344064": no increment
            ("ljx", "ljx", '["DELETE","view"]'),  # recordType view
            ("ljx", "ljx", "not a JSON object"),  # value [1, 2]
            ("ljx", None, "missing coll"),  # coll ""
        ],
    )


# ---- Debezium: bad-messages.jsonl -----------------------------------------------------------------------
def test_debezium_bad_messages():
    """A tombstone (payload null), a heartbeat and a transaction marker change no table: filtered; the rest
    dead letters by cause."""
    events = typed_events("debezium", "debezium/bad-messages.jsonl")
    assert_causes(
        [(e.get("database"), e.get("table"), e["error"]) if "error" in e else e["op"] for e in events],
        [
            ("d", "t", '["x"]'),  # op x
            ("d", None, "source.table"),  # no source.table
            ("d", "t", "no 'after' image"),  # a create with after null
            "filtered",  # tombstone
            "filtered",  # io.debezium.connector.common.Heartbeat
            "filtered",  # transaction BEGIN
            (None, None, "'payload' is not a JSON object"),  # payload "oops"
            ("d", "t", 'columns ["price"]'),  # a Decimal's bytes that are not base64 of its unscaled value
            ("d", "t", "no 'op'"),  # payload without op (nor ddl)
            ("d", "t", "REPLICA IDENTITY FULL"),  # a delete with before {}
        ],
    )
    ts_ms = at(2023, 11, 14, 22, 13, 20)  # ts_ms 1700000000000
    for event in events[4:6]:
        assert (event["seq"], event["event_time"], event["position"]) == (
            [1700000000000, 0, 0],
            ts_ms,
            "ts_ms:1700000000000",
        )


# ---- Aliyun DTS Avro: bad.b64 (written by make_fixtures.py's bad()) -------------------------------------
def test_dts_avro_bad_records():
    orders = ("shop", "orders")
    events = typed_events("dts-avro", "dts-avro/bad.b64")
    assert_causes(
        [(e.get("database"), e.get("table"), e["error"]) if "error" in e else e["op"] for e in events],
        [
            (None, None, "not a DTS Avro record"),  # "not an avro record at all"
            (None, None, "not a DTS Avro record"),  # a record cut after 20 bytes
            (None, None, "bytes left after the record"),  # two bytes too many: another schema version
            "insert",  # id 51, tags {}: no key named, keyed by the engine
            (*orders, 'primary key column in ["missing"]'),  # pk_uk_info names a column not in fields
            (*orders, 'primary key column in ["id"]'),  # id null
            (*orders, "'FILL'"),  # not an operation of Record.avsc
            (*orders, "5 fields but 3 values"),  # afterImages shorter than fields
            (*orders, "column 'name' (afterImages): unknown encoding"),  # charset klingon
            (*orders, "column 'name' (afterImages): 'utf-8' codec"),  # bytes ff fe in utf8mb4
            (None, None, "missing database (objectName)"),  # objectName null
            ("shop", "t", "DDL record carries its statement as a string"),  # a DDL without afterImages
            (*orders, "no beforeImages"),  # an UPDATE without its before image
            (*orders, "pk_uk_info is not JSON"),  # tags.pk_uk_info "{oops"
            (*orders, "column 'id' (afterImages)"),  # integer value "1x"
        ],
    )
    row = {"id": 1, "name": "pen", "price": Decimal("1.50"), "note": None}
    row |= {"created": dt.datetime(2023, 11, 14, 22, 13, 20, 123000)}  # datetime: wall clock
    expected = {"dialect": "dts-avro", "op": "insert", "database": "shop", "table": "orders"}
    expected |= {"primary_key": [], "after": row, "seq": [51], "event_time": at(2023, 11, 14, 22, 13, 20)}
    assert same(events[3], expected | {"position": "6100@3"}), events[3]


# ---- Aliyun DTS Avro: dml.b64, ddl.b64, container.avro (make_fixtures.py's dml(), ddl(), container()) ----
def dts_at(id_: int, seconds: int, position: str | None = None) -> dict[str, Any]:
    """``id`` orders a record, ``sourceTimestamp`` (s) times it, ``sourcePosition`` (offset@file) places it;
    make_fixtures.py writes 1000 + 100 * id, @3."""
    return {"seq": [id_], "event_time": at(1970, 1, 1) + dt.timedelta(seconds=seconds)} | {
        "position": position or f"{1000 + 100 * id_}@3"
    }


ORDERS = {"database": "shop", "table": "orders", "primary_key": ["id"]}  # tags.pk_uk_info PRIMARY [id]
CREATED = dt.datetime(2023, 11, 14, 22, 13, 20, 123000)  # DateTime: millis holds microseconds


def order(id_: int, name: str, price: str, note: str | None) -> dict[str, Any]:
    return {"id": id_, "name": name, "price": Decimal(price), "created": CREATED, "note": note}


def test_dts_avro_dml():
    """BEGIN, COMMIT and HEARTBEAT change no table (a heartbeat without sourcePosition is placed by its id);
    a column of EmptyObject NONE is absent from its image (the binlog's minimal image), NULL is NULL."""
    pen, pen_on_sale = order(1, "pen", "1.50", None), order(1, "pen", "1.75", "sale")
    check(
        "dts-avro",
        "dts-avro/dml.b64",
        [
            {"op": "filtered"} | dts_at(10, 1700000000),
            {"op": "insert", **ORDERS, "after": pen} | dts_at(11, 1700000000),
            {"op": "update", **ORDERS, "before": pen, "after": pen_on_sale} | dts_at(12, 1700000001),
            {"op": "delete", **ORDERS, "before": pen_on_sale} | dts_at(13, 1700000002),
            {"op": "filtered"} | dts_at(14, 1700000000),
            {"op": "filtered"} | dts_at(15, 1700000000, "id=15"),
            {"op": "update", **ORDERS, "before": {"id": 2}}
            | {"after": {"id": 2, "price": Decimal("-0.05"), "note": None}}
            | dts_at(16, 1700000003),
        ],
    )


def test_dts_avro_ddl():
    """A DDL record's statement is its afterImages string, its table objectName's second part; TRUNCATE
    empties the table; CREATE DATABASE (objectName "shop") has no table."""
    statements = [
        ("t2", "CREATE", "CREATE TABLE t2 (id int primary key, v varchar(8))"),
        ("t2", "ALTER", "/* dts */ ALTER TABLE t2 ADD COLUMN w int"),
        ("t2", "CINDEX", "CREATE UNIQUE INDEX uk_v ON t2 (v)"),
        ("t2", "TRUNCATE", "truncate table t2"),
        ("t2", "ERASE", "DROP TABLE t2"),
        (None, "CREATE", "CREATE DATABASE shop"),
    ]
    events = typed_events("dts-avro", "dts-avro/ddl.b64")
    expected = [
        {"dialect": "dts-avro", "op": "truncate" if kind == "TRUNCATE" else "ddl", "database": "shop"}
        | ({"table": table} if table else {})
        | dts_at(20 + i, 1700000100 + i)
        for i, (table, kind, _) in enumerate(statements)
    ]
    assert same(events, expected), events

    from replicator.commands.inspect import decode_path, event_records
    from tests.dialects.golden import FIXTURES

    kinds = event_records(decode_path(FIXTURES / "dts-avro/ddl.b64", "dts-avro"), ("ddl_kind", "ddl_sql"))
    assert kinds == [{"ddl_kind": kind, "ddl_sql": sql} for _, kind, sql in statements]


def test_dts_avro_container_file():
    """An object container file: its records in file order, each as a single record would decode."""
    cup, mug = order(100, "cup", "3.00", None), order(101, "mug", "4.00", "blue")
    check(
        "dts-avro",
        "dts-avro/container.avro",
        [
            {"op": "insert", **ORDERS, "after": cup} | dts_at(70, 1700000000),
            {"op": "insert", **ORDERS, "after": mug} | dts_at(71, 1700000000),
            {"op": "update", **ORDERS, "before": mug, "after": {**mug, "price": Decimal("4.50")}}
            | dts_at(72, 1700000000),
            {"op": "delete", **ORDERS, "before": cup} | dts_at(73, 1700000000),
            {"op": "filtered"} | dts_at(74, 1700000000),
        ],
    )


def test_dts_avro_postgres_record():
    """A PostgreSQL source: objectName is db.schema.table, sourcePosition its LSN; TimestampWithTimeZone an
    instant whatever its zone's spelling; numeric beyond 38 digits stays exact text; bytea bytes."""
    row = {
        "id": 7,
        "amount": "123456789012345678901234567890123456789.5",
        "paid_at": at(2024, 1, 1, 2, 0, 0, 1),  # 10:00:00.000001+08:00
        "paid_local": at(2024, 7, 1),  # 08:00 Asia/Shanghai
        "paid_utc": at(2024, 1, 1),
        "seen": dt.datetime(2024, 1, 1, 10, 0, 0, 250000),  # timestamp without time zone: wall clock
        "doc": '{"k": "v"}',
        "data": b"\xde\xad",
        "label": "ok",
        "n": None,
    }
    accounts = {"database": "pgdb", "schema": "public", "table": "accounts", "primary_key": ["id"]}
    time = {"event_time": at(2023, 11, 14, 22, 13, 20)}
    check(
        "dts-avro",
        "dts-avro/postgres.b64",
        [
            {"op": "insert", **accounts, "after": row, "seq": [40], **time, "position": "0/16B3748"},
            {"op": "delete", **accounts, "before": row, "seq": [41], **time, "position": "0/16B3800"},
        ],
    )


def test_dts_avro_value_record():
    """values.b64's one INSERT, its values typed as test_dts_avro.py's VALUE_EDGES states them (c_none,
    EmptyObject NONE, absent)."""
    from tests.dialects.test_dts_avro import VALUE_EDGES

    [event] = typed_events("dts-avro", "dts-avro/values.b64", timezone="+08:00")
    assert event.pop("after") == {"id": 1} | {column: typed for column, (_, typed) in VALUE_EDGES.items()}
    expected = {
        "dialect": "dts-avro",
        "op": "insert",
        "database": "lab",
        "table": "vals",
        "primary_key": ["id"],
    }
    assert same(event, expected | dts_at(30, 1700000000)), event


# ---- Tencent CKafka and KafkaRiverCanal: values-edge.jsonl, the events around their values ----------------
def events_without_images(dialect: str, fixture: str) -> list[dict[str, Any]]:
    """The events' op, names, key, order, time and position (their values are test_ckafka.py's and
    test_river_canal.py's)."""
    events = typed_events(dialect, fixture)
    for event in events:
        event.pop("before", None), event.pop("after", None)
    return events


def test_ckafka_value_edge_events():
    """Format one: BINLOG_NAME's number then BINLOG_POS (text or number) order an event; TIME is the server's
    wall clock (source.timezone, UTC here). Canal-shaped: es then id; an es of 0 is unknown and ts stands in
    (Tencent CKafka «MySQL 订阅消息官方格式说明»'s INSERT writes es 0); pkNames null is no key; a DELETE
    event per row of data."""
    customers = {"dialect": "ckafka", "database": "inventory", "table": "customers"}
    delete = {"op": "delete", **customers, "primary_key": ["id"], "seq": [1465581029100, 0]}
    delete |= {"event_time": at(2016, 6, 10, 17, 50, 29, 100000), "position": "es=1465581029100 id=0"}
    expected = [
        {"op": "insert", **customers, "primary_key": [], "seq": [12, 4], "event_time": at(1970, 1, 1, 8)}
        | {"position": "mysql-bin.000012:4"},
        {"op": "update", **customers, "primary_key": [], "seq": [12, 400]}
        | {"event_time": at(2016, 6, 11, 1, 50, 29), "position": "mysql-bin.000012:400"},
        {"op": "insert", **customers, "table": "edge", "primary_key": [], "seq": [1465491411815, 0]}
        | {"event_time": at(2016, 6, 9, 16, 56, 51, 815000), "position": "es=0 id=0"},
        delete,
        delete,
    ]
    events = events_without_images("ckafka", "ckafka/values-edge.jsonl")
    assert same(events, expected), events


def test_river_canal_value_edge_events_and_the_keyless_row():
    """KafkaRiverCanal «Kafka消息 Specification»: binlog "offset@file" gives the position and the order (the
    file's number, then the offset); time (ms) the event time; keys the key (empty: none, the engine's)."""
    edge = {"dialect": "river-canal", "database": "edge", "table": "values", "primary_key": ["id"]}
    expected = [
        {"op": "insert", **edge, "seq": [1, 4], "event_time": at(2023, 11, 14, 22, 13, 20, 123000)}
        | {"position": "mysql-bin.000001:4"},
        {"op": "update", **edge, "seq": [2, 9], "event_time": at(2023, 11, 14, 22, 13, 21)}
        | {"position": "mysql-bin.000002:9"},
    ]
    events = events_without_images("river-canal", "river-canal/values-edge.jsonl")
    assert same(events, expected), events
    [keyless] = [
        e for e in events_without_images("river-canal", "river-canal/bad-messages.jsonl") if "op" in e
    ]
    expected_keyless = {"dialect": "river-canal", "op": "insert", "database": "TestCanal", "table": "t"}
    expected_keyless |= {"primary_key": [], "seq": [3, 100], "event_time": at(2015, 12, 16, 3, 4, 52)}
    assert same(keyless, expected_keyless | {"position": "mysql-bin.000003:100"}), keyless
