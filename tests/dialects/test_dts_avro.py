from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json

import fastavro
import pyarrow as pa
import pytest

from replicator import types
from replicator.dialects import DecodeOptions
from replicator.dialects.base import Decoder
from replicator.dialects.dts_avro import load_record_schema
from replicator.dialects.events import At
from replicator.inspect import decode_path, event_records
from tests.dialects.golden import FIXTURES, check_golden, params

FOLDER = FIXTURES / "dts-avro"


@pytest.fixture(scope="module")
def options(shared) -> DecodeOptions:
    return DecodeOptions(avro_schema=shared / "schemas" / "aliyun_dts_record.avsc")


@pytest.mark.parametrize("case", params("dts-avro"))
def test_golden(case, options):
    check_golden(case, "dts-avro", options)


def test_golden_container_file(options):
    """An object container file (*.avro) is one raw record holding many DTS records."""
    events = check_golden(FOLDER / "container.avro", "dts-avro", options)
    assert [e["op"] for e in events] == ["insert", "insert", "update", "delete", "filtered"]


def test_schema_option_is_required():
    """A missing or unreadable schema file stops the job before any batch (Dialect.check)."""
    with pytest.raises(ValueError, match=r"source\.avro_schema"):
        Decoder("dts-avro", DecodeOptions())
    with pytest.raises(ValueError, match=r"source\.avro_schema"):
        Decoder("dts-avro", DecodeOptions(avro_schema=FOLDER / "no-such-schema.avsc"))


# column -> (source type, typed value after types.parse_values with source.timezone +08:00)
VALUE_EDGES = {
    "c_tiny": ("tinyint", -128),
    "c_small": ("smallint", 32767),
    "c_medium": ("mediumint", -8388608),
    "c_int": ("int", 2147483647),
    "c_uint": ("int unsigned", 4294967295),
    "c_big": ("bigint", -9223372036854775808),
    "c_ubig": ("bigint unsigned", decimal.Decimal(18446744073709551615)),
    "c_dec": ("decimal(12,4)", decimal.Decimal("-12345678.0001")),
    "c_dec_zero": ("decimal(5,2)", decimal.Decimal("0.00")),
    "c_float": ("float", 1.25),
    "c_double": ("double", -1.5e-07),
    "c_double_big": ("double", 1e300),
    "c_char": ("char", "中文ü😀"),
    "c_empty": ("varchar", ""),
    "c_latin1": ("varchar", "café"),
    "c_gbk": ("varchar", "中文"),
    "c_binary": ("binary", b"\xff\x00\x80A"),
    "c_varbinary": ("varbinary", b"\xfe"),
    "c_blob": ("blob", b""),
    "c_text": ("text", "long text ü"),
    "c_json": ("json", '{"a": [1, 2]}'),
    "c_enum": ("enum", "b"),
    "c_set": ("set", "a,c"),
    # MySQL TIMESTAMP is an instant: ISO text with Z, whatever source.timezone says
    "c_ts": ("timestamp", dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)),
    "c_ts_epoch": ("timestamp", dt.datetime(1970, 1, 1, tzinfo=dt.UTC)),
    "c_datetime": ("datetime", dt.datetime(2023, 11, 14, 22, 13, 20, 5)),
    "c_datetime0": ("datetime", dt.datetime(9999, 12, 31, 23, 59, 59)),
    "c_zero_datetime": ("datetime", None),  # zero date -> NULL (source.zero_dates: null)
    "c_date": ("date", dt.date(1000, 1, 1)),
    "c_time_min": ("time", "-838:59:59"),
    "c_time": ("time", "12:00:01.500000"),
    "c_year": ("year", 2155),
    "c_bit": ("bit(8)", 255),
    "c_geometry": ("geometry", "0101000000"),
    "c_null": ("varchar", None),
    "c_empty_null": ("varchar", None),
}


def test_value_edges(options):
    [event] = check_golden(FOLDER / "values.b64", "dts-avro", options)
    after, source_types = event["after"], event["source_types"]
    assert "c_none" not in after  # EmptyObject NONE: absent, not NULL
    assert source_types["c_none"] == "varchar"
    for column, (source_type, typed) in VALUE_EDGES.items():
        assert source_types[column] == source_type, column
        parsed, errors = types.parse_values(
            pa.array([after[column]], pa.string()), types.arrow_type(source_type), timezone="+08:00"
        )
        assert errors == [], column
        assert parsed.to_pylist() == [typed], column


def test_postgres_values(options):
    [insert, _] = check_golden(FOLDER / "postgres.b64", "dts-avro", options)
    after, source_types = insert["after"], insert["source_types"]
    expected = {
        "paid_at": dt.datetime(2024, 1, 1, 2, 0, 0, 1, tzinfo=dt.UTC),
        "paid_local": dt.datetime(2024, 7, 1, 0, 0, tzinfo=dt.UTC),  # Asia/Shanghai is +08:00
        "paid_utc": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "seen": dt.datetime(2024, 1, 1, 10, 0, 0, 250000),
        "data": b"\xde\xad",
        "amount": "123456789012345678901234567890123456789.5",  # precision > 38 stays exact text
    }
    for column, typed in expected.items():
        parsed, errors = types.parse_values(pa.array([after[column]]), types.arrow_type(source_types[column]))
        assert errors == [], column
        assert parsed.to_pylist() == [typed], column


def test_schema_version_mismatch(tmp_path, shared, options):
    """The SDK's 14-field schema (no bornTimestamp): a plain datum read with the 15-field schema is a dead
    letter naming source.avro_schema; a container file carries its own schema and decodes."""
    schema = load_record_schema(shared / "schemas" / "aliyun_dts_record.avsc")
    old = {**schema, "fields": [f for f in schema["fields"] if f["name"] != "bornTimestamp"]}
    record = {
        "version": 1,
        "id": 9,
        "sourceTimestamp": 1700000000,
        "sourcePosition": "1@1",
        "source": {"sourceType": "MySQL", "version": "8.0"},
        "operation": "INSERT",
        "objectName": "db.t",
        "tags": {"pk_uk_info": json.dumps({"PRIMARY": ["id"]})},
        "fields": [{"name": "id", "dataTypeNumber": 8}],
        "afterImages": [("com.alibaba.dts.formats.avro.Integer", {"precision": 20, "value": "5"})],
    }
    datum = io.BytesIO()
    fastavro.schemaless_writer(datum, fastavro.parse_schema(old), record)
    (tmp_path / "old.b64").write_text(base64.b64encode(datum.getvalue()).decode() + "\n")
    with (tmp_path / "old.avro").open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(old), [record])
    events = event_records(
        decode_path(tmp_path, "dts-avro", options), ("op", "after", "error", "coordinates")
    )
    by_file = {e["coordinates"]["source"].rsplit("/", 1)[-1]: e for e in events}
    assert "source.avro_schema" in by_file["old.b64"]["error"]
    assert by_file["old.avro"]["after"] == {"id": "5"}
    assert "error" not in by_file["old.avro"]


def test_container_failure_is_reported_at_the_failing_record(shared):
    """Records before a corrupt block of a container file decode; the failure carries the next index."""
    import fastavro as fa

    from replicator.dialects.dts_avro import read_records

    schema = fa.parse_schema(load_record_schema(shared / "schemas" / "aliyun_dts_record.avsc"))
    records = list(fa.reader((FOLDER / "container.avro").open("rb")))
    out = io.BytesIO()
    fa.writer(out, schema, records, sync_interval=1)  # one block per record
    at = At(batch_id=0, source="x.avro", partition=0, offset=1, index=0, raw=None)
    results = list(read_records(out.getvalue()[:-40], schema, at))
    assert [r[2] is None for r in results] == [True] * (len(records) - 1) + [False]
    assert [r[1].index for r in results] == list(range(len(records)))
    assert results[-1][2].startswith("not a DTS Avro container file")
