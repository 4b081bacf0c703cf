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
    import numpy as np
    import pyarrow as pa

# meta key naming the coordinate system of an event's seq order part, where a dialect writes two systems
# (CKafka: format-one DML by binlog file+pos, canal-shaped DDL by es+id); absent: the dialect's usual one.
# Events of one table in different systems are ordered by delivery (fold.arrow._segments).
SEQ_SYSTEM = "seq_system"
# schema metadata key of a decoded table: its Events.notices as JSON [[database, schema, table, text], ...]
NOTICES = b"replicator.notices"
Image = dict[str, str | None]  # a row image or a type map: column -> canonical text (None: SQL NULL)


def seq_texts(seq: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``model.seq_text`` of every row of an ``ARRAY<BIGINT>`` column, vectorized."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import SEQ_WIDTH

    seq = seq.combine_chunks() if isinstance(seq, pa.ChunkedArray) else seq
    if len(seq) == 0:
        return pa.array([], pa.string())
    flat = pc.max_element_wise(pc.fill_null(seq.flatten(), 0), 0)
    # digits are ASCII: ascii_lpad, 7 ns a part against utf8_lpad's 30-35 (which counts code points)
    padded = pc.ascii_lpad(pc.cast(flat, pa.string()), SEQ_WIDTH, "0")
    offsets = pc.subtract(seq.offsets, seq.offsets[0])
    return pc.binary_join(pa.ListArray.from_arrays(offsets, padded), ".")


def with_seq_text(events: pa.Table) -> pa.Table:
    """``events`` with their ``seq_text`` column (made from ``seq`` where they have none: the decode tasks
    leave it to the fold, replicator.decode.FOLD_COLUMNS)."""
    if "seq_text" in events.column_names:
        return events
    return events.append_column("seq_text", seq_texts(events["seq"]))


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


@dataclass(slots=True)
class At:
    """Where a message came from: the raw record's coordinates, the message's index inside the record
    (a JSON array document holds several), the micro-batch, and the message's bytes for dead letters: the
    raw record's, or an element's own (arrays.Element: cut from its document by ``bytes()`` only when an
    error row needs them).

    Not ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which cost ~1 µs of
    the ~12 µs a message may take (one ``At`` per record); nothing changes an ``At`` once made."""

    batch_id: int
    source: str | None
    partition: int | None
    offset: int | None
    index: int
    raw: bytes | SupportsBytes | None
    key: bytes | None = None  # the Kafka record key (where Debezium puts the primary key); None for files


# A row of the builder, positionally (one tuple per row: appending it is the whole per-row cost).
_DIALECT, _DATABASE, _SCHEMA, _TABLE, _OP, _POSITION, _PK, _AFTER, _BEFORE, _TYPES, _META = range(11)
_SEQ, _EVENT_TIME, _SOURCE, _PARTITION, _OFFSET, _INDEX, _ROW = range(11, 18)
# The fields only DDL and error rows carry, kept aside by row number (most rows have none).
_RARE = ("ddl_kind", "ddl_sql", "table_changes", "error", "raw")
# A usual row (Events.usual), positionally: only what varies from event to event. Its table's identity is a
# slot (Events.slot); seq, position, event_time, meta and coordinates are derived from these numbers in
# Arrow (Events._usual_arrow), not built per event in Python.
_U_AFTER, _U_BEFORE, _U_OP, _U_SLOT, _U_ES, _U_ID, _U_TS, _U_SOURCE, _U_PARTITION, _U_OFFSET, _U_ROW = range(
    11
)


class Events:
    """Rows of decoded events. :meth:`add` appends one event, :meth:`fail` one error row (a dead letter
    keeping the raw record); :meth:`to_arrow` builds the table.

    Each row is one tuple (:meth:`row`); the fields of DDL and error rows are kept aside by row number.
    :meth:`to_arrow` transposes the tuples and hands each column to Arrow in one call: measured, that is
    cheaper than a list per column appended row by row, and Arrow converts a list of dicts to a map column
    faster than from flat key/value lists built in Python (benchmarks/LOG.md, "Decoding per message").

    The usual canal row has a compact layout of its own (:attr:`usual`: images, op, its table's slot and
    the message's numbers), whose seq, position, event_time, meta and coordinates are computed in Arrow
    for the whole batch: 127k -> 114k instructions per message of a decode task (callgrind)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.rare: dict[int, tuple[str | None, str | None, str | None, str | None, bytes | None]] = {}
        # Usual canal rows (replicator.dialects.canal_plain), in their compact layout, beside ``rows``:
        self.usual: list[tuple[Any, ...]] = []
        self.usual_batch = 0  # the micro-batch of the usual rows (part of their seq)
        self.slots: list[tuple[str, str, str, list[str], Image]] = []  # (dialect, database, table, pk, types)
        # Per slot, the columns its usual rows' images hold the values of, in order (an image is then a
        # tuple or list of values, canal_plain._RowReader), or None (its images are dicts).
        self.slot_columns: list[tuple[str, ...] | None] = []
        self._slot_of: dict[tuple[Any, ...], int] = {}
        # (usual rows, rows) when a record went to the general path between usual ones: the rows it added
        # follow those usual rows (to_arrow keeps the order the records came in).
        self.breaks: list[tuple[int, int]] = []
        # (database, schema, table) -> what the operator should know of that table's messages (a capture
        # setting that loses data, types unknown): beside the rows (NOTICES), logged once by the engine
        # (database, schema, table, text): several per table, each once (an ordered set)
        self.notices: dict[tuple[str | None, str | None, str | None, str], None] = {}

    def notice(self, database: str | None, schema: str | None, table: str | None, text: str) -> None:
        self.notices[(database, schema, table, text)] = None

    def __len__(self) -> int:
        """The rows of the general layout (what :meth:`mark` and :meth:`rollback` count)."""
        return len(self.rows)

    def slot(
        self,
        dialect: str,
        database: str,
        table: str,
        primary_key: list[str],
        types: Image,
        columns: tuple[str, ...] | None = None,
    ) -> int:
        """The slot of a table's identity for usual rows (the same objects, the same slot)."""
        ident = (dialect, database, table, id(primary_key), id(types), id(columns))
        found = self._slot_of.get(ident)
        if found is None:  # the slot keeps the objects alive: their ids stay theirs
            found = self._slot_of[ident] = len(self.slots)
            self.slots.append((dialect, database, table, primary_key, types))
            self.slot_columns.append(columns)
        return found

    def general_follows(self) -> None:
        """The next rows of the general layout come after the usual rows appended so far."""
        self.breaks.append((len(self.usual), len(self.rows)))

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
        raw = bytes(at.raw) if error is not None and at.raw is not None else None
        if ddl_kind is not None or ddl_sql is not None or table_changes is not None or error is not None:
            self.rare[len(self.rows) - 1] = (ddl_kind, ddl_sql, table_changes, error, raw)

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
        self.rows.append(
            (
                dialect, database, schema, table, op, position, primary_key, after, before, source_types,
                meta, None if order is None
                else (*order, at.batch_id, at.partition or 0, at.offset or 0, at.index, row),
                event_time, at.source, at.partition, at.offset, at.index, row,
            )
        )  # fmt: skip

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
        return len(self.rows)

    def rollback(self, mark: int) -> None:
        del self.rows[mark:]
        for n in [n for n in self.rare if n >= mark]:
            del self.rare[n]

    # ---- Arrow ------------------------------------------------------------------------------------------
    def type_keys(self) -> pa.Array:
        """Per row, the text of its ``source_types`` map (names, then types, as engine.type_key_text
        writes them), dictionary-encoded: rows that share a type map object share an entry, so the
        engine groups a batch's type maps without reading every row's map."""
        import pyarrow as pa

        maps = [r[_TYPES] for r in self.rows]
        if self.usual and self.rows:  # both layouts (rare): each row's map, in the rows' order
            slot_maps = [types for *_identity, types in self.slots]
            maps += [slot_maps[r[_U_SLOT]] for r in self.usual]
            maps = [maps[i] for i in self._order().tolist()]
        elif self.usual:  # the usual rows' maps are their slots' (a few distinct objects)
            import numpy as np

            distinct_slots, slot_positions = _distinct([types for *_identity, types in self.slots])
            slots = np.fromiter((r[_U_SLOT] for r in self.usual), np.int32, len(self.usual))
            texts = [type_key_text(types) for types in distinct_slots]
            indices = np.asarray(slot_positions)[slots]
            return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(texts, pa.string()))
        distinct, positions = _distinct(maps)
        texts = [type_key_text(types) for types in distinct]
        return pa.DictionaryArray.from_arrays(positions, pa.array(texts, pa.string()))

    def to_arrow(self) -> pa.Table:
        """Both layouts as one table, the rows in the order their records came in."""
        if not self.usual:
            return self._general_arrow()
        usual = self._usual_arrow()
        if not self.rows:
            return usual
        import pyarrow as pa

        return pa.concat_tables([self._general_arrow(), usual]).take(self._order())

    def _order(self) -> np.ndarray:
        """Positions in (general rows, then usual rows) of the rows in the order they were appended."""
        import numpy as np

        general, usual = len(self.rows), len(self.usual)
        parts = []
        done = 0  # usual rows placed
        for k, (before, at) in enumerate(self.breaks):
            until = self.breaks[k + 1][1] if k + 1 < len(self.breaks) else general
            parts += [general + np.arange(done, before), np.arange(at, until)]
            done = before
        parts.append(general + np.arange(done, usual))
        order = np.concatenate(parts) if parts else np.arange(0)
        if len(order) != general + usual or (self.breaks and self.breaks[0][1] != 0):
            raise AssertionError("general rows appended without Events.general_follows")
        return order

    def _usual_arrow(self) -> pa.Table:
        """The usual rows as Arrow: their numbers become seq, position, event_time, meta and coordinates
        with NumPy and Arrow, each table's identity is taken from its slot."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = decoded_schema()
        n = len(self.usual)
        columns: list[Any] = list(zip(*self.usual, strict=True))
        slots = pa.array(np.fromiter(columns[_U_SLOT], np.int32, n))
        dialects, databases, tables, keys, types = zip(*self.slots, strict=True)
        string = pa.string()
        es = np.fromiter(columns[_U_ES], np.int64, n)
        ids = np.fromiter(columns[_U_ID], np.int64, n)
        rows = np.fromiter(columns[_U_ROW], np.int64, n)
        partition = _shared(columns[_U_PARTITION], pa.int64())
        offset = pa.array(columns[_U_OFFSET], pa.int64())
        millis = np.where((es > -100_000_000_000) & (es < 100_000_000_000), es * 1000, es)  # epoch_millis
        timed = (millis >= MIN_MICROS // 1000) & (millis <= MAX_MICROS // 1000)  # epoch_micros
        event_time = pa.array(np.where(timed, millis, 0) * 1000, pa.int64(), mask=~timed)
        flat = np.empty((n, 7), np.int64)
        flat[:, 0], flat[:, 1], flat[:, 2] = millis, ids, self.usual_batch
        flat[:, 3] = np.asarray(pc.fill_null(partition, 0))
        flat[:, 4] = np.asarray(pc.fill_null(offset, 0))
        flat[:, 5], flat[:, 6] = 0, rows  # the message's index in its record (0), the row's in the message
        seq = pa.ListArray.from_arrays(
            pa.array(np.arange(0, 7 * n + 1, 7, dtype=np.int32)), pa.array(flat.ravel())
        )
        position = pc.binary_join_element_wise(
            pa.scalar("es="),
            pc.cast(pa.array(es), string),
            pa.scalar(" id="),
            pc.cast(pa.array(ids), string),
            "",
        )
        one = pa.array(np.arange(n + 1, dtype=np.int32))
        ts = pc.cast(pa.array(columns[_U_TS], pa.int64()), string)
        meta = pa.MapArray.from_arrays(
            one, pa.array(["ts"], string).take(pa.array(np.zeros(n, np.int32))), ts
        )
        coordinates = schema.field("coordinates").type
        arrays = {
            "dialect": pa.array(dialects, string).take(slots),
            "database": pa.array(databases, string).take(slots),
            "schema": pa.nulls(n, string),
            "table": pa.array(tables, string).take(slots),
            "op": pa.array(columns[_U_OP], string),
            "primary_key": pa.array(keys, schema.field("primary_key").type).take(slots),
            "after": _images(columns[_U_AFTER], slots, self.slot_columns, schema.field("after").type),
            "before": _images(columns[_U_BEFORE], slots, self.slot_columns, schema.field("before").type),
            "source_types": pa.array(types, schema.field("source_types").type).take(slots),
            "meta": meta,
            "seq": seq,
            "event_time": event_time.cast(schema.field("event_time").type),
            "position": position,
            "coordinates": pa.StructArray.from_arrays(
                [
                    _shared(columns[_U_SOURCE], string),
                    partition,
                    offset,
                    pa.array(np.zeros(n, np.int32)),
                    pa.array(rows.astype(np.int32)),
                ],
                fields=list(coordinates),
            ),
        }
        return pa.table(
            [arrays[f.name] if f.name in arrays else pa.nulls(n, f.type) for f in schema], schema=schema
        )

    def _general_arrow(self) -> pa.Table:
        import pyarrow as pa

        schema = decoded_schema()
        n = len(self.rows)
        columns: list[Any] = list(zip(*self.rows, strict=True)) if n else [()] * 18
        string = pa.string()
        arrays: dict[str, pa.Array] = {
            name: pa.array(columns[i], string)
            for name, i in (
                ("dialect", _DIALECT),
                ("database", _DATABASE),
                ("schema", _SCHEMA),
                ("table", _TABLE),
                ("op", _OP),
                ("position", _POSITION),
            )
        }
        rare: list[list[Any]] = [[None] * n for _ in _RARE]
        for at, fields in self.rare.items():
            for values, value in zip(rare, fields, strict=True):
                values[at] = value
        for name, values in zip(_RARE, rare, strict=True):
            arrays[name] = pa.array(values, schema.field(name).type)
        arrays["primary_key"] = _shared(columns[_PK], schema.field("primary_key").type)
        text_map = schema.field("after").type
        arrays["after"] = pa.array(columns[_AFTER], text_map)
        arrays["before"] = pa.array(columns[_BEFORE], text_map)
        arrays["source_types"] = _shared(columns[_TYPES], text_map)
        arrays["meta"] = pa.array(columns[_META], text_map)
        arrays["seq"] = pa.array(columns[_SEQ], schema.field("seq").type)
        arrays["event_time"] = pa.array(columns[_EVENT_TIME], pa.int64()).cast(
            schema.field("event_time").type
        )
        struct_type = schema.field("coordinates").type
        arrays["coordinates"] = pa.StructArray.from_arrays(
            [pa.array(columns[i], struct_type.field(i - _SOURCE).type) for i in range(_SOURCE, _ROW + 1)],
            fields=list(struct_type),
        )
        return pa.table([arrays[f.name] for f in schema], schema=schema)


def _images(
    images: Sequence[Any], slots: pa.Array, slot_columns: list[tuple[str, ...] | None], map_type: pa.DataType
) -> pa.Array:
    """Usual rows' images -> a map column. An image is a dict, None, or its slot's columns' values (a tuple
    or list, canal_plain._RowReader): when every image is values or None, the values become one text
    array and the keys are taken from the slots' column names (measured: 0.5 against 1.4 µs per image
    through dicts); a value marking an absent column, or any dict, makes each image a dict."""
    from itertools import chain

    import numpy as np
    import pyarrow as pa

    kinds = set(map(type, images))
    if dict not in kinds and kinds != {type(None)}:
        try:
            values = pa.array(list(chain.from_iterable(filter(None, images))), pa.string())
        except (pa.ArrowTypeError, pa.ArrowInvalid):  # an absent column's marker: not text
            values = None
        if values is not None:
            widths = np.array([len(c) if c is not None else -1 for c in slot_columns], np.int64)
            starts = np.concatenate([[0], np.cumsum(np.maximum(widths, 0))[:-1]])
            names = pa.array(
                [c for columns in slot_columns if columns is not None for c in columns], pa.string()
            )
            at = np.asarray(slots)
            valid = np.fromiter((image is not None for image in images), bool, len(images))
            lengths = np.where(valid, widths[at], 0)
            if (lengths >= 0).all():
                ends = np.cumsum(lengths)
                firsts = ends - lengths
                keys = names.take(
                    pa.array(
                        np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(firsts - starts[at], lengths)
                    )
                )
                offsets = pa.array(np.concatenate([[0], ends]).astype(np.int32))
                return pa.MapArray.from_arrays(offsets, keys, values, type=map_type, mask=pa.array(~valid))
    return pa.array(
        [
            image if type(image) is dict or image is None else values_image(slot_columns[slot], image)
            for image, slot in zip(images, slots.to_pylist(), strict=True)
        ],
        map_type,
    )


def values_image(columns: tuple[str, ...] | None, values: Sequence[Any]) -> dict[str, Any]:
    """A row read as its table's values (canal_plain._RowReader) as its image: the columns it holds, in the
    table's order (any value that is not text or NULL marks a column it does not hold)."""
    assert columns is not None
    return {c: v for c, v in zip(columns, values, strict=True) if v is None or type(v) is str}


def _shared(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """Values many rows hold as the very same object (a table's type map, a message's primary key, a
    file's path and time) -> Arrow: each distinct object is converted once and the rows take it by index;
    one text or number in every row (a file's path and time) is repeated without converting each row's
    (not for maps: equal dicts may order their keys differently)."""
    import pyarrow as pa

    first = values[0] if values else None
    if type(first) in (str, int) and values.count(first) == len(values):  # the same object compares at once
        return pa.repeat(pa.scalar(first, arrow_type), len(values))
    distinct, positions = _distinct(values)
    if len(distinct) * 2 > len(values):
        return pa.array(values, arrow_type)
    return pa.array(distinct, arrow_type).take(positions)


# Timestamps Arrow, Delta and Python all hold: years 0001 to 9999.
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999


def _distinct(values: Sequence[Any]) -> tuple[list[Any], pa.Array]:
    """The distinct objects (by identity: a dialect shares one object per table's type map), in order of
    first appearance, and each row's index into them (Int32, NULL for a NULL value). NumPy over the
    objects' ids: a Python loop over the rows cost ~0.3 µs per row per column (measured)."""
    import numpy as np
    import pyarrow as pa

    ids = np.fromiter(map(id, values), np.uint64, len(values))
    unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)  # the distinct objects in order of first appearance
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    positions = rank[inverse.reshape(-1)]
    distinct = [values[i] for i in first[order]]
    none = np.flatnonzero(unique[order] == id(None))
    if not len(none):
        return distinct, pa.array(positions, pa.int32())
    null = positions == none[0]
    del distinct[none[0]]
    positions = positions - (positions > none[0])
    return distinct, pa.array(positions, pa.int32(), mask=null)


def type_key_text(types: Image) -> str:
    """A type map as one text: names joined by 0x1F, 0x1E, types joined by 0x1F (NULL types as empty)."""
    return "\x1f".join(types) + "\x1e" + "\x1f".join(t or "" for t in types.values())


def epoch_millis(value: int | None) -> int | None:
    """Epoch seconds or milliseconds (vendors use both; see Tencent CKafka «MySQL 订阅消息官方格式说明»'s DDL
    examples) -> milliseconds: a value
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
