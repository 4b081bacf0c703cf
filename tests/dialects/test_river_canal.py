from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from replicator import types
from replicator.dialects import DecodeOptions
from tests.dialects.golden import FIXTURES, _decoded_folder, check_golden, params

FOLDER = "river-canal"
SHANGHAI = DecodeOptions(timezone="Asia/Shanghai")


@pytest.mark.parametrize("case", params(FOLDER))
def test_golden(case):
    check_golden(case, "river-canal")


@pytest.mark.parametrize("case", [p for p in params(FOLDER) if "bad" not in p.id])
def test_auto_detection_agrees(case):
    """KafkaRiverCanal «Kafka消息 Specification»'s keys (binlog, db, table, event, columns) are unique to
    KafkaRiverCanal."""
    check_golden(case, "auto")


def test_seed_update_images():
    """KafkaRiverCanal «Kafka消息 Specification» UPDATE: the before image takes origin_val for the updated
    column, v elsewhere."""
    [event] = check_golden(FIXTURES / FOLDER / "seed000-update.json", "river-canal")
    assert event["before"] == {"order_id": "126", "x_id": "123456", "name": "小明"}
    assert event["after"] == {"order_id": "126", "x_id": "123456", "name": "小春"}
    assert event["seq"] == [70, 25521]
    assert event["position"] == "mysql-bin.000070:25521"
    assert event["event_time"] == "2015-12-16T03:25:07Z"


def test_bad_messages_are_dead_letters():
    events = check_golden(FIXTURES / FOLDER / "bad-messages.jsonl", "river-canal")
    # empty keys (a table without a primary key): an event without key columns, keyed by the engine
    assert [(e["table"], e["primary_key"]) for e in events if not e.get("error")] == [("t", [])]
    errors = [e["error"] for e in events if e.get("error")]
    assert errors == [
        'unknown event ["x"] (expected i, u or d)',
        "missing db",
        "missing table",
        'malformed binlog ["mysql-bin.000003:100"]: expected offset@file.NNNNNN',
        "no columns in 'columns'",
        "a column in 'columns' has no name or a duplicate name ('n')",
        "a column in 'columns' has no name or a duplicate name ('n')",
        'NULL or absent primary key column in ["id"]',
        'NULL or absent primary key column in ["nope"]',
        "wrong shape: no 'event' in the message",
        "not a JSON object: a message must be an object",
    ]


def _edge_events() -> list[dict]:
    return _decoded_folder(FIXTURES / FOLDER, "river-canal", SHANGHAI)["values-edge.jsonl"]


# column -> (canonical text, typed value after types.parse_values)
EDGE = {
    "id": ("18446744073709551615", decimal.Decimal("18446744073709551615")),
    "ti": ("-128", -128),
    "i": ("-2147483648", -2147483648),
    "iu": ("4294967295", 4294967295),
    "bi": ("-9223372036854775808", -9223372036854775808),
    "dec_neg": ("-1234567890.12", decimal.Decimal("-1234567890.12")),
    "dec_scale": ("0.0000000001", decimal.Decimal("1E-10")),
    "dbl": ("1.7976931348623157E308", 1.7976931348623157e308),
    "flt": ("-1.5E-7", -1.5e-7),
    "d": ("2024-02-29", dt.date(2024, 2, 29)),
    "dt": ("2024-02-29 23:59:59.999999", dt.datetime(2024, 2, 29, 23, 59, 59, 999999)),
    # MySQL TIMESTAMP as canal writes it: wall clock of the server zone (source.timezone).
    "ts": ("2015-08-10 13:08:13", dt.datetime(2015, 8, 10, 5, 8, 13, tzinfo=dt.UTC)),
    "empty": ("", ""),
    "nul": (None, None),
    "mb": ("小春😀", "小春😀"),
    "bin": ("ff008061", b"\xff\x00\x80a"),
    "blb": ("e9c0", b"\xe9\xc0"),
    "j": ('{"a": [1, "é"]}', '{"a": [1, "é"]}'),
    "e": ("y", "y"),
    "yr": ("2024", 2024),
}


def test_value_edge_cases():
    insert, _ = _edge_events()
    assert "error" not in insert, insert
    assert set(insert["after"]) == set(EDGE)
    for column, (text, typed) in EDGE.items():
        assert insert["after"][column] == text, column
        source_type = insert["source_types"][column]
        values, errors = types.parse_values(
            pa.array([text], pa.string()), types.arrow_type(source_type), timezone="Asia/Shanghai"
        )
        assert errors == [], (column, errors)
        assert values.to_pylist() == [typed], column


def test_update_null_transitions():
    """NULL -> value (origin_val absent: GSON omits nulls), value -> NULL, NULL unchanged, binary."""
    _, update = _edge_events()
    assert update["op"] == "update"
    assert update["before"] == {
        "id": "18446744073709551615",
        "was_null": None,
        "now_null": "was set",
        "stays_null": None,
        "bin": "ff",
    }
    assert update["after"] == {
        "id": "18446744073709551615",
        "was_null": "now set",
        "now_null": None,
        "stays_null": None,
        "bin": "fe",
    }
