"""The vendors' DDL examples (seed and documentation fixtures), each event written here by hand from the
message: op, database, table, DDL kind, key, order, time and position. What the statement changes is
tests/test_ddl.py's (tests/fixtures/ddl/events.json).

canal «Data Type» / Tencent CKafka «MySQL 订阅消息官方格式说明» (canal-shaped): ``type`` is the DDL kind
(QUERY for a statement without a table), ``es`` then ``id`` order an event, ``es`` times it (CKafka writes
seconds where canal writes ms); CloudCanal «MQ 消息同步格式说明»: ``execTs`` then ``bid``, the key from
``tableChanges``; Debezium (its MySQL connector documentation, schema change topic): ``source.file``'s
number, ``pos``, ``row`` order it, ``source.ts_ms`` times it, the key from ``tableChanges``; Huawei DRS
«Kafka消息格式»: ``id`` then ``es``, INIT_DDL the full sync's table structure.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from replicator.commands.inspect import decode_path, event_records
from tests.dialects.golden import FIXTURES
from tests.dialects.test_seed_values import at, same, typed_events


def canal(es_ms: int, id_: int, es_text: int | None = None) -> dict[str, Any]:
    time = at(1970, 1, 1) + dt.timedelta(milliseconds=es_ms)
    position = f"es={es_text if es_text is not None else es_ms} id={id_}"
    return {"seq": [es_ms, id_], "event_time": time, "position": position}


def ckafka(es_s: int) -> dict[str, Any]:  # es in seconds, id 0
    return canal(es_s * 1000, 0, es_s)


def ddl(database: str, table: str | None, kind: str, key: tuple[str, ...] = ()) -> dict[str, Any]:
    return (
        {"op": "ddl", "database": database}
        | ({"table": table} if table else {})
        | {
            "primary_key": list(key),
            "ddl_kind": kind,
        }
    )


EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "canal-json/seed002-alter-add-column.json": (
        "canal-json",
        ddl("test", "asd", "ALTER") | canal(1554045155000, 11),
    ),
    "canal-json/seed002-alter-drop-column.json": (
        "canal-json",
        ddl("test", "asd", "ALTER") | canal(1554045230000, 12),
    ),
    "canal-json/seed002-cindex.json": ("canal-json", ddl("test", "asd", "CINDEX") | canal(1554041367000, 5)),
    "canal-json/seed002-create-table.json": (
        "canal-json",
        ddl("test", "asd_copy", "CREATE") | canal(1554044748000, 6),
    ),
    "canal-json/seed002-erase.json": ("canal-json", ddl("test", "asd", "ERASE") | canal(1554045030000, 9)),
    "canal-json/seed002-rename.json": ("canal-json", ddl("test", "asd", "RENAME") | canal(1554045087000, 10)),
    "canal-json/seed004-canal-json-ddl-alter.json": (
        "canal-json",
        ddl("db_test", "table_test", "ALTER") | canal(1669790951000, 0),
    ),
    "ckafka/seed001-ddl-alter-table.json": ("ckafka", ddl("test", "user", "ALTER") | ckafka(1655782153)),
    "ckafka/seed001-ddl-create-database.json": (
        "ckafka",
        ddl("dip_test", None, "QUERY") | ckafka(1655812326),
    ),
    "ckafka/seed001-ddl-create-table.json": (
        "ckafka",
        ddl("dip_test", "customers", "CREATE") | ckafka(1655812326),
    ),
    "ckafka/seed001-ddl-drop-database.json": ("ckafka", ddl("dip_test", None, "QUERY") | ckafka(1655812326)),
    "ckafka/seed001-ddl-drop-table.json": (
        "ckafka",
        ddl("dip_test", "customers", "ERASE") | ckafka(1655812326),
    ),
    # the RENAME example writes es in milliseconds
    "ckafka/seed001-ddl-rename-table.json": (
        "ckafka",
        ddl("testDB", "t_test", "RENAME") | canal(1656300979748, 0),
    ),
    "cloudcanal-json/seed004-ddl-alter.json": (
        "cloudcanal-json",
        ddl("db_test", "table_test", "ALTER", ("col_pk",))
        | {"seq": [1669789188000, 0], "event_time": at(2022, 11, 30, 6, 19, 48)}
        | {"position": "execTs=1669789188000 bid=0"},
    ),
    "debezium/seed004-ddl-alter.json": (
        "debezium",
        ddl("db_test", "table_test", "ALTER", ("col_pk",))
        | {"seq": [3, 154, 0], "event_time": at(2022, 11, 30, 8, 17, 41) + dt.timedelta(milliseconds=933)}
        | {"position": "mysql-bin.000003:154"},
    ),
    "debezium/docs-mysql-schema-change-alter.json": (
        "debezium",
        ddl("inventory", "customers", "ALTER", ("id",))
        | {"seq": [3, 570, 0], "event_time": at(2022, 5, 2, 23, 55, 50) + dt.timedelta(milliseconds=218)}
        | {"position": "{context}-bin.000003:570"},
    ),
    "drs-json/seed003-mysql-init-ddl.json": (
        "drs-json",
        ddl("test01", "test", "INIT_DDL")
        | {
            "seq": [0, 1733998006282],
            "event_time": at(2024, 12, 12, 10, 6, 46) + dt.timedelta(milliseconds=282),
        }
        | {"position": "id=0 es=1733998006282"},
    ),
}


@pytest.mark.parametrize("fixture", sorted(EXAMPLES))
def test_ddl_example(fixture):
    dialect, expected = EXAMPLES[fixture]
    expected = dict(expected)
    kind = expected.pop("ddl_kind")
    [event] = typed_events(dialect, fixture)
    assert same(event, {"dialect": dialect, **expected}), event
    [kinds] = event_records(decode_path(FIXTURES / fixture, dialect), ("ddl_kind",))
    assert kinds == {"ddl_kind": kind}
