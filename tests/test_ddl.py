"""DDL text and tableChanges -> schema-change objects (replicator.ddl), without Spark.

Golden cases: the DDL / TRUNCATE events of the vendors' examples (CKafka «MySQL 订阅消息官方格式说明», canal
«Data Type», Huawei DRS «Kafka消息格式» INIT_DDL, CloudCanal / canal-json / Debezium with their tableChanges,
and the published vectors), as ``tests/fixtures/ddl/events.json`` states them (each names the fixture it
came from), parsed into ``tests/fixtures/ddl/fixtures.expected.json``. ``REPLICATOR_REGOLD=1`` rewrites the
latter; review by hand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator import ddl
from replicator.apply.barriers import plan_barriers, rename_links
from replicator.types import column_type

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = FIXTURES / "ddl" / "fixtures.expected.json"
EVENTS = FIXTURES / "ddl" / "events.json"
# The seed examples that must be among the golden cases.
SEED_CASES = (
    "canal-json/seed002-create-table#0",
    "canal-json/seed002-alter-add-column#0",
    "canal-json/seed002-alter-drop-column#0",
    "canal-json/seed002-cindex#0",
    "canal-json/seed002-erase#0",
    "canal-json/seed002-rename#0",
    "ckafka/seed001-ddl-alter-table#0",
    "ckafka/seed001-ddl-create-database#0",
    "ckafka/seed001-ddl-create-table#0",
    "ckafka/seed001-ddl-drop-database#0",
    "ckafka/seed001-ddl-drop-table#0",
    "ckafka/seed001-ddl-rename-table#0",
    "drs-json/seed003-mysql-init-ddl#0",
    "cloudcanal-json/seed004-ddl-alter#0",
    "canal-json/seed004-canal-json-ddl-alter#0",
    "debezium/seed004-ddl-alter#0",
)


def fixture_events() -> dict[str, dict[str, Any]]:
    """The barrier events of the DDL golden cases, the test's own inputs (tests/fixtures/ddl/events.json):
    each the event a dialect decodes from the vendor example named in its ``from``, written down once."""
    cases = json.loads(EVENTS.read_text(encoding="utf-8"))
    return {case: {k: v for k, v in event.items() if k != "from"} for case, event in cases.items()}


def parsed(event: dict[str, Any]) -> list[dict[str, Any]] | dict[str, str]:
    try:
        return [c.model_dump(mode="json", exclude_none=True) for c in ddl.parse_event(event)]
    except ddl.DdlError as exc:
        return {"error": str(exc)}


def test_fixture_ddl_goldens():
    actual = {case: parsed(event) for case, event in fixture_events().items()}
    if os.environ.get("REPLICATOR_REGOLD") == "1":
        # Writes the file for review and fails: a run that rewrites its own expectation proves nothing.
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        pytest.fail(f"REPLICATOR_REGOLD=1: {GOLDEN} rewritten from the output; review it and rerun without")
    if not GOLDEN.exists():
        pytest.fail(f"no golden file {GOLDEN}: run with REPLICATOR_REGOLD=1 and review it")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert actual == expected
    assert not [case for case in SEED_CASES if case not in actual]
    assert not [case for case, result in actual.items() if isinstance(result, dict) and case in SEED_CASES]


def test_every_declared_type_maps_to_a_known_delta_type():
    for case, changes in json.loads(GOLDEN.read_text(encoding="utf-8")).items():
        if isinstance(changes, dict):
            continue
        for change in changes:
            if change["kind"] not in ("create_table", "declare_schema", "add_column"):
                continue
            columns = change.get("columns", []) + ([change["column"]] if "column" in change else [])
            for column in columns:
                assert column_type(column["type"]).known, (case, column)


def test_table_changes_give_the_declared_schema():
    event = fixture_events()["cloudcanal-json/seed004-ddl-alter#0"]
    changes = ddl.parse_event(event)
    assert changes[0] == ddl.AddColumn(
        table=ddl.TableRef(name="table_test"), column=ddl.Column(name="col2", type="varchar(22)")
    )
    assert changes[1] == ddl.DeclareSchema(
        columns=(
            ddl.Column(name="col1", type="varchar(22)"),
            ddl.Column(name="col2", type="varchar(22)"),
            ddl.Column(name="col_pk", type="varchar(22)", nullable=False),
        ),
        primary_key=("col_pk",),
    )
    # Debezium: typeName + length (CloudCanal «MQ 消息同步格式说明» has none; the Debezium docs example does)
    debezium = ddl.parse_event(fixture_events()["debezium/docs-mysql-schema-change-alter#0"])
    declared = next(c for c in debezium if isinstance(c, ddl.DeclareSchema))
    assert {c.name: c.type for c in declared.columns}["middle_name"] == "varchar(255)"
    assert declared.primary_key == ("id",)


def test_table_changes_alone_when_the_statement_cannot_be_read():
    structure = {
        "type": "CREATE",
        "table": {
            "primaryKeyColumnNames": ["id"],
            "columns": [
                {"name": "id", "typeName": "INT", "position": 1, "optional": False},
                {
                    "name": "price",
                    "typeName": "DECIMAL",
                    "length": 12,
                    "scale": 2,
                    "position": 2,
                    "optional": True,
                },
            ],
        },
    }
    changes = ddl.parse_event(
        {
            "op": "ddl",
            "ddl_kind": "CREATE",
            "ddl_sql": "CREATE TABLE t LIKE u",
            "table_changes": json.dumps([structure]),
        }
    )
    assert changes == [
        ddl.CreateTable(
            columns=(
                ddl.Column(name="id", type="int", nullable=False),
                ddl.Column(name="price", type="decimal(12,2)"),
            ),
            primary_key=("id",),
        )
    ]
    assert ddl.parse_event(
        {
            "op": "ddl",
            "ddl_kind": "ERASE",
            "ddl_sql": None,
            "table_changes": '{"type": "DROP", "table": null}',
        }
    ) == [ddl.DropTable()]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("RENAME TABLE a TO b", [ddl.RenameTable(old=ddl.TableRef(name="a"), new=ddl.TableRef(name="b"))]),
        (
            "rename table `db`.`a` to `db`.`b`, c TO d",
            [
                ddl.RenameTable(
                    old=ddl.TableRef(namespace="db", name="a"), new=ddl.TableRef(namespace="db", name="b")
                ),
                ddl.RenameTable(old=ddl.TableRef(name="c"), new=ddl.TableRef(name="d")),
            ],
        ),
        (
            "ALTER TABLE a RENAME TO b",
            [ddl.RenameTable(old=ddl.TableRef(name="a"), new=ddl.TableRef(name="b"))],
        ),
        (
            "ALTER TABLE t CHANGE COLUMN a b decimal(12,2)",
            [
                ddl.RenameColumn(table=ddl.TableRef(name="t"), old="a", new="b"),
                ddl.ChangeType(table=ddl.TableRef(name="t"), name="b", type="decimal(12,2)"),
            ],
        ),
        (
            "ALTER TABLE t MODIFY a bigint unsigned NOT NULL",
            [
                ddl.ChangeType(table=ddl.TableRef(name="t"), name="a", type="bigint unsigned"),
            ],
        ),
        (
            "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (a, b)",
            [
                ddl.DropPrimaryKey(table=ddl.TableRef(name="t")),
                ddl.AddPrimaryKey(table=ddl.TableRef(name="t"), columns=("a", "b")),
            ],
        ),
        (
            "ALTER TABLE t ADD COLUMN c int, DROP COLUMN d",
            [
                ddl.AddColumn(table=ddl.TableRef(name="t"), column=ddl.Column(name="c", type="int")),
                ddl.DropColumn(table=ddl.TableRef(name="t"), name="d"),
            ],
        ),
        ("ALTER TABLE t ENGINE=InnoDB", []),
        ("TRUNCATE TABLE t", [ddl.TruncateTable(table=ddl.TableRef(name="t"))]),
        ("DROP INDEX ix ON t", [ddl.DropIndex(table=ddl.TableRef(name="t"), name="ix")]),
    ],
)
def test_mysql_statements(sql, expected):
    assert ddl.parse_ddl(sql, "mysql") == expected


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "ALTER TABLE public.t ALTER COLUMN a TYPE numeric(12,2)",
            [
                ddl.ChangeType(
                    table=ddl.TableRef(namespace="public", name="t"), name="a", type="decimal(12,2)"
                ),
            ],
        ),
        ("ALTER TABLE t ALTER COLUMN a SET NOT NULL", []),
        (
            "ALTER TABLE public.t RENAME TO u",
            [
                ddl.RenameTable(old=ddl.TableRef(namespace="public", name="t"), new=ddl.TableRef(name="u")),
            ],
        ),
        (
            "CREATE TABLE t (id bigserial PRIMARY KEY, at timestamp(3), tz timestamptz, "
            "v character varying(9))",
            [
                ddl.CreateTable(
                    table=ddl.TableRef(name="t"),
                    primary_key=("id",),
                    columns=(
                        ddl.Column(name="id", type="bigserial", nullable=False),
                        ddl.Column(name="at", type="timestamp(3) without time zone"),
                        ddl.Column(name="tz", type="timestamp with time zone"),
                        ddl.Column(name="v", type="varchar(9)"),
                    ),
                ),
            ],
        ),
    ],
)
def test_postgres_statements(sql, expected):
    assert ddl.parse_ddl(sql, "postgres") == expected


def test_postgres_timestamps_keep_their_zone_meaning():
    create = ddl.parse_ddl("CREATE TABLE t (a timestamp, b timestamptz)", "postgres")[0]
    assert isinstance(create, ddl.CreateTable)
    a, b = (column_type(c.type).arrow for c in create.columns)
    assert a.tz is None and b.tz == "UTC"


def test_the_event_schema_picks_the_sql_dialect():
    event = {
        "op": "ddl",
        "ddl_kind": "ALTER",
        "database": "db",
        "schema": "public",
        "table": "t",
        "ddl_sql": "ALTER TABLE t ADD COLUMN at timestamp",
    }
    assert ddl.parse_event(event)[0].column.type == "timestamp without time zone"  # type: ignore[union-attr]
    assert ddl.parse_event({**event, "schema": None})[0].column.type == "timestamp"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t FROBNICATE",
        "GRANT ALL ON *.* TO x",
        "CREATE TABLE t2 LIKE t",
        "",
        "   ",
        "ALTER TABLE t ADD COLUMN (a int, b text), DROP c",
    ],
)
def test_unreadable_statements_raise(sql):
    with pytest.raises(ddl.DdlError):
        ddl.parse_event({"op": "ddl", "ddl_kind": "ALTER", "ddl_sql": sql})


def test_init_ddl_must_be_a_create():
    assert isinstance(
        ddl.parse_event(
            {"op": "ddl", "ddl_kind": "INIT_DDL", "ddl_sql": "CREATE TABLE t (id int primary key)"}
        )[0],
        ddl.CreateTable,
    )
    with pytest.raises(ddl.DdlError, match="INIT_DDL"):
        ddl.parse_event({"op": "ddl", "ddl_kind": "INIT_DDL", "ddl_sql": "ALTER TABLE t ADD COLUMN c int"})


def test_mongo_commands():
    assert ddl.parse_event({"op": "ddl", "ddl_kind": "QUERY", "ddl_sql": '{"drop": "ljx"}'}) == [
        ddl.DropTable(table=ddl.TableRef(name="ljx"))
    ]


def test_rename_links_and_barrier_plan():
    rename = {
        "database": "test",
        "schema": None,
        "table": "asd",
        "op": "ddl",
        "ddl_kind": "RENAME",
        "ddl_sql": "alter table `asd_copy` rename to `asd`",
        "seq": [2],
        "seq_text": "2",
    }
    alter = {
        "database": "test",
        "schema": None,
        "table": "asd",
        "op": "ddl",
        "ddl_kind": "ALTER",
        "ddl_sql": "ALTER TABLE asd ADD COLUMN c int",
        "seq": [3],
        "seq_text": "3",
    }
    old, new = ("test", None, "asd_copy"), ("test", None, "asd")
    assert rename_links(rename) == [(old, new)]
    by_table, links = plan_barriers([rename, alter])
    assert by_table[old] == [rename] and by_table[new] == [rename, alter]
    assert links == [(old, new, "2")]


_TYPES = st.sampled_from(
    [
        "int",
        "int(11)",
        "int(10) unsigned",
        "bigint",
        "bigint(20) unsigned",
        "tinyint(1)",
        "smallint",
        "mediumint",
        "varchar(255)",
        "char(3)",
        "text",
        "longtext",
        "datetime",
        "datetime(3)",
        "timestamp",
        "timestamp(6)",
        "date",
        "double",
        "float",
        "json",
        "blob",
        "varbinary(16)",
        "bit(1)",
        "bit(8)",
        "year",
        "time(3)",
    ]
)
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)


@given(name=_NAMES, source_type=_TYPES, precision=st.integers(1, 38), scale=st.integers(0, 38))
def test_added_column_keeps_a_type_that_maps_like_the_source_text(name, source_type, precision, scale):
    for text in (source_type, f"decimal({precision},{min(scale, precision)})"):
        change = ddl.parse_ddl(f"ALTER TABLE `t` ADD COLUMN `{name}` {text}", "mysql")[0]
        assert isinstance(change, ddl.AddColumn) and change.column.name == name
        assert column_type(change.column.type).arrow == column_type(text).arrow


@pytest.mark.parametrize(
    ("clause", "dialect", "default"),
    [
        ("decimal(12,4) NOT NULL DEFAULT '12.5'", "mysql", ("value", "12.5")),
        ("int DEFAULT -7", "mysql", ("value", "-7")),
        ("varchar(9) DEFAULT 'it''s\\n'", "mysql", ("value", "it's\n")),
        ("varchar(9) DEFAULT _utf8mb4'x'", "mysql", ("value", "x")),
        ("char(4) DEFAULT 'ab  '", "mysql", ("value", "ab")),  # CHAR drops trailing spaces
        ("bit(8) NOT NULL DEFAULT b'101'", "mysql", ("value", "5")),
        ("bit(1) DEFAULT b'1'", "mysql", ("value", "1")),
        ("boolean NOT NULL DEFAULT TRUE", "mysql", ("value", "true")),
        ("tinyint(1) NOT NULL DEFAULT FALSE", "mysql", ("value", "0")),
        ("binary(4) DEFAULT 'ab'", "mysql", ("value", "61620000")),  # padded with 0x00, as hex
        ("varbinary(4) DEFAULT x'00FF'", "mysql", ("value", "00ff")),
        ("datetime(3) DEFAULT CURRENT_TIMESTAMP(3)", "mysql", ("now", None)),
        ("timestamp NULL DEFAULT NOW()", "mysql", ("now", None)),
        ("varchar(36) DEFAULT (uuid())", "mysql", ("expression", None)),
        ("int NOT NULL", "mysql", ("value", "0")),
        ("enum('a''b','c') NOT NULL", "mysql", ("value", "a'b")),
        ("binary(2) NOT NULL", "mysql", ("value", "0000")),
        ("date NOT NULL", "mysql", ("value", "0000-00-00")),
        ("time NOT NULL", "mysql", ("value", "00:00:00")),
        ("text NOT NULL", "mysql", ("value", "")),
        ("int", "mysql", None),
        ("int DEFAULT NULL", "mysql", None),
        ("int NOT NULL", "postgres", None),  # PostgreSQL refuses it on a table with rows
        ("text NOT NULL DEFAULT 'it''s'", "postgres", ("value", "it's")),
    ],
)
def test_add_column_default(clause, dialect, default):
    """The default an ADD COLUMN gives the rows already there, as canonical text for the column's type
    (docs/schema-evolution.md); a CREATE TABLE's columns carry none (no rows to fill)."""
    (change,) = ddl.parse_ddl(f"ALTER TABLE t ADD COLUMN c {clause}", dialect)
    got = change.column.default
    assert (got.kind, got.value) == default if default else got is None
    (created,) = ddl.parse_ddl(f"CREATE TABLE t (c {clause})", dialect)
    assert created.columns[0].default is None
