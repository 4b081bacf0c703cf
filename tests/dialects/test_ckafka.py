from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from replicator import types
from replicator.dialects import DecodeOptions
from tests.dialects.golden import FIXTURES, _decoded_folder, check_golden, params

FOLDER = "ckafka"
SHANGHAI = DecodeOptions(timezone="Asia/Shanghai")
FORMAT_ONE = [p for p in params(FOLDER) if "dml" in p.id or "official-format1" in p.id]
CANAL_DDL = [p for p in params(FOLDER) if "ddl" in p.id]


@pytest.mark.parametrize("case", params(FOLDER))
def test_golden(case):
    check_golden(case, "ckafka")


@pytest.mark.parametrize("case", FORMAT_ONE)
def test_auto_detects_format_one(case):
    check_golden(case, "auto")


@pytest.mark.parametrize("case", CANAL_DDL)
def test_auto_reads_ddl_as_canal_json(case):
    """Under `auto` the canal-shaped DDL messages are canal-json's; they decode the same but for the name."""
    auto = _decoded_folder(case.parent, "auto", None)[case.name]
    pinned = _decoded_folder(case.parent, "ckafka", None)[case.name]
    assert [e["dialect"] for e in auto] == ["canal-json"]
    assert [{**e, "dialect": "ckafka"} for e in auto] == pinned


def test_seed_and_vector_format_one_agree():
    """Tencent CKafka «MySQL 订阅消息官方格式说明»'s DML examples and the Tencent doc vectors are the same
    messages."""
    by_file = _decoded_folder(FIXTURES / FOLDER, "ckafka", None)
    for kind in ("insert", "update", "delete"):
        assert (
            by_file[f"seed001-dml-{kind}.json"]
            == by_file[f"vector-tencent-ckafka-official-format1__{kind}.json"]
        )


def test_format_one_update():
    [event] = check_golden(FIXTURES / FOLDER / "seed001-dml-update.json", "ckafka")
    assert event["op"] == "update"
    assert event["primary_key"] == []  # format one has no key: the engine resolves it (changelog.with_keys)
    assert event["source_types"] == {}
    assert event["before"]["first_name"] == "Anne" and event["after"]["first_name"] == "Anne Marie"
    assert event["seq"] == [3, 484]
    assert event["position"] == "mysql-bin.000003:484"
    assert event["event_time"] == "2016-06-11T01:50:29Z"  # TIME read in source.timezone (default UTC)


def test_tencent_canal_dml():
    """Tencent's canal shape: numbers as values, full `old`, the deleted row in `old`, no pkNames."""
    by_file = _decoded_folder(FIXTURES / FOLDER, "ckafka", None)
    [insert] = by_file["vector-tencent-ckafka-canal-json__insert.json"]
    [update] = by_file["vector-tencent-ckafka-canal-json__update.json"]
    [delete] = by_file["vector-tencent-ckafka-canal-json__delete.json"]
    assert all("error" not in e for e in (insert, update, delete))
    assert insert["after"]["id"] == "1004"
    assert insert["seq"] == [1465491411815, 0]  # es is 0: the processing time ts stands in
    assert update["before"]["first_name"] == "Anne" and update["after"]["first_name"] == "Anne Marie"
    assert delete["before"] == {
        "email": "annek@noanswer.org",
        "first_name": "Anne Marie",
        "id": "1004",
        "last_name": "Kretchmar",
    }
    assert "after" not in delete


def test_ddl_seconds_and_milliseconds():
    """Tencent CKafka «MySQL 订阅消息官方格式说明»'s DDL examples write es/ts in seconds, RENAME in
    milliseconds."""
    by_file = _decoded_folder(FIXTURES / FOLDER, "ckafka", None)
    [alter] = by_file["seed001-ddl-alter-table.json"]
    [rename] = by_file["seed001-ddl-rename-table.json"]
    assert alter["event_time"] == "2022-06-21T03:29:13Z" and alter["seq"] == [1655782153000, 0]
    assert rename["event_time"] == "2022-06-27T03:36:19.748000Z" and rename["seq"] == [1656300979748, 0]


def test_bad_messages_are_dead_letters():
    events = check_golden(FIXTURES / FOLDER / "bad-messages.jsonl", "ckafka")
    errors = [e.get("error") for e in events]
    assert all(errors), events
    assert errors == [
        'unknown TYPE ["X"] (expected I, U or D)',
        "missing DATABASE",
        "missing TABLE",
        'malformed BINLOG_NAME ["mysql-bin"]: '
        "expected a binlog file name ending in its number (mysql-bin.000003)",
        'malformed BINLOG_POS ["abc"]: expected an integer',
        'malformed TIME ["2016-06-11"]: expected yyyyMMddHHmmss',
        "no NEW_VALUES (absent, null or not a JSON object)",
        "no OLD_VALUES (absent, null or not a JSON object)",
        "no OLD_VALUES (absent, null or not a JSON object)",
        "wrong shape: no 'TYPE' in the message",
        'unknown op type ["UPSERT"]',
        "no rows in 'data' (nor in 'old' for a DELETE)",
        'NULL or absent primary key column in ["id"]',
        "missing database",
        "wrong shape: neither CKafka official format one (BINLOG_NAME, BINLOG_POS, TYPE, ...) "
        "nor canal-shaped (type, isDdl, data, ...)",
        "not a JSON object: a message must be an object",
    ]


def _edges() -> list[dict]:
    return _decoded_folder(FIXTURES / FOLDER, "ckafka", SHANGHAI)["values-edge.jsonl"]


def _typed(text: str | None, source_type: str):
    values, errors = types.parse_values(
        pa.array([text], pa.string()), types.arrow_type(source_type), timezone="Asia/Shanghai"
    )
    assert errors == [], (text, source_type, errors)
    return values.to_pylist()[0]


def test_format_one_values_and_time_zone():
    insert, update = _edges()[:2]
    assert "error" not in insert and "error" not in update
    assert insert["op"] == "insert"  # TYPE 'l', as the doc's field table writes insert
    # "19700101080000" is epoch 0 on a UTC+8 server (Tencent CKafka «MySQL 订阅消息官方格式说明»'s insert
    # example).
    assert insert["event_time"] == "1970-01-01T00:00:00Z"
    assert insert["seq"] == [12, 4] and insert["position"] == "mysql-bin.000012:4"
    after = insert["after"]
    # Format one has no types: the column types come from the mirror; check the text parses into them.
    expected = {
        "id": ("18446744073709551615", "bigint(20) unsigned", decimal.Decimal("18446744073709551615")),
        "dec": (
            "-12345678901234567890.123456789",
            "decimal(38,9)",
            decimal.Decimal("-12345678901234567890.123456789"),
        ),
        "nul": (None, "varchar(10)", None),
        "empty": ("", "varchar(10)", ""),
        "mb": ("小春😀", "varchar(10)", "小春😀"),
        "ts": ("2016-06-11 01:50:29", "timestamp", dt.datetime(2016, 6, 10, 17, 50, 29, tzinfo=dt.UTC)),
        "dt": ("2024-02-29 23:59:59.999999", "datetime(6)", dt.datetime(2024, 2, 29, 23, 59, 59, 999999)),
        "d": ("2024-02-29", "date", dt.date(2024, 2, 29)),
    }
    assert after == {k: v[0] for k, v in expected.items()}
    for text, source_type, typed in expected.values():
        assert _typed(text, source_type) == typed
    assert update["event_time"] == "2016-06-10T17:50:29Z"
    assert update["before"] == {"id": "18446744073709551615", "nul": None, "empty": ""}
    assert update["after"] == {"id": "18446744073709551615", "nul": "set", "empty": None}


def test_tencent_canal_numbers_are_exact():
    """JSON numbers keep every digit, exactly as written (never through a double)."""
    insert, multi_delete = _edges()[2:4]
    assert "error" not in insert
    after = insert["after"]
    assert after == {
        "id": "18446744073709551615",
        "dec": "-12345678901234567890.123456789",
        "neg": "-0.10",  # as written: the JSON number -0.10
        "f": "1.5E-7",
        "b": "true",
        "n": None,
        "s": "小春😀",
        "big": "-9223372036854775808",
    }
    assert _typed(after["dec"], "decimal(38,9)") == decimal.Decimal("-12345678901234567890.123456789")
    assert _typed(after["neg"], "decimal(5,2)") == decimal.Decimal("-0.10")
    assert _typed(after["f"], "double") == 1.5e-7
    assert _typed(after["b"], "boolean") is True
    assert _typed(after["big"], "bigint(20)") == -9223372036854775808
    assert _typed(after["id"], "bigint unsigned") == decimal.Decimal("18446744073709551615")
    # Alibaba-style multi-row DELETE (rows in data) with mysqlType: binary hex as in canal-json.
    assert multi_delete["op"] == "delete"
    assert multi_delete["primary_key"] == ["id"] and multi_delete["before"] == {"id": "7", "x": "61"}


def test_multi_row_delete_second_row():
    rows = [e for e in _edges() if e.get("op") == "delete"]
    assert [r["before"] for r in rows] == [{"id": "7", "x": "61"}, {"id": "8", "x": None}]


def test_a_position_beyond_any_integer_is_malformed_not_a_crash():
    """5,000 digits (past Python's int() text limit) is a malformed BINLOG_POS like 20 digits is."""
    import json

    from replicator.dialects.base import decode
    from tests.dialects.golden import raw_records

    base = json.loads((FIXTURES / FOLDER / "bad-messages.jsonl").read_text().splitlines()[0])
    messages = [{**base, "TYPE": "I", "BINLOG_POS": "9" * n} for n in (20, 5000)]
    errors = decode(raw_records(messages), "ckafka")["error"].to_pylist()
    assert [e.split(":")[0] for e in errors] == [f'malformed BINLOG_POS ["{"9" * n}"]' for n in (20, 5000)]
