from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from replicator import types
from replicator.commands.inspect import event_records
from replicator.dialects import decode
from tests.dialects.golden import check_golden, params, raw_records


@pytest.mark.parametrize("case", params("cloudcanal-json"))
def test_golden(case):
    check_golden(case, "cloudcanal-json")


@pytest.mark.parametrize("case", params("cloudcanal-json"))
def test_auto_detection_agrees(case):
    """CloudCanal's own key names (execTs, action, entryType) identify it under `auto`."""
    check_golden(case, "auto")


def _decode(messages: list[dict]) -> list[dict]:
    records = raw_records([json.dumps(m, ensure_ascii=False).encode() for m in messages])
    return event_records(decode(records, "cloudcanal-json"))


# (dbValType, jdbcType, wire value, canonical text, typed value)
EDGES = [
    ("tinyint(4)", -6, "-128", "-128", -128),
    ("bigint(20)", -5, "9223372036854775807", "9223372036854775807", 9223372036854775807),
    ("bigint(20)", -5, "-9223372036854775808", "-9223372036854775808", -9223372036854775808),
    ("bigint(20) unsigned", -5, "18446744073709551615", "18446744073709551615", decimal.Decimal(2**64 - 1)),
    ("decimal(12,4)", 3, "-12345678.0001", "-12345678.0001", decimal.Decimal("-12345678.0001")),
    ("double", 8, "-1.5E-7", "-1.5E-7", -1.5e-7),
    (
        "datetime(6)",
        93,
        "2023-11-14 22:13:20.000001",
        "2023-11-14 22:13:20.000001",
        dt.datetime(2023, 11, 14, 22, 13, 20, 1),
    ),
    (
        "timestamp",
        93,
        "2023-11-14 22:13:20",
        "2023-11-14 22:13:20",
        dt.datetime(2023, 11, 14, 14, 13, 20, tzinfo=dt.UTC),
    ),  # wall clock in source.timezone (+08:00)
    ("date", 91, "1000-01-01", "1000-01-01", dt.date(1000, 1, 1)),
    ("varchar(8)", 12, "", "", ""),
    ("varchar(8)", 12, None, None, None),
    ("varchar(8)", 12, "中文ü😀", "中文ü😀", "中文ü😀"),
    ("varbinary(4)", -3, "\u00ff\u0080\u0000A", "ff800041", b"\xff\x80\x00A"),
    (None, 2004, "\u00e9", "e9", b"\xe9"),  # binary by jdbcType when dbValType lacks the column
]


def test_value_edges():
    columns = {f"c{i}": edge for i, edge in enumerate(EDGES)}
    message = {
        "action": "INSERT",
        "bid": 1,
        "db": "lab",
        "table": "edges",
        "isDdl": False,
        "entryType": "ROWDATA",
        "execTs": 1700000000000,
        "pks": ["id"],
        "dbValType": {"id": "int", **{c: e[0] for c, e in columns.items() if e[0]}},
        "jdbcType": {"id": 4, **{c: e[1] for c, e in columns.items()}},
        "data": [{"id": "1", **{c: e[2] for c, e in columns.items()}}],
    }
    [row] = _decode([message])
    assert "error" not in row
    after = row["after"]
    source_types = row["source_types"]
    for column, (_, _, _, text, typed) in columns.items():
        assert after[column] == text, column
        target = types.arrow_type(source_types[column])
        parsed, errors = types.parse_values(pa.array([after[column]], pa.string()), target, timezone="+08:00")
        assert errors == []
        assert parsed.to_pylist() == [typed], column


def test_absent_column_stays_absent_and_null_stays_null():
    message = {
        "action": "UPDATE",
        "bid": 1,
        "db": "lab",
        "table": "t",
        "isDdl": False,
        "entryType": "ROWDATA",
        "execTs": 1700000000000,
        "pks": ["id"],
        "dbValType": {"id": "int", "a": "int", "b": "int"},
        "data": [{"id": "1", "a": None}],
        "before": [{"id": "1", "a": "5"}],
    }
    [row] = _decode([message])
    assert row["after"] == {"id": "1", "a": None}
    assert "b" not in row["after"]
    assert row["before"] == {"id": "1", "a": "5"}


def test_seconds_exec_ts_is_normalised():
    message = {
        "action": "INSERT",
        "bid": 3,
        "db": "lab",
        "table": "t",
        "isDdl": False,
        "entryType": "ROWDATA",
        "execTs": 1669789152,
        "pks": ["id"],
        "data": [{"id": "1"}],
    }
    [row] = _decode([message])
    assert row["seq"] == [1669789152000, 3]  # event_records keeps the dialect's part of seq
    assert row["event_time"] == "2022-11-30T06:19:12Z"
