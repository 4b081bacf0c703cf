"""Debezium column values with a Kafka Connect schema -> canonical text (the ``debezium`` dialect's values).

With ``schemas.enable=true`` each column's Connect ``type``, logical ``name`` and ``parameters`` (from
``schema.fields[field=after|before].fields``) drive the conversion; docs/dialects.md has the table. Decimals
are base64 two's-complement unscaled integers of any length, decoded exactly (``int.from_bytes``, never a
float); epoch days/ms/us/ns become date and wall-clock text with integer arithmetic (Debezium renders
DATETIME "by using UTC", so no zone applies).

The readers at the top keep the Spark SQL semantics the dialect was first written in: a number field is
read as text and ``try_cast`` to BIGINT (:func:`bigint`), base64 is ``try_to_binary(v, 'base64')``
(:func:`base64_bytes`), a field typed INT/BIGINT in the old ``from_json`` schema takes JSON integers only.
A value that does not convert is ``None``: the dialect names such columns in a dead letter.
"""

from __future__ import annotations

import binascii
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from replicator.dialects.datetext import clock_text, day_text
from replicator.dialects.jsontext import (
    BLANKS,
    INT32,
    cast_bigint,
    image,
    json_integer,
    string,
    text,
    to_json,
)
from replicator.dialects.pg_dates import INFINITE, INFINITE_TEXT, ZONED

Convert = Callable[[Any], str | None]

# Logical type name -> source type text for types.column_type (Debezium MySQL/PostgreSQL data type docs).
LOGICAL_TYPES = {
    "io.debezium.data.VariableScaleDecimal": "decimal",
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.IsoDate": "date",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.NanoTime": "time",
    "org.apache.kafka.connect.data.Time": "time",
    "io.debezium.time.IsoTime": "time",
    "io.debezium.time.ZonedTime": "timetz",
    "io.debezium.time.Timestamp": "datetime",
    "io.debezium.time.MicroTimestamp": "datetime",
    "io.debezium.time.NanoTimestamp": "datetime",
    "org.apache.kafka.connect.data.Timestamp": "datetime",
    # ISO text with a zone designator: an instant (isostring mode renders wall-clock values "...Z").
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.IsoTimestamp": "timestamp",
    "io.debezium.time.Year": "year",
    "io.debezium.time.MicroDuration": "interval",
    "io.debezium.time.NanoDuration": "interval",
    "io.debezium.time.Interval": "interval",
    "io.debezium.data.Json": "json",
    "io.debezium.data.Enum": "enum",
    "io.debezium.data.EnumSet": "set",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Xml": "xml",
    "io.debezium.data.Ltree": "varchar",
    "io.debezium.data.geometry.Geometry": "geometry",
    "io.debezium.data.geometry.Geography": "geography",
    "io.debezium.data.geometry.Point": "point",
}
CONNECT_TYPES = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "varchar",
    "bytes": "varbinary",
    "array": "array",
    "map": "json",
    "struct": "json",
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
BITS = "io.debezium.data.Bits"
# epoch unit per logical type: value -> (kind, units per second)
EPOCH_UNITS = {
    "io.debezium.time.Timestamp": ("ts", 1000),
    "org.apache.kafka.connect.data.Timestamp": ("ts", 1000),
    "io.debezium.time.MicroTimestamp": ("ts", 1_000_000),
    "io.debezium.time.NanoTimestamp": ("ts", 1_000_000_000),
    "io.debezium.time.Time": ("time", 1000),
    "org.apache.kafka.connect.data.Time": ("time", 1000),
    "io.debezium.time.MicroTime": ("time", 1_000_000),
    "io.debezium.time.NanoTime": ("time", 1_000_000_000),
}
DAY_TYPES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
MAX_SCALE = 100_000  # a scale beyond this is no column type's (PostgreSQL NUMERIC: 16383): NULL
# The longest unscaled value whose digits Python writes (its int -> str limit, 4,300 digits: 1,785 bytes),
# far beyond any declared decimal (PostgreSQL NUMERIC(1000)); longer is a value that does not decode (NULL:
# the event's error names its column), never an exception for the whole message.
MAX_NUMBER_BYTES = 1_785
MAX_DAYS = 3_000_000  # |epoch days| beyond this (about year 10183) is not a date: NULL

# ---- readers with the old Spark SQL semantics ----------------------------------------------------------

# try_cast trims bytes up to ' ' and DEL at both ends (UTF8String.trimAll).
CAST_TRIM = BLANKS + "\x7f"


def bigint(value: Any) -> int | None:
    """A JSON value read as text, then ``try_cast`` to BIGINT (lsn, ts_ns and BIGINT UNSIGNED exceed 2^53,
    and Debezium's docs also quote numbers: ``"ts_ms":"1620393591654"``)."""
    if type(value) is int:
        return json_integer(value)
    return cast_bigint(string(value), blanks=CAST_TRIM)


def structs(value: Any) -> list[dict[str, Any]] | None:
    """An ``ARRAY<STRUCT<...>>`` field: ``None`` when not an array or when an element is not an object
    (``from_json`` drops such an array whole); JSON null elements are left out."""
    if type(value) is not list or any(type(x) is not dict for x in value if x is not None):
        return None
    return [x for x in value if x is not None]


_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_B64_CLEAN = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?")


def _java_whitespace(c: str) -> bool:
    """java.lang.Character.isWhitespace."""
    if c in " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f":
        return True
    return c not in "\u00a0\u2007\u202f" and unicodedata.category(c) in ("Zs", "Zl", "Zp")


def base64_bytes(value: str) -> bytes | None:
    """Spark ``try_to_binary(value, 'base64')``: RFC 4648 symbols, whitespace ignored before the padding,
    an unpadded last group of 2 or 3 symbols or a padded one of 4 (Spark's UnBase64.isValidBase64, then
    Java's MIME decoder); ``None`` when malformed."""
    if _B64_CLEAN.fullmatch(value):
        symbols = value
    else:
        position = padding = 0
        for c in value:
            if c in _B64_ALPHABET:
                if padding:
                    return None  # padding must conclude the string
                position += 1
            elif c == "=":
                padding += 1
                if padding > 2 or position % 4 < 2:
                    return None
            elif not _java_whitespace(c) or padding:
                return None
        complete = (position + padding) % 4 == 0 if padding else position % 4 != 1
        if not complete:
            return None
        symbols = "".join(c for c in value if c in _B64_ALPHABET)
    symbols = symbols.rstrip("=")
    return binascii.a2b_base64(symbols + "=" * (-len(symbols) % 4))


# ---- value conversions ---------------------------------------------------------------------------------


def decimal_text(data: bytes | None, scale: int | None) -> str | None:
    """Kafka Connect Decimal bytes (big-endian two's complement unscaled value) + scale -> plain decimal
    text (``-123.45``, ``0.00``; a negative scale appends zeros). Exact for any length."""
    if data is None or scale is None or abs(scale) > MAX_SCALE or len(data) > MAX_NUMBER_BYTES:
        return None
    unscaled = int.from_bytes(data, "big", signed=True)
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled))
    if scale <= 0:
        return sign + (digits if digits == "0" else digits + "0" * -scale)
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def bits_text(data: bytes | None) -> str | None:
    """io.debezium.data.Bits: little-endian bytes -> unsigned integer text (types maps bit(n>1) to ints)."""
    return None if data is None or len(data) > MAX_NUMBER_BYTES else str(int.from_bytes(data, "little"))


def date_text(days: int | None) -> str | None:
    if days is None or abs(days) > MAX_DAYS:
        return None
    return day_text(days)


def timestamp_text(count: int | None, unit: int) -> str | None:
    """Epoch count (ms/us/ns) -> wall-clock 'YYYY-MM-DD HH:MM:SS[.f]'."""
    day = unit * 86_400
    if count is None or abs(count) // day > MAX_DAYS:
        return None
    days, rest = divmod(count, day)
    return f"{day_text(days)} {clock_text(rest, unit)}"


def time_text(count: int | None, unit: int) -> str | None:
    """Time of day (ms/us/ns since midnight) -> '[-]HH:MM:SS[.f]'."""
    if count is None:
        return None
    return ("-" if count < 0 else "") + clock_text(abs(count), unit)


def variable_scale_decimal(value: Any) -> str | None:
    """io.debezium.data.VariableScaleDecimal: ``{"scale": s, "value": base64}``."""
    if type(value) is not dict:
        return None
    digits = string(value.get("value"))
    if digits is None:
        return None
    return decimal_text(base64_bytes(digits), json_integer(value.get("scale"), INT32))


def converter(field: dict[str, Any]) -> Convert:
    """The conversion of a column's non-NULL JSON value, from its field schema (type, name, parameters).
    Decimal, Bits and bytes are base64 only when the JSON value is a string (``decimal.format=NUMERIC``
    writes a JSON number, kept as written)."""
    name = string(field.get("name"))
    if name == DECIMAL:
        scale = cast_bigint((image(field.get("parameters")) or {}).get("scale"), INT32, CAST_TRIM)
        return lambda v: decimal_text(base64_bytes(v), scale) if type(v) is str else text(v)
    if name == VARIABLE_SCALE_DECIMAL:
        return variable_scale_decimal
    if name in DAY_TYPES:
        return lambda v: date_text(bigint(v))
    if name == ZONED:  # PostgreSQL's 'infinity' / '-infinity' are no timestamp (pg_dates)
        return lambda v: None if v in INFINITE_TEXT else text(v)
    if name in EPOCH_UNITS:
        kind, unit = EPOCH_UNITS[name]
        epoch = timestamp_text if kind == "ts" else time_text
        return lambda v: epoch(bigint(v), unit)
    if name == BITS:
        return lambda v: bits_text(base64_bytes(v)) if type(v) is str else text(v)
    if string(field.get("type")) == "bytes":
        return lambda v: _hex(base64_bytes(v)) if type(v) is str else text(v)
    return text


def _unsigned(convert: Convert) -> Convert:
    """A BIGINT UNSIGNED published as int64 (bigint.unsigned.handling.mode=long, Debezium «MySQL connector»
    docs): a negative value is the two's complement of a value past 2^63-1: the exact value is that + 2^64."""

    def unwrapped(value: Any) -> str | None:
        number = bigint(value)
        if number is None:
            return None
        return str(number + 2**64) if number < 0 else convert(value)

    return unwrapped


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def source_type(field: dict[str, Any]) -> str | None:
    """Field schema -> source type text that replicator.types.column_type maps."""
    name = string(field.get("name"))
    parameters = image(field.get("parameters")) or {}
    if name == DECIMAL:
        precision = parameters.get("connect.decimal.precision")
        if precision is None:
            return "decimal"
        scale = parameters.get("scale")
        return f"decimal({precision},{'0' if scale is None else scale})"
    if name == BITS:
        length = parameters.get("length")
        return f"bit({'64' if length is None else length})"
    kind = string(field.get("type"))
    return LOGICAL_TYPES.get(name) or CONNECT_TYPES.get(kind) or kind  # type: ignore[arg-type]


# ``column.propagate.source.type`` (parameters of each field): the column's type in the database. With it,
# the value modes that lose what a column is can be told (seen with Debezium 3.5, tests/test_e2e.py).
SOURCE_TYPE = "__debezium.source.column.type"
SOURCE_LENGTH = "__debezium.source.column.length"
SOURCE_SCALE = "__debezium.source.column.scale"
_DECIMALS = frozenset(("decimal", "numeric", "dec", "fixed", "number"))
_BINARIES = frozenset(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bytea", "raw"))
_SIZED = frozenset(("char", "varchar", "binary", "varbinary", "bit", "datetime", "timestamp", "time"))
BINARY_AS_TEXT = (
    "binary.handling.mode base64/hex publishes binary columns as text that cannot be told apart "
    "(set binary.handling.mode=bytes)"
)
DECIMAL_AS_DOUBLE = (
    "decimal.handling.mode=double publishes DECIMAL as an approximate double "
    "(set decimal.handling.mode=precise or string)"
)


# Notices (logged once per table by the engine): settings whose effect the messages show but cannot undo.
NULL_DEFAULTS = (
    "columns {columns} have a DEFAULT in their field schemas: Kafka Connect's JsonConverter writes a NULL "
    "of such a column as the default unless value.converter.replace.null.with.default=false (true by "
    "default): set it on the Connect worker. Until then a stored value equal to the default may have been "
    "NULL in the database; the two cannot be told apart"
)
SCHEMALESS = (
    "Debezium messages without schemas (value.converter.schemas.enable=false): the column types are "
    "unknown and every column not declared in tables.types is stored as text; set "
    "value.converter.schemas.enable=true on the Connect worker, or declare the types in tables.types"
)


def propagated_type(parameters: dict[str, Any]) -> str | None:
    """The database type text of ``column.propagate.source.type``: ``DECIMAL`` + length 38 + scale 10 ->
    ``decimal(38,10)``, ``BIGINT UNSIGNED`` -> ``bigint unsigned``, ``DATETIME`` + 6 -> ``datetime(6)``."""
    kind = string(parameters.get(SOURCE_TYPE))
    if not kind:
        return None
    words = kind.lower().split()
    base, length = words[0], string(parameters.get(SOURCE_LENGTH))
    if base in _DECIMALS and length is not None:
        base = f"{base}({length},{string(parameters.get(SOURCE_SCALE)) or 0})"
    elif base in _SIZED and length is not None:
        base = f"{base}({length})"
    return " ".join([base, *words[1:]])


def refusal(field: dict[str, Any], database_type: str | None) -> str | None:
    """Why a column's values cannot be mirrored right whatever they are (a value mode that lost the type)."""
    if database_type is None:
        return None
    base, kind = database_type.split("(")[0].split(" ")[0], string(field.get("type"))
    if base in _BINARIES and kind == "string":
        return BINARY_AS_TEXT
    if base in _DECIMALS and kind in ("float32", "float64", "double", "float"):
        return DECIMAL_AS_DOUBLE
    return None


def _refused(_value: Any) -> str | None:
    return None


class Columns:
    """The conversions and source types of one image schema (the ``fields`` of ``schema.fields[after]``,
    else ``[before]``); ``reasons``: why a column's value may not convert (a value mode), for the error."""

    __slots__ = ("convert", "dates", "defaults", "reasons", "types")

    def __init__(self, fields: list[dict[str, Any]]) -> None:
        self.convert: dict[str, Convert] = {}
        self.types: dict[str, str | None] = {}
        self.reasons: dict[str, str] = {}
        self.defaults: list[str] = []  # nullable columns whose field schema has a default (NULL_DEFAULTS)
        self.dates: dict[str, str] = {}  # column -> date/time logical type (pg_dates)
        for field in fields:
            name = string(field.get("field"))
            if name is None:
                continue
            if field.get("default") is not None and field.get("optional") is not False:
                self.defaults.append(name)
            # a later field of the same name wins (LAST_WIN)
            database_type = propagated_type(image(field.get("parameters")) or {})
            convert = converter(field)
            reason = refusal(field, database_type)
            if reason is not None:
                convert = _refused
            elif (
                database_type is not None
                and database_type.startswith("bigint")
                and "unsigned" in database_type
            ):
                if string(field.get("type")) == "int64" and string(field.get("name")) is None:
                    convert = _unsigned(convert)
            self.convert[name] = convert
            self.types[name] = database_type or source_type(field)
            logical = string(field.get("name"))
            if logical in INFINITE or logical == ZONED:
                self.dates[name] = logical
            if reason is not None:
                self.reasons[name] = reason

    def image(self, row: dict[str, Any]) -> tuple[dict[str, str | None], list[str]]:
        """A row image as canonical text, and the columns whose non-NULL value did not convert."""
        out: dict[str, str | None] = {}
        lost: list[str] = []
        convert = self.convert
        for key, value in row.items():
            if value is None:
                out[key] = None
                continue
            conversion = convert.get(key)
            converted = text(value) if conversion is None else conversion(value)
            if converted is None:
                lost.append(key)
            out[key] = converted
        return out, lost


class ColumnsCache:
    """Messages of a topic repeat the same schema: the :class:`Columns` of an image schema are derived once
    and found again by the schema's compact JSON text (exact: ``1``, ``1.0`` and ``true`` differ there,
    where ``==`` on parsed JSON would take them for equal). One :class:`Columns` also means one
    ``source_types`` object for all those rows, which the Arrow builder flattens once."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.entries: dict[str, Columns] = {}

    def get(self, fields: Any) -> Columns | None:
        """The columns of an image schema's ``fields``; ``None`` when that is not an array of objects."""
        try:
            signature: str | None = to_json(fields)
        except TypeError:  # an integer beyond 64 bits, which orjson does not write: derive, do not cache
            signature = None
        hit = self.entries.get(signature) if signature is not None else None
        if hit is not None:
            return hit
        schemas = structs(fields)
        if schemas is None:
            return None
        columns = Columns(schemas)
        if signature is not None:
            if len(self.entries) >= self.LIMIT:
                self.entries.clear()
            self.entries[signature] = columns
        return columns
