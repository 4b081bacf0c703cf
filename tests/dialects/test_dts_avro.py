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
from replicator.commands.inspect import decode_path, event_records
from replicator.dialects import DecodeOptions
from replicator.dialects.base import Decoder, decode
from replicator.dialects.dts_avro import load_record_schema
from replicator.dialects.dts_record import record_schema
from replicator.dialects.events import At
from tests.dialects.golden import FIXTURES, check_golden, params, raw_records

FOLDER = FIXTURES / "dts-avro"


# Aliyun's published Record.avsc, a copy (provenance: _NOTES.json in the folder).
VENDOR_SCHEMA = FOLDER / "aliyun_dts_record.avsc"


@pytest.fixture(scope="module")
def options() -> DecodeOptions:
    """The project's own declaration of the Record layout (dts_record.py): no schema file needed."""
    return DecodeOptions()


@pytest.mark.parametrize("case", params("dts-avro"))
def test_golden(case, options):
    check_golden(case, "dts-avro", options)


def test_golden_container_file(options):
    """An object container file (*.avro) is one raw record holding many DTS records."""
    events = check_golden(FOLDER / "container.avro", "dts-avro", options)
    assert [e["op"] for e in events] == ["insert", "insert", "update", "delete", "filtered"]


def test_schema_file_is_optional_but_checked_when_named():
    """No schema file: the declared layout decodes. A named file that cannot be read stops the job
    before any batch (Dialect.check)."""
    datums = [base64.b64decode(line) for line in (FOLDER / "dml.b64").read_text().split()]
    events = decode(raw_records(datums), "dts-avro", DecodeOptions())
    assert events.num_rows == len(datums)
    assert set(events.column("error").to_pylist()) == {None}
    with pytest.raises(ValueError, match=r"source\.avro_schema"):
        Decoder("dts-avro", DecodeOptions(avro_schema=FOLDER / "no-such-schema.avsc"))


def test_declared_layout_reads_the_vendor_files_records_byte_for_byte():
    """The declared layout is Aliyun's Record.avsc on the wire: the same Avro Parsing Canonical Form (the
    spec's form for "same schema on the wire"), and every golden datum reads to the same record, consuming
    all its bytes, with either."""
    from fastavro.schema import to_parsing_canonical_form

    vendor = fastavro.parse_schema(load_record_schema(VENDOR_SCHEMA))
    declared = fastavro.parse_schema(record_schema())
    assert to_parsing_canonical_form(declared) == to_parsing_canonical_form(vendor)
    datums = [
        base64.b64decode(line)
        for name in ("dml", "ddl", "values", "postgres")
        for line in (FOLDER / f"{name}.b64").read_text().split()
    ]
    assert len(datums) >= 16  # every row, DDL and value branch of the golden inputs
    for datum in datums:
        read = []
        for schema in (vendor, declared):
            stream = io.BytesIO(datum)
            read.append(fastavro.schemaless_reader(stream, schema, None, return_named_type=True))
            assert stream.tell() == len(datum)
        assert read[0] == read[1]


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


def test_schema_version_mismatch(tmp_path, options):
    """The SDK's 14-field schema (no bornTimestamp): a plain datum read with the 15-field schema is a dead
    letter naming source.avro_schema; a container file carries its own schema and decodes."""
    old = record_schema(born_timestamp=False)
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


def test_container_failure_is_reported_at_the_failing_record():
    """Records before a corrupt block of a container file decode; the failure carries the next index."""
    import fastavro as fa

    from replicator.dialects.dts_avro import read_records

    schema = fa.parse_schema(record_schema())
    records = list(fa.reader((FOLDER / "container.avro").open("rb")))
    out = io.BytesIO()
    fa.writer(out, schema, records, sync_interval=1)  # one block per record
    at = At(batch_id=0, source="x.avro", partition=0, offset=1, index=0, raw=None)
    results = list(read_records(out.getvalue()[:-40], schema, at))
    assert [r[2] is None for r in results] == [True] * (len(records) - 1) + [False]
    assert [r[1].index for r in results] == list(range(len(records)))
    assert results[-1][2].startswith("not a DTS Avro container file")


def _varint(n: int) -> bytes:
    """An Avro long (zig-zag varint)."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _container_with_block(codec: str, data: bytes, count: int = 1) -> bytes:
    """A container file of the Record schema whose one block is ``data`` as it is (``codec``'s bytes)."""
    sync = b"replicator-bomb!"
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(record_schema()), [], codec=codec, sync_marker=sync)
    return out.getvalue() + _varint(count) + _varint(len(data)) + data + sync


def _deflated_zeros(size: int) -> bytes:
    """``size`` zero bytes as a raw deflate stream (Avro's deflate codec), compressed a MiB at a time."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(size >> 20)]
    return b"".join([*parts, packer.flush()])


@pytest.mark.parametrize("codec", ["deflate", "bzip2", "xz"])
def test_a_compressed_block_larger_than_the_limit_is_a_dead_letter(codec):
    """A decompression bomb: a few kilobytes whose block claims more than ``max_decompressed_bytes`` stop at
    the limit (never decompressed whole) and are a dead letter of the container at that record's index; a
    block within the limit decodes."""
    import bz2
    import lzma

    from replicator.dialects.dts_avro import read_records

    schema = fastavro.parse_schema(record_schema())
    records = list(fastavro.reader((FOLDER / "container.avro").open("rb")))
    datum = io.BytesIO()
    fastavro.schemaless_writer(datum, schema, records[0])
    compress = {
        "deflate": lambda b: _deflated_zeros(len(b)) if not b.strip(b"\0") else None,
        "bzip2": bz2.compress,
        "xz": lambda b: lzma.compress(b, format=lzma.FORMAT_XZ),
    }[codec]
    at = At(batch_id=0, source="bomb.avro", partition=0, offset=7, index=0, raw=None)
    limit = 1 << 20
    if codec == "deflate":
        import zlib

        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        good = packer.compress(datum.getvalue()) + packer.flush()
    else:
        good = compress(datum.getvalue())
    [(record, _at, error)] = read_records(_container_with_block(codec, good), schema, at, limit)
    assert error is None and record["id"] == records[0]["id"]
    bomb = _deflated_zeros(4 * limit) if codec == "deflate" else compress(bytes(4 * limit))
    assert len(bomb) < 10_000
    [(record, where, error)] = read_records(_container_with_block(codec, bomb), schema, at, limit)
    assert record is None and (where.source, where.offset, where.index) == ("bomb.avro", 7, 0)
    assert f"a {codec} block decompresses to more than 1,048,576 bytes" in error
    assert "source.max_decompressed_bytes" in error


def test_a_deflate_bomb_stops_at_the_default_limit():
    """256 MiB of zeros in ~250 KB of deflate: read up to the 64 MiB default, then a dead letter, with the
    worker's memory never holding the whole block."""
    import tracemalloc

    from replicator.dialects.base import MAX_DECOMPRESSED_BYTES
    from replicator.dialects.dts_avro import read_records

    bomb = _container_with_block("deflate", _deflated_zeros(256 << 20))
    assert len(bomb) < 300_000
    at = At(batch_id=0, source="bomb.avro", partition=0, offset=1, index=0, raw=None)
    tracemalloc.start()
    try:
        [(_record, _at, error)] = read_records(bomb, fastavro.parse_schema(record_schema()), at)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"more than {MAX_DECOMPRESSED_BYTES:,} bytes" in error
    assert peak < 3 * MAX_DECOMPRESSED_BYTES  # the limit and zlib's growing output buffer, not the block


def test_codecs_without_a_bounded_reader_are_refused():
    from replicator.dialects.dts_avro import read_records

    at = At(batch_id=0, source="x.avro", partition=0, offset=1, index=0, raw=None)
    schema = fastavro.parse_schema(record_schema())
    for codec in ("snappy", "zstandard", "lz4"):
        named = _varint(len(codec)) + codec.encode()  # the header's avro.codec value (Avro bytes)
        raw = _container_with_block("null", b"\0" * 8).replace(_varint(4) + b"null", named, 1)
        [(_record, _at, error)] = read_records(raw, schema, at)
        assert f"codec {codec!r} is not read" in error
