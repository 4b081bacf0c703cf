"""Types that change without a DDL event (issue 51): Debezium's PostgreSQL connector publishes no schema
changes; after ``ALTER TABLE ... ALTER COLUMN c TYPE bigint`` the next rows simply declare ``c`` int64. A
mirror column whose rows now declare a type that holds every value of its own (replicator.apply.schema
``lossless``: int -> bigint, decimal(10,2) -> decimal(12,4), float -> double) is widened before the rows
are typed, so values past the old type are not dead letters. Never narrowed; the job's schema_evolution
policy decides as for a DDL: ``ignore`` keeps the column, ``fail`` stops, ``lenient``/``evolve`` widen.

Not from ``tinyint`` (int8): Debezium's MySQL connector publishes every TINYINT as an INT16 (Debezium MySQL
connector documentation, "Basic types"), which is no change of the column."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from replicator.columns import by_source
from replicator.types import column_type


def is_untyped(column: pa.Field) -> bool:
    metadata = column.metadata or {}
    return metadata.get(b"replicator.untyped") == b"true" and pa.types.is_string(column.type)


def lossless(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly a value of ``new`` (int -> bigint, decimal(10,2) ->
    decimal(12,2), int -> decimal(p,0) wide enough, float -> double; varchar -> text is string -> string)."""
    if old == new:
        return True
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}
    if old in ints and new in ints:
        return ints.index(new) >= ints.index(old)
    if old in ints and pa.types.is_decimal(new):
        return new.precision - new.scale >= digits[old]
    if old in (pa.int8(), pa.int16(), pa.int32()) and new == pa.float64():
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width >= old.bit_width
    return False


def widened(schema: pa.Schema, declared: dict[str, str], present: Iterable[str]) -> dict[str, pa.DataType]:
    """Mirror column name -> the wider type the rows declare, for the ``present`` source columns."""
    fields = by_source(schema)
    out: dict[str, pa.DataType] = {}
    for name in present:
        field, kind = fields.get(name), declared.get(name)
        if field is None or kind is None or is_untyped(field) or field.type == pa.int8():
            continue
        target = column_type(kind).arrow
        if target != field.type and lossless(field.type, target):
            out[field.name] = target
    return out


def cast(data: pa.Table, types: dict[str, pa.DataType]) -> pa.Table:
    """The mirror's rows with the ``types`` of those columns (lossless: every value fits)."""
    for name, target in types.items():
        index = data.schema.get_field_index(name)
        field = data.schema.field(index)
        data = data.set_column(index, field.with_type(target), data.column(index).cast(target, safe=True))
    return data
