"""How a batch's DML events reach the fold's tasks: a bucket per (table, primary key) hash, chosen by the
decode task that made the event, written to that task's Arrow file in the batch's folder.

The decode task is the map side of the fold's exchange. It buckets every event by the key its message
names (canal ``pkNames``, Debezium's key, ...), and writes it once, next to its bucket's other rows
(record batches of one Arrow IPC file, listed in an index the driver collects). An update that changes
the key is also copied to its old key's bucket, marked ``secondary``: the fold of a key then sees every
event that touches it, the delete half of a key change included. An event whose message names no key
(CKafka's format one, DTS without keys) has no bucket yet: every fold task reads it and routes it with the
key the driver chose for its table (:func:`routes`), so it is folded where its key's other events are.

Measured against a partial fold per task then a shuffle of the winners (1M canal-json events over 100k
keys): a decode task's events rarely repeat a key (ten tasks kept 630k of 1M), so the partial fold mostly
read, folded and wrote the events a second time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

UNBUCKETED = -1  # events whose message names no key: read by every fold task


def key_text(values: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array | pa.ChunkedArray:
    """Key values (one array per key column) as one text per row, as :func:`list_key_text` joins them."""
    import pyarrow.compute as pc

    filled = [pc.fill_null(v, "\x00") for v in values]
    return filled[0] if len(filled) == 1 else pc.binary_join_element_wise(*filled, "\x1f")


def list_key_text(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A list column of key values (the fold's ``key``) as one text per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    lengths = pc.fill_null(pc.list_value_length(keys), 0).to_numpy()
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    flat = pc.fill_null(pc.list_flatten(keys), "\x00")
    return pc.binary_join(pa.ListArray.from_arrays(offsets, flat), "\x1f")


def bucket_of(label: pa.Array | pa.ChunkedArray, key: pa.Array | pa.ChunkedArray, buckets: int) -> pa.Array:
    """A bucket per row from its table label and key text: a hash that is the same in every process
    (:func:`text_hash`; Python's own string hash is salted per process)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.binary_join_element_wise(label, key, "\x1e")
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    # the high half: a multiplicative hash mixes its high bits best
    return pa.array(((text_hash(text) >> np.uint64(32)) % np.uint64(buckets)).astype(np.int32))


# Rows hashed at once: a chunk's per-byte arrays stay a few MB.
HASH_ROWS = 65_536
_PRIME = 0x100000001B3  # FNV-1's 64-bit prime


def text_hash(text: pa.Array) -> np.ndarray:
    """A 64-bit hash of each row's UTF-8 bytes (NULL hashes as empty), with NumPy over the Arrow buffers: a
    polynomial in the bytes modulo 2^64, its length mixed in, then splitmix64's finalizer to spread the
    bits. Measured ~0.1 µs per key (:func:`_horner`) against 0.43 µs for pandas' SipHash (``hash_array``)."""
    import numpy as np
    import pyarrow as pa

    from replicator.model import text_buffers

    text = text.cast(pa.large_string())
    n = len(text)
    out = np.empty(n, np.uint64)
    for first in range(0, n, HASH_ROWS):
        chunk = text.slice(first, HASH_ROWS)
        offsets, data = text_buffers(chunk)
        lengths = np.diff(offsets)
        if chunk.null_count:
            lengths[np.asarray(chunk.is_null())] = 0
        longest = int(lengths.max()) if len(lengths) else 0
        starts = offsets[:-1]
        if longest <= HORNER_BYTES:
            h = _horner(data, starts, lengths, longest)
        else:
            h = _by_terms(data, starts, lengths, longest)
        h ^= lengths.astype(np.uint64)
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
        out[first : first + len(chunk)] = h
    return out


# Texts up to this many bytes are hashed a byte position at a time (Horner's rule over the rows): one
# gather per position. Measured on 10,000 table-and-key texts of ~20 bytes: 325 -> ~90 ns a row against
# the sum of terms below (a gather, a power and a product per byte, then a segmented sum).
HORNER_BYTES = 64


def _horner(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, longest: int) -> np.ndarray:
    """Each row's polynomial: h = h * P + byte, over its bytes in order (the same value as
    :func:`_by_terms`, modulo 2^64)."""
    import numpy as np

    prime = np.uint64(_PRIME)
    h = np.zeros(len(starts), np.uint64)
    shortest = int(lengths.min()) if len(lengths) else 0
    for j in range(shortest):  # every row has a byte here
        h = h * prime + data[starts + j]
    for j in range(shortest, longest):
        live = np.flatnonzero(lengths > j)
        h[live] = h[live] * prime + data[starts[live] + j]
    return h


def _by_terms(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, longest: int) -> np.ndarray:
    """Each row's polynomial as a sum of terms: byte j of a row ending at ``end`` weighs P^(end - 1 - j)."""
    import numpy as np

    powers = np.full(max(longest, 1), _PRIME, np.uint64)
    powers[0] = 1
    powers = np.cumprod(powers)  # P^i, wrapping modulo 2^64 as in C
    firsts = np.cumsum(lengths) - lengths  # each row's first term
    positions = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - firsts, lengths)
    exponents = np.repeat(starts + lengths - 1, lengths) - positions
    terms = data[positions].astype(np.uint64) * powers[exponents]
    h = np.zeros(len(starts), np.uint64)
    some = lengths > 0
    if some.any():
        h[some] = np.add.reduceat(terms, firsts[some])
    return h


def routes(
    events: pa.Table, buckets: int, keys: dict[str, list[str]] | None = None
) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Per event, its key's bucket and, for an update that changes the key, its old key's bucket (else
    NULL), and whether its old image is read later (a delete, a key change, no key named yet). The key
    is the one the event names; ``keys`` (table label -> key columns) stands in where it names none, else
    such an event gets :data:`UNBUCKETED`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.model import key_changes, table_labels

    n = events.num_rows
    current = np.full(n, UNBUCKETED, np.int32)
    old = np.full(n, UNBUCKETED, np.int32)
    needed = np.zeros(n, bool)
    names = pc.binary_join(events["primary_key"], "\x1f")
    label = table_labels(events)
    if keys:  # the driver's key for events that name none
        missing = pc.fill_null(pc.equal(names, ""), True)
        if pc.any(missing).as_py():
            chosen = pa.array(["\x1f".join(keys.get(x) or []) for x in label.to_pylist()], pa.string())
            names = pc.if_else(missing, chosen, names)
    op = events["op"]
    is_delete = pc.equal(op, "delete")
    for text in pc.unique(names).to_pylist():
        if not text:
            continue
        rows = np.asarray(pc.fill_null(pc.equal(names, text), False))
        before, after, changed = key_changes(op, events["before"], events["after"], text.split("\x1f"))
        now = [pc.if_else(is_delete, b, a) for b, a in zip(before, after, strict=True)]
        current[rows] = np.asarray(bucket_of(label, key_text(now), buckets))[rows]
        moved = rows & np.asarray(changed)
        if moved.any():
            old[moved] = np.asarray(bucket_of(label, key_text(before), buckets))[moved]
            needed |= moved
    has_old = (old != UNBUCKETED) & (old != current)
    needed |= (current == UNBUCKETED) | np.asarray(pc.fill_null(is_delete, False))
    return pa.array(current), pa.array(old, mask=~has_old), needed


def split(events: pa.Table, buckets: int) -> Iterator[tuple[int, bool, pa.Table]]:
    """A slice of DML events -> (bucket, secondary, rows): each event once in its key's bucket (or
    :data:`UNBUCKETED`), a key-changing update a second time in its old key's bucket.

    ``before`` is kept only where it is read (a delete, a key change, a key not named yet: the fold, the
    history tables): an update's old image is a third of a canal batch."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    current, old, needed = routes(events, buckets)
    if not needed.all():
        before = pc.if_else(
            pa.array(needed), events["before"], pa.nulls(events.num_rows, events["before"].type)
        )
        events = events.set_column(events.schema.get_field_index("before"), "before", before)
    order = pc.sort_indices(current)  # one gather, then a slice per bucket
    ordered = events.take(order)
    codes = current.take(order).to_numpy()
    edges = (np.flatnonzero(np.diff(codes)) + 1).tolist()
    for start, end in zip([0, *edges], [*edges, len(codes)], strict=True):
        yield int(codes[start]), False, ordered.slice(start, end - start)
    if old.null_count < len(old):
        for bucket in pc.unique(old.drop_null()).to_pylist():
            yield bucket, True, events.filter(pc.fill_null(pc.equal(old, bucket), False))


class EventFile:
    """One decode task's events in one Arrow IPC file (random access: a fold task reads its buckets'
    record batches only), with the index of its batches."""

    def __init__(self, folder: str) -> None:
        from pyarrow import fs

        from replicator.payload import folder_uri

        self.base = folder_uri(folder)
        self.filesystem, self.root = fs.FileSystem.from_uri(self.base)
        self.index: dict[str, list[object]] = {c: [] for c in index_schema().names}
        self._writer = self._sink = self._schema = self._uri = None
        self._batches = 0

    def write(self, bucket: int, secondary: bool, rows: pa.Table) -> None:
        import uuid

        import pyarrow as pa

        if self._writer is not None and not rows.schema.equals(self._schema):
            try:  # a slice whose columns came out typed alike but not equal (e.g. all null)
                rows = rows.cast(self._schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, TypeError):
                self._finish()  # another schema: another file
        if self._writer is None:
            self.filesystem.create_dir(self.root, recursive=True)
            name = f"events-{uuid.uuid4()}.arrow"
            self._sink = self.filesystem.open_output_stream(f"{self.root}/{name}")
            self._writer = pa.ipc.new_file(self._sink, rows.schema)
            self._schema, self._uri, self._batches = rows.schema, f"{self.base}/{name}", 0
        for batch in rows.combine_chunks().to_batches():
            self._writer.write_batch(batch)
            for column, value in zip(
                self.index, (self._uri, self._batches, bucket, secondary, batch.num_rows), strict=True
            ):
                self.index[column].append(value)
            self._batches += 1

    def _finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def close(self) -> pa.Table:
        import pyarrow as pa

        self._finish()
        return pa.table(self.index, schema=index_schema())


def index_schema() -> pa.Schema:
    """The index of a decode task's event file: one row per record batch."""
    import pyarrow as pa

    return pa.schema(
        [
            ("uri", pa.string()),
            ("batch", pa.int32()),
            ("bucket", pa.int32()),
            ("secondary", pa.bool_()),
            ("rows", pa.int64()),
        ]
    )


def read(listing: pa.Table) -> list[tuple[int, pa.Table]]:
    """The record batches an index lists (uri, batch, bucket), as (bucket, rows) per file and bucket."""
    import pyarrow as pa

    from replicator.payload import open_input

    wanted: dict[str, dict[int, list[int]]] = {}
    for uri, batch, bucket in zip(*(listing[c].to_pylist() for c in ("uri", "batch", "bucket")), strict=True):
        wanted.setdefault(uri, {}).setdefault(bucket, []).append(batch)
    out = []
    for uri, by_bucket in wanted.items():
        with open_input(uri) as source:
            reader = pa.ipc.open_file(source)
            for bucket, batches in by_bucket.items():
                rows = pa.Table.from_batches([reader.get_batch(i) for i in batches], schema=reader.schema)
                out.append((bucket, rows))
    return out
