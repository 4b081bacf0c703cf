"""debezium dialect: golden files (CloudCanal «MQ 消息同步格式说明», Debezium/Flink vectors) and the
schema-typed value encodings."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from replicator.types import arrow_type, parse_values
from tests.conftest import FIXTURES
from tests.dialects.golden import check_golden, params, raw_records


@pytest.mark.parametrize("case", params("debezium"))
def test_golden(case):
    check_golden(case, "debezium")


@pytest.mark.parametrize("case", params("debezium"))
def test_auto_detection_agrees(case):
    """Both shapes (schema+payload, bare payload) and schema-change events are detected by their keys."""
    check_golden(case, "auto")


def _b64(unscaled: int) -> str:
    """Java BigInteger.toByteArray(): minimal big-endian two's complement (Kafka Connect Decimal bytes)."""
    length = unscaled.bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _decimal(scale: int, precision: int | None = None) -> dict:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": params}


BIG = 10**38 - 1
HUGE = -(10**49 + 123456789)
# column -> (field schema, JSON value, canonical text, source type)
CASES: dict[str, tuple[dict, object, str | None, str]] = {
    "dec_pos": (_decimal(2, 10), _b64(12345), "123.45", "decimal(10,2)"),
    "dec_neg": (_decimal(2, 10), _b64(-12345), "-123.45", "decimal(10,2)"),
    "dec_zero": (_decimal(2, 10), _b64(0), "0.00", "decimal(10,2)"),
    "dec_minus_cent": (_decimal(2, 10), _b64(-1), "-0.01", "decimal(10,2)"),
    "dec_128": (_decimal(2, 10), _b64(128), "1.28", "decimal(10,2)"),
    "dec_minus_128": (_decimal(2, 10), _b64(-128), "-1.28", "decimal(10,2)"),
    "dec_max38": (_decimal(0, 38), _b64(BIG), str(BIG), "decimal(38,0)"),
    "dec_min38": (_decimal(4, 38), _b64(-BIG), "-" + str(BIG)[:-4] + "." + str(BIG)[-4:], "decimal(38,4)"),
    "dec_huge": (_decimal(10), _b64(HUGE), f"-{-HUGE // 10**10}.{-HUGE % 10**10:010d}", "decimal"),
    "dec_unsigned_bigint": (_decimal(0, 20), _b64(2**64 - 1), "18446744073709551615", "decimal(20,0)"),
    "dec_numeric_format": (_decimal(2, 10), 12.34, "12.34", "decimal(10,2)"),
    "var_scale": (
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        {"scale": 3, "value": _b64(-1234567)},
        "-1234.567",
        "decimal",
    ),
    "date": ({"type": "int32", "name": "io.debezium.time.Date"}, 17702, "2018-06-20", "date"),
    "date_before_epoch": ({"type": "int32", "name": "io.debezium.time.Date"}, -1, "1969-12-31", "date"),
    "dt_ms": (
        {"type": "int64", "name": "io.debezium.time.Timestamp"},
        1529476623000,
        "2018-06-20 06:37:03",
        "datetime",
    ),
    "dt_ms_frac": (
        {"type": "int64", "name": "io.debezium.time.Timestamp"},
        1529476623120,
        "2018-06-20 06:37:03.12",
        "datetime",
    ),
    "dt_us": (
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        1529507596945104,
        "2018-06-20 15:13:16.945104",
        "datetime",
    ),
    "dt_us_negative": (
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        -1,
        "1969-12-31 23:59:59.999999",
        "datetime",
    ),
    "dt_ns": (
        {"type": "int64", "name": "io.debezium.time.NanoTimestamp"},
        1529507596945104000,
        "2018-06-20 15:13:16.945104",
        "datetime",
    ),
    "dt_connect": (
        {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
        0,
        "1970-01-01 00:00:00",
        "datetime",
    ),
    "ts_zoned": (
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        "2018-06-20T13:37:03Z",
        "2018-06-20T13:37:03Z",
        "timestamp",
    ),
    "time_us": (
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        3723000001,
        "01:02:03.000001",
        "time",
    ),
    "time_mysql_min": (
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        -3020399000000,
        "-838:59:59",
        "time",
    ),
    "time_ms": ({"type": "int32", "name": "io.debezium.time.Time"}, 45296789, "12:34:56.789", "time"),
    "year": ({"type": "int32", "name": "io.debezium.time.Year"}, 2024, "2024", "year"),
    "bytes": ({"type": "bytes"}, base64.b64encode(b"\x00\x7f\x80\xff").decode(), "007f80ff", "varbinary"),
    "bytes_empty": ({"type": "bytes"}, "", "", "varbinary"),
    "bits": (
        {"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "12"}},
        base64.b64encode(b"\x01\x02").decode(),
        "513",
        "bit(12)",
    ),
    "bool": ({"type": "boolean"}, True, "true", "boolean"),
    "bit1": ({"type": "boolean"}, False, "false", "boolean"),
    "int8_min": ({"type": "int8"}, -128, "-128", "tinyint"),
    "int16_max": ({"type": "int16"}, 32767, "32767", "smallint"),
    "int32_min": ({"type": "int32"}, -2147483648, "-2147483648", "int"),
    "int64_max": ({"type": "int64"}, 9223372036854775807, "9223372036854775807", "bigint"),
    "int64_min": ({"type": "int64"}, -9223372036854775808, "-9223372036854775808", "bigint"),
    "float64": ({"type": "double"}, 0.1, "0.1", "double"),
    "text_empty": ({"type": "string"}, "", "", "varchar"),
    "text_null": ({"type": "string", "optional": True}, None, None, "varchar"),
    "text_multibyte": ({"type": "string"}, "中文 ünï 😀", "中文 ünï 😀", "varchar"),
    "json": ({"type": "string", "name": "io.debezium.data.Json"}, '{"a": [1, 2]}', '{"a": [1, 2]}', "json"),
    "enum": (
        {"type": "string", "name": "io.debezium.data.Enum", "parameters": {"allowed": "a,b"}},
        "b",
        "b",
        "enum",
    ),
    "set": ({"type": "string", "name": "io.debezium.data.EnumSet"}, "a,b", "a,b", "set"),
}
# What a mirror stores for each column: the value the Debezium docs give for the field's encoding
# (Debezium's connector documentation, data type mappings), typed as its source type maps (replicator.types).
# Written by hand for
# every column of CASES, never derived from the decoder's output.
NINES = "9" * 38
TYPED: dict[str, object] = {
    "dec_pos": decimal.Decimal("123.45"),  # unscaled 12345, scale 2
    "dec_neg": decimal.Decimal("-123.45"),
    "dec_zero": decimal.Decimal("0.00"),
    "dec_minus_cent": decimal.Decimal("-0.01"),  # unscaled -1: the single byte ff
    "dec_128": decimal.Decimal("1.28"),  # 00 80: a sign byte before 0x80
    "dec_minus_128": decimal.Decimal("-1.28"),  # 80 alone
    "dec_max38": decimal.Decimal(NINES),
    "dec_min38": decimal.Decimal("-" + NINES[:34] + "." + NINES[34:]),
    "dec_huge": "-1" + "0" * 39 + ".0123456789",  # decimal with no precision: kept as exact text
    "dec_unsigned_bigint": decimal.Decimal("18446744073709551615"),  # BIGINT UNSIGNED, precise mode
    "dec_numeric_format": decimal.Decimal("12.34"),  # decimal.format=NUMERIC: a JSON number
    "var_scale": "-1234.567",  # VariableScaleDecimal {scale 3, value -1234567}: text, its scale varies
    "date": dt.date(2018, 6, 20),  # 17702 days after 1970-01-01
    "date_before_epoch": dt.date(1969, 12, 31),
    "dt_ms": dt.datetime(2018, 6, 20, 6, 37, 3),  # the docs' DATETIME example: a wall clock, no zone
    "dt_ms_frac": dt.datetime(2018, 6, 20, 6, 37, 3, 120000),
    "dt_us": dt.datetime(2018, 6, 20, 15, 13, 16, 945104),  # the docs' PostgreSQL TIMESTAMP example
    "dt_us_negative": dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    "dt_ns": dt.datetime(2018, 6, 20, 15, 13, 16, 945104),  # ns to the mirror's µs
    "dt_connect": dt.datetime(1970, 1, 1),
    "ts_zoned": dt.datetime(2018, 6, 20, 13, 37, 3, tzinfo=dt.UTC),  # ZonedTimestamp: an instant
    "time_us": "01:02:03.000001",  # TIME is kept as text (a MySQL TIME spans -838:59:59..838:59:59)
    "time_mysql_min": "-838:59:59",
    "time_ms": "12:34:56.789",
    "year": 2024,
    "bytes": b"\x00\x7f\x80\xff",
    "bytes_empty": b"",
    "bits": 513,  # BIT(12) bytes 01 02, little-endian: 0x0201
    "bool": True,
    "bit1": False,
    "int8_min": -128,
    "int16_max": 32767,
    "int32_min": -2147483648,
    "int64_max": 9223372036854775807,
    "int64_min": -9223372036854775808,
    "float64": 0.1,
    "text_empty": "",
    "text_null": None,
    "text_multibyte": "中文 ünï 😀",
    "json": '{"a": [1, 2]}',
    "enum": "b",
    "set": "a,b",
}


def _message(with_schema: bool) -> bytes:
    after = {name: value for name, (_, value, _, _) in CASES.items()}
    payload = {
        "before": None,
        "after": after,
        "op": "c",
        "ts_ms": 1700000000001,
        "source": {
            "connector": "mysql",
            "db": "d",
            "table": "t",
            "file": "mysql-bin.000012",
            "pos": 4711,
            "row": 2,
            "ts_ms": 1700000000000,
            "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23",
        },
    }
    if not with_schema:
        return json.dumps(payload, ensure_ascii=False).encode()
    fields = [{**schema, "field": name} for name, (schema, _, _, _) in CASES.items()]
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "field": "before", "optional": True, "fields": fields},
            {"type": "struct", "field": "after", "optional": True, "fields": fields},
        ],
    }
    return json.dumps({"schema": schema, "payload": payload}, ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def decoded():
    from replicator.dialects import decode

    records = raw_records([_message(True), _message(False)], source="mem")  # offsets 1 and 2
    rows = decode(records, "debezium").to_pylist()
    maps = ("after", "before", "source_types", "meta")  # Arrow maps come as lists of pairs
    return {
        r["coordinates"]["offset"]: {**r, **{k: dict(r[k]) for k in maps if r[k] is not None}} for r in rows
    }


def test_schema_typed_values(decoded):
    event = decoded[1]
    assert event["error"] is None
    assert event["op"] == "insert"
    assert list(event["seq"][:3]) == [12, 4711, 2]
    assert event["position"] == "mysql-bin.000012:4711 gtid=3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    assert event["event_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert event["primary_key"] == []
    for name, (_, _, text, source_type) in CASES.items():
        assert name in event["after"], name
        assert event["after"][name] == text, name
        assert event["source_types"][name] == source_type, name


def test_every_column_of_the_matrix_has_its_typed_value(decoded):
    """Each column's canonical text parsed into its column type is the value written above: equal, of the
    same Python type, Decimals with their scale, timestamps naive or in UTC as their type says."""
    assert TYPED.keys() == CASES.keys()
    after, types = decoded[1]["after"], decoded[1]["source_types"]
    wrong = {}
    for name, expected in TYPED.items():
        typed, errors = parse_values(
            pa.array([after[name]], pa.string()), arrow_type(types[name]), timezone="UTC"
        )
        value = typed[0].as_py()
        same = type(value) is type(expected) and value == expected
        if isinstance(expected, decimal.Decimal):
            same = same and value.as_tuple() == expected.as_tuple()
        if isinstance(expected, dt.datetime):
            same = same and value.utcoffset() == expected.utcoffset()
        if errors or not same:
            wrong[name] = (value, expected, errors)
    assert wrong == {}


def test_without_schema_values_keep_their_json_text(decoded):
    event = decoded[2]
    assert event["error"] is None
    assert event["source_types"] == {}
    assert event["after"]["dec_pos"] == _b64(12345)  # no schema: nothing says it is a decimal
    assert event["after"]["int64_min"] == "-9223372036854775808"
    assert event["after"]["text_null"] is None and "text_null" in event["after"]
    assert event["after"]["text_empty"] == ""
    assert event["after"]["var_scale"] == json.dumps(
        {"scale": 3, "value": _b64(-1234567)}, separators=(",", ":")
    )


def test_schema_conversions_follow_each_message_schema():
    """Conversions derived from a schema are reused for the next message only when its schema is the same
    JSON: a changed scale, or a parameter that is ``true`` instead of ``1``, is derived again."""
    from replicator.commands.inspect import event_records
    from replicator.dialects import decode

    def message(parameters: dict) -> dict:
        fields = [
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "field": "p",
                "parameters": parameters,
            }
        ]
        return {
            "schema": {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": fields}]},
            "payload": {
                "op": "c",
                "before": None,
                "after": {"p": _b64(12345)},
                "source": {"db": "d", "table": "t", "lsn": 7},
            },
        }

    records = raw_records(
        [message({"scale": "2"}), message({"scale": "3"}), message({"scale": 1}), message({"scale": True})]
    )
    rows = event_records(decode(records, "debezium"))
    assert [r.get("after", {}).get("p") for r in rows] == ["123.45", "12.345", "1234.5", None]
    assert rows[3]["error"] == 'values do not decode as their schema types: columns ["p"]'


# ---- what Debezium 3.5's MariaDB connector really publishes (tests/test_e2e.py, issue 31) ------------------

REAL = FIXTURES / "debezium" / "real-mariadb-3.5.jsonl"


def _real_events() -> list[dict]:
    """The fixture's events in its line order; ``order`` is the dialect's part of seq (before the record
    coordinates), ``meta`` a dict."""
    from replicator.commands.inspect import event_records
    from replicator.dialects import decode

    lines = REAL.read_text(encoding="utf-8").splitlines()
    rows = event_records(decode(raw_records(lines, source="mem"), "debezium"))
    for r in rows:
        r["order"] = tuple(r["seq"][:3]) if r.get("seq") else None
        r["meta"] = dict(r.get("meta") or {})
    return rows


def test_real_snapshot_schema_events_rank_before_the_snapshot_rows():
    """The snapshot's DROP TABLE IF EXISTS / CREATE TABLE carry the snapshot rows' binlog position but come on
    the schema-change topic: they must rank before those rows, or a row lands before the DROP and is lost."""
    events = _real_events()
    rows = [e for e in events if e.get("op") == "snapshot"]
    snapshot_ddl = [e for e in events if e.get("op") == "ddl" and e["position"] == rows[0]["position"]]
    assert [e["ddl_kind"] for e in snapshot_ddl] == ["ERASE", "CREATE"]  # same position text as published
    assert all(d["order"] < r["order"] for d in snapshot_ddl for r in rows)
    streamed = [e for e in events if e.get("op") in ("insert", "update", "delete")]
    assert streamed and all(r["order"] <= s["order"] for r in rows for s in streamed)


def test_real_session_statement_of_no_database_is_filtered():
    """The snapshot opens with ``SET character_set_server=...``, databaseName "" and no table: filtered,
    not a 'missing database' dead letter."""
    first = _real_events()[0]
    assert first["op"] == "filtered"
    assert first.get("error") is None


def test_real_schema_history_record_is_a_dead_letter_naming_the_topic():
    """A record of the connector's schema history topic (subscribed by a too-wide topic pattern) looks like
    a bare schema-change event but has no binlog order: a dead letter, never an applied DDL."""
    last = _real_events()[-1]
    assert last.get("op") is None
    assert "schema history record" in last["error"]


def _propagated(kind: str, source: str, length: str | None = None, scale: str | None = None) -> dict:
    """A field as ``column.propagate.source.type=.*`` writes it (Debezium 3.5, MariaDB; tests/test_e2e.py)."""
    parameters = {"__debezium.source.column.type": source, "__debezium.source.column.name": "v"}
    if length is not None:
        parameters["__debezium.source.column.length"] = length
    if scale is not None:
        parameters["__debezium.source.column.scale"] = scale
    return {"type": kind, "optional": True, "parameters": parameters, "field": "v"}


PROPAGATED_ARROW = {
    "decimal(38,10)": pa.decimal128(38, 10),
    "varbinary(10)": pa.binary(),
    "bigint unsigned": pa.decimal128(20, 0),
    "datetime(6)": pa.timestamp("us"),
}


@pytest.mark.parametrize(
    ("field", "value", "text", "source_type", "error"),
    [
        # decimal.handling.mode=string: exact text; the propagated type makes it decimal(38,10), not a string
        (
            _propagated("string", "DECIMAL", "38", "10"),
            "-1.0123456789",
            "-1.0123456789",
            "decimal(38,10)",
            None,
        ),
        (_propagated("double", "DECIMAL", "38", "10"), 1.2345678901234567e19, None, None, "decimal.handling"),
        (_propagated("string", "VARBINARY", "10"), "AP8=", None, None, "binary.handling.mode base64/hex"),
        (_propagated("string", "BLOB"), "abcd", None, None, "binary.handling.mode base64/hex"),
        (_propagated("bytes", "VARBINARY", "10"), "AP8=", "00ff", "varbinary(10)", None),
        (_propagated("int64", "BIGINT UNSIGNED", "20"), 5, "5", "bigint unsigned", None),
        # bigint.unsigned.handling.mode=long: a value past 2^63-1 wraps to a negative long; stored exactly
        (_propagated("int64", "BIGINT UNSIGNED", "20"), -1, "18446744073709551615", "bigint unsigned", None),
        (
            _propagated("int64", "DATETIME", "6") | {"name": "io.debezium.time.MicroTimestamp"},
            1,
            "1970-01-01 00:00:00.000001",
            "datetime(6)",
            None,
        ),
    ],
)
def test_propagated_source_types_and_refused_value_modes(field, value, text, source_type, error):
    """With ``column.propagate.source.type`` the database type is known: string decimals are typed exactly,
    and value modes that lost the column's meaning (binary as base64/hex text, decimals as doubles, BIGINT
    UNSIGNED wrapped by ``long``) are dead letters naming the connector setting, never wrong values."""
    from replicator.commands.inspect import event_records
    from replicator.dialects import decode

    message = {
        "schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [field]}]},
        "payload": {
            "op": "c",
            "after": {"v": value},
            "source": {"db": "d", "table": "t", "file": "b.1", "pos": 4},
        },
    }
    (row,) = event_records(decode(raw_records([message]), "debezium"))
    if error is None:
        assert row.get("error") is None
        assert row["after"] == {"v": text}
        assert row["source_types"] == {"v": source_type}
        assert arrow_type(source_type) == PROPAGATED_ARROW[source_type]
    else:
        assert error in row["error"], row["error"]
        assert row["error"].startswith('values do not decode as their schema types: columns ["v"]')
