from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from replicator import types
from replicator.commands.inspect import decode_path, event_records
from replicator.dialects import DecodeOptions
from tests.dialects.golden import FIXTURES, check_golden, params

FOLDER = FIXTURES / "drs-json"
# Cases auto detection must decode exactly as the pinned dialect: DRS-only keys or DRS-only types.
SURELY_DRS = (
    "seed003-mysql-init",
    "seed003-mysql-init-ddl",
    "seed003-gaussdb-update",
    "constructed-ddl",
    "constructed-pg-oracle",
)


@pytest.mark.parametrize("case", params("drs-json"))
def test_golden(case):
    check_golden(case, "drs-json")


@pytest.mark.parametrize("name", SURELY_DRS)
def test_auto_detection_decodes_surely_drs(name):
    path = next(p for p in FOLDER.iterdir() if p.stem == name and not p.name.endswith(".expected.json"))
    check_golden(path, "auto")


def test_auto_detection_refuses_to_guess_canal_look_alike():
    """Huawei DRS «Kafka消息格式»'s incremental UPDATE has only keys canal also has and bare types: a dead
    letter asking to
    pin the dialect, never a silent guess."""
    events = event_records(decode_path(FOLDER / "seed003-mysql-update.json", "auto"))
    assert len(events) == 1
    error = events[0]["error"]
    assert error.startswith("ambiguous message format")
    assert "canal-json" in error and "drs-json" in error and "pin source.dialect" in error


def test_meta_carries_full_sync_identity():
    rows = event_records(decode_path(FOLDER / "seed003-mysql-init.json", "drs-json"), ("meta",))
    assert rows[0]["meta"] == {
        "ts": "1625058726990",
        "jobId": "e28c0c1e-e3ab-4f6c-bbc2-69c28670deec",
        "shardId": "c66c15af-747b-4bd6-9b5d-de2e8e38f935",
        "identifier": "1",
        "eventId": "mysql-bin.000065:800;2bf665dc-f8e2-11eb-bcfd-6c4b90b9d8b3:1-251167",
    }


# ---- values: canonical text and the typed value it parses into -----------------------------------------
UTC = dt.UTC
MYSQL_CASES = [  # column, mysqlType, DRS text, canonical text, typed value
    ("i_max", "int", "2147483647", "2147483647", 2147483647),
    ("i_min", "int", "-2147483648", "-2147483648", -2147483648),
    ("big_min", "bigint", "-9223372036854775808", "-9223372036854775808", -9223372036854775808),
    ("dec_neg", "decimal", "-0.0500", "-0.0500", "-0.0500"),  # bare `decimal`: exact text (types.py)
    (
        "dec_big",
        "decimal",
        "123456789012345678901234567890.12",
        "123456789012345678901234567890.12",
        "123456789012345678901234567890.12",
    ),
    ("dbl", "double", "1.2510357E7", "1.2510357E7", 12510357.0),
    ("flt", "float", "-3.4028235E38", "-3.4028235E38", -3.4028235e38),
    ("bin_hi", "varbinary", "[-1, -128, 127, 0, 200]", "ff807f00c8", b"\xff\x80\x7f\x00\xc8"),
    ("bin_empty", "blob", "[]", "", b""),
    (
        "ts_frac",
        "timestamp",
        "1624614713.201",
        "2021-06-25T09:51:53.201Z",
        dt.datetime(2021, 6, 25, 9, 51, 53, 201000, tzinfo=UTC),
    ),
    (
        "ts_micro",
        "timestamp",
        "1624614713.000001",
        "2021-06-25T09:51:53.000001Z",
        dt.datetime(2021, 6, 25, 9, 51, 53, 1, tzinfo=UTC),
    ),
    (
        "ts_whole",
        "timestamp",
        "2147483647",
        "2038-01-19T03:14:07Z",
        dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC),
    ),
    (
        "ts_neg",
        "timestamp",
        "-0.25",
        "1969-12-31T23:59:59.75Z",
        dt.datetime(1969, 12, 31, 23, 59, 59, 750000, tzinfo=UTC),
    ),
    ("ts_zero", "timestamp", "0", "0000-00-00 00:00:00", None),  # MySQL zero TIMESTAMP -> NULL by default
    (
        "dt",
        "datetime",
        "2021-06-25 17:51:53.5",
        "2021-06-25 17:51:53.5",
        dt.datetime(2021, 6, 25, 17, 51, 53, 500000),
    ),
    ("txt_empty", "varchar", "", "", ""),
    ("txt_null", "varchar", None, None, None),
    ("txt_mb", "text", "华为云 🚀 ünï", "华为云 🚀 ünï", "华为云 🚀 ünï"),
]
PG_CASES = [
    ("b_true", "boolean", "true", "true", True),
    ("b_false", "boolean", "false", "false", False),
    ("bytea", "bytea", "62797465615F64617461", "62797465615f64617461", b"bytea_data"),
    ("bytea_x", "bytea", "\\xFF00", "ff00", b"\xff\x00"),
    (
        "tstz",
        "timestamp with time zone",
        "2010-01-01 14:30:00+08",
        "2010-01-01 14:30:00+08",
        dt.datetime(2010, 1, 1, 6, 30, tzinfo=UTC),
    ),
    (
        "ts_ntz",
        "timestamp without time zone",
        "2021-12-16 12:31:49.344365",
        "2021-12-16 12:31:49.344365",
        dt.datetime(2021, 12, 16, 12, 31, 49, 344365),
    ),
    ("num", "numeric(10,2)", "-12345678.90", "-12345678.90", Decimal("-12345678.90")),
    (
        "rng",
        "tstzrange",
        '("2010-01-01 14:30:00+08",)',
        '("2010-01-01 14:30:00+08",)',
        '("2010-01-01 14:30:00+08",)',
    ),
    ("js", "json", '{"k": "v"}', '{"k": "v"}', '{"k": "v"}'),
]


def _message(cases, **extra):
    types_key = "columnType" if "dbType" in extra else "mysqlType"
    row = {"pk": "1", **{c[0]: c[2] for c in cases}}
    return {
        types_key: {"pk": "int", **{c[0]: c[1] for c in cases}},
        "id": 1,
        "es": 1700000000000,
        "ts": 1700000000001,
        "database": "d",
        "table": "t",
        "type": "INSERT",
        "isDdl": False,
        "sql": "",
        "sqlType": None,
        "data": [row],
        "old": None,
        "pkNames": ["pk"],
        **extra,
    }


def test_value_edge_cases(tmp_path):
    messages = [_message(MYSQL_CASES), _message(PG_CASES, dbType="PostgreSQL", schema="public")]
    path = tmp_path / "values.jsonl"
    path.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in messages) + "\n", encoding="utf-8")
    events = event_records(decode_path(path, "drs-json"))
    assert [e.get("error") for e in events] == [None, None]
    for event, cases in zip(events, (MYSQL_CASES, PG_CASES), strict=True):
        for column, source_type, _, canonical, typed in cases:
            assert event["after"][column] == canonical, column
            assert event["source_types"][column] == source_type
            parsed, errors = types.parse_values(
                pa.array([canonical], pa.string()), types.arrow_type(source_type), timezone="Asia/Shanghai"
            )
            assert errors == [], column
            value = parsed.to_pylist()[0]
            if isinstance(typed, str) and isinstance(value, Decimal):
                value = str(value)
            assert value == typed, column
    assert events[1]["schema"] == "public"


def test_malformed_byte_list_is_kept_for_a_dead_letter_at_apply(tmp_path):
    path = tmp_path / "bad-bytes.jsonl"
    path.write_text(
        json.dumps(_message([("b", "varbinary", "[1, 999]", None, None)])) + "\n", encoding="utf-8"
    )
    event = event_records(decode_path(path, "drs-json"))[0]
    assert event["after"]["b"] == "[1, 999]"
    _, errors = types.parse_values(pa.array(["[1, 999]"]), types.arrow_type("varbinary"))
    assert errors and errors[0].row == 0


def test_ddl_kinds_from_sql_text():
    events = check_golden(FOLDER / "constructed-ddl.jsonl", "drs-json")
    assert [(e["op"], e["ddl_kind"]) for e in events] == [
        ("ddl", "CREATE"),
        ("ddl", "ALTER"),
        ("ddl", "RENAME"),
        ("ddl", "RENAME"),
        ("ddl", "ALTER"),
        ("ddl", "CINDEX"),
        ("ddl", "DINDEX"),
        ("truncate", "TRUNCATE"),
        ("ddl", "ERASE"),
        ("ddl", "QUERY"),
        ("ddl", "INIT_DDL"),
    ]


def test_options_do_not_change_drs_json_text():
    """Epoch TIMESTAMPs are instants: source.timezone does not enter the canonical text."""
    events = event_records(
        decode_path(FOLDER / "seed003-mysql-init.json", "drs-json", DecodeOptions(timezone="Asia/Shanghai"))
    )
    assert events[0]["after"]["c5"] == "2021-06-25T09:51:53.201Z"
