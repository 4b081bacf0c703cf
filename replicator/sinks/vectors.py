"""Deletion vectors written by the engine for delta-rs mirrors (``target.deletion_vectors`` with the
default writer): a batch's guarded MERGE as "mark the rows it replaces, write its new rows to one file".

deltalake 1.6 (the newest on PyPI) writes no deletion vectors, but it reads them, its MERGE / DELETE /
UPDATE honour them when they rewrite a file that has one, and its checkpoints keep them (tests/
test_vectors.py). A copy-on-write MERGE rewrites every data file holding a changed key: with changes
spread over the keys that is the whole table at each batch. Here each such file gets a deletion vector
(Delta's format: PROTOCOL.md, "Deletion Vectors" and "Deletion Vector Format") marking the rows the batch
replaces or deletes; updated and inserted rows go to one new file; one commit (put-if-absent) holds the
removes, the adds and the batch's app transaction. Untouched rows are neither read (only the key and
sequence columns are) nor written again.

Used only where it is exactly the MERGE (``usable``): a local table with the deletionVectors feature and
no feature this writer does not know (no change data feed, column mapping, constraints, partitions), and
a batch with all of the mirror's columns (the MERGE's update sets the columns a batch has, this replaces
the row). Otherwise the writer MERGEs as before.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replicator.jsonl import json_lines
from replicator.sinks.base import MergeResult, Txn

# Table features whose tables this path writes exactly as delta-rs would (none of them constrains a data
# file or needs more than add/remove actions); any other feature leaves the table to delta-rs's MERGE.
WRITER_FEATURES = {"deletionVectors", "appendOnly", "invariants", "timestampNtz", "variantType"}
READER_FEATURES = {"deletionVectors", "timestampNtz", "variantType"}
MAGIC = 1681511377  # RoaringBitmapArray's magic number (little-endian), PROTOCOL.md
_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


class Unsupported(Exception):
    """Something in the table this path does not write (the caller MERGEs instead)."""


# A mirror this wide is MERGEd here by rewriting its changed files in Arrow (``merge(rewrite=True)``):
# delta-rs's MERGE plans each column (deltalake 1.6: 1,000 columns 17 s, 2,000 about 70 s for one row,
# growing with the square of the columns; benchmarks/LOG.md, "Wide rows"), this path reads and writes
# each column once.
WIDE_COLUMNS = 200
# A file the rewrite leaves with fewer rows is not written alone: such rows go into one file with others
# and the batch's new rows (a uniform batch leaves a third of every file: without this, the file count
# grew by one a batch and each file shrank).
PIECE_ROWS = 100_000
# A file of more bytes is not read whole by a large batch's rewrite (``merge(min_share=...)``): its
# decoded columns are held at once, several times its compressed size.
WHOLE_BYTES = 256 << 20


def usable(table: Any, path: str, batch: pa.Table, schema: pa.Schema, *, rewrite: bool = False) -> bool:
    """Whether a batch's guarded MERGE into ``table`` (a deltalake.DeltaTable) may be done here: with
    deletion vectors, or (``rewrite``) by rewriting the changed files of a table with or without them."""
    if "://" in path:  # put-if-absent by the local file system's exclusive create
        return False
    protocol = table.protocol()
    readers, writers = set(protocol.reader_features or []), set(protocol.writer_features or [])
    if readers - READER_FEATURES or writers - WRITER_FEATURES:
        return False
    # Legacy protocol versions name no features: 1/2 (appendOnly, invariants) or table features (3/7) only.
    if protocol.min_reader_version not in (1, 3) or protocol.min_writer_version not in (1, 2, 7):
        return False
    if not rewrite and "deletionVectors" not in readers:
        return False
    metadata = table.metadata()
    settings = metadata.configuration
    vectors = settings.get("delta.enableDeletionVectors") == "true"
    if (not rewrite and not vectors) or metadata.partition_columns:
        return False
    if settings.get("delta.enableChangeDataFeed") == "true":
        return False
    if any(k.startswith("delta.constraints.") for k in settings):
        return False
    return sorted(batch.column_names) == sorted(schema.names)


# ---- the vector files ------------------------------------------------------------------------------------
def z85(data: bytes) -> str:
    """Z85 (ZeroMQ's base 85, Delta's encoding of a vector file's UUID): base64's b85, another alphabet."""
    return base64.b85encode(data).translate(bytes.maketrans(_B85, _Z85)).decode()


def unz85(text: str) -> bytes:
    return base64.b85decode(text.encode().translate(bytes.maketrans(_Z85, _B85)))


def write_vector(root: Path, rows: Any) -> dict[str, Any]:
    """A vector file marking ``rows`` (a pyroaring BitMap of row indexes) and its descriptor. The file:
    a version byte (1), the data's size (big-endian), the data (the magic number, one 32-bit bitmap of high
    bits 0 in Roaring's portable format), the data's CRC-32 (big-endian)."""
    data = struct.pack("<iqi", MAGIC, 1, 0) + rows.serialize()
    name = uuid.uuid4()
    blob = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    with open(root / f"deletion_vector_{name}.bin", "xb") as out:
        out.write(blob)
    return {
        "storageType": "u",
        "pathOrInlineDv": z85(name.bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }


def read_vector(root: Path, descriptor: dict[str, Any]) -> Any:
    """The rows a descriptor marks (a pyroaring BitMap): a vector file of this table ("u"), or inline."""
    from pyroaring import BitMap

    kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "i":
        data = unz85(where)
    elif kind == "u":
        prefix, name = where[:-20], uuid.UUID(bytes=unz85(where[-20:]))
        with open(root / prefix / f"deletion_vector_{name}.bin", "rb") as f:
            f.seek(descriptor.get("offset") or 0)
            (size,) = struct.unpack(">i", f.read(4))
            data = f.read(size)
            (checksum,) = struct.unpack(">I", f.read(4))
        if zlib.crc32(data) != checksum:
            raise ValueError(f"deletion vector {name}: checksum mismatch")
    else:
        raise Unsupported(f"deletion vector storage type {kind!r}")
    magic, count = struct.unpack("<iq", data[:12])
    if magic != MAGIC:
        raise ValueError(f"not a deletion vector (magic {magic})")
    if count == 0:
        return BitMap()
    if count != 1 or struct.unpack("<i", data[12:16])[0] != 0:
        raise Unsupported("a deletion vector of row indexes past 2^32")
    rows = BitMap.deserialize(data[16:])
    if len(rows) != descriptor["cardinality"]:
        raise ValueError(
            f"deletion vector: {len(rows)} rows, its descriptor says {descriptor['cardinality']}"
        )
    return rows


# ---- the log ---------------------------------------------------------------------------------------------
def _clean(action: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's add as the JSON action it was (maps as objects, no null fields)."""
    out = {k: v for k, v in action.items() if v is not None}
    for name in ("partitionValues", "tags"):
        if isinstance(out.get(name), list):
            out[name] = dict(out[name])
    return out


def _file_id(action: dict[str, Any]) -> tuple[str, str]:
    """A logical file: its path and its deletion vector's unique id (PROTOCOL.md, "Action Reconciliation"):
    a commit that marks rows adds (path, new vector) and removes (path, old vector), in either order."""
    vector = action.get("deletionVector") or {}
    unique = vector.get("storageType", "") + vector.get("pathOrInlineDv", "")
    if vector.get("offset") is not None:
        unique += f"@{vector['offset']}"
    return action["path"], unique


def live_files(root: Path, version: int) -> dict[tuple[str, str], dict[str, Any]]:
    """The add actions of the table's files at ``version``: its newest checkpoint, then the commits after."""
    import pyarrow.parquet as pq

    log = root / "_delta_log"
    files: dict[tuple[str, str], dict[str, Any]] = {}
    start = 0
    pointer = log / "_last_checkpoint"
    checkpoint = json.loads(pointer.read_text()) if pointer.exists() else None
    if checkpoint and checkpoint["version"] <= version:
        at, parts = checkpoint["version"], checkpoint.get("parts")
        if checkpoint.get("v2Checkpoint") or checkpoint.get("checkpointSchema", {}).get("v2"):
            raise Unsupported("a v2 checkpoint")
        names = (
            [f"{at:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
            if parts
            else [f"{at:020d}.checkpoint.parquet"]
        )
        for name in names:
            for add in pq.read_table(log / name, columns=["add"]).column("add").drop_null().to_pylist():
                files[_file_id(add)] = _clean(add)
        start = at + 1
    for number in range(start, version + 1):
        for _n, line in json_lines((log / f"{number:020d}.json").read_text(encoding="utf-8")):
            action = json.loads(line)
            if "add" in action:
                files[_file_id(action["add"])] = action["add"]
            elif "remove" in action:
                files.pop(_file_id(action["remove"]), None)
    return files


def _commit(root: Path, version: int, actions: list[dict[str, Any]]) -> None:
    """The next commit, whole or not at all, and only if absent: written to a temporary file, then linked
    to its name (a hard link fails if the name exists: a commit another writer made first is never
    replaced; a kill -9 leaves no half-written commit, only the temporary file)."""
    import os

    log = root / "_delta_log"
    temporary = log / f".{version:020d}.json.{uuid.uuid4().hex}.tmp"
    with open(temporary, "x") as out:
        out.write("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, log / f"{version:020d}.json")
    finally:
        temporary.unlink()


# ---- the MERGE ------------------------------------------------------------------------------------------
def _key_bounds(stats: dict[str, Any], key: str) -> tuple[Any, Any]:
    return stats.get("minValues", {}).get(key), stats.get("maxValues", {}).get(key)


def _stats(rows: pa.Table, key: Sequence[str]) -> str:
    """A new file's statistics: rows, nulls, and the key columns' range where it is a JSON number or
    string (what the MERGE's key-range predicate and Delta's file skipping read); other bounds are
    optional and left out."""
    values: dict[str, Any] = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in rows.column_names:
        column = rows[name]
        if not pa.types.is_nested(column.type):
            values["nullCount"][name] = column.null_count
        if name in key and (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
            low, high = pc.min_max(column).values()
            values["minValues"][name], values["maxValues"][name] = low.as_py(), high.as_py()
    return json.dumps(values)


def _write(root: Path, rows: pa.Table, key: Sequence[str], now: int) -> dict[str, Any]:
    """A new data file of ``rows`` in the table's folder -> its add action."""
    import pyarrow.parquet as pq

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(rows, root / name, compression="snappy")
    add = {"path": url_quote(name), "partitionValues": {}, "size": (root / name).stat().st_size}
    return add | {"modificationTime": now, "dataChange": True, "stats": _stats(rows, key)}


def _conformed(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """A data file's rows in the mirror's schema (a column added after the file was written is NULL in it).

    pyarrow (26) has no filter kernel for the view types delta-rs writes (Utf8View, BinaryView): the cast
    to the mirror's plain types comes before any filter."""
    have = dict(zip(data.column_names, data.columns, strict=True))  # (by name: a lookup per column is linear)
    columns = [
        have[f.name].cast(f.type) if f.name in have else pa.nulls(data.num_rows, f.type) for f in schema
    ]
    return pa.table(columns, schema=schema)


def _without_rows(data: pa.Table, rows: Any, schema: pa.Schema) -> pa.Table:
    """A data file's rows less those marked (a BitMap of row numbers), in the mirror's schema."""
    if data.schema != schema:
        data = _conformed(data, schema)
    drop = np.fromiter(rows, np.int64, len(rows))
    keep = np.ones(data.num_rows, bool)
    keep[drop] = False
    return data.filter(pa.array(keep))


class _Lookup:
    """The batch rows of the mirror rows' keys, file after file. One integer key column of a batch with one
    row a key: the batch's keys sorted once, each file's found by binary search (numpy); one other key
    column: a hash lookup (``index_in``); otherwise an Acero join (~2x the CPU of either on 500k rows)."""

    def __init__(self, source: pa.Table, key: Sequence[str]) -> None:
        self.source, self.key = source, list(key)
        column = source[key[0]]
        self.unique = len(key) == 1 and pc.count_distinct(column).as_py() == source.num_rows
        self.order = self.sorted = None
        if self.unique and pa.types.is_integer(column.type) and column.null_count == 0:
            values = column.to_numpy()
            self.order = np.argsort(values, kind="stable")
            self.sorted = values[self.order]

    def pairs(self, mirror: pa.Table) -> pa.Table:
        """The mirror rows (``__row``) whose key a batch row (``__source``) has, with the mirror's key and
        sequence columns."""
        column = mirror[self.key[0]]
        if self.sorted is not None and len(self.sorted) and column.null_count == 0:
            values = column.to_numpy()
            at = np.minimum(np.searchsorted(self.sorted, values), len(self.sorted) - 1)
            found = self.sorted[at] == values
            pairs = mirror.filter(pa.array(found))
            return pairs.append_column("__source", pa.array(self.order[at[found]].astype(np.int64)))
        if self.unique:
            at = pc.index_in(column, value_set=self.source[self.key[0]], skip_nulls=True)
            found = pc.is_valid(at)
            return mirror.filter(found).append_column("__source", at.filter(found).cast(pa.int64()))
        return mirror.join(self.source, keys=self.key, join_type="inner")


def merge(
    table: Any,
    path: str,
    batch: pa.Table,
    schema: pa.Schema,
    key: Sequence[str],
    seq_column: str,
    op_column: str,
    txn: Txn | None,
    *,
    ties: bool = False,
    rewrite: bool = False,
    max_bytes: int | None = None,
    min_share: float | None = None,
) -> MergeResult:
    """The guarded MERGE (sinks.delta_rs.DeltaRsWriter.merge_guarded: delete a matched row when the change
    is a delete and newer, replace it when newer, insert an unmatched non-delete) into ``table`` (a
    deltalake.DeltaTable at its newest version) as deletion vectors and one new file; with ``rewrite``,
    each file holding replaced rows is written again without them (copy-on-write, as the MERGE does; the
    rows left of files that kept few go into one file with the batch's new rows).
    ``max_bytes``: :class:`Unsupported`, before anything is written, when the files in the batch's key
    range hold more bytes (the caller MERGEs a large mirror instead); ``min_share``: the same when the
    batch has fewer rows than this share of those files' rows, and otherwise each file is read whole at
    once (a batch this large touches most of them)."""
    import pyarrow.parquet as pq
    from pyroaring import BitMap

    root = Path(path)
    version = table.version()
    files = live_files(root, version)
    try:
        # (One chunk: a take from a chunked column of many, below, cost ~10x; measured.)
        batch = batch.select(schema.names).cast(schema).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise Unsupported(f"a batch not in the mirror's types: {exc}") from None  # (the MERGE casts)
    source = batch.select(list(key)).append_column("__source", pa.array(np.arange(batch.num_rows)))
    matched = np.zeros(batch.num_rows, bool)
    applied = np.zeros(batch.num_rows, bool)
    first = key[0]
    low, high = pc.min_max(batch[first]).values()
    bounded = pa.types.is_integer(batch[first].type) or pa.types.is_string(batch[first].type)
    lookup = _Lookup(source, key)
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = []
    scanned = skipped = copied = 0
    candidates = []
    for add in files.values():
        name = add["path"]
        if "://" in name or name.startswith("/"):
            raise Unsupported(f"a data file outside the table's folder: {name}")
        stats = json.loads(add.get("stats") or "{}")
        lo, hi = _key_bounds(stats, first)
        if bounded and lo is not None and hi is not None and (hi < low.as_py() or lo > high.as_py()):
            skipped += 1  # outside the batch's key range (the MERGE's predicate skips it too)
            continue
        candidates.append((add, name, stats))
    if max_bytes is not None and sum(add.get("size") or 0 for add, _n, _s in candidates) > max_bytes:
        raise Unsupported(f"more than {max_bytes} bytes of files to read")
    whole = rewrite and min_share is not None
    if whole:
        if any("numRecords" not in s or (a.get("size") or 0) > WHOLE_BYTES for a, _n, s in candidates):
            raise Unsupported("a file without statistics, or too large to hold whole")
        if batch.num_rows < min_share * sum(s["numRecords"] for _a, _n, s in candidates):
            raise Unsupported(f"a batch of less than {min_share:.0%} of the rows in its key range")
    pending: list[pa.Table] = []  # rows left of files that kept few (written together: fewer files)
    for add, name, stats in candidates:
        scanned += 1
        # (A ParquetFile, not pq.read_table: its dataset discovery cost ~1 ms a file of a small mirror.)
        data = _conformed(pq.ParquetFile(root / unquote(name)).read(), schema) if whole else None
        if data is not None:
            mirror = data.select([*key, seq_column])
        else:
            mirror = pq.ParquetFile(root / unquote(name)).read(columns=[*key, seq_column])
            mirror = mirror.cast(pa.schema([schema.field(c) for c in mirror.column_names]))
        mirror = mirror.append_column("__row", pa.array(np.arange(mirror.num_rows)))
        marked = read_vector(root, add["deletionVector"]) if add.get("deletionVector") else BitMap()
        pairs = lookup.pairs(mirror)
        if len(marked):  # rows a vector marks are gone: they match nothing
            live = ~np.isin(pairs["__row"].to_numpy(), np.fromiter(marked, np.int64, len(marked)))
            pairs = pairs.filter(pa.array(live))
        if pairs.num_rows == 0:
            continue
        rows, sources = pairs["__row"].to_numpy(), pairs["__source"].to_numpy()
        compare = pc.greater_equal if ties else pc.greater
        newer = compare(pc.take(batch[seq_column], sources), pairs[seq_column]).to_numpy(zero_copy_only=False)
        matched[sources] = True
        applied[sources[newer]] = True
        if not newer.any():
            continue
        vector = BitMap(marked)
        vector.update(rows[newer].astype(np.uint32))
        remove = {k: add[k] for k in ("path", "partitionValues", "size", "tags") if k in add}
        remove |= {"deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True}
        if add.get("deletionVector"):
            remove["deletionVector"] = add["deletionVector"]
        actions.append({"remove": remove})
        if rewrite:
            if data is None:
                data = pq.ParquetFile(root / unquote(name)).read()
            kept = _without_rows(data, vector, schema)
            del data
            copied += kept.num_rows
            if kept.num_rows >= PIECE_ROWS:
                actions.append({"add": _write(root, kept, key, now)})
            elif kept.num_rows:
                pending.append(kept)
                if sum(p.num_rows for p in pending) >= PIECE_ROWS:
                    actions.append({"add": _write(root, pa.concat_tables(pending), key, now)})
                    pending.clear()
            continue
        stats["tightBounds"] = False  # the statistics still count the rows the vector marks
        replaced = {**add, "deletionVector": write_vector(root, vector), "stats": json.dumps(stats)}
        actions.append({"add": {**replaced, "dataChange": True, "modificationTime": now}})
    deletes = pc.equal(batch[op_column], "delete").to_numpy(zero_copy_only=False)
    keep = ~deletes & (applied | ~matched)
    new_rows = batch.filter(pa.array(keep)).sort_by([(k, "ascending") for k in key])
    if pending:
        new_rows = pa.concat_tables([*pending, new_rows])
    if new_rows.num_rows:
        actions.append({"add": _write(root, new_rows, key, now)})
    result = MergeResult(
        inserted=int((~deletes & ~matched).sum()),
        updated=int((~deletes & applied).sum()),
        deleted=int((deletes & applied).sum()),
        files_scanned=scanned,
        files_skipped=skipped,
        rows_copied=copied,
    )
    info = {
        "timestamp": now,
        "operation": "MERGE",
        "operationParameters": {"writer": f"replicator {'rewrite' if rewrite else 'deletion vectors'}"},
        "operationMetrics": {
            "num_target_rows_inserted": result.inserted,
            "num_target_rows_updated": result.updated,
            "num_target_rows_deleted": result.deleted,
        },
    }
    head = [{"commitInfo": info}]
    if txn is not None:
        head.append({"txn": {"appId": txn.app_id, "version": txn.version, "lastUpdated": now}})
    if actions or txn is not None:
        _commit(root, version + 1, head + actions)
    return result
