"""The change-event contract every dialect produces, and sequence and table-name helpers.

Plain Python, so that ``import replicator`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

Op = Literal["insert", "update", "delete", "snapshot", "truncate", "ddl"]
DML_OPS: tuple[str, ...] = ("insert", "update", "delete", "snapshot")
BARRIER_OPS: tuple[str, ...] = ("truncate", "ddl")
DdlKind = Literal["CREATE", "ALTER", "ERASE", "RENAME", "TRUNCATE", "CINDEX", "DINDEX", "QUERY", "INIT_DDL"]

# One change event; its Arrow types are dialects.events.decoded_schema (which adds ``error`` and ``raw``:
# a failed record's message and its raw bytes, for the dead letter). `after`/`before` hold each column's
# value as canonical text (see docs/dialects.md), SQL NULL as a null map value, and an absent column as an
# absent key. `seq` is compared lexicographically: the dialect's ordering key followed by the record
# coordinates. `coordinates` say where the raw record came from: topic/partition/offset for Kafka, file
# path / modification time (ms) / line number for files, the message index inside the record (a JSON
# array document holds several messages) and the row index inside the message (canal multi-row messages).
EVENT_COLUMNS: tuple[str, ...] = (
    "dialect",
    "database",
    "schema",
    "table",
    "op",
    "ddl_kind",
    "ddl_sql",
    "table_changes",
    "primary_key",
    "after",
    "before",
    "source_types",
    "seq",
    "event_time",
    "position",
    "meta",
    "coordinates",
)

# Engine metadata columns of every mirror table.
CDC_OP = "_cdc_op"
CDC_SEQ = "_cdc_seq"
CDC_EVENT_TIME = "_cdc_event_time"
CDC_POSITION = "_cdc_position"
CDC_COLUMNS: tuple[str, ...] = (CDC_OP, CDC_SEQ, CDC_EVENT_TIME, CDC_POSITION)

TableId = tuple[str, str | None, str]  # database, schema, table

SEQ_WIDTH = 19  # digits of the largest BIGINT


def seq_text(seq: list[int] | tuple[int, ...]) -> str:
    """Render a sequence tuple as fixed-width text whose string order is the tuple order.

    Example:
        >>> seq_text([1554044748000, 6, 0])
        '0000001554044748000.0000000000000000006.0000000000000000000'
    """
    return ".".join(str(max(int(part), 0)).zfill(SEQ_WIDTH) for part in seq)


def parse_seq_text(text: str) -> tuple[int, ...]:
    """Inverse of :func:`seq_text`."""
    return tuple(int(part) for part in text.split(".")) if text else ()


def table_label(table: tuple[str, str | None, str]) -> str:
    """``database.schema.table`` (``database.table`` without a schema): how logs and summaries name it."""
    return ".".join(part for part in table if part)


def table_order(table: tuple[str, str | None, str]) -> tuple[str, str, str]:
    """A sort key of table ids (a NULL schema sorts first)."""
    return (table[0], table[1] or "", table[2])


def table_labels(events: Any) -> Any:
    """:func:`table_label` of every row of an Arrow table with ``database``, ``schema``, ``table``."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(
        events["database"], events["schema"], events["table"], ".", null_handling="skip"
    )


def keep(table: Any, mask: Any) -> Any:
    """``table.filter(mask)`` (Arrow) without the copy when every row is kept (the usual batch: a filter
    copies every row image)."""
    import pyarrow.compute as pc

    if pc.all(pc.fill_null(mask, False)).as_py():
        return table
    return table.filter(mask)


def map_entries(maps: Any) -> tuple[Any, Any]:
    """A ``MAP<STRING, STRING>`` array's entries (a struct array of key and value; NULL maps hold none)
    and each entry's row (NumPy), whatever the array's chunks or slice."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(maps, pa.ChunkedArray):
        maps = maps.combine_chunks()
    as_lists = maps.cast(pa.list_(pa.struct([maps.type.key_field, maps.type.item_field])))
    return pc.list_flatten(as_lists), np.asarray(pc.list_parent_indices(as_lists))


def map_without(maps: Any, names: Any) -> Any:
    """The maps without the entries whose key is one of ``names`` (an empty map where none is left)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    entries, parents = map_entries(maps)
    kept = np.asarray(pc.invert(pc.is_in(entries.field("key"), value_set=pa.array(names, pa.string()))))
    counts = np.bincount(parents[kept], minlength=len(maps))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    entries = entries.filter(pa.array(kept))
    return pa.MapArray.from_arrays(offsets, entries.field("key"), entries.field("value")).cast(maps.type)


def map_values(maps: Any, names: Any) -> list[Any]:
    """Each name's value in every row of a ``MAP<STRING, STRING>`` array, as ``pc.map_lookup(maps, name,
    "first")`` gives it (NULL where the map is NULL or lacks the key; a repeated key's first entry), from
    one flattening of the maps. ``map_lookup`` walks every row's entries again for each name: measured on
    300k nine-column images, 0.83 s for the nine columns against 0.12-0.2 s, and 0.09 against 0.02 s for
    one (a table's key)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(maps, pa.ChunkedArray):
        # Chunk by chunk: combining the maps copied every image (the fold's keys: one chunk per decoded
        # slice), and only each name's values are joined.
        if maps.num_chunks == 1:
            maps = maps.chunk(0)
        else:
            parts = [map_values(chunk, names) for chunk in maps.chunks]
            empty = pa.array([], maps.type.item_type)
            return [pa.concat_arrays([empty, *(part[i] for part in parts)]) for i in range(len(names))]
    n = len(maps)
    uniform = _uniform_layout(maps)
    if uniform is not None:  # every image the same keys in the same order: each name's values by position
        starts, pattern, usable = uniform
        places: dict[str, int] = {}
        for i, name in enumerate(pattern):  # (a repeated key: its first entry, as map_lookup "first")
            places.setdefault(name, i)
        out = []
        for name in names:
            if name not in places:
                out.append(pa.nulls(n, maps.type.item_type))
                continue
            at = starts + places[name]
            out.append(maps.items.take(pa.array(at, mask=~usable)))
        return out
    entries, parents = map_entries(maps)
    keys, values = entries.field("key"), entries.field("value")
    every_row = np.arange(n)
    out = []
    for name in names:
        hits = np.flatnonzero(np.asarray(pc.equal(keys, name)))
        rows = parents[hits]
        if len(hits) == n and np.array_equal(rows, every_row):  # the usual image: the key once in each row
            out.append(values.take(pa.array(hits)))
            continue
        index = np.full(n, -1, np.int64)
        index[rows[::-1]] = hits[::-1]  # written last to first: a repeated key's first entry wins
        out.append(values.take(pa.array(index, mask=index < 0)))
    return out


def text_buffers(texts: Any) -> tuple[np.ndarray, np.ndarray]:
    """A string or binary array's offsets (``len + 1``, int64 positions in its data, a slice's included)
    and its data bytes (uint8), read from its buffers with NumPy: no Python string per value."""
    import numpy as np
    import pyarrow as pa

    _validity, offsets, data = texts.buffers()[:3]
    wide = pa.types.is_large_string(texts.type) or pa.types.is_large_binary(texts.type)
    width = 8 if wide else 4
    starts = np.frombuffer(offsets, np.int64 if wide else np.int32, len(texts) + 1, texts.offset * width)
    return starts.astype(np.int64, copy=False), (
        np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    )


def _uniform_layout(maps: Any) -> tuple[np.ndarray, list[str], np.ndarray] | None:
    """Where every non-empty map of a ``MAP<STRING, STRING>`` array holds the same keys in the same order
    (the usual images: a table's columns in its order), each row's first entry (an absolute position in
    the map's items), those keys, and which rows hold them (valid and non-empty); else None.

    Checked on the keys' raw bytes and lengths with NumPy, without a string comparison per entry: the
    nine columns of 150k workload images, 0.38 -> 0.17 µs a row against flattening and comparing keys."""
    import numpy as np
    import pyarrow as pa

    if len(maps) == 0 or not pa.types.is_string(maps.type.key_type):
        return None
    offsets = np.asarray(maps.offsets, np.int64)  # absolute positions in the items (sliced maps too)
    lengths = np.diff(offsets)
    nonzero = np.flatnonzero(lengths)
    if len(nonzero) == 0:
        return None
    k = int(lengths[nonzero[0]])
    if not np.all(lengths[nonzero] == k):
        return None
    first, end = int(offsets[0]), int(offsets[-1])  # empty rows hold no entries: the rest are back to back
    # ``maps.keys`` is every entry of the maps' buffers, a slice's neighbours too (a table's slice of a
    # batch sorted by table): only this slice's entries are read, else each of a batch's tables reads
    # the whole batch's (measured: one fold of 4,000 tables of 100 events, 8.2 -> 2.7 ms a table).
    keys = maps.keys.slice(first, end - first)
    key_offsets, data = text_buffers(keys)
    key_lengths = np.diff(key_offsets)
    rows = len(nonzero)
    if not (key_lengths.reshape(rows, k) == key_lengths[:k]).all():
        return None
    data = data[key_offsets[0] : key_offsets[-1]]
    width = int(key_offsets[k] - key_offsets[0])
    if not (data.reshape(rows, width) == data[:width]).all():
        return None
    pattern = keys.slice(0, k).to_pylist()
    usable = lengths == k
    if maps.null_count:
        usable &= np.asarray(maps.is_valid())
    return offsets[:-1], pattern, usable


def key_changes(op: Any, before: Any, after: Any, key: Any) -> tuple[list[Any], list[Any], Any]:
    """Which updates move their row to another key (Arrow columns ``op``, ``before``, ``after``; ``key``
    the key columns): every old key value present and one of them different from the new. Returns the
    old and the new key values (an array per key column) and that mask. The fold folds such an update as
    a delete of the old key too; the exchange copies it to the old key's bucket: one rule for both."""
    import pyarrow as pa
    import pyarrow.compute as pc

    old = map_values(before, key)
    new = map_values(after, key)
    changed = pc.equal(op, "update")
    differs = pa.repeat(pa.scalar(False), len(op))
    for o, a in zip(old, new, strict=True):
        changed = pc.and_(changed, pc.is_valid(o))
        differs = pc.or_(differs, pc.fill_null(pc.not_equal(o, a), False))
    return old, new, pc.fill_null(pc.and_(changed, differs), False)
