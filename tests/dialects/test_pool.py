"""Decoding in worker processes gives exactly what decoding in one process gives."""

from __future__ import annotations

import pyarrow as pa
import pytest

from replicator.dialects import DecodeOptions
from replicator.dialects.pool import decode_stream
from replicator.sources import read_path
from tests.dialects.golden import FIXTURES


def plain(table: pa.Table) -> list[dict]:
    """Rows with the dictionary-encoded type keys as text (each slice brings its own dictionary)."""
    columns = {n: table[n].cast(pa.string()) if n == "type_key" else table[n] for n in table.column_names}
    return pa.table(columns).to_pylist()


def test_worker_processes_decode_like_one_process():
    # Every JSON golden input of every format, as one batch under `auto` (errors and dead letters included).
    records = pa.concat_tables(
        read_path(str(FIXTURES / folder))
        for folder in ("canal-json", "drs-json", "debezium", "river-canal", "cloudcanal-json", "drs-mongo")
    )
    options = DecodeOptions()
    _, one = decode_stream([records], "auto", options, batch_id=3, workers=1)
    _, many = decode_stream([records], "auto", options, batch_id=3, workers=2, parallel_from=1, slice_size=7)
    assert one.num_rows > 100
    assert one.schema == many.schema
    assert plain(one) == plain(many)


def test_a_batch_without_records_decodes_to_no_events():
    records, decoded = decode_stream([], "canal-json", DecodeOptions(), batch_id=1)
    assert records.num_rows == 0 and decoded.num_rows == 0
    assert "seq_text" in decoded.column_names


def test_a_dead_worker_fails_its_batch_and_the_next_batch_gets_new_workers():
    import os
    import signal
    from concurrent.futures.process import BrokenProcessPool

    from replicator.dialects import pool

    records = read_path(str(FIXTURES / "canal-json"))
    run = {"workers": 2, "parallel_from": 1, "slice_size": 1}
    _, first = decode_stream([records], "canal-json", DecodeOptions(), 1, **run)
    for process in list(pool._pool(2)._processes.values()):
        os.kill(process.pid, signal.SIGKILL)
    with pytest.raises(BrokenProcessPool):
        decode_stream([records], "canal-json", DecodeOptions(), 1, **run)
    _, again = decode_stream([records], "canal-json", DecodeOptions(), 1, **run)
    assert plain(again) == plain(first)
