"""dts-avro: Aliyun DTS Avro records, ``com.alibaba.dts.formats.avro.Record`` (CloudCanal
«MQ 消息同步格式说明» "Aliyun DTS Avro").

Binary, so not detectable: pin ``source.dialect: dts-avro``. The record layout is declared in
:mod:`replicator.dialects.dts_record` (the 15-field Record); ``source.avro_schema`` names a schema file
instead, for the older 14-field SDK variant or an override. A raw record is one plain Avro datum (a Kafka
value, or one line of a ``*.b64`` file) or a whole object container file (``*.avro``, magic ``Obj\\x01``).
Each raw record is read with fastavro (:meth:`DtsAvro.decode_raw`), the schema parsed once per dialect
instance. Value encodings: Aliyun's DTS subscribe SDK (AvroRecordParser) and subscribe examples.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from replicator.dialects.base import MAX_DECOMPRESSED_BYTES, DecodeOptions, Dialect
from replicator.dialects.dts_record import record_schema
from replicator.dialects.events import At, Events, epoch_micros

if TYPE_CHECKING:
    from collections.abc import Iterator

SCHEMA_KEY = "source.avro_schema"
NAMESPACE = "com.alibaba.dts.formats.avro"
RECORD = f"{NAMESPACE}.Record"
CONTAINER_MAGIC = b"Obj\x01"

ROW_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
# Transaction and stream control records carry no row (Record.avsc Operation enum).
FILTERED_OPS = frozenset({"HEARTBEAT", "BEGIN", "COMMIT", "ROLLBACK", "ABORT", "CHECKPOINT", "NOOP"})
# Sources whose `dataTypeNumber` is MySQL's binlog MYSQL_TYPE_* code (Aliyun's subscribe examples,
# MysqlFieldConverter).
MYSQL_SOURCES = frozenset({"MySQL", "DRDS"})
MYSQL_TYPES = {
    1: "tinyint",
    2: "smallint",
    3: "int",
    8: "bigint",
    9: "mediumint",
    4: "float",
    5: "double",
    7: "timestamp",
    12: "datetime",
    10: "date",
    14: "date",
    11: "time",
    13: "year",
    16: "bit",
    245: "json",
    247: "enum",
    248: "set",
    249: "tinyblob",
    250: "mediumblob",
    251: "longblob",
    252: "blob",
    15: "varchar",
    253: "varchar",
    254: "char",
    255: "geometry",
    0: "decimal",
    246: "decimal",
}
# The binlog gives TEXT and BLOB (and CHAR and BINARY) one code; the value's union branch tells them apart.
TEXT_OF_BLOB = {"tinyblob": "tinytext", "mediumblob": "mediumtext", "longblob": "longtext", "blob": "text"}
BINARY_OF_CHAR = {"char": "binary", "varchar": "varbinary"}
SIGNED_MAX = {
    "tinyint": 2**7 - 1,
    "smallint": 2**15 - 1,
    "mediumint": 2**23 - 1,
    "int": 2**31 - 1,
    "bigint": 2**63 - 1,
}
# MySQL charset names -> Python codecs (MySQL's latin1 is cp1252).
CHARSETS = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "cp1252",
    "ascii": "ascii",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "gb18030": "gb18030",
    "big5": "big5",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
}
DDL_KINDS = (
    (r"create\s+(unique\s+|fulltext\s+|spatial\s+)?index\b", "CINDEX"),
    (r"drop\s+index\b", "DINDEX"),
    (r"create\b", "CREATE"),
    (r"alter\b", "ALTER"),
    (r"drop\s+(temporary\s+)?table\b", "ERASE"),
    (r"rename\b", "RENAME"),
    (r"truncate\b", "TRUNCATE"),
)
_LEADING_COMMENTS = re.compile(r"^(\s+|/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)*", re.S)
_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.I)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
NONE = object()  # EmptyObject.NONE: the column is not in the image (an absent key, not SQL NULL)


class ValueProblem(ValueError):
    pass


def load_record_schema(path: str | Path) -> dict[str, Any]:
    """The Record schema of Aliyun's ``Record.avsc`` as one self-contained JSON schema.

    The published file is a JSON list of named types with the Record last; each named type is inlined at
    its first use (Avro's rule), so the result can also head an object container file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{SCHEMA_KEY}: cannot read the DTS Avro schema {path}: {exc}") from None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{SCHEMA_KEY}: {path} is not JSON: {exc}") from None
    items = loaded if isinstance(loaded, list) else [loaded]
    defs = {_full_name(item): item for item in items if isinstance(item, dict) and "name" in item}
    record = defs.get(RECORD)
    if record is None:
        raise ValueError(f"{SCHEMA_KEY}: {path} defines no {RECORD}")
    return _inline(record, defs, set(), NAMESPACE)


def _full_name(node: dict[str, Any], namespace: str = NAMESPACE) -> str:
    name = str(node["name"])
    return name if "." in name else f"{node.get('namespace', namespace)}.{name}"


def _inline(node: Any, defs: dict[str, Any], seen: set[str], namespace: str) -> Any:
    if isinstance(node, str):
        full = node if "." in node else f"{namespace}.{node}"
        if full in defs and full not in seen:
            return _inline(defs[full], defs, seen, namespace)
        return full if full in defs else node
    if isinstance(node, list):
        return [_inline(item, defs, seen, namespace) for item in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if node.get("type") in ("record", "enum", "fixed") and "name" in node:
        full = _full_name(node, namespace)
        seen.add(full)
        out.pop("namespace", None)
        out["name"] = full
        namespace = full.rsplit(".", 1)[0]
    if "fields" in node:
        out["fields"] = [{**f, "type": _inline(f["type"], defs, seen, namespace)} for f in node["fields"]]
    for key in ("items", "values"):
        if key in node:
            out[key] = _inline(node[key], defs, seen, namespace)
    if isinstance(node.get("type"), dict | list):
        out["type"] = _inline(node["type"], defs, seen, namespace)
    return out


class DtsAvro(Dialect):
    name = "dts-avro"
    binary = True
    detectable = False

    def __init__(self, options: DecodeOptions | None = None) -> None:
        super().__init__(options)
        self._parsed: Any = None  # fastavro's parsed Record schema, read once per instance when needed

    def check(self) -> None:
        """A schema file named in the job file is a prerequisite: unreadable, the job stops before any
        batch."""
        self.parsed_schema()

    def parsed_schema(self) -> Any:
        import fastavro

        if self._parsed is None:
            path = self.options.avro_schema
            schema = record_schema() if path is None else load_record_schema(path)
            self._parsed = fastavro.parse_schema(schema)
        return self._parsed

    def decode_raw(self, raw: bytes | None, at: At, out: Events) -> None:
        """One raw record: a plain datum, or a container file whose records get index 0, 1, ..."""
        limit = self.options.max_decompressed_bytes
        for record, record_at, error in read_records(raw, self.parsed_schema(), at, limit):
            add_event(out, record, record_at, error, self.name)


def read_records(
    raw: bytes | None, parsed: Any, at: At, limit: int = MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[dict[str, Any] | None, At, str | None]]:
    """(record, where it is, error) for each record of one raw record; ``At.raw`` is the record's own bytes
    (a container file's record re-encoded as a plain datum). ``limit``: the most bytes one compressed block
    of a container file may decompress to (:func:`bounded_block_readers`)."""
    import fastavro

    if not raw:
        yield None, at, "empty record: no Avro datum"
        return
    if raw.startswith(CONTAINER_MAGIC):
        index = 0  # of the record being read: a failure is reported at its index
        bounded_block_readers()
        try:
            reader = fastavro.reader(_Container(raw, limit), return_named_type=True)
            writer_schema = reader.writer_schema
            if empty_items(writer_schema):
                raise ValueError(
                    "its schema has an array whose items take no bytes (null, an empty record): a few bytes"
                    " could claim billions of them"
                )
            for record in reader:
                datum = io.BytesIO()
                fastavro.schemaless_writer(datum, writer_schema, _unnamed(record))
                yield cast(dict, record), replace(at, index=index, raw=datum.getvalue()), None
                index += 1
        except Exception as exc:
            yield None, replace(at, index=index), f"not a DTS Avro container file: {exc}"
        return
    stream = io.BytesIO(raw)
    try:
        record = fastavro.schemaless_reader(stream, parsed, None, return_named_type=True)
    except Exception as exc:
        yield None, at, f"not a DTS Avro record ({SCHEMA_KEY}): {type(exc).__name__}: {exc}"
        return
    left = len(raw) - stream.tell()
    if left:
        yield (
            None,
            at,
            (
                f"not a DTS Avro record: {left} bytes left after the record; does {SCHEMA_KEY} match the "
                "producer's schema version (14 or 15 fields)?"
            ),
        )
        return
    yield cast(dict, record), at, None


class _Container(io.BytesIO):
    """A container file's bytes, with the most one of its blocks may decompress to (read by the block
    readers, which fastavro hands this stream, or a decoder holding it as ``fo``)."""

    def __init__(self, raw: bytes, limit: int) -> None:
        super().__init__(raw)
        self.limit = limit


class BlockTooLarge(ValueError):
    pass


def _block(source: Any) -> tuple[bytes, int]:
    """A compressed block's bytes (Avro: a long, its length, then the bytes) and the stream's limit.
    fastavro's compiled reader hands a block reader the stream, its pure-Python reader a decoder."""
    stream = getattr(source, "fo", source)
    limit = getattr(stream, "limit", MAX_DECOMPRESSED_BYTES)
    if hasattr(source, "read_bytes"):
        return source.read_bytes(), limit
    value = shift = 0
    while True:  # zig-zag varint (Avro's long)
        byte = stream.read(1)
        if not byte:
            raise EOFError("a block's length is cut short")
        value |= (byte[0] & 0x7F) << shift
        shift += 7
        if not byte[0] & 0x80:
            break
    length = (value >> 1) ^ -(value & 1)
    if length < 0:
        raise ValueError(f"a block's length is negative ({length})")
    return stream.read(length), limit


def _bounded(codec: str, decompressor: Any) -> Any:
    def read_block(source: Any) -> io.BytesIO:
        data, limit = _block(source)
        out = decompressor().decompress(data, limit + 1)
        if len(out) > limit:
            raise BlockTooLarge(
                f"a {codec} block decompresses to more than {limit:,} bytes (source.max_decompressed_bytes: "
                "a decompression bomb, or a block larger than the job allows)"
            )
        return io.BytesIO(out)

    return read_block


def _not_read(codec: str) -> Any:
    def read_block(source: Any) -> io.BytesIO:
        raise ValueError(f"codec {codec!r} is not read (no size-bounded decompressor; docs/dialects.md)")

    return read_block


@functools.cache
def bounded_block_readers() -> None:
    """fastavro's block readers (its documented ``BLOCK_READERS`` hook) replaced, once per process, by ones
    that stop at the stream's limit: fastavro's own decompress a whole block at once, so a few kilobytes of
    deflate claiming gigabytes filled the worker's memory. deflate, bzip2 and xz are read incrementally
    up to the limit; other codecs (snappy, zstandard, lz4: libraries this project does not install) are
    refused, so that installing one later opens no unbounded path."""
    import bz2
    import lzma
    import zlib

    from fastavro import read

    for codec in list(read.BLOCK_READERS):
        if codec != "null":
            read.BLOCK_READERS[codec] = _not_read(codec)
    for codec in ("snappy", "zstandard", "lz4"):
        read.BLOCK_READERS[codec] = _not_read(codec)
    read.BLOCK_READERS["deflate"] = _bounded("deflate", lambda: zlib.decompressobj(-15))
    read.BLOCK_READERS["bzip2"] = _bounded("bzip2", bz2.BZ2Decompressor)
    read.BLOCK_READERS["xz"] = _bounded("xz", lzma.LZMADecompressor)


def empty_items(schema: Any) -> bool:
    """Does a (writer's) schema have an array whose items are encoded in no bytes? Such an array's count
    alone makes fastavro build that many items: a container file's own schema (the producer's) with
    ``{"type": "array", "items": "null"}`` and a count of 2**40 is 177 bytes that never finish reading (the
    fuzz target found 10 million items taking a minute and 266 MB). Any other item takes at least a byte
    of the record, so the record's size bounds the work."""
    named: dict[str, Any] = {}

    def collect(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                collect(branch)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                named[node["name"]] = node
                named[node["name"].rsplit(".", 1)[-1]] = node
                if isinstance(node.get("namespace"), str):
                    named[f"{node['namespace']}.{node['name']}"] = node
            for value in node.values():
                collect(value)

    def width_zero(node: Any, seen: frozenset[int]) -> bool:
        if isinstance(node, str):
            if node == "null":
                return True
            found = named.get(node)
            return found is not None and id(found) not in seen and width_zero(found, seen | {id(found)})
        if not isinstance(node, dict):
            return False  # a union: its branch index takes a byte
        kind = node.get("type")
        if kind in ("record", "error"):
            return all(width_zero(f.get("type"), seen | {id(node)}) for f in node.get("fields") or [])
        if kind == "fixed":
            return node.get("size") == 0
        return kind == "null" or (isinstance(kind, dict | str) and kind != node and width_zero(kind, seen))

    def arrays(node: Any) -> bool:
        if isinstance(node, list):
            return any(arrays(branch) for branch in node)
        if not isinstance(node, dict):
            return False
        if node.get("type") == "array" and width_zero(node.get("items"), frozenset()):
            return True
        return any(arrays(value) for value in node.values())

    collect(schema)
    return arrays(schema)


def _unnamed(value: Any) -> Any:
    """Undo ``return_named_type`` (union branches as (name, value)) so a record can be written back."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _unnamed(value[1])
    if isinstance(value, dict):
        return {k: _unnamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unnamed(v) for v in value]
    return value


def add_event(out: Events, record: dict[str, Any] | None, at: At, error: str | None, dialect: str) -> None:
    """One Record (or a record that could not be read) -> one row of ``out``."""
    if record is None:
        out.fail(at, dialect, error or "no record")
        return
    event: dict[str, Any] = {}
    try:
        _fill(event, record)
    except ValueProblem as exc:
        get = event.get
        out.fail(at, dialect, str(exc), database=get("database"), schema=get("schema"), table=get("table"))
        return
    order: Any = (record.get("id"),)  # Record.id; the only ordering key DTS gives
    out.add(at, dialect, event.pop("op"), order=order, **event)


def _fill(out: dict[str, Any], record: dict[str, Any]) -> None:
    """Map one Record onto the keyword arguments of :meth:`Events.add` in ``out``; raises ValueProblem for
    a dead letter."""
    operation = str(record.get("operation"))
    source = record.get("source") or {}
    source_type = str(source.get("sourceType"))
    # Seconds (Record.avsc; the SDK), tolerating milliseconds as events.epoch_micros does.
    out["event_time"] = epoch_micros(record.get("sourceTimestamp"))
    out["position"] = record.get("sourcePosition") or f"id={record.get('id')}"
    out["meta"] = {
        k: str(v)
        for k, v in (
            ("sourceType", source_type),
            ("sourceTxid", record.get("sourceTxid")),
            ("safeSourcePosition", record.get("safeSourcePosition")),
            ("bornTimestamp", record.get("bornTimestamp")),
            ("id", record.get("id")),
        )
        if v not in (None, "")
    }
    out.update(_names(record.get("objectName"), source_type))

    if operation in FILTERED_OPS:
        out["op"] = "filtered"
        return
    if operation == "DDL":
        sql = record.get("afterImages")
        if not isinstance(sql, str):
            raise ValueProblem("wrong shape: a DDL record carries its statement as a string in afterImages")
        kind = _ddl_kind(sql)
        out.update(op="truncate" if kind == "TRUNCATE" else "ddl", ddl_kind=kind, ddl_sql=sql)
        if not out.get("database"):
            raise ValueProblem("missing database (objectName)")
        return
    op = ROW_OPS.get(operation)
    if op is None:
        raise ValueProblem(f"unsupported DTS operation {operation!r}")
    out["op"] = op
    fields = record.get("fields")
    if not isinstance(fields, list):
        raise ValueProblem("wrong shape: a row record without its fields list")
    out["primary_key"] = primary_key = _primary_key(record.get("tags") or {})
    if not out.get("database"):
        raise ValueProblem("missing database (objectName)")
    if not out.get("table"):
        raise ValueProblem("missing table (objectName)")
    hints: dict[str, list[tuple[str, Any]]] = {}
    images = {}
    for side in ("after", "before"):
        wanted = (side == "after" and op != "delete") or (side == "before" and op != "insert")
        if wanted:
            images[side] = _image(record.get(f"{side}Images"), fields, side, hints)
    out["after"], out["before"] = images.get("after"), images.get("before")
    out["source_types"] = _source_types(fields, hints, source_type in MYSQL_SOURCES)
    if not primary_key:  # a table without a primary key: resolved by the engine (tables.keys, ...)
        return
    key_image = images.get("after") or images.get("before") or {}
    if any(key_image.get(k) is None for k in primary_key):
        raise ValueProblem(f"NULL or absent primary key column in {json.dumps(primary_key)}")


def _names(object_name: str | None, source_type: str) -> dict[str, str | None]:
    """``db.table`` (MySQL) or ``db.schema.table`` (PostgreSQL, Oracle, SQL Server ...)."""
    if not object_name:
        return {}
    if source_type in MYSQL_SOURCES:
        database, _, table = object_name.partition(".")
        return {"database": database, "table": table or None}
    parts = object_name.split(".", 2)
    if len(parts) == 3:
        return {"database": parts[0], "schema": parts[1], "table": parts[2]}
    return {"database": parts[0], "table": parts[1] if len(parts) > 1 else None}


def _ddl_kind(sql: str) -> str:
    text = _LEADING_COMMENTS.sub("", sql).lower()
    return next((kind for pattern, kind in DDL_KINDS if re.match(pattern, text)), "QUERY")


def _primary_key(tags: dict[str, str]) -> list[str]:
    text = tags.get("pk_uk_info")
    if not text:
        return []
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        raise ValueProblem(f"tags.pk_uk_info is not JSON: {text!r}") from None
    primary = info.get("PRIMARY") if isinstance(info, dict) else None
    return [str(c) for c in primary] if isinstance(primary, list) else []


def _image(
    values: Any, fields: list[dict[str, Any]], side: str, hints: dict[str, list[tuple[str, Any]]]
) -> dict[str, str | None]:
    if not isinstance(values, list):
        raise ValueProblem(f"wrong shape: no {side}Images list")
    if len(values) != len(fields):
        raise ValueProblem(f"wrong shape: {len(fields)} fields but {len(values)} values in {side}Images")
    image = {}
    for field, value in zip(fields, values, strict=True):
        name = field["name"]
        try:
            text, hint = convert(value)
        except (ValueError, OverflowError, LookupError) as exc:
            raise ValueProblem(f"column {name!r} ({side}Images): {exc}") from None
        if hint is not None:
            hints.setdefault(name, []).append(hint)
        if text is not NONE:
            image[name] = text
    return image


def convert(value: Any) -> tuple[Any, tuple[str, Any] | None]:
    """One union value -> (canonical text, None for SQL NULL or NONE for absent; a type hint)."""
    if value is None:
        return None, None
    branch, body = value
    kind = branch.rsplit(".", 1)[-1]
    if kind == "EmptyObject":
        return (NONE if body == "NONE" else None), None
    if kind == "Integer":
        return str(body["value"]).strip(), (kind, (body["precision"], int(body["value"])))
    if kind == "Decimal":
        return str(body["value"]).strip(), (kind, (body["precision"], body["scale"]))
    if kind == "Float":
        return repr(float(body["value"])), (kind, None)
    if kind == "Character":
        charset = str(body["charset"]).lower()
        if charset == "binary":
            return body["value"].hex(), ("BinaryObject", "varbinary")
        return body["value"].decode(CHARSETS.get(charset, charset)), (kind, charset)
    if kind in ("BinaryObject", "BinaryGeometry"):
        return body["value"].hex(), (kind, str(body["type"]).lower())
    if kind in ("TextObject", "TextGeometry"):
        return body["value"], (kind, str(body["type"]).lower())
    if kind == "Timestamp":
        # `millis` holds MICROseconds (the SDK's setMicro).
        moment = _EPOCH + dt.timedelta(seconds=body["timestamp"], microseconds=body["millis"])
        return _iso(moment) + "Z", (kind, None)
    if kind == "DateTime":
        return _datetime_text(body)
    if kind == "TimestampWithTimeZone":
        text, _ = _datetime_text(body["value"])
        return text.replace(" ", "T") + _offset(str(body["timezone"]), body["value"]), (kind, None)
    raise ValueProblem(f"unknown value branch {branch}")


def _iso(moment: dt.datetime) -> str:
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}"
    )


def _datetime_text(body: dict[str, Any]) -> tuple[str, tuple[str, str]]:
    """DateTime's set parts say what it is: DATETIME, DATE (y/m/d), TIME (h/m/s) or YEAR (year only)."""
    year, month, day = body.get("year"), body.get("month"), body.get("day")
    hour, minute, second, micros = (
        body.get("hour"),
        body.get("minute"),
        body.get("second"),
        body.get("millis"),
    )
    fraction = "" if micros is None else f".{abs(micros):06d}"  # `millis` holds microseconds (§5)
    has_date = month is not None or day is not None
    has_time = hour is not None or minute is not None or second is not None
    if year is not None and not has_date and not has_time:
        return f"{year:04d}", ("DateTime", "year")
    date = f"{year or 0:04d}-{month or 0:02d}-{day or 0:02d}"
    if has_date and not has_time:
        return date, ("DateTime", "date")
    parts = [hour or 0, minute or 0, second or 0]
    if not has_date:
        # TIME may be negative or above 99 hours (MySQL: -838:59:59 .. 838:59:59).
        sign = "-" if any(p < 0 for p in parts) or (micros or 0) < 0 else ""
        clock = ":".join(f"{abs(p):02d}" for p in parts)
        return f"{sign}{clock}{fraction}", ("DateTime", "time")
    return f"{date} {parts[0]:02d}:{parts[1]:02d}:{parts[2]:02d}{fraction}", ("DateTime", "datetime")


def _offset(zone: str, local: dict[str, Any]) -> str:
    """TimestampWithTimeZone's zone -> an ISO offset (``Z``, ``+08:00``); zone names resolve at that time."""
    text = zone.strip()
    if text.upper() in ("", "Z", "UTC", "GMT"):
        return "Z"
    match = _OFFSET.match(text)
    if match:
        sign, hours, minutes = match.groups()
        return f"{sign}{int(hours):02d}:{int(minutes or 0):02d}"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        tz = ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueProblem(f"unknown time zone {zone!r}") from None
    wall = dt.datetime(
        local.get("year") or 1970,
        local.get("month") or 1,
        local.get("day") or 1,
        local.get("hour") or 0,
        local.get("minute") or 0,
        local.get("second") or 0,
        tzinfo=tz,
    )
    offset = wall.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _source_types(
    fields: list[dict[str, Any]], hints: dict[str, list[tuple[str, Any]]], mysql: bool
) -> dict[str, str]:
    return {f["name"]: _source_type(f.get("dataTypeNumber"), hints.get(f["name"], []), mysql) for f in fields}


def _source_type(number: int | None, hints: list[tuple[str, Any]], mysql: bool) -> str:
    """Type text for types.column_type: the MySQL type code, refined by the values' union branches."""
    kinds = {kind for kind, _ in hints}
    base = MYSQL_TYPES.get(number) if mysql and number is not None else None
    if base is None:
        return _type_from_values(hints) or f"dts:{number}"
    if base == "decimal":
        scales = [info for kind, info in hints if kind == "Decimal"]
        return f"decimal({scales[0][0]},{scales[0][1]})" if scales else "decimal"
    if base == "bit":
        # Integer.precision carries the bit width; without a value the widest BIT keeps every value.
        widths = [info[0] for kind, info in hints if kind == "Integer" and info[0] > 0]
        return f"bit({max(widths)})" if widths else "bit(64)"
    if base in SIGNED_MAX:
        # Type codes carry no signedness: a value above the signed range marks the column unsigned.
        values = [info[1] for kind, info in hints if kind == "Integer"]
        return f"{base} unsigned" if any(v > SIGNED_MAX[base] for v in values) else base
    binary = "BinaryObject" in kinds
    if base in TEXT_OF_BLOB and not binary:
        # Without a byte value (all NULL) the column reads as TEXT: hex kept as text loses nothing, while
        # text parsed as hex would be a dead letter.
        return TEXT_OF_BLOB[base]
    if base in BINARY_OF_CHAR and binary:
        return BINARY_OF_CHAR[base]
    return base


def _type_from_values(hints: list[tuple[str, Any]]) -> str | None:
    """Type text from the union branch alone (sources whose type codes are not MySQL's)."""
    from replicator.types import column_type

    if not hints:
        return None
    kind, info = hints[0]
    if kind == "Integer":
        return "bigint" if all(-(2**63) <= i[1] < 2**63 for k, i in hints if k == "Integer") else "numeric"
    if kind == "Decimal":
        return f"decimal({info[0]},{info[1]})"
    if kind in ("BinaryObject", "TextObject"):
        fallback = "binary" if kind == "BinaryObject" else "text"
        return info if column_type(info).known else fallback
    return {
        "Float": "double",
        "Character": "varchar",
        "Timestamp": "timestamp",
        "TimestampWithTimeZone": "timestamp with time zone",
        "BinaryGeometry": "geometry",
        "TextGeometry": "geometry",
    }.get(kind) or (info if kind == "DateTime" else None)
