"""Decode a large micro-batch in worker processes (the GIL keeps one Python process on one core).

Records are cut into contiguous slices, each slice is decoded in a worker (started once per job with
``spawn``: the driver holds the Spark JVM's gateway threads, which a fork must not copy), and the results
are concatenated in input order, so the output equals :func:`replicator.dialects.base.decode`'s.
Small batches decode in the driver itself: a round trip to a worker costs more than they do.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

from replicator.dialects.base import DecodeOptions, decode

if TYPE_CHECKING:
    import pyarrow as pa

# Below this many records a batch decodes in the driver (measured: a worker round trip of a slice costs
# about as much as decoding 5,000 canal-json records).
PARALLEL_FROM = 20_000
SLICE = 10_000
_pools: dict[int, ProcessPoolExecutor] = {}


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _pool(workers: int) -> ProcessPoolExecutor:
    pool = _pools.get(workers)
    if pool is None:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        _pools[workers] = pool
    return pool


@atexit.register
def shutdown() -> None:
    for pool in _pools.values():
        pool.shutdown(wait=False, cancel_futures=True)
    _pools.clear()


def _decode_slice(records: pa.Table, dialect: str, options: DecodeOptions, batch_id: int) -> pa.Table:
    """Decoded events plus the engine's derived ``seq_text`` and ``type_key``."""
    return decode(records, dialect, options, batch_id, sort_keys=True)


def _ipc(table: pa.Table) -> bytes:
    """Arrow IPC bytes of a table. Unlike pickle, IPC writes only the rows of a slice, not the buffers it
    shares with the rest of the batch (measured: pickling 1/32 of a batch sent the whole batch)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def _worker(data: bytes, dialect: str, options: DecodeOptions, batch_id: int) -> bytes:
    return _ipc(_decode_slice(_from_ipc(data), dialect, options, batch_id))


def decode_batch(
    records: pa.Table,
    dialect: str,
    options: DecodeOptions,
    batch_id: int,
    workers: int | None = None,
    parallel_from: int = PARALLEL_FROM,
    slice_size: int = SLICE,
) -> pa.Table:
    """Raw records -> decoded events (model.DECODED_DDL as Arrow, plus ``seq_text`` and ``type_key``), in
    ``workers`` processes when large."""
    import pyarrow as pa

    workers = workers or default_workers()
    n = records.num_rows
    if workers <= 1 or n < parallel_from:
        return _decode_slice(records, dialect, options, batch_id)
    # Many small slices: a worker's heap stays small (measured on 2 cores: 16 slices per worker decode
    # 35% faster than 1 each), and slices of unequal cost (a few large array documents) even out.
    step = min(slice_size, max(1_000, -(-n // (workers * 16))))
    pool = _pool(workers)
    futures = [
        pool.submit(_worker, _ipc(records.slice(start, step)), dialect, options, batch_id)
        for start in range(0, n, step)
    ]
    # Each slice has its own dictionary of type keys: unify them into one.
    return pa.concat_tables([_from_ipc(f.result()) for f in futures]).unify_dictionaries()
