"""A new table's bulk inserts written by the fold tasks: Parquet files in the mirror's folder, which the
driver commits as add actions (``MirrorWriter.add_files``) with the batch's app transaction.

Only for a table the driver created when it planned the batch (``Engine._typing``): no rows, no
tombstones and no horizon to guard against, so a MERGE of its net changes would insert every one that is
not a delete. Those rows go to files here; the deletes (their tombstones), the rows with a value that
does not fit (dead letters) and those with columns the mirror lacks (schema evolution) still go to the
driver. On a 1M catch-up the driver's apply went from ~290 to ~35 ms and its Python's CPU fell by ~0.25 s
(benchmarks/LOG.md). A batch that is replayed writes its files again: the first try's, never committed,
are orphans that ``optimize``'s vacuum removes (as the change log's).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def files_schema() -> pa.Schema:
    """What a fold task reports of each file it wrote; the driver turns it into an add action."""
    import pyarrow as pa

    return pa.schema(
        [
            ("path", pa.string()),  # relative to the table's folder, as the Delta log names it
            ("size", pa.int64()),
            ("rows", pa.int64()),
            ("mtime", pa.int64()),  # ms since the epoch
            ("stats", pa.string()),  # Delta's statistics JSON
            # the newest event of the file: the table's position moves to it (TableApplier._advance)
            ("last_seq", pa.string()),
            ("last_position", pa.string()),
            ("last_event_time", pa.timestamp("us", tz="UTC")),
        ]
    )


def split(typed: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A table's typed net changes (replicator.fold.typed) -> (rows for the files, rows for the driver):
    upserts whose values all fit and whose columns are all the mirror's, and the rest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.types import REST, TYPE_ERROR

    offsets = np.asarray(typed[REST].combine_chunks().offsets)  # a NULL map: no entries
    no_rest = pa.array(offsets[1:] == offsets[:-1])
    ok = pc.and_(pc.and_(pc.not_equal(typed["op"], "delete"), pc.is_null(typed[TYPE_ERROR])), no_rest)
    ok = pc.fill_null(ok, False)
    return typed.filter(ok), typed.filter(pc.invert(ok))


def mirror_rows(typed: pa.Table, schema: pa.Schema, key: list[str]) -> pa.Table:
    """Typed net changes as rows of the mirror (its columns, then the CDC columns), sorted by key: as
    ``TableApplier.typed`` and the MERGE make them."""
    import pyarrow as pa

    from replicator.types import TYPED, cdc_columns

    struct = typed[TYPED].combine_chunks()
    columns: dict[str, Any] = {f.name: struct.field(i) for i, f in enumerate(struct.type)}
    columns.update(cdc_columns(typed))
    # cast: the mirror's schema as Delta reports it (its strings may be read back as another string type)
    table = pa.Table.from_arrays([columns[f.name] for f in schema], names=schema.names).cast(schema)
    return table.sort_by([(k, "ascending") for k in key])


def _stat(value: Any) -> Any:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def stats(rows: pa.Table, key: list[str]) -> str:
    """Delta's statistics of a file: its rows, every column's NULLs, and the bounds of the key columns
    that are integers or text (those the MERGE's and ``read_keys``' file pruning reads: key_range). A
    column without bounds is one a reader cannot skip files by, never one it skips wrongly."""
    import pyarrow as pa
    import pyarrow.compute as pc

    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for name in key:
        column = rows[name]
        if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
            continue
        bounds = pc.min_max(column).as_py()
        lo, hi = _stat(bounds["min"]), _stat(bounds["max"])
        if lo is not None and hi is not None:
            low[name], high[name] = lo, hi
    nulls = {f.name: rows[f.name].null_count for f in rows.schema}
    return json.dumps({"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})


def write(rows: pa.Table, table_uri: str, key: list[str]) -> pa.Table:
    """Mirror rows -> one Parquet file in the table's folder; its files_schema() row."""
    import time
    import uuid

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyarrow import fs

    from replicator.model import CDC_EVENT_TIME, CDC_POSITION, CDC_SEQ

    filesystem, root = fs.FileSystem.from_uri(table_uri)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    with filesystem.open_output_stream(f"{root}/{name}") as sink:
        pq.write_table(rows, sink, compression="snappy")
    size = filesystem.get_file_info(f"{root}/{name}").size
    at = pc.index(rows[CDC_SEQ], pc.max(rows[CDC_SEQ])).as_py()
    return pa.Table.from_pylist(
        [
            {
                "path": name,
                "size": size,
                "rows": rows.num_rows,
                "mtime": int(time.time() * 1000),
                "stats": stats(rows, key),
                "last_seq": rows[CDC_SEQ][at].as_py(),
                "last_position": rows[CDC_POSITION][at].as_py(),
                "last_event_time": rows[CDC_EVENT_TIME][at].as_py(),
            }
        ],
        files_schema(),
    )


def missing(table_path: str, files: pa.Table) -> list[str]:
    """The files of ``files`` the driver does not find in the table's folder: a fold task wrote them where
    only its own machine sees them (a local target.path on a cluster)."""
    from pyarrow import fs

    from replicator.payload import folder_uri

    filesystem, root = fs.FileSystem.from_uri(folder_uri(table_path))
    infos = filesystem.get_file_info([f"{root}/{p}" for p in files["path"].to_pylist()])
    return [info.path for info in infos if info.type != fs.FileType.File]
