"""The published example messages outside the vendors' own format documents — Debezium's documentation and
tutorial, Apache Flink's docs and its test data captured from Debezium and canal, Tencent Cloud's CKafka
documents — every field of each change event written here by hand from the message and the producer's
documented rules, not read from the ``.expected.json`` snapshots (the code's own output).

canal (FlatMessage, as Flink's canal-json test data holds it): one event per row of ``data``; an update's
before image is the row overlaid with ``old`` (the changed columns' previous values); ``mysqlType`` types
the columns (INTEGER -> int, VARCHAR -> str, FLOAT -> a double), a column it does not name stays text;
``es`` then ``id`` order the events, ``es`` (ms) times them.

Tencent CKafka: format one (upper-case keys; TIME read in source.timezone, UTC here) and Tencent's canal
format (values as JSON numbers, written as text; deletes in ``old``; no key; ``es`` in seconds in DDL, 0 in
the insert example, then ``ts``).

Debezium (the connector documentation, "Data change events"): ``op`` c/u/d/r/t/m; the position is the
MySQL binlog file's number, ``pos`` and ``row``, or PostgreSQL's ``lsn``; ``source.ts_ms`` is when the change
was made in the database (0 in a MySQL snapshot of Debezium 1.x: then the event's own ``ts_ms``). A message
with a schema types its columns (int32 -> int, string -> varchar, float64 -> double); without one the values
stay the text the message writes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.dialects.golden import FIXTURES
from tests.dialects.test_seed_values import check, typed_events

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ms(epoch_ms: int) -> dt.datetime:
    """An epoch in milliseconds as an instant."""
    return EPOCH + dt.timedelta(milliseconds=epoch_ms)


# ---- Debezium's documentation (MySQL / MariaDB connector, PostgreSQL connector, tutorial) ------------
ANNE = {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
ANNE_TEXT = {**ANNE, "id": "1004"}
MARIE_TEXT = {**ANNE_TEXT, "first_name": "Anne Marie"}
DOCS_MYSQL = {"database": "inventory", "table": "customers", "primary_key": []}
DOCS_PG = {"database": "postgres", "schema": "public", "table": "customers", "primary_key": []}
PG_TIME = ms(1559033904863)  # source.ts_ms of every PostgreSQL example

# ---- Apache Flink 1.11.2's test data (Debezium 1.1 MySQL, 1.2 PostgreSQL) and docs ------------------------
FLINK_MYSQL = {"database": "inventory", "table": "products", "primary_key": []}
FLINK_PG = {"database": "postgres", "schema": "inventory", "table": "products", "primary_key": []}
SCOOTER = {"id": "101", "name": "scooter", "description": "Small 2-wheel scooter"}
BIG_SCOOTER = {"id": "111", "name": "scooter", "description": "Big 2-wheel scooter "}  # trailing blank kept
HAMMER_16 = {"id": "106", "name": "hammer", "description": "16oz carpenter's hammer"}
HAMMER_18 = {**HAMMER_16, "description": "18oz carpenter hammer"}
DOCS_SCOOTER = {"id": "111", "name": "scooter", "description": "Big 2-wheel scooter"}


def typed(row: dict[str, str], **values: Any) -> dict[str, Any]:
    """A text row with the schema's types: id int32 -> int, the given values (weight float64 -> float)."""
    return {**row, "id": int(row["id"]), **values}


MYSQL_SNAPSHOT_TIME = ms(1589355606100)  # source.ts_ms 0 in Debezium 1.1's snapshot: the event's ts_ms
DEBEZIUM: dict[str, list[dict[str, Any]]] = {
    # MySQL connector documentation: create (with its schema), update, delete, truncate
    "vector-create-schema-payload__debezium-docs-mysql.json": [
        {"op": "insert", **DOCS_MYSQL, "after": ANNE, "seq": [3, 154, 0]}
        | {"event_time": ms(1465491411815), "position": "{context}-bin.000003:154"}
    ],
    "vector-update__debezium-docs-mysql.json": [
        {"op": "update", **DOCS_MYSQL, "before": ANNE_TEXT, "after": MARIE_TEXT, "seq": [3, 484, 0]}
        | {"event_time": ms(1465581029100), "position": "{context}-bin.000003:484"}
    ],
    "vector-delete__debezium-docs-mysql.json": [
        {"op": "delete", **DOCS_MYSQL, "before": MARIE_TEXT, "seq": [3, 805, 0]}
        | {"event_time": ms(1465581902300), "position": "{context}-bin.000003:805"}
    ],
    "vector-truncate__debezium-docs-mysql.json": [
        {"op": "truncate", **DOCS_MYSQL, "seq": [3, 484, 0]}
        | {"event_time": ms(1465581029100), "position": "{context}-bin.000003:484"}
    ],
    # the incremental snapshot's read event (its elided source restored: tests/fixtures/debezium/_NOTES.json)
    "vector-incremental-snapshot-read__debezium-docs.json": [
        {"op": "snapshot", "database": "schema1", "table": "products", "primary_key": []}
        | {"after": {"pk": "1", "value": "New data"}, "seq": [3, 154, 0]}
        | {"event_time": ms(1620393591000), "position": "mysql-bin.000003:154"}
    ],
    # the tutorial's snapshot read: no source.ts_ms (ts_sec 0), so the event's ts_ms
    "vector-snapshot-read-schema-payload__debezium-tutorial-mysql.json": [
        {"op": "snapshot", **DOCS_MYSQL, "after": ANNE, "seq": [3, 154, 0]}
        | {"event_time": ms(1486500577691), "position": "mysql-bin.000003:154"}
    ],
    # PostgreSQL connector documentation
    "vector-create-schema-payload__debezium-docs-postgresql.json": [
        {"op": "insert", **DOCS_PG, "after": {**ANNE, "id": 1}, "seq": [24023128, 0, 0]}
        | {"event_time": PG_TIME, "position": "lsn:24023128"}
    ],
    "vector-update__debezium-docs-postgresql.json": [  # REPLICA IDENTITY DEFAULT: before holds the key only
        {"op": "update", **DOCS_PG, "before": {"id": "1"}, "after": {**MARIE_TEXT, "id": "1"}}
        | {"seq": [24023128, 0, 0], "event_time": PG_TIME, "position": "lsn:24023128"}
    ],
    "vector-delete__debezium-docs-postgresql.json": [
        {"op": "delete", **DOCS_PG, "before": {"id": "1"}, "seq": [46523128, 0, 0]}
        | {"event_time": PG_TIME, "position": "lsn:46523128"}
    ],
    "vector-truncate__debezium-docs-postgresql.json": [
        {"op": "truncate", **DOCS_PG, "seq": [46523128, 0, 0], "event_time": PG_TIME}
        | {"position": "lsn:46523128"}
    ],
    # logical decoding messages (op m) change no table: filtered, counted
    **{
        f"vector-message__debezium-docs-postgresql-{kind}.json": [
            {"op": "filtered", "database": "postgres", "primary_key": [], "seq": [46523128, 0, 0]}
            | {"event_time": PG_TIME, "position": "lsn:46523128"}
        ]
        for kind in ("transactional", "nontransactional")
    },
    # Flink's Debezium 1.1 MySQL stream, without and with the schema
    "vector-create-payload-only__flink-testdata-mysql.json": [
        {"op": "insert", **FLINK_MYSQL, "after": {**SCOOTER, "weight": "3.140000104904175"}}
        | {"seq": [3, 154, 0], "event_time": MYSQL_SNAPSHOT_TIME, "position": "mysql-bin.000003:154"}
    ],
    "vector-create-schema-payload__flink-testdata-mysql.json": [
        {"op": "insert", **FLINK_MYSQL, "after": typed(SCOOTER, weight=3.140000104904175)}
        | {"seq": [3, 154, 0], "event_time": MYSQL_SNAPSHOT_TIME, "position": "mysql-bin.000003:154"}
    ],
    "vector-update-payload-only__flink-testdata-mysql.json": [
        {"op": "update", **FLINK_MYSQL}
        | {"before": {**HAMMER_16, "weight": "1"}, "after": {**HAMMER_18, "weight": "1"}}
        | {"seq": [3, 362, 0], "event_time": ms(1589361987000), "position": "mysql-bin.000003:362"}
    ],
    "vector-update-schema-payload__flink-testdata-mysql.json": [
        {"op": "update", **FLINK_MYSQL}
        | {"before": typed(HAMMER_16, weight=1.0), "after": typed(HAMMER_18, weight=1.0)}
        | {"seq": [3, 362, 0], "event_time": ms(1589361987000), "position": "mysql-bin.000003:362"}
    ],
    "vector-delete-payload-only__flink-testdata-mysql.json": [
        {"op": "delete", **FLINK_MYSQL, "before": {**BIG_SCOOTER, "weight": "5.170000076293945"}}
        | {"seq": [3, 2443, 0], "event_time": ms(1589362344000), "position": "mysql-bin.000003:2443"}
    ],
    "vector-delete-schema-payload__flink-testdata-mysql.json": [
        {"op": "delete", **FLINK_MYSQL, "before": typed(BIG_SCOOTER, weight=5.170000076293945)}
        | {"seq": [3, 2443, 0], "event_time": ms(1589362344000), "position": "mysql-bin.000003:2443"}
    ],
    # Flink's docs: the same update event (source restored from the test data; an empty schema types nothing)
    **{
        f"vector-update-{shape}__flink-docs.json": [
            {"op": "update", **FLINK_MYSQL}
            | {"before": {**DOCS_SCOOTER, "weight": "5.18"}, "after": {**DOCS_SCOOTER, "weight": "5.15"}}
            | {"seq": [3, 2090, 0], "event_time": ms(1589362330000), "position": "mysql-bin.000003:2090"}
        ]
        for shape in ("payload-only", "schema-include")
    },
    # Flink's Debezium 1.2 PostgreSQL stream
    "vector-create-payload-only__flink-testdata-postgres.json": [
        {"op": "insert", **FLINK_PG}
        | {
            "after": {
                "id": "110",
                "name": "jacket",
                "description": "water resistent white wind breaker",
                "weight": "0.2",
            }
        }
        | {"seq": [34132560, 0, 0], "event_time": ms(1596010946488), "position": "lsn:34132560"}
    ],
    "vector-snapshot-read-payload-only__flink-testdata-postgres.json": [
        {"op": "snapshot", **FLINK_PG, "after": {**SCOOTER, "weight": "3.14"}}
        | {"seq": [34078720, 0, 0], "event_time": ms(1596001099434), "position": "lsn:34078720"}
    ],
    "vector-snapshot-read-schema-payload__flink-testdata-postgres.json": [
        {"op": "snapshot", **FLINK_PG, "after": typed(SCOOTER, weight=3.14)}
        | {"seq": [34078720, 0, 0], "event_time": ms(1596001099434), "position": "lsn:34078720"}
    ],
    "vector-update-payload-only__flink-testdata-postgres.json": [
        {"op": "update", **FLINK_PG}
        | {"before": {**HAMMER_16, "weight": "1.0"}, "after": {**HAMMER_18, "weight": "1.0"}}
        | {"seq": [34131104, 0, 0], "event_time": ms(1596010889629), "position": "lsn:34131104"}
    ],
    # REPLICA IDENTITY DEFAULT on a table without a key: no before image, the after image is the row
    "vector-update-replica-identity-default-before-null__flink-testdata-postgres.json": [
        {"op": "update", **FLINK_PG, "after": {**HAMMER_18, "weight": "1.0"}}
        | {"seq": [34131104, 0, 0], "event_time": ms(1596010889629), "position": "lsn:34131104"}
    ],
    "vector-delete-payload-only__flink-testdata-postgres.json": [  # REPLICA IDENTITY FULL: the whole row
        {"op": "delete", **FLINK_PG, "before": {**BIG_SCOOTER, "weight": "5.17"}}
        | {"seq": [34133800, 0, 0], "event_time": ms(1596010988168), "position": "lsn:34133800"}
    ],
}
# Records that are dead letters: what names the record, and the cause
DEBEZIUM_ERRORS: dict[str, tuple[dict[str, str], str]] = {
    # a topic's key record, not its value (the tutorial's key of customer 1004)
    "vector-snapshot-read-key__debezium-tutorial-mysql.json": ({}, "a Debezium message key"),
    # REPLICA IDENTITY DEFAULT without a key: a delete with neither image cannot name its row
    "vector-delete-replica-identity-default__flink-testdata-postgres.json": (
        {"database": "postgres", "schema": "inventory", "table": "products"},
        "delete without a 'before' image",
    ),
}


@pytest.mark.parametrize("fixture", sorted(DEBEZIUM))
def test_debezium_examples(fixture):
    check("debezium", f"debezium/{fixture}", DEBEZIUM[fixture])


@pytest.mark.parametrize("fixture", sorted(DEBEZIUM_ERRORS))
def test_debezium_examples_that_are_dead_letters(fixture):
    names, cause = DEBEZIUM_ERRORS[fixture]
    [event] = typed_events("debezium", f"debezium/{fixture}")
    error = event.pop("error")
    assert error.startswith(cause), error
    assert event == {"dialect": "debezium", **names}


def test_every_debezium_vector_is_checked_here():
    """A published Debezium example added under tests/fixtures/debezium gets its hand-written values here."""
    vectors = {p.name for p in (FIXTURES / "debezium").glob("vector-*.json") if ".expected." not in p.name}
    assert vectors == set(DEBEZIUM) | set(DEBEZIUM_ERRORS)


# ---- canal: Apache Flink 1.11.2's canal-json test data and docs -----------------------------------------
PRODUCTS = {"database": "inventory", "table": "products2", "primary_key": ["id"]}
CATALOGUE = [  # the nine products of Flink's canal-data.txt, (id, name, description, weight)
    (101, "scooter", "Small 2-wheel scooter", 3.14),
    (102, "car battery", "12V car battery", 8.1),
    (103, "12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.8),
    (104, "hammer", "12oz carpenter's hammer", 0.75),
    (105, "hammer", "14oz carpenter's hammer", 0.875),
    (106, "hammer", "16oz carpenter's hammer", 1.0),
    (107, "rocks", "box of assorted rocks", 5.3),
    (108, "jacket", "water resistent black wind breaker", 0.1),
    (109, "spare tire", "24 inch spare tire", 22.2),
]


def product(i: int, name: str, description: str | None, weight: float, **extra: str) -> dict[str, Any]:
    return {"id": i, "name": name, "description": description, "weight": weight, **extra}


def canal_at(es: int, id_: int) -> dict[str, Any]:
    return {"seq": [es, id_], "event_time": ms(es), "position": f"es={es} id={id_}"}


INIT_ROWS = [product(*row) for row in CATALOGUE]
INIT_ROWS[0]["other"] = "val1"  # a column mysqlType does not name: kept, as text
INIT_ROWS[5]["description"] = None  # "description": null in the INIT row of 106
# One UPDATE statement over two rows: one message, its data[] and old[] parallel arrays.
MULTIROW_UPDATE = [
    {"op": "update", **PRODUCTS}
    | {"before": product(i, name, description, old), "after": product(i, name, description, 5.17)}
    | canal_at(1589373753000, 11)
    for i, name, description, old in [
        (101, "scooter", "Small 2-wheel scooter", 3.14),
        (102, "car battery", "12V car battery", 8.1),
    ]
]
CANAL: dict[str, list[dict[str, Any]]] = {
    "vector-insert-multirow__flink-testdata.json": [
        {"op": "insert", **PRODUCTS, "after": product(*row)} | canal_at(1589373515000, 3) for row in CATALOGUE
    ],
    "vector-init-snapshot-multirow-with-null__flink-testdata.json": [
        {"op": "snapshot", **PRODUCTS, "after": row} | canal_at(1589373515000, 3) for row in INIT_ROWS
    ],
    "vector-update__flink-testdata.json": [
        {"op": "update", **PRODUCTS}
        | {"before": product(106, "hammer", "16oz carpenter's hammer", 1.0)}
        | {"after": product(106, "hammer", "18oz carpenter hammer", 1.0)}
        | canal_at(1589373546000, 4)
    ],
    "vector-update-old-with-null__flink-testdata.json": [  # old: description was NULL, other was val2
        {"op": "update", **PRODUCTS}
        | {"before": product(106, "hammer", None, 1.0, other="val2")}
        | {"after": product(106, "hammer", "18oz carpenter hammer", 1.0, other="val0")}
        | canal_at(1589373546000, 4)
    ],
    "vector-update-multirow__flink-testdata.json": MULTIROW_UPDATE,  # data[] and old[] are parallel arrays
    "vector-delete__flink-testdata.json": [  # a DELETE's row is in data
        {"op": "delete", **PRODUCTS, "before": product(111, "scooter", "Big 2-wheel scooter ", 5.17)}
        | canal_at(1589373563000, 10)
    ],
    "vector-update__flink-docs.json": [
        {"op": "update", **PRODUCTS, "table": "products"}
        | {"before": product(111, "scooter", "Big 2-wheel scooter", 5.15)}
        | {"after": product(111, "scooter", "Big 2-wheel scooter", 5.18)}
        | canal_at(1589373560000, 9)
    ],
    # a DDL event: its table and time here; what the statement does is tests/test_ddl.py's
    "vector-ddl-create-table__flink-testdata.json": [
        {"op": "ddl", "database": "inventory", "table": "user02", "primary_key": []}
        | canal_at(1589373566000, 13)
    ],
}


@pytest.mark.parametrize("fixture", sorted(CANAL))
def test_canal_examples(fixture):
    check("canal-json", f"canal-json/{fixture}", CANAL[fixture])


# Flink's canal-data-with-init.txt (Flink 1.11.2): its snapshot (INIT) of the nine products, then the
# statements of canal-data.txt in binlog order, the CREATE TABLE of user02 among them: each event by the same
# rules as above, in the order the messages come (ordering by ``es``/``id`` is the fold's, not the decode's).
UPDATED_106 = product(106, "hammer", "18oz carpenter hammer", 1.0, other="val0")
JACKET_110 = product(110, "jacket", "water resistent white wind breaker", 0.2)
NEW_JACKET_110 = product(110, "jacket", "new water resistent white wind breaker", 0.5)
SCOOTER_111 = product(111, "scooter", "Big 2-wheel scooter ", 5.18)  # (the trailing blank is the data's)
CANAL_INIT_STREAM = [
    *({"op": "snapshot", **PRODUCTS, "after": row} | canal_at(1589373515000, 3) for row in INIT_ROWS),
    {"op": "update", **PRODUCTS, "before": product(106, "hammer", None, 1.0, other="val2")}
    | {"after": UPDATED_106}
    | canal_at(1589373546000, 4),
    {"op": "update", **PRODUCTS, "before": product(107, "rocks", "box of assorted rocks", 5.3)}
    | {"after": product(107, "rocks", "box of assorted rocks", 5.1)}
    | canal_at(1589373549000, 5),
    {"op": "insert", **PRODUCTS, "after": JACKET_110} | canal_at(1589373552000, 6),
    {"op": "insert", **PRODUCTS, "after": SCOOTER_111} | canal_at(1589373555000, 7),
    {"op": "update", **PRODUCTS, "before": JACKET_110, "after": NEW_JACKET_110} | canal_at(1589373558000, 8),
    {"op": "update", **PRODUCTS, "before": SCOOTER_111}
    | {"after": {**SCOOTER_111, "weight": 5.17}}
    | canal_at(1589373560000, 9),
    {"op": "delete", **PRODUCTS, "before": {**SCOOTER_111, "weight": 5.17}} | canal_at(1589373563000, 10),
    *MULTIROW_UPDATE,
    {"op": "ddl", "database": "inventory", "table": "user02", "primary_key": []}
    | canal_at(1589373566000, 13),
    *(
        {"op": "delete", **PRODUCTS, "before": row} | canal_at(1589374013000, 12)
        for row in (
            product(102, "car battery", "12V car battery", 5.17),
            product(
                103, "12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.8
            ),
        )
    ),
]


def test_flinks_canal_stream_with_its_snapshot():
    check("canal-json", "canal-json/flink-canal-data-with-init.jsonl", CANAL_INIT_STREAM)


# ---- Tencent Cloud CKafka: «MySQL 订阅消息官方格式说明» and «MySQL 订阅消息 Canal 格式说明»
CUSTOMERS = {"database": "inventory", "table": "customers", "primary_key": []}  # no key in either format


def ckafka_ddl(database: str, table: str | None, es_seconds: int) -> dict[str, Any]:
    named = {"database": database, **({"table": table} if table else {}), "primary_key": []}
    at = {"seq": [es_seconds * 1000, 0], "event_time": ms(es_seconds * 1000)}
    return {"op": "ddl", **named, **at, "position": f"es={es_seconds} id=0"}


CKAFKA: dict[str, list[dict[str, Any]]] = {
    "vector-tencent-ckafka-official-format1__insert.json": [
        {"op": "insert", **CUSTOMERS, "after": ANNE_TEXT, "seq": [3, 154]}
        | {"event_time": dt.datetime(1970, 1, 1, 8, tzinfo=dt.UTC), "position": "mysql-bin.000003:154"}
    ],
    "vector-tencent-ckafka-official-format1__update.json": [
        {"op": "update", **CUSTOMERS, "before": ANNE_TEXT, "after": MARIE_TEXT, "seq": [3, 484]}
        | {
            "event_time": dt.datetime(2016, 6, 11, 1, 50, 29, tzinfo=dt.UTC),
            "position": "mysql-bin.000003:484",
        }
    ],
    "vector-tencent-ckafka-official-format1__delete.json": [
        {"op": "delete", **CUSTOMERS, "before": MARIE_TEXT, "seq": [3, 805]}
        | {"event_time": dt.datetime(2016, 6, 11, 2, 5, 2, tzinfo=dt.UTC), "position": "mysql-bin.000003:805"}
    ],
    # Tencent's canal format: es 0 in the insert, so ts orders and times it; the position keeps es as written
    "vector-tencent-ckafka-canal-json__insert.json": [
        {"op": "insert", **CUSTOMERS, "after": ANNE_TEXT, "seq": [1465491411815, 0]}
        | {"event_time": ms(1465491411815), "position": "es=0 id=0"}
    ],
    "vector-tencent-ckafka-canal-json__update.json": [  # old is the whole previous row
        {"op": "update", **CUSTOMERS, "before": ANNE_TEXT, "after": MARIE_TEXT} | canal_at(1465581029100, 0)
    ],
    "vector-tencent-ckafka-canal-json__delete.json": [  # the deleted row is in old, data is null
        {"op": "delete", **CUSTOMERS, "before": MARIE_TEXT} | canal_at(1465581902300, 0)
    ],
    "vector-tencent-ckafka-canal-json__ddl-alter-table.json": [ckafka_ddl("test", "user", 1655782153)],
    "vector-tencent-ckafka-canal-json__ddl-create-database.json": [ckafka_ddl("dip_test", None, 1655812326)],
    "vector-tencent-ckafka-canal-json__ddl-create-table.json": [
        ckafka_ddl("dip_test", "customers", 1655812326)
    ],
    "vector-tencent-ckafka-canal-json__ddl-drop-database.json": [ckafka_ddl("dip_test", None, 1655812326)],
    "vector-tencent-ckafka-canal-json__ddl-drop-table.json": [
        ckafka_ddl("dip_test", "customers", 1655812326)
    ],
    # RENAME's es is in milliseconds (1656300979748): the document writes it so
    "vector-tencent-ckafka-canal-json__ddl-rename-table.json": [
        {"op": "ddl", "database": "testDB", "table": "t_test", "primary_key": []} | canal_at(1656300979748, 0)
    ],
}


@pytest.mark.parametrize("fixture", sorted(CKAFKA))
def test_ckafka_examples(fixture):
    check("ckafka", f"ckafka/{fixture}", CKAFKA[fixture])


@pytest.mark.parametrize(("folder", "cases"), [("canal-json", CANAL), ("ckafka", CKAFKA)])
def test_every_published_example_is_checked_here(folder, cases):
    vectors = {p.name for p in (FIXTURES / folder).glob("vector-*.json") if ".expected." not in p.name}
    assert vectors == set(cases)


# ---- Apache Flink's Debezium streams: the changelog Flink's own test states for them ----------------------
# apache/flink, flink-formats/flink-json/src/test/java/org/apache/flink/formats/json/debezium/
# DebeziumJsonSerDeSchemaTest.java (testSerializationDeserialization): the statements in its comment on table
# `product` give this changelog, for the MySQL and the PostgreSQL captures, schema included or not; weight is
# a FLOAT there (compared here as float32: the MySQL capture writes the float32's double, 3.140000104904175).
FLINK_CHANGELOG = [
    ("+I", 101, "scooter", "Small 2-wheel scooter", 3.14),
    ("+I", 102, "car battery", "12V car battery", 8.1),
    ("+I", 103, "12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.8),
    ("+I", 104, "hammer", "12oz carpenter's hammer", 0.75),
    ("+I", 105, "hammer", "14oz carpenter's hammer", 0.875),
    ("+I", 106, "hammer", "16oz carpenter's hammer", 1.0),
    ("+I", 107, "rocks", "box of assorted rocks", 5.3),
    ("+I", 108, "jacket", "water resistent black wind breaker", 0.1),
    ("+I", 109, "spare tire", "24 inch spare tire", 22.2),
    ("-U", 106, "hammer", "16oz carpenter's hammer", 1.0),
    ("+U", 106, "hammer", "18oz carpenter hammer", 1.0),
    ("-U", 107, "rocks", "box of assorted rocks", 5.3),
    ("+U", 107, "rocks", "box of assorted rocks", 5.1),
    ("+I", 110, "jacket", "water resistent white wind breaker", 0.2),
    ("+I", 111, "scooter", "Big 2-wheel scooter ", 5.18),
    ("-U", 110, "jacket", "water resistent white wind breaker", 0.2),
    ("+U", 110, "jacket", "new water resistent white wind breaker", 0.5),
    ("-U", 111, "scooter", "Big 2-wheel scooter ", 5.18),
    ("+U", 111, "scooter", "Big 2-wheel scooter ", 5.17),
    ("-D", 111, "scooter", "Big 2-wheel scooter ", 5.17),
]


def float32(value: Any) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", float(value)))[0]


def changelog(fixture: str) -> tuple[list[tuple[str, int, str, str, float]], list[str]]:
    """The stream's events as Flink's row kinds (insert and snapshot rows +I, an update -U then +U, a
    delete -D), and its dead letters' errors."""
    kinds = {"insert": ["+I"], "snapshot": ["+I"], "update": ["-U", "+U"], "delete": ["-D"]}
    rows, errors = [], []
    for event in typed_events("debezium", f"debezium/{fixture}"):
        if "error" in event:
            errors.append(event["error"])
            continue
        assert (event["database"], event["table"]) in {("inventory", "products"), ("postgres", "products")}
        for kind in kinds[event["op"]]:
            image = event.get("before" if kind in ("-U", "-D") else "after")
            if image is None:
                continue  # no before image (REPLICA IDENTITY DEFAULT on a table without a key)
            row = (int(image["id"]), image["name"], image["description"], float32(image["weight"]))
            rows.append((kind, *row))
    return rows, errors


@pytest.mark.parametrize(
    "fixture",
    [
        "flink-debezium-data-schema-exclude.jsonl",
        "flink-debezium-data-schema-include.jsonl",
        "flink-debezium-postgres-data-schema-exclude.jsonl",
        "flink-debezium-postgres-data-schema-include.jsonl",
    ],
)
def test_flink_debezium_streams_give_flinks_changelog(fixture):
    rows, errors = changelog(fixture)
    assert errors == []
    assert rows == [(kind, i, name, text, float32(weight)) for kind, i, name, text, weight in FLINK_CHANGELOG]


def test_flink_debezium_stream_without_replica_identity_full():
    """The same statements captured from a table with REPLICA IDENTITY DEFAULT and no key: updates carry no
    before image (applied by their after image) and the delete carries no row at all, a dead letter that
    says what to change (Flink's test expects its deserializer to fail there, asking for REPLICA IDENTITY
    FULL)."""
    rows, errors = changelog("flink-debezium-postgres-data-replica-identity.jsonl")
    expected = [(k, i, n, t, float32(w)) for k, i, n, t, w in FLINK_CHANGELOG if k not in ("-U", "-D")]
    assert rows == expected
    assert len(errors) == 1 and "REPLICA IDENTITY FULL" in errors[0], errors
