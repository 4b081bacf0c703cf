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
    """Decoded events plus ``seq_text`` (the engine's sort key), computed here, in parallel."""
    from replicator.changelog import seq_texts

    events = decode(records, dialect, options, batch_id)
    return events.append_column("seq_text", seq_texts(events["seq"]))


def decode_batch(
    records: pa.Table,
    dialect: str,
    options: DecodeOptions,
    batch_id: int,
    workers: int | None = None,
) -> pa.Table:
    """Raw records -> decoded events (model.DECODED_DDL as Arrow, plus ``seq_text``), in ``workers``
    processes when large."""
    import pyarrow as pa

    workers = workers or default_workers()
    n = records.num_rows
    if workers <= 1 or n < PARALLEL_FROM:
        return _decode_slice(records, dialect, options, batch_id)
    parts = workers * 2  # slices of unequal cost (a few large array documents) even out
    step = -(-n // parts)
    slices = [records.slice(start, step) for start in range(0, n, step)]
    pool = _pool(workers)
    futures = [pool.submit(_decode_slice, s, dialect, options, batch_id) for s in slices]
    return pa.concat_tables([f.result() for f in futures])
