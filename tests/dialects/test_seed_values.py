"""The vendor documents' change examples, every field of the change event checked (the vendor extras in
``meta`` where they carry the change: drs-mongo) against values written here by hand from the
documents' text (the examples are copied into tests/fixtures/<format>/seedNNN-*; the documents are cited by
title in docs/dialects.md, "Sources") and the producers' value encodings — not read from the
``.expected.json`` snapshots (the code's own output).

Values are compared typed, as a mirror stores them: each canonical text parsed into the Arrow type of its
declared source type (replicator.types), text where a format declares none.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from replicator.commands.inspect import decode_path, event_records
from replicator.types import arrow_type, parse_values
from tests.dialects.golden import FIXTURES

UTC = dt.UTC


def at(*parts: int) -> dt.datetime:
    """An instant, UTC."""
    return dt.datetime(*parts, tzinfo=UTC)


def typed_events(
    dialect: str, fixture: str, timezone: str = "UTC", meta: bool = False
) -> list[dict[str, Any]]:
    """The fixture's decoded events; row images typed by their source types, the event time parsed;
    ``meta`` (vendor extras) only when asked for."""
    events = []
    fields = (*_FIELDS, "meta") if meta else _FIELDS
    for event in event_records(decode_path(FIXTURES / fixture, dialect), fields):
        types = event.pop("source_types", {}) or {}
        for image in ("before", "after"):
            if image in event:
                event[image] = {c: _typed(v, types.get(c), timezone) for c, v in event[image].items()}
        if "event_time" in event:
            event["event_time"] = dt.datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
        events.append(event)
    return events


_FIELDS = ("dialect", "op", "database", "schema", "table", "primary_key", "before", "after")
_FIELDS += ("source_types", "seq", "event_time", "position", "error")


def _typed(text: str | None, source_type: str | None, timezone: str) -> Any:
    if source_type is None:
        return text
    typed, errors = parse_values(pa.array([text], pa.string()), arrow_type(source_type), timezone=timezone)
    assert errors == [], (text, source_type, errors)
    return typed[0].as_py()


def same(actual: Any, expected: Any) -> bool:
    """Equal and of the same type all the way down (1 is not 1.0 nor "1"); Decimals with their scale."""
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(same(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, Decimal):
        return isinstance(actual, Decimal) and actual.as_tuple() == expected.as_tuple()
    return type(actual) is type(expected) and actual == expected


def check(dialect: str, fixture: str, expected: list[dict[str, Any]], timezone: str = "UTC") -> None:
    """The fixture decodes to ``expected``, each event also naming ``dialect``."""
    expected = [{"dialect": dialect, **event} for event in expected]
    actual = typed_events(dialect, fixture, timezone)
    assert same(actual, expected), f"{fixture}:\n{actual}\n!=\n{expected}"


# ---- canal «Data Type»: Alibaba canal-json (FlatMessage)
# ------------------------------------------------------------
CANAL = {"dialect": "canal-json", "database": "test"}
CANAL_CASES = {
    "seed002-insert.json": [
        {"op": "insert", "table": "asd_copy", "primary_key": ["ID"], "after": {"ID": 2223}},
        (1554044748000, 6),
    ],
    "seed002-update.json": [  # old holds the changed columns' previous values
        {"op": "update", "table": "asd", "primary_key": ["ID"], "before": {"ID": 2223}, "after": {"ID": 222}},
        (1554044876000, 7),
    ],
    "seed002-delete.json": [  # a DELETE's row is in data
        {"op": "delete", "table": "asd", "primary_key": ["ID"], "before": {"ID": 222}},
        (1554044940000, 8),
    ],
}


@pytest.mark.parametrize("fixture", CANAL_CASES)
def test_canal_json_seed_rows(fixture):
    event, (es, id_) = CANAL_CASES[fixture]
    expected = {
        "op": event["op"],
        "database": "test",
        **event,
        "seq": [es, id_],
        "position": f"es={es} id={id_}",
    }
    expected["event_time"] = dt.datetime.fromtimestamp(es / 1000, UTC)
    check("canal-json", f"canal-json/{fixture}", [_ordered(expected)])


def _ordered(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in (*_FIELDS, "meta") if k in event}


def test_canal_json_seed_multirow_update_and_delete():
    """canal «Data Type»'s multi-row messages: one event per row; an update's ``old`` row holds only the
    changed
    column (TEST_NAME was NULL), the rest of its before image is the row's ``data``; pkNames repeats ID."""
    update_time, delete_time = at(2019, 3, 31, 15, 15, 59), at(2019, 3, 31, 15, 19, 2)
    common = {"op": "update", "database": "test", "table": "asd", "primary_key": ["ID"]}
    check(
        "canal-json",
        "canal-json/seed002-update-multirow.json",
        [
            {
                **common,
                "before": {"ID": i, "TEST_NAME": None},
                "after": {"ID": i, "TEST_NAME": "123"},
                "seq": [1554045359000, 15],
                "event_time": update_time,
                "position": "es=1554045359000 id=15",
            }
            for i in (22, 2223)
        ],
    )
    check(
        "canal-json",
        "canal-json/seed002-delete-multirow.json",
        [
            {
                **common,
                "op": "delete",
                "before": {"ID": i, "TEST_NAME": "123"},
                "seq": [1554045542000, 16],
                "event_time": delete_time,
                "position": "es=1554045542000 id=16",
            }
            for i in (22, 2223)
        ],
    )


def test_canal_json_seed004_update_with_full_old_row():
    check(
        "canal-json",
        "canal-json/seed004-canal-json-dml.json",
        [
            {
                "op": "update",
                "database": "db_test",
                "table": "table_test",
                "primary_key": ["col_pk"],
                "before": {"col1": "22", "col2": "22", "col_pk": "22"},
                "after": {"col1": "11", "col2": "11", "col_pk": "11"},
                "seq": [1669790847000, 0],
                "event_time": at(2022, 11, 30, 6, 47, 27),
                "position": "es=1669790847000 id=0",
            }
        ],
    )


# ---- Tencent CKafka «MySQL 订阅消息官方格式说明»: Tencent CKafka "format one"
# -----------------------------------------------------------------
def test_ckafka_seed_rows():
    """No types and no key in format one: values stay text; TIME (yyyyMMddHHmmss) is read in
    source.timezone (UTC by default); the position is the binlog file's number and the offset."""
    customer = {"email": "annek@noanswer.org", "first_name": "Anne", "id": "1004", "last_name": "Kretchmar"}
    marie = {**customer, "first_name": "Anne Marie"}
    common = {"database": "inventory", "table": "customers", "primary_key": []}
    cases = {
        "insert": {"after": customer, "seq": [3, 154], "event_time": at(1970, 1, 1, 8)},
        "update": {
            "before": customer,
            "after": marie,
            "seq": [3, 484],
            "event_time": at(2016, 6, 11, 1, 50, 29),
        },
        "delete": {"before": marie, "seq": [3, 805], "event_time": at(2016, 6, 11, 2, 5, 2)},
    }
    positions = {
        "insert": "mysql-bin.000003:154",
        "update": "mysql-bin.000003:484",
        "delete": "mysql-bin.000003:805",
    }
    for op, fields in cases.items():
        event = {"op": op, **common, **fields, "position": positions[op]}
        check("ckafka", f"ckafka/seed001-dml-{op}.json", [_ordered(event)])


# ---- CloudCanal «MQ 消息同步格式说明»: CloudCanal, Debezium (as written in the seed)
# -----------------------------------------------
def test_cloudcanal_seed_update_without_a_key_leaves_the_key_to_the_engine():
    """CloudCanal «MQ 消息同步格式说明»'s CloudCanal update has ``pks: []`` (a table without a primary key):
    an event without key columns, which the engine keys from tables.keys (or dead-letters: no primary key
    known). ``before`` is the whole previous row; ``dbValType`` varchar(22) keeps the values text; execTs
    (ms) orders and times it, then bid."""
    check(
        "cloudcanal-json",
        "cloudcanal-json/seed004-dml.json",
        [
            {
                "op": "update",
                "database": "db_test",
                "table": "table_test",
                "primary_key": [],
                "before": {"col1": "22", "col2": "22", "col_pk": "22"},
                "after": {"col1": "11", "col2": "11", "col_pk": "11"},
                "seq": [1669789152000, 0],
                "event_time": at(2022, 11, 30, 6, 19, 12),
                "position": "execTs=1669789152000 bid=0",
            }
        ],
    )


def test_debezium_seed004_insert():
    """op "i" as the seed writes it; an empty schema declares no types, so values stay text; the position
    is the binlog file's number, pos and the row (absent: 0); ts_ms of source is the event time."""
    check(
        "debezium",
        "debezium/seed004-dml-insert.json",
        [
            {
                "op": "insert",
                "database": "db_test",
                "table": "table_test",
                "primary_key": [],
                "after": {"col1": "11", "col2": "11", "col_pk": "11"},
                "seq": [3, 154, 0],
                "event_time": at(2022, 11, 30, 8, 17, 41) + dt.timedelta(milliseconds=933),
                "position": "mysql-bin.000003:154",
            }
        ],
    )


# ---- Huawei DRS «Kafka消息格式»: Huawei DRS JSON, JSON-C and MongoDB
# ---------------------------------------------------------
C12 = b"jgojgoidsjgojosog934094309tjhrgjew9tu09340teroejg98304ieurg9ewurg0weut9r04u095tu3092ut093ut0w9e"
C14 = (
    b"jgojgoidsjgojosog934094309tjhrgjew9tu09340teroejg98304i79846546661465"
    b'!@#$%^*()_)+_+|}"?>::eurg9ewurg0weut9r04u095tu3092ut093ut0w9e'
)
C13 = (
    "asfiajhfiaf939-0239uoituqorjoqirfoidjfqrniowejoiwqjroqwjrowqjojoiqgoiegnkjgoi23roiugouofdug9u90weurtg103"
)
DRS_ROW = {  # Huawei DRS «Kafka消息格式»'s MySQL row, typed: binary columns are JSON lists of byte values
    "c1": "cf3f70a7-7565-44b0-ae3c-83bec549ea8e:104",
    "c10": "华为云huaweicloud",
    "c11": b"",
    "c12": C12,
    "c13": C13,
    "c14": C14,
    "c2": b"",
    "c3": 103,
    "c4": dt.datetime(2021, 6, 25, 17, 51, 53),  # DATETIME: a wall clock
    "c5": at(2021, 6, 25, 9, 51, 53) + dt.timedelta(milliseconds=201),  # TIMESTAMP: epoch s 1624614713.201
    "c6": "!@#$%90weurtg103",
    "c7": 10357.0,
    "c8": 12510357.0,  # 1.2510357E7
    "c9": "9874510357",  # DECIMAL without precision: kept as its exact text
    "id": 104,
}
DRS_COMMON = {"database": "test01", "primary_key": ["id"], "seq": [27677, 1624614713000]}
DRS_TIME = at(2021, 6, 25, 9, 51, 53)


@pytest.mark.parametrize(
    ("dialect", "suffix", "timezone"),
    [("drs-json", "", "UTC"), ("drs-json-c", "-as-json-c", "Asia/Shanghai")],
    ids=["json", "json-c"],
)
def test_drs_seed_init_and_update(dialect, suffix, timezone):
    """JSON and JSON-C carry the same row; JSON-C writes the TIMESTAMP as text in the source's zone
    (2021-06-25 17:51:53.201 in Asia/Shanghai): the same instant. The UPDATE's table name keeps the
    seed's trailing space; its old row differs in id (103) and c13."""
    folder = dialect
    check(
        dialect,
        f"{folder}/seed003-mysql-init{suffix}.json",
        [
            {"op": "snapshot", **DRS_COMMON, "table": "test", "after": DRS_ROW, "event_time": DRS_TIME}
            | {"position": "mysql-bin.000065:800;2bf665dc-f8e2-11eb-bcfd-6c4b90b9d8b3:1-251167"}  # eventId
        ],
        timezone,
    )
    old = {**DRS_ROW, "id": 103, "c13": "asfiajhfiaf939-0239"}
    check(
        dialect,
        f"{folder}/seed003-mysql-update{suffix}.json",
        [
            _ordered(
                {"op": "update", **DRS_COMMON, "table": "test ", "before": old, "after": DRS_ROW}
                | {"event_time": DRS_TIME, "position": "id=27677 es=1624614713000"}
            )
        ],
        timezone,
    )


def test_drs_seed_gaussdb_update_without_a_key_leaves_the_key_to_the_engine():
    """``pkNames: null``: an event without key columns, keyed by the engine (tables.keys) or dead. Typed by
    ``columnType``: bytea hex -> bytes, bare ``bit`` is bit(1) -> boolean, ``timestamp without time zone``
    a wall clock, ranges and json as text; the DRS sqlType codes are not java.sql.Types and are ignored."""
    row = {
        "bit_column": True,
        "bytea_column": b"bytea_data",
        "char_column": "g",
        "int4range_column": "[11,20)",
        "jsonb_column": '{"key1": "value1", "key2": "value2"}',
        "smallint_column": 12,
        "tstzrange_column": '("2010-01-01 14:30:00+08","2010-01-01 15:30:00+08")',
    }
    check(
        "drs-json",
        "drs-json/seed003-gaussdb-update.json",
        [
            {
                "op": "update",
                "database": "database01",
                "schema": "schema01",
                "table": "table01",
                "primary_key": [],
                "before": {
                    **row,
                    "boolean_column": True,
                    "timestamp_column": dt.datetime(2014, 7, 2, 6, 14, 0, 742000),
                },
                "after": {
                    **row,
                    "boolean_column": False,
                    "timestamp_column": dt.datetime(2021, 12, 16, 12, 31, 49, 344365),
                },
                "seq": [332, 1639626187000],
                "event_time": at(2021, 12, 16, 3, 43, 7),
                "position": "id=332 es=1639626187000",
            }
        ],
    )


OID = "64650cf67dc36a464e76e583"


def test_drs_mongo_seed_operations():
    """Huawei DRS «Kafka消息格式»'s MongoDB messages: ``_id`` is the key (the ObjectId's hex), the document is
    extended JSON;
    an update's $set / $unset spec travels in meta; the position is clusterTime (seconds, increment) then
    the DRS id; ``es`` (ms) is the event time."""

    def one(fixture: str) -> dict[str, Any]:
        [event] = typed_events("drs-mongo", f"drs-mongo/{fixture}", meta=True)
        return event

    common = {"database": "ljx", "table": "ljx", "primary_key": ["_id"]}
    insert = one("seed003-insert.json")
    document = json.loads(insert["after"].pop("document"))
    assert document == {"_id": {"$oid": OID}, "c1": "baz", "tags": ["mongodb", "database", "NoSQL"]}
    assert same(
        insert,
        {"dialect": "drs-mongo", "op": "insert", **common, "after": {"_id": OID}, "seq": [1684344064, 1, 256]}
        | {"event_time": at(2023, 5, 17, 9, 18, 31) + dt.timedelta(milliseconds=439)}
        | {"position": "1684344064:1", "meta": {"ts": "1684315111576", "mongo_doc": "insert"}},
    )
    replace = one("seed003-replace.json")
    assert json.loads(replace["after"].pop("document")) == {"_id": {"$oid": OID}, "c1": "sss"}
    assert (replace["op"], replace["after"], replace["seq"]) == ("update", {"_id": OID}, [1684344904, 9, 340])
    assert (replace["position"], replace["meta"]) == (
        "1684344904:9",
        {"ts": "1684315951961", "mongo_doc": "replace"},
    )
    assert replace["event_time"] == at(2023, 5, 17, 9, 32, 31) + dt.timedelta(milliseconds=831)
    for fixture, spec, seq, millis in [
        ("seed003-update-set.json", {"$set": {"c1": "aaa"}}, [1684345365, 1, 386], 1684316412008),
        (
            "seed003-update-unset-set.json",
            {"$unset": {"c1": True}, "$set": {"column1": "aaa"}},
            [1684345648, 1, 414],
            1684316692054,
        ),
    ]:
        update = one(fixture)
        assert (update["op"], update["after"], update["seq"]) == ("update", {"_id": OID}, seq)
        assert (update["position"], update["meta"]["mongo_doc"]) == (f"{seq[0]}:{seq[1]}", "patch")
        assert json.loads(update["meta"]["mongo_update"]) == spec
        assert update["event_time"] == dt.datetime.fromtimestamp(millis / 1000, UTC)
    remove = one("seed003-remove.json")
    assert (remove["op"], remove["before"], remove["seq"]) == ("delete", {"_id": OID}, [1684346209, 1, 471])
    assert (remove["position"], remove["meta"]) == (
        "1684346209:1",
        {"ts": "1684317252869", "mongo_doc": "delete"},
    )
    assert "after" not in remove
    assert remove["event_time"] == at(2023, 5, 17, 9, 54, 12) + dt.timedelta(milliseconds=747)


# ---- KafkaRiverCanal «Kafka消息 Specification»: go-mysql river canal
# ------------------------------------------------------------------------
def test_river_canal_seed_rows():
    """binlog "<pos>@<file>" orders by the file's number then pos; a TIMESTAMP's text is read in the source
    zone (UTC by default); an update's before image takes origin_val for the updated column."""
    common = {"database": "TestCanal", "table": "g_order_010", "primary_key": ["order_id"]}
    row = {"order_id": 126, "x_id": 123456, "phone": "13264494028"}
    check(
        "river-canal",
        "river-canal/seed000-insert.json",
        [
            {"op": "insert", **common, "after": {**row, "time": at(2015, 8, 10, 13, 8, 13)}}
            | {
                "seq": [70, 6816],
                "event_time": at(2015, 12, 16, 3, 4, 52),
                "position": "mysql-bin.000070:6816",
            }
        ],
    )
    check(
        "river-canal",
        "river-canal/seed000-update.json",
        [
            {"op": "update", **common}
            | {"before": {"order_id": 126, "x_id": 123456, "name": "小明"}}
            | {"after": {"order_id": 126, "x_id": 123456, "name": "小春"}}
            | {
                "seq": [70, 25521],
                "event_time": at(2015, 12, 16, 3, 25, 7),
                "position": "mysql-bin.000070:25521",
            }
        ],
    )
    check(
        "river-canal",
        "river-canal/seed000-delete.json",
        [
            {
                "op": "delete",
                **common,
                "before": row,
                "seq": [70, 58851],
                "event_time": at(2015, 12, 16, 3, 37, 14),
                "position": "mysql-bin.000070:58851",
            }
        ],
    )


def test_every_seed_change_example_is_checked_here():
    """A seed DML example added under tests/fixtures must get its hand-written values here too."""
    covered = {f"canal-json/{f}" for f in CANAL_CASES} | {
        "canal-json/seed002-update-multirow.json",
        "canal-json/seed002-delete-multirow.json",
        "canal-json/seed004-canal-json-dml.json",
        *(f"ckafka/seed001-dml-{op}.json" for op in ("insert", "update", "delete")),
        "cloudcanal-json/seed004-dml.json",
        "debezium/seed004-dml-insert.json",
        "drs-json/seed003-mysql-init.json",
        "drs-json/seed003-mysql-update.json",
        "drs-json/seed003-gaussdb-update.json",
        "drs-json-c/seed003-mysql-init-as-json-c.json",
        "drs-json-c/seed003-mysql-update-as-json-c.json",
        *(
            f"drs-mongo/seed003-{kind}.json"
            for kind in ("insert", "remove", "replace", "update-set", "update-unset-set")
        ),
        *(f"river-canal/seed000-{kind}.json" for kind in ("insert", "update", "delete")),
    }
    changes = {
        f"{p.parent.name}/{p.name}"
        for p in FIXTURES.glob("*/seed00*.json")
        if not p.name.endswith(".expected.json") and not _ddl_only(p)
    }
    assert changes == covered


def _ddl_only(path) -> bool:  # type: ignore[no-untyped-def]
    """Seed examples of schema changes (checked by tests/test_ddl.py): no row values. By name: each seed
    fixture names what it shows."""
    return any(word in path.stem for word in ("ddl", "alter", "create", "rename", "cindex", "erase"))
