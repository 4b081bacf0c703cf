"""Arrow tables as Spark rows: ``(kind, bucket, payload)`` where ``payload`` is one Arrow IPC stream.

The stages run on Spark's executors over Arrow (``mapInArrow``) and hand each other whole Arrow tables,
not one Spark row per event: the JVM schedules and transports the bytes, or only the names of the files
holding them (:func:`to_files`, replicator.exchange), and never converts an event's map columns to its own
rows and back (measured: that conversion costs more than the decoding). A row's ``kind`` says what the
table holds (``events``, ``groups``, ``barriers``, ``dead``, ``types``, ``changelog``, ``folded``, ...),
``bucket`` which of the fold's buckets it is for.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC bytes of a table (only the rows of a slice, not the buffers it shares)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


# Rows of a table per payload row, at most: a few tens of MB of events.
ROWS_PER_PAYLOAD = 50_000


def rows(items: Iterable[tuple[str, int, pa.Table]]) -> Iterator[pa.RecordBatch]:
    """``(kind, bucket, table)`` items -> one record batch of payload rows per item."""
    import pyarrow as pa

    for kind, bucket, table in items:
        # Sliced: a payload is one JVM byte array (2 GB at most), and the JVM buffers a few at a time.
        for start in range(0, max(table.num_rows, 1), ROWS_PER_PAYLOAD):
            yield pa.RecordBatch.from_pydict(
                {
                    "kind": pa.array([kind], pa.string()),
                    "bucket": pa.array([bucket], pa.int32()),
                    "payload": pa.array([to_ipc(table.slice(start, ROWS_PER_PAYLOAD))], pa.binary()),
                }
            )


# A payload row whose kind ends so holds the URI of an Arrow IPC file, not the table itself.
IN_FILE = "@file"


def to_files(folder: str, items: Iterable[tuple[str, int, pa.Table]]) -> Iterator[pa.RecordBatch]:
    """``(kind, bucket, table)`` items written as Arrow IPC files in ``folder`` (a path or a pyarrow
    file-system URI the driver reaches too: the state folder), as payload rows naming them.

    For what the driver collects and may be large (net changes, dead letters with their raw bytes): the
    driver's JVM then carries file names, not the tables (its heap held every task's result at once and
    ran out on a 500k-event batch with 1 GB, measured)."""
    import uuid

    import pyarrow as pa
    from pyarrow import fs

    base = folder_uri(folder)
    filesystem, root = fs.FileSystem.from_uri(base)
    filesystem.create_dir(root, recursive=True)
    for kind, bucket, table in items:
        name = f"{uuid.uuid4()}.arrow"
        with filesystem.open_output_stream(f"{root}/{name}") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        yield from rows([(kind + IN_FILE, bucket, pa.table({"uri": [f"{base}/{name}"]}))])


def _resolve(kind: str, data: bytes) -> tuple[str, pa.Table]:
    if not kind.endswith(IN_FILE):
        return kind, from_ipc(data)
    import pyarrow as pa

    with open_input(from_ipc(data)["uri"][0].as_py()) as source:  # (the folder is removed once read)
        return kind[: -len(IN_FILE)], pa.ipc.open_stream(source).read_all()


def open_input(uri: str) -> pa.NativeFile:
    """An Arrow file of a batch's folder, for reading: a local one is memory-mapped, so the record batches
    read from it are used where they lie instead of copied into fresh memory (measured on the 5M
    catch-up: ~0.9 s of the fold tasks, ~0.5 s of the driver). The mapping outlives the file's name."""
    import pyarrow as pa
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    if isinstance(filesystem, fs.LocalFileSystem):
        return pa.memory_map(path)
    return filesystem.open_input_file(path)


def clear(folder: str) -> None:
    """Remove a folder of payload files (a batch's, once read; a crashed batch's leftovers)."""
    from pyarrow import fs

    filesystem, root = fs.FileSystem.from_uri(folder_uri(folder))
    if filesystem.get_file_info(root).type != fs.FileType.NotFound:
        filesystem.delete_dir(root)


def folder_uri(root: str) -> str:
    """A folder as a pyarrow file-system URI (plain paths are local, percent-encoded: a mirror's folder
    may hold letters of any script, which a URI holds only encoded)."""
    import os
    from urllib.parse import quote

    if "://" in root or root.startswith("file:"):
        return root.replace("s3a://", "s3://", 1).replace("s3n://", "s3://", 1)
    return "file://" + quote(os.path.abspath(root))


def tables(batches: Iterable[pa.RecordBatch], kind: str | None = None) -> Iterator[pa.Table]:
    """The tables inside payload rows (all of them, or those of one kind), read from their files for
    rows written by :func:`to_files`."""
    for k, _bucket, table in items(batches):
        if kind is None or k == kind:
            yield table


def concat(parts: list[pa.Table], schema: pa.Schema | None = None) -> pa.Table:
    """Payload tables of one kind as one table (an empty table of ``schema`` when there are none)."""
    import pyarrow as pa

    if not parts:
        assert schema is not None
        return schema.empty_table()
    return pa.concat_tables(parts, promote_options="permissive").unify_dictionaries()


def items(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, int, pa.Table]]:
    """``(kind, bucket, table)`` of every payload row."""
    for batch in batches:
        columns = (batch.column(n).to_pylist() for n in ("kind", "bucket", "payload"))
        for kind, bucket, data in zip(*columns, strict=True):
            name, table = _resolve(kind, data)
            yield name, bucket, table


def frame(spark: SparkSession, parts: Iterable[tuple[str, pa.Table]], slice_rows: int = 20_000) -> DataFrame:
    """Arrow tables made on the driver (records for a batch, replayed events) as payload rows, a task each."""
    import pyarrow as pa

    from replicator.spark import local_frame

    data = []
    for kind, table in parts:
        for start in range(0, max(table.num_rows, 1), slice_rows):
            data.append((kind, 0, to_ipc(table.slice(start, slice_rows))))
    return local_frame(spark, data or [("none", 0, to_ipc(pa.table({})))], payload_schema())


def payload_schema() -> pa.Schema:
    """A payload row: its kind, its bucket and an Arrow IPC stream."""
    import pyarrow as pa

    return pa.schema([("kind", pa.string()), ("bucket", pa.int32()), ("payload", pa.binary())])


# What a process that lives across batches (the driver, Spark's reused Python workers) keeps of the memory
# it freed, for its next task: up to this resident size, in MB (REPLICATOR_KEEP_RESIDENT_MB overrides; 0
# gives everything back after each task). Arrow's allocator keeps freed memory a minute
# (spark.ALLOCATOR_ENV).
KEEP_RESIDENT_MB = 1024


def keep_freed_memory() -> None:
    """Arrow's allocator keeps freed memory for a minute (spark.ALLOCATOR_ENV, unless the environment says
    otherwise), so that a task reuses what the previous one freed (:func:`release_memory`). mimalloc reads
    its settings when Arrow loads: the ``replicator`` command sets them first, for its driver and the local
    Python workers Spark starts from it (spark.SESSION_DEFAULTS sets them for a cluster's)."""
    import os

    from replicator.spark import ALLOCATOR_ENV

    for name, value in ALLOCATOR_ENV.items():
        os.environ.setdefault(name, value)


def release_memory() -> None:
    """At the end of a task or a batch: give freed memory back to the system when the process is larger
    than it may stay between tasks (:data:`KEEP_RESIDENT_MB`).

    Arrow's pool (mimalloc) keeps what a task freed for the next one, and glibc keeps Python's and the
    libraries' freed chunks mapped until trimmed. Giving it all back after every task made the next task
    fault every page in again, zeroed by the kernel: on the 5M catch-up, 1.2M page faults and ~9 s of
    kernel time in the Python workers, ~10% of the run (perf; benchmarks/LOG.md). Kept, the workers
    fault ~0.2M pages, each process stays at its largest task's size (~0.45 GB a worker, ~0.6-0.85 GB the
    driver there) and the run's peak is ~0.4 GB higher. A process above the limit (a larger batch) gives
    its freed memory back as before."""
    keep = _keep_resident()
    if keep is not None:
        resident = _resident()
        if resident is not None and resident <= keep:
            return
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _keep_resident() -> int | None:
    """The resident size (bytes) a process may keep between tasks; None: give freed memory back always."""
    import os

    text = os.environ.get("REPLICATOR_KEEP_RESIDENT_MB", "").strip()
    try:
        megabytes = int(text) if text else KEEP_RESIDENT_MB
    except ValueError:
        megabytes = KEEP_RESIDENT_MB
    return megabytes << 20 if megabytes > 0 else None


def _resident() -> int | None:
    """This process's resident size in bytes (Linux's /proc; None elsewhere)."""
    import os

    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def freeze_heap() -> None:
    """Exempt what is alive when a task starts (the worker's modules, its caches) from the cyclic garbage
    collector's passes.

    Spark's reused Python worker runs a full ``gc.collect()`` after every task (pyspark/daemon.py), which
    walks every tracked object of the process: ~30 ms with pyarrow, NumPy and the engine imported.
    Measured on the 5M catch-up: 6 s of the workers' CPU, ~5% of the run. Frozen objects are still freed
    by reference counting; only a cycle among them is never collected, and at a task's start those are
    the worker's own long-lived objects. The task's garbage is younger and still collected."""
    import gc

    gc.freeze()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None on other C libraries)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)


def spark_schema() -> StructType:
    """:func:`payload_schema` for Spark (what the stages' ``mapInArrow`` returns)."""
    from replicator.spark import struct

    return struct(payload_schema())
