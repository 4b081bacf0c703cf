"""Column defaults of ``ADD COLUMN``: the value the rows already in a table take (docs/schema-evolution.md).

MySQL/MariaDB and PostgreSQL give every row that exists when a column is added the column's default, with
no row event in the binlog / WAL: an explicit ``DEFAULT``, or for a MySQL ``NOT NULL`` column without one,
its type's implicit default (MySQL 8.0 reference manual, "Data Type Default Values": 0 for numbers, ''
for strings, the first member of an ENUM, the "zero" value of a date or time type). The default is read
from the statement's sqlglot tree (never evaluated as SQL) and kept as *canonical text* for the column's
type (replicator.types: numbers as decimal text, binary as hex ...), so that it is typed at apply time by
the same ``types.parse_values`` as the DML values. ``CURRENT_TIMESTAMP`` (and NOW(), LOCALTIMESTAMP,
CURRENT_DATE) is what the database evaluates at the ALTER: the statement's time, which the mirror takes
from the DDL event (:func:`now_value`) for a column without fractional seconds (the event's time has whole
seconds). Any other expression cannot be evaluated: the rows keep NULL and
the batch summary names the column (replicator.apply.schema).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa

from replicator.changes import Default
from replicator.types import column_type

_NOW = {"NOW", "LOCALTIME", "LOCALTIMESTAMP", "CURRENT_TIMESTAMP", "SYSDATE", "CURDATE", "CURRENT_DATE"}
_FSP = re.compile(r"\((\d+)\)")


def _base(type_text: str | None) -> str:
    return re.split(r"[\s(]", (type_text or "").strip().lower(), maxsplit=1)[0]


def _width(type_text: str | None) -> int | None:
    found = _FSP.search(type_text or "")
    return int(found.group(1)) if found else None


def _constant(node: Any, dialect: str) -> tuple[str, Any] | None:
    """A literal of the tree as (kind, value): ``text`` (str), ``number`` (its text), ``bool``, ``bytes``,
    ``null``; None when it is not a constant."""
    from sqlglot import exp

    if isinstance(node, exp.Paren | exp.Introducer):  # (5), _utf8mb4'x'
        return _constant(node.this if isinstance(node, exp.Paren) else node.expression, dialect)
    if isinstance(node, exp.Null):
        return "null", None
    if isinstance(node, exp.Boolean):
        return "bool", bool(node.this)
    if isinstance(node, exp.National):
        return "text", node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "text", node.this  # (sqlglot has read the escapes: '', \n ...)
        return "number", node.this
    if isinstance(node, exp.Neg):
        inner = _constant(node.this, dialect)
        if inner is not None and inner[0] == "number":
            return "number", inner[1][1:] if inner[1].startswith("-") else "-" + inner[1]
        return None
    if isinstance(node, exp.BitString):  # b'101'
        bits = node.this or "0"
        number = int(bits, 2)
        return "bytes", number.to_bytes(max(1, (len(bits) + 7) // 8), "big")
    if isinstance(node, exp.HexString):  # x'4142', 0x4142
        digits = node.this if len(node.this) % 2 == 0 else "0" + node.this
        return "bytes", bytes.fromhex(digits)
    return None


def _is_now(node: Any) -> bool:
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _is_now(node.this)
    if isinstance(node, exp.CurrentTimestamp | exp.Localtimestamp | exp.CurrentDate | exp.CurrentDatetime):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).upper() in _NOW and not node.expressions


def canonical(kind: str, value: Any, type_text: str | None) -> str | None:
    """A constant as canonical text for a column of ``type_text`` (None: it cannot be one)."""
    target = column_type(type_text).arrow
    base = _base(type_text)
    if kind == "bytes" and not pa.types.is_binary(target):
        if pa.types.is_string(target):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return str(int.from_bytes(value, "big"))  # b'101' / 0x41 into a number: its value
    if pa.types.is_binary(target):
        if kind == "bytes":
            data = value
        else:
            data = (("1" if value else "0") if kind == "bool" else str(value)).encode()
        width = _width(type_text)
        if base == "binary" and width is not None:  # BINARY(n) pads with 0x00 to n bytes
            data = data.ljust(width, b"\0")
        return data.hex()
    if kind == "bool":
        return ("true" if value else "false") if pa.types.is_boolean(target) else ("1" if value else "0")
    text = str(value)
    if base == "char" and pa.types.is_string(target):
        return text.rstrip(" ")  # CHAR drops trailing spaces when read (PAD_CHAR_TO_FULL_LENGTH off)
    return text.strip() if not pa.types.is_string(target) else text


def implicit(type_text: str | None, enum_first: str | None = None) -> Default | None:
    """The implicit default of a MySQL ``NOT NULL`` column without ``DEFAULT`` (None: the type has none the
    mirror knows). TIMESTAMP takes the zero value, as with ``explicit_defaults_for_timestamp`` on (MariaDB
    10.10+ and MySQL 8.0's default)."""
    ctype = column_type(type_text)
    target, base = ctype.arrow, _base(type_text)
    sql = "implicit default of NOT NULL " + (type_text or "?")
    if base == "enum":
        return Default(kind="value", value=enum_first or "", sql=sql)
    if not ctype.known:
        return Default(kind="expression", sql=sql)
    if pa.types.is_boolean(target):
        value = "false"
    elif pa.types.is_integer(target) or pa.types.is_decimal(target) or pa.types.is_floating(target):
        value = "0"
    elif pa.types.is_date(target):
        value = "0000-00-00"
    elif pa.types.is_timestamp(target):
        value = "0000-00-00 00:00:00"
    elif pa.types.is_binary(target):
        width = _width(type_text) if base == "binary" else None
        value = bytes(width or 0).hex()
    elif base == "time":
        value = "00:00:00"
    else:  # strings, SET, JSON (a LONGTEXT in MariaDB)
        value = ""
    return Default(kind="value", value=value, sql=sql)


def from_column(definition: Any, type_text: str | None, nullable: bool, dialect: str) -> Default | None:
    """The default an ADD COLUMN's ``ColumnDef`` gives existing rows; None when they stay NULL."""
    from sqlglot import exp

    node = None
    for constraint in definition.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.DefaultColumnConstraint):
            node = kind.this
    if node is None:
        # (PostgreSQL refuses a NOT NULL column without DEFAULT on a table with rows)
        if nullable or dialect != "mysql":
            return None
        data_type = definition.args.get("kind")
        first = None
        if data_type is not None and data_type.this == exp.DataType.Type.ENUM and data_type.expressions:
            member = data_type.expressions[0]
            first = member.this if isinstance(member, exp.Literal) else None
        return implicit(type_text, first)
    if _is_now(node):
        return Default(kind="now", sql=node.sql(dialect=dialect))
    constant = _constant(node, dialect)
    if constant is None:
        return Default(kind="expression", sql=node.sql(dialect=dialect))
    if constant[0] == "null":
        return None
    value = canonical(constant[0], constant[1], type_text)
    if value is None:
        return Default(kind="expression", sql=node.sql(dialect=dialect))
    return Default(kind="value", value=value, sql=node.sql(dialect=dialect))


def fractional_digits(type_text: str | None) -> int:
    """A DATETIME / TIMESTAMP / TIME column's fractional-second digits (``datetime(3)``: 3), else 0."""
    return min(_width(type_text) or 0, 6) if _base(type_text) in ("datetime", "timestamp", "time") else 0


def now_value(target: pa.DataType, at: dt.datetime, timezone: str) -> pa.Array | None:
    """``CURRENT_TIMESTAMP`` at ``at`` (the DDL event's time, UTC; whole seconds for a binlog event) for a
    column without fractional seconds: a TIMESTAMP the instant, a DATETIME its wall clock in ``timezone``
    (source.timezone, the sessions' zone), a DATE its day there. None for a column of another type."""
    import pyarrow.compute as pc

    at = (at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)).replace(microsecond=0)
    if pa.types.is_timestamp(target) and target.tz is not None:
        return pa.array([at], target)
    # The wall clock in the source's zone, by Arrow (the zones types.parse_values reads wall clocks in).
    local = pc.local_timestamp(pa.array([at], pa.timestamp("us", tz=timezone)))
    if pa.types.is_timestamp(target):
        return local.cast(target)
    if pa.types.is_date(target):
        return local.cast(pa.date32()).cast(target)
    return None
