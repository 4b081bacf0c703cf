"""Source column types -> Delta (Arrow) types, and canonical value text -> typed Arrow arrays.

Dialects normalise every value to *canonical text* in Spark (docs/dialects.md, "Canonical values"):
integers and decimals as plain decimal text, floats as text ``float()`` reads, booleans as
true/false/t/f/1/0, dates ``YYYY-MM-DD``, times of day as text, DATETIME as wall-clock text
``YYYY-MM-DD HH:MM:SS[.ffffff]``, TIMESTAMP as ISO text with an offset or as wall-clock text in
``source.timezone``, binary as hex. Parsing here is strict: a value that does not fit its column is
reported with its row index and never becomes NULL.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Folded rows typed by the fold tasks (type_images): the mirror's columns as one struct, and per row the
# message of a value that does not fit (NULL: the row is whole).
TYPED = "typed"
TYPE_ERROR = "type_error"
REST = "rest"  # the entries of columns the mirror did not have (replicator.fold.typed)

# Unsigned integers widen to the next signed type (Delta has no unsigned types).
_INTS = {
    "tinyint": (pa.int8(), pa.int16()),
    "int1": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "int2": (pa.int16(), pa.int32()),
    "smallserial": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "integer": (pa.int32(), pa.int64()),
    "int4": (pa.int32(), pa.int64()),
    "serial": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), pa.decimal128(20, 0)),
    "int8": (pa.int64(), pa.decimal128(20, 0)),
    "bigserial": (pa.int64(), pa.decimal128(20, 0)),
    "long": (pa.int64(), pa.decimal128(20, 0)),
}
_DECIMALS = {"decimal", "numeric", "number", "dec", "fixed"}
_FLOATS = {
    "float",
    "double",
    "real",
    "float4",
    "float8",
    "double precision",
    "binary_float",
    "binary_double",
    "smallmoney",
}
_BOOLS = {"bool", "boolean"}
_BINARY = {
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
    "bytea",
    "raw",
    "long raw",
    "image",
    "bfile",
    "varbinary(max)",
}
_STRINGS = {
    "char",
    "varchar",
    "nchar",
    "nvarchar",
    "varchar2",
    "nvarchar2",
    "text",
    "tinytext",
    "mediumtext",
    "longtext",
    "ntext",
    "clob",
    "nclob",
    "long",
    "string",
    "enum",
    "set",
    "json",
    "jsonb",
    "uuid",
    "uniqueidentifier",
    "xml",
    "character",
    "character varying",
    "bpchar",
    "name",
    "citext",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "interval",
    "time",
    "timetz",
    "time without time zone",
    "time with time zone",
    "int4range",
    "int8range",
    "numrange",
    "tsrange",
    "tstzrange",
    "daterange",
    "tsvector",
    "tsquery",
    "point",
    "line",
    "lseg",
    "box",
    "path",
    "polygon",
    "circle",
    "geometry",
    "geography",
    "hierarchyid",
    "sql_variant",
    "rowid",
    "urowid",
    "money",
    "bit varying",
    "varbit",
    "oid",
    "array",
    "other",
}
_DATES = {"date"}
_NTZ = {"datetime", "datetime2", "smalldatetime", "timestamp without time zone", "timestamp_ntz"}
# MySQL TIMESTAMP is an instant (UTC in the binlog); PostgreSQL/Oracle name their instants explicitly.
_TZ = {
    "timestamp",
    "timestamptz",
    "timestamp with time zone",
    "datetimeoffset",
    "timestamp with local time zone",
    "timestamp_ltz",
}

# java.sql.Types codes (CloudCanal «MQ 消息同步格式说明»'s table) for columns that arrive without a type name.
JDBC_TYPES: dict[int, pa.DataType] = {
    -7: pa.bool_(),
    16: pa.bool_(),
    -6: pa.int8(),
    5: pa.int16(),
    4: pa.int32(),
    -5: pa.int64(),
    6: pa.float64(),
    7: pa.float64(),
    8: pa.float64(),
    2: pa.string(),
    3: pa.string(),
    1: pa.string(),
    12: pa.string(),
    -1: pa.string(),
    -9: pa.string(),
    -15: pa.string(),
    -16: pa.string(),
    2005: pa.string(),
    2011: pa.string(),
    1111: pa.string(),
    2000: pa.string(),
    2003: pa.string(),
    91: pa.date32(),
    92: pa.string(),
    93: pa.timestamp("us"),
    2014: pa.timestamp("us", tz="UTC"),
    2013: pa.string(),
    -2: pa.binary(),
    -3: pa.binary(),
    -4: pa.binary(),
    2004: pa.binary(),
}

_TYPE_RE = re.compile(
    r"^\s*(?P<base>[a-z_][a-z0-9_ ]*)\s*(?:\((?P<params>[^)]*)\))?"
    r"\s*(?P<rest>[a-z ]*?)\s*(?P<array>\[\])?\s*$"
)


class UnknownType(ValueError):
    pass


@dataclass(frozen=True)
class ColumnType:
    """A parsed source type: the Delta/Arrow type and whether it was recognised."""

    arrow: pa.DataType
    known: bool = True
    # BIGINT UNSIGNED (decimal(20,0)): a negative value is the two's complement of one past 2^63-1, as a
    # signed 64-bit field carries it (Debezium's bigint.unsigned.handling.mode=long, its default).
    unsigned64: bool = False

    @property
    def metadata(self) -> dict[str, str] | None:
        """The mirror field's metadata this type needs (:data:`UNSIGNED64`), or None."""
        return UNSIGNED64 if self.unsigned64 else None


UNSIGNED64 = {"replicator.unsigned": "bigint"}  # field metadata of a BIGINT UNSIGNED mirror column
_UNSIGNED64_KEY = b"replicator.unsigned"


@lru_cache(maxsize=4096)
def column_type(source_type: str | None) -> ColumnType:
    """Map source type text (MySQL, PostgreSQL/GaussDB, Oracle, SQL Server) or ``jdbc:<code>`` to Arrow.

    Unknown types map to string (the text is kept verbatim) with ``known=False`` so callers can warn.

    Example:
        >>> column_type("int(10) unsigned").arrow
        DataType(int64)
        >>> column_type("decimal(12,2)").arrow
        Decimal128Type(decimal128(12, 2))
    """
    if source_type is None or not str(source_type).strip():
        return ColumnType(pa.string(), known=False)
    text = str(source_type).strip().lower()
    if text.startswith("jdbc:"):
        try:
            return ColumnType(JDBC_TYPES[int(text[5:])])
        except (KeyError, ValueError):
            return ColumnType(pa.string(), known=False)
    match = _TYPE_RE.match(text)
    if not match:
        return ColumnType(pa.string(), known=False)
    base, params, rest = match.group("base").strip(), match.group("params"), match.group("rest") or ""
    if match.group("array") or base.startswith("_"):
        return ColumnType(pa.string())  # PG arrays keep their text form
    base = base.removesuffix(" zerofill").strip()
    unsigned = "unsigned" in rest or base.endswith(" unsigned")
    base = base.removesuffix(" unsigned").strip()
    # "timestamp(6) without time zone": the zone words follow the parameters.
    if rest.strip() in {"without time zone", "with time zone", "with local time zone"}:
        base = f"{base} {rest.strip()}"
    args = [p.strip() for p in params.split(",")] if params else []

    if base in _INTS:
        signed, widened = _INTS[base]
        return ColumnType(widened if unsigned else signed, unsigned64=unsigned and signed == pa.int64())
    if base in _DECIMALS:
        if not args or not args[0].isdigit():
            return ColumnType(pa.string())  # unconstrained precision: exact text
        precision = int(args[0])
        scale = int(args[1]) if len(args) > 1 and args[1].lstrip("-").isdigit() else 0
        if precision > 38 or scale < 0 or scale > precision:
            return ColumnType(pa.string())
        return ColumnType(pa.decimal128(precision, scale))
    if base in _FLOATS:
        return ColumnType(pa.float64())
    if base in _BOOLS:
        return ColumnType(pa.bool_())
    if base == "bit":
        width = int(args[0]) if args and args[0].isdigit() else 1
        if width == 1:
            return ColumnType(pa.bool_())
        return ColumnType(pa.int64() if width < 64 else pa.decimal128(20, 0))
    if base == "year":
        return ColumnType(pa.int16())
    if base in _DATES:
        return ColumnType(pa.date32())
    if base in _NTZ:
        return ColumnType(pa.timestamp("us"))
    if base in _TZ:
        return ColumnType(pa.timestamp("us", tz="UTC"))
    if base in _BINARY:
        return ColumnType(pa.binary())
    if base in _STRINGS:
        return ColumnType(pa.string())
    return ColumnType(pa.string(), known=False)


def arrow_type(source_type: str | None) -> pa.DataType:
    return column_type(source_type).arrow


# ---- canonical text -> Arrow ----------------------------------------------------------------------------

_OFFSET = r"(Z|z|[+-]\d{2}(:?\d{2})?)$"
_ZERO_DATE = r"^0000-00-00"
_TRUE = {"true", "t", "1", "yes", "y", "on"}
_FALSE = {"false", "f", "0", "no", "n", "off"}


@dataclass(frozen=True)
class ValueError_:
    row: int
    message: str


def _scalar_ok(value: str, convert) -> bool:  # type: ignore[no-untyped-def]
    try:
        convert(pa.array([value], pa.string()))
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
        return False


def _convert(values: pa.Array, convert, target: pa.DataType) -> tuple[pa.Array, list[int]]:  # type: ignore[no-untyped-def]
    """Vectorized conversion; on failure, locate the bad rows one by one and convert the rest."""
    try:
        return convert(values), []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
        pass
    items = values.to_pylist()
    bad = [i for i, v in enumerate(items) if v is not None and not _scalar_ok(v, convert)]
    bad_set = set(bad)
    cleaned = pa.array([None if i in bad_set else v for i, v in enumerate(items)], pa.string())
    return convert(cleaned), bad


def _to_bool(values: pa.Array) -> pa.Array:
    lowered = pc.utf8_lower(pc.utf8_trim_whitespace(values))
    is_true = pc.is_in(lowered, value_set=pa.array(sorted(_TRUE)))
    is_false = pc.is_in(lowered, value_set=pa.array(sorted(_FALSE)))
    if not pc.all(pc.or_kleene(pc.or_kleene(is_true, is_false), pc.is_null(values)), min_count=0).as_py():
        raise ValueError("not a boolean")  # (min_count 0: no values are all booleans, not NULL)
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), is_true)


def _to_binary(values: pa.Array) -> pa.Array:
    return pa.array([None if v is None else bytes.fromhex(v) for v in values.to_pylist()], pa.binary())


def _byte_at(values: pa.Array, at: int, byte: bytes) -> bool:
    """Whether some text has ``byte`` at byte ``at``: read from the array's buffers with NumPy, so that a
    regex rewrite of a few texts (an ISO "T") is not run over every value of a column that has none."""
    from replicator.model import text_buffers

    starts, data = text_buffers(values)
    long = np.flatnonzero(np.diff(starts) > at)
    return bool(len(long)) and bool((data[starts[long] + at] == byte[0]).any())


def _to_timestamp_tz(values: pa.Array, timezone: str) -> pa.Array:
    target = pa.timestamp("us", tz="UTC")
    has_offset = pc.match_substring_regex(values, _OFFSET)
    with_offset = pc.cast(pc.if_else(has_offset, values, pa.scalar(None, pa.string())), target)
    local = pc.cast(pc.if_else(has_offset, pa.scalar(None, pa.string()), values), pa.timestamp("us"))
    if timezone == "UTC":  # a wall clock in UTC is its instant: Arrow's cast keeps the value
        zoned = local
    else:
        zoned = pc.assume_timezone(local, timezone=timezone, ambiguous="earliest", nonexistent="earliest")
    return pc.if_else(has_offset, with_offset, pc.cast(zoned, target))


def parse_values(
    values: pa.Array,
    target: pa.DataType,
    *,
    timezone: str = "UTC",
    zero_dates: str = "null",
) -> tuple[pa.Array, list[ValueError_]]:
    """Canonical text -> ``target``. Returns the typed array and the rows whose value does not fit."""
    values = values.cast(pa.string()) if values.type != pa.string() else values
    original = values
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return values, []
    errors: list[ValueError_] = []
    if pa.types.is_date(target) or pa.types.is_timestamp(target):
        zero = pc.fill_null(pc.match_substring_regex(values, _ZERO_DATE), False)
        if pc.any(zero).as_py():
            if zero_dates == "dead_letter":
                errors.extend(
                    ValueError_(i, "zero date (source.zero_dates: dead_letter)")
                    for i, z in enumerate(zero.to_pylist())
                    if z
                )
            values = pc.if_else(zero, pa.scalar(None, pa.string()), values)
        if pa.types.is_timestamp(target) and _byte_at(values, 10, b"T"):
            values = pc.replace_substring_regex(values, r"^(\d{4}-\d{2}-\d{2})T", r"\1 ")

    if pa.types.is_boolean(target):
        convert = _to_bool
    elif pa.types.is_binary(target):
        convert = _to_binary
    elif pa.types.is_timestamp(target) and target.tz is not None:

        def convert(v: pa.Array) -> pa.Array:
            return _to_timestamp_tz(v, timezone)
    else:

        def convert(v: pa.Array) -> pa.Array:
            return pc.cast(pc.utf8_trim_whitespace(v), target, safe=True)

    refused: list[int] = []
    if pa.types.is_decimal(target) or pa.types.is_integer(target):
        values, refused = _exact_numbers(values, target)
    typed, bad = _convert(values, convert, target)
    if pa.types.is_floating(target):
        typed, out_of_range = _finite_floats(values, typed)
        bad = sorted({*bad, *out_of_range})
    bad = sorted({*bad, *refused})
    if bad:
        items = original.to_pylist()
        errors.extend(ValueError_(i, f"value {shown(items[i])} does not fit {target}") for i in bad)
    if pa.types.is_date(target) or pa.types.is_timestamp(target):
        typed, outside = _readable_years(typed, target)
        if outside:
            items = original.to_pylist()
            errors.extend(
                ValueError_(i, f"value {shown(items[i])} is outside the years 1 to 9999 Delta readers read")
                for i in outside
            )
    return typed, errors


# Years 1..9999: what a Delta table's readers read (Python's datetime, hence deltalake's to_pylist and
# pandas, fail on the whole column with "year 0 is out of range"); Arrow's cast reads "0000-01-01".
_FIRST_DAY = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
_LAST_DAY = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _readable_years(typed: pa.Array, target: pa.DataType) -> tuple[pa.Array, list[int]]:
    """Dates and timestamps outside years 1..9999 (in UTC) -> NULL and their rows (two comparisons over the
    column's integers; nothing more where all are inside)."""
    if pa.types.is_date32(target):
        numbers, first, last = typed.view(pa.int32()), _FIRST_DAY, _LAST_DAY
    elif pa.types.is_timestamp(target) and target.unit != "ns":  # ns reaches years 1677..2262 only
        per_day = _PER_DAY[target.unit]
        numbers, first, last = typed.view(pa.int64()), _FIRST_DAY * per_day, (_LAST_DAY + 1) * per_day - 1
    else:
        return typed, []
    outside = pc.fill_null(pc.or_(pc.less(numbers, first), pc.greater(numbers, last)), False)
    if not pc.any(outside).as_py():
        return typed, []
    rows = pc.indices_nonzero(outside).to_pylist()
    return pc.if_else(outside, pa.scalar(None, target), typed), rows


def shown(value: str | None, limit: int = 60) -> str:
    """A value for an error message: its repr, cut (with its length) when long, so that one 10,000-digit
    value does not make a 10 KB message."""
    if value is None or len(value) <= limit:
        return repr(value)
    return f"{value[: limit - 20]!r}... ({len(value):,} characters)"


# Arrow's text -> decimal cast reads the digits into a 128-bit integer and rescales it without checking
# for overflow (pyarrow 26: 400 nines into decimal(10,2) gave -1.00, a 1 and 399 zeros 0.00; 100 digits
# into decimal(38,0) a wrong 38-digit number; "239" into decimal(38,38) 0.80234...). Text of at most 38
# characters has at most 38 digits, which a 128-bit integer holds, and when its whole part fits the
# column the rescaled value does too: the cast's own checks are then exact. Other text (longer, an
# exponent, a whole part too wide) is read here, exactly, and handed to the cast as its short canonical
# form, or refused.
_TRUSTED_LENGTH = 38
_NUMBER = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_INTEGER = re.compile(r"(-?)(\d+)")  # what Arrow's text -> integer cast reads (no "+", no exponent)


def _has_x(values: pa.Array) -> bool:
    """Whether an "x" or "X" is anywhere in the texts' bytes: one NumPy pass over the data buffer, so that
    a column of plain integers (the hot path) runs no per-value kernel for hexadecimal text."""
    from replicator.model import text_buffers

    starts, data = text_buffers(values)
    if len(starts) == 0:
        return False
    data = data[starts[0] : starts[-1]]
    return bool(np.any((data | 0x20) == ord("x")))


def _exact_numbers(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, list[int]]:
    """Rows Arrow's cast cannot be trusted with (long text, exponents) -> their canonical short text, or
    NULL and their row index when the number does not fit ``target`` (or is not a number)."""
    trimmed = pc.utf8_trim_whitespace(values)
    lengths = pc.utf8_length(trimmed)
    suspect = pc.greater(lengths, _TRUSTED_LENGTH)
    if pa.types.is_decimal(target):
        # Its rescaling overflows too ("239" into decimal(38,38) gave 0.80234...): only text whose whole
        # part fits is left to it. (No text longer than the whole part's digits: none has a wider one.)
        if (pc.max(lengths).as_py() or 0) > target.precision - target.scale:
            whole = pc.replace_substring_regex(trimmed, r"(?s)^[+-]?0*(\d*).*$", r"\1")
            suspect = pc.or_(suspect, pc.greater(pc.utf8_length(whole), target.precision - target.scale))
        exponent = pc.or_(pc.match_substring(trimmed, "e"), pc.match_substring(trimmed, "E"))
        suspect = pc.or_(suspect, exponent)
    elif _has_x(values):  # Arrow's integer cast reads "0x10" as 16: only decimal digits are (_INTEGER)
        hexadecimal = pc.or_(pc.match_substring(trimmed, "x"), pc.match_substring(trimmed, "X"))
        suspect = pc.or_(suspect, hexadecimal)
    suspect = pc.fill_null(suspect, False)
    if not pc.any(suspect).as_py():
        return values, []
    items = trimmed.to_pylist()
    bad: list[int] = []
    for i in pc.indices_nonzero(suspect).to_pylist():
        text = _canonical(items[i], target)
        if text is None:
            bad.append(i)
        items[i] = text
    return pa.array(items, pa.string()), bad


def _canonical(text: str, target: pa.DataType) -> str | None:
    """A number's plain decimal text of at most 38 digits when it fits ``target`` exactly, else None.
    Works on the digit string alone: no conversion of a long text to an int or a Decimal context."""
    if pa.types.is_decimal(target):
        match = _NUMBER.fullmatch(text)
        if match is None or not (match.group(2) or match.group(3)):
            return None
        sign, whole, fraction, exponent = match.group(1), match.group(2), match.group(3) or "", match.group(4)
        precision, scale = target.precision, target.scale
    else:
        match = _INTEGER.fullmatch(text)
        if match is None:
            return None
        sign, whole, fraction, exponent = match.group(1), match.group(2), "", None
        precision, scale = 20, 0  # a 64-bit integer has at most 19 digits; the cast checks the range
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return "0"
    # value = digits * 10**power, digits without trailing zeros
    stripped = digits.rstrip("0")
    power = len(digits) - len(stripped) - len(fraction)
    if exponent is not None:
        if len(exponent.lstrip("+-").lstrip("0")) > 6:  # |exponent| >= 10**6: far beyond 38 digits
            return None
        power += int(exponent)
    if power < -scale or len(stripped) + power > precision - scale:
        return None
    if power >= 0:
        return sign + stripped + "0" * power
    whole_digits = stripped[:power].rjust(1, "0")
    return f"{sign}{whole_digits}.{stripped[power:].rjust(-power, '0')}"


_INFINITY = re.compile(r"[+-]?inf(inity)?", re.IGNORECASE)
_NONZERO_MANTISSA = re.compile(r"[+-]?[0.]*[1-9]")


def _finite_floats(texts: pa.Array, typed: pa.Array) -> tuple[pa.Array, list[int]]:
    """A double parsed from text is refused when the text is a finite number that overflowed to
    infinity (``1`` and 400 zeros) or a non-zero one that underflowed to zero (``1e-400``): the column
    cannot hold it. Infinity written as such (PostgreSQL's ``Infinity``) stays."""
    inf = pc.fill_null(pc.is_inf(typed), False)
    zero = pc.fill_null(pc.equal(typed, 0), False)
    suspect = pc.or_(inf, zero)
    if not pc.any(suspect).as_py():
        return typed, []
    items = pc.utf8_trim_whitespace(texts).to_pylist()
    numbers = typed.to_pylist()
    bad = []
    for i in pc.indices_nonzero(suspect).to_pylist():
        text = items[i]
        underflow = numbers[i] == 0 and _NONZERO_MANTISSA.match(text) is not None
        overflow = numbers[i] != 0 and _INFINITY.fullmatch(text) is None
        if underflow or overflow:
            bad.append(i)
    refuse = pa.array(np.isin(np.arange(len(typed)), bad))
    return pc.if_else(refuse, pa.scalar(None, typed.type), typed), bad


def unwrapped(texts: pa.Array) -> pa.Array:
    """Values of a BIGINT UNSIGNED column: a negative one in the signed 64-bit range is the two's complement
    of the real value past 2^63-1 (Debezium «MySQL connector» docs, ``bigint.unsigned.handling.mode``:
    ``long`` "may result in a loss of precision" for values above 2^63-1; they wrap): stored exactly as
    value + 2^64. A value outside that range is left to refuse."""
    negative = pc.fill_null(pc.starts_with(pc.utf8_trim_whitespace(texts), "-"), False)
    if not pc.any(negative).as_py():
        return texts
    items = texts.to_pylist()
    for i in pc.indices_nonzero(negative).to_pylist():
        try:
            number = int(items[i].strip())
        except ValueError:
            continue
        if -(2**63) <= number < 0:
            items[i] = str(number + 2**64)
    return pa.array(items, pa.string())


def type_images(
    images: pa.MapArray | pa.ChunkedArray,
    fields: list[pa.Field],
    *,
    timezone: str = "UTC",
    zero_dates: str = "null",
) -> tuple[list[pa.Array], dict[int, str]]:
    """Row images (``MAP<STRING, STRING>`` of canonical text) -> one array per field, typed as the field,
    and the rows with a value that does not fit (row index -> the first such column's message).

    The applier runs it on the driver; the fold tasks run it on the executors for the tables the driver
    gives them a schema for (replicator.fold, ``FoldPlan.typing``)."""
    from replicator.columns import source_name
    from replicator.model import map_values

    columns: list[pa.Array] = []
    bad: dict[int, str] = {}
    # Images are keyed by source names; a field names the mirror's column (replicator.columns).
    for f, strings in zip(fields, map_values(images, [source_name(f) for f in fields]), strict=True):
        if f.metadata and f.metadata.get(_UNSIGNED64_KEY) == b"bigint":
            strings = unwrapped(strings)
        typed, errors = parse_values(strings, f.type, timezone=timezone, zero_dates=zero_dates)
        for err in errors:
            bad.setdefault(err.row, f"column {source_name(f)!r}: {err.message}")
        columns.append(typed.cast(f.type) if typed.type != f.type else typed)
    return columns, bad


def cdc_columns(rows: pa.Table) -> dict[str, pa.Array]:
    """The CDC columns of the mirror rows made from folded net changes (their op, seq, event time and
    position): one mapping for the driver's typing (TableApplier.typed) and the fold tasks' files
    (replicator.fold.mirror_files)."""
    from replicator.model import CDC_EVENT_TIME, CDC_OP, CDC_POSITION, CDC_SEQ

    return {
        CDC_OP: rows["op"].combine_chunks(),
        CDC_SEQ: rows["seq_text"].combine_chunks(),
        CDC_EVENT_TIME: rows["event_time"].combine_chunks().cast(pa.timestamp("us", tz="UTC")),
        CDC_POSITION: rows["position"].combine_chunks(),
    }
