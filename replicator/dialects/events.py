"""A columnar builder of decoded events: dialects append rows, the batch becomes one Arrow table.

The table has the contract's columns (model.EVENT_COLUMNS) plus ``error`` and ``raw``, in the Arrow types
the rest of the engine reads (:func:`decoded_schema`). Row images are dicts of text;
they are flattened into Arrow map arrays once per batch, not per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, SupportsBytes

if TYPE_CHECKING:
    import pyarrow as pa

# meta key naming the coordinate system of an event's seq order part, where a dialect writes two systems
# (CKafka: format-one DML by binlog file+pos, canal-shaped DDL by es+id); absent: the dialect's usual one.
# Events of one table in different systems are ordered by delivery (changelog._segments).
SEQ_SYSTEM = "seq_system"
Image = dict[str, str | None]  # a row image or a type map: column -> canonical text (None: SQL NULL)


@cache
def decoded_schema() -> pa.Schema:
    """The change-event contract (model.EVENT_COLUMNS, in order) plus ``error`` and ``raw``, as Arrow."""
    import pyarrow as pa

    text_map = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            ("dialect", pa.string()),
            ("database", pa.string()),
            ("schema", pa.string()),
            ("table", pa.string()),
            ("op", pa.string()),
            ("ddl_kind", pa.string()),
            ("ddl_sql", pa.string()),
            ("table_changes", pa.string()),
            ("primary_key", pa.list_(pa.string())),
            ("after", text_map),
            ("before", text_map),
            ("source_types", text_map),
            ("seq", pa.list_(pa.int64())),
            ("event_time", pa.timestamp("us", tz="UTC")),
            ("position", pa.string()),
            ("meta", text_map),
            (
                "coordinates",
                pa.struct(
                    [
                        ("source", pa.string()),
                        ("partition", pa.int64()),
                        ("offset", pa.int64()),
                        ("index", pa.int32()),
                        ("row", pa.int32()),
                    ]
                ),
            ),
            ("error", pa.string()),
            ("raw", pa.binary()),
        ]
    )


@dataclass(frozen=True, slots=True)
class At:
    """Where a message came from: the raw record's coordinates, the message's index inside the record
    (a JSON array document holds several), the micro-batch, and the message's bytes for dead letters: the
    raw record's, or an element's own (arrays.Element: cut from its document by ``bytes()`` only when an
    error row needs them)."""

    batch_id: int
    source: str | None
    partition: int | None
    offset: int | None
    index: int
    raw: bytes | SupportsBytes | None
    key: bytes | None = None  # the Kafka record key (where Debezium puts the primary key); None for files


class Events:
    """Rows of decoded events. :meth:`add` appends one event, :meth:`fail` one error row (a dead letter
    keeping the raw record); :meth:`to_arrow` builds the table."""

    SCALARS = ("dialect", "database", "schema", "table", "op", "ddl_kind", "ddl_sql", "table_changes")
    SCALARS += ("position", "error")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {
            name: [] for name in (*self.SCALARS, "primary_key", "event_time", "raw")
        }
        self.after: list[Image | None] = []
        self.before: list[Image | None] = []
        self.types: list[Image | None] = []
        self.meta: list[Image | None] = []
        self.seq: list[Sequence[int] | None] = []
        self.coordinates: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self.coordinates)

    def add(
        self,
        at: At,
        dialect: str | None,
        op: str | None,
        *,
        database: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        ddl_kind: str | None = None,
        ddl_sql: str | None = None,
        table_changes: str | None = None,
        primary_key: Sequence[str] | None = None,
        after: Image | None = None,
        before: Image | None = None,
        source_types: Image | None = None,
        order: Sequence[int] | None = (),
        row: int = 0,
        event_time: int | None = None,
        position: str | None = None,
        meta: Image | None = None,
        error: str | None = None,
    ) -> None:
        """One event. ``order`` is the dialect's part of ``seq`` (the coordinates follow it; ``None``
        leaves ``seq`` NULL); ``event_time`` is epoch microseconds (:func:`epoch_micros`)."""
        self.row(
            at, dialect, op, database, schema, table, primary_key, after, before, source_types, order, row,
            event_time, position, meta,
        )  # fmt: skip
        c = self.columns
        c["ddl_kind"][-1] = ddl_kind
        c["ddl_sql"][-1] = ddl_sql
        c["table_changes"][-1] = table_changes
        c["error"][-1] = error
        if error is not None and at.raw is not None:
            c["raw"][-1] = bytes(at.raw)

    def row(
        self,
        at: At,
        dialect: str | None,
        op: str | None,
        database: str | None,
        schema: str | None,
        table: str | None,
        primary_key: Sequence[str] | None,
        after: Image | None,
        before: Image | None,
        source_types: Image | None,
        order: Sequence[int] | None,
        row: int,
        event_time: int | None,
        position: str | None,
        meta: Image | None,
    ) -> None:
        """A row event (no DDL fields, no error), positionally: the hot path of the row formats."""
        c = self.columns
        for name in ("ddl_kind", "ddl_sql", "table_changes", "error", "raw"):
            c[name].append(None)
        c["dialect"].append(dialect)
        c["database"].append(database)
        c["schema"].append(schema)
        c["table"].append(table)
        c["op"].append(op)
        c["position"].append(position)
        c["primary_key"].append(primary_key)
        c["event_time"].append(event_time)
        self.after.append(after)
        self.before.append(before)
        self.types.append(source_types)
        self.meta.append(meta)
        self.seq.append(
            None if order is None else (*order, at.batch_id, at.partition or 0, at.offset or 0, at.index, row)
        )
        self.coordinates.append((at.source, at.partition, at.offset, at.index, row))

    def fail(
        self,
        at: At,
        dialect: str | None,
        error: str,
        *,
        database: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        row: int = 0,
    ) -> None:
        """An error row: it becomes a dead letter with the message's own bytes (the raw record, or the
        element of an array document), naming what is known of it. Rows that are not errors carry no
        bytes (``raw`` NULL)."""
        self.add(
            at, dialect, None, database=database, schema=schema, table=table, row=row, order=None, error=error
        )

    def filtered(self, at: At, dialect: str | None, **known: Any) -> None:
        """A message that carries no change (heartbeats, transaction markers): counted as filtered."""
        self.add(at, dialect, "filtered", order=None, **known)

    # ---- rollback: a message decoded again after an Inexact number ----------------------------------------
    def mark(self) -> int:
        return len(self.coordinates)

    def rollback(self, mark: int) -> None:
        for values in (
            *self.columns.values(),
            self.after,
            self.before,
            self.types,
            self.meta,
            self.seq,
            self.coordinates,
        ):
            del values[mark:]

    # ---- Arrow ------------------------------------------------------------------------------------------
    def type_keys(self) -> pa.Array:
        """Per row, the text of its ``source_types`` map (names, then types, as engine.type_key_text
        writes them), dictionary-encoded: rows that share a type map object share an entry, so the
        engine groups a batch's type maps without reading every row's map."""
        import pyarrow as pa

        distinct, positions = _distinct(self.types)
        texts = [type_key_text(types) for types in distinct]
        return pa.DictionaryArray.from_arrays(pa.array(positions, pa.int32()), _strings(texts))

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        schema = decoded_schema()
        n = len(self.coordinates)
        arrays: dict[str, pa.Array] = {}
        for name in self.SCALARS:
            arrays[name] = _strings(self.columns[name])
        arrays["primary_key"] = pa.array(self.columns["primary_key"], schema.field("primary_key").type)
        arrays["after"] = _maps(self.after)
        arrays["before"] = _maps(self.before)
        arrays["source_types"] = _maps(self.types, shared=True)
        arrays["meta"] = _maps(self.meta, shared=True)
        arrays["seq"] = pa.array(self.seq, schema.field("seq").type)
        arrays["event_time"] = pa.array(self.columns["event_time"], pa.int64()).cast(
            schema.field("event_time").type
        )
        coordinates = list(zip(*self.coordinates, strict=True)) if n else [[], [], [], [], []]
        struct_type = schema.field("coordinates").type
        arrays["coordinates"] = pa.StructArray.from_arrays(
            [pa.array(values, struct_type.field(i).type) for i, values in enumerate(coordinates)],
            fields=list(struct_type),
        )
        arrays["raw"] = pa.array(self.columns["raw"], pa.binary())
        return pa.table([arrays[f.name] for f in schema], schema=schema)


def _maps(images: list[Image | None], shared: bool = False) -> pa.Array:
    """Dicts of text -> ``map<string,string>``. ``shared``: many rows hold the very same dict object (a
    table's type map), so each distinct object is flattened once and the rows take it by index."""
    import pyarrow as pa

    map_type = pa.map_(pa.string(), pa.string())
    if shared:
        distinct, positions = _distinct(images)
        if len(distinct) < len(images):
            return _maps(distinct).take(pa.array(positions, pa.int32()))
    keys: list[str] = []
    values: list[str | None] = []
    offsets = [0]
    valid: list[bool] = []
    for image in images:
        if image is None:
            valid.append(False)
        else:
            keys.extend(image)
            values.extend(image.values())
            valid.append(True)
        offsets.append(len(keys))
    mask = None if all(valid) else pa.array([not v for v in valid], pa.bool_())
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        _strings(keys),
        _strings(values),
        type=map_type,
        mask=mask,
    )


# Timestamps Arrow, Delta and Python all hold: years 0001 to 9999.
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999


def _distinct(images: list[Image | None]) -> tuple[list[Image], list[int | None]]:
    """The distinct image objects (by identity: a dialect shares one object per table's type map) and
    each row's index into them (None for a NULL image)."""
    index: dict[int, int] = {}
    distinct: list[Image] = []
    positions: list[int | None] = []
    for image in images:
        if image is None:
            positions.append(None)
            continue
        at = index.get(id(image))
        if at is None:
            at = index[id(image)] = len(distinct)
            distinct.append(image)
        positions.append(at)
    return distinct, positions


def type_key_text(types: Image) -> str:
    """A type map as one text: names joined by 0x1F, 0x1E, types joined by 0x1F (NULL types as empty)."""
    return "\x1f".join(types) + "\x1e" + "\x1f".join(t or "" for t in types.values())


def _strings(values: list[str | None]) -> pa.Array:
    """Python strings -> Arrow, through a NumPy object array (measured 2x faster than from the list)."""
    import numpy as np
    import pyarrow as pa

    return (
        pa.array(np.array(values, dtype=object), pa.string(), from_pandas=False)
        if values
        else pa.array([], pa.string())
    )


def epoch_millis(value: int | None) -> int | None:
    """Epoch seconds or milliseconds (vendors use both; see seed 001's DDL examples) -> milliseconds: a value
    under 10^11 in magnitude (year 5138 in seconds, 1973 in milliseconds) is seconds."""
    if value is None:
        return None
    return value * 1000 if abs(value) < 100_000_000_000 else value


def epoch_micros(value: int | None) -> int | None:
    """Epoch seconds or milliseconds (:func:`epoch_millis`) -> microseconds. A value outside years 1-9999
    has no timestamp: ``None`` (the event still orders by its ``seq``)."""
    millis = epoch_millis(value)
    if millis is None:
        return None
    micros = millis * 1000
    return micros if MIN_MICROS <= micros <= MAX_MICROS else None
