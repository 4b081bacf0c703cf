"""What a decode task hands the driver about many tables (replicator.decode.decode_partition, in this
process: what a Python worker runs): its type maps and counts compacted to a row per table, and sent as a
file in the batch's folder when they are large, not through Spark's result collection (whose executor
buffer failed at 512 MB on a 1M-event task over 10,000 tables)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replicator import decode, payload
from replicator.decode import DecodePlan, decode_partition
from replicator.dialects.base import DecodeOptions
from tests.helpers import ORDER_TYPES, canal, order

TABLES = 50


def messages(
    path: Path,
    count: int,
    tables: int = TABLES,
    types: Callable[[int], dict[str, str]] = lambda _n: ORDER_TYPES,
) -> Path:
    """canal-json INSERTs spread round-robin over ``tables`` tables, a row each; message ``n`` with the
    type map ``types(n)``."""
    rows = (
        canal(
            "INSERT",
            [order(n, name=f"n{n}")],
            es=1_700_000_000_000 + n,
            table=f"t{n % tables:04d}",
            types=types(n),
        )
        for n in range(count)
    )
    path.write_text("".join(json.dumps(m) + "\n" for m in rows), encoding="utf-8")
    return path


def run_task(tmp_path: Path, name: str, file: Path) -> list[pa.RecordBatch]:
    plan = DecodePlan(
        source="files",
        dialect="canal-json",
        options=DecodeOptions(),
        batch_id=1,
        spill=str(tmp_path / name / "spill"),
        changelog=str(tmp_path / name / "changelog"),
        buckets=2,
    )
    listing = pa.record_batch({"path": [f"file:{file}"], "mtime": [0]})
    return list(decode_partition(plan, [listing]))


def results(batches: list[pa.RecordBatch]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for kind, _bucket, table in payload.items(batches):
        if kind in ("groups", "types"):
            found.setdefault(kind, []).extend(table.to_pylist())
    return {kind: sorted(rows, key=repr) for kind, rows in found.items()}


def test_many_tables_results_are_a_row_a_table_and_go_by_file_when_large(tmp_path, monkeypatch):
    file = messages(tmp_path / "m.jsonl", 25_000)  # three slices of 10,000 events, each over every table
    monkeypatch.setattr(decode, "COMPACT_PARTS", 2)  # compacted while the task runs, and at its end
    direct = run_task(tmp_path, "direct", file)
    kinds = [k for b in direct for k in b["kind"].to_pylist()]
    assert not any(k.endswith(payload.IN_FILE) for k in kinds)
    got = results(direct)
    assert len(got["types"]) == TABLES  # a row per table (one type map each), not per table and slice
    assert sum(r["first_count"] for r in got["groups"]) == 25_000
    assert len(got["groups"]) == TABLES

    monkeypatch.setattr(decode, "RESULT_BYTES", 0)  # every task's results are "large"
    by_file = run_task(tmp_path, "by-file", file)
    kinds = [k for b in by_file for k in b["kind"].to_pylist()]
    assert "groups" + payload.IN_FILE in kinds and "types" + payload.IN_FILE in kinds
    assert results(by_file) == got


@pytest.mark.parametrize("tables", [1, 1000])
def test_change_log_files_hold_every_event_in_few_row_groups(tmp_path, tables):
    """The change log's writer flushes its slices at 30,000 events only when they hold ~100 events a
    table (or 256 MB): 40,000 events over 1,000 tables are a row group a table, not two (a row group costs
    ~0.4 ms however small); a file of a few events is snappy, a large one zstd."""
    file = messages(tmp_path / "m.jsonl", 40_000, tables)
    batches = run_task(tmp_path, "task", file)
    listing = next(t for k, _b, t in payload.items(batches) if k == "changelog")
    assert listing.num_rows == tables
    assert sum(listing["rows"].to_pylist()) == 40_000
    root = tmp_path / "task" / "changelog"
    for path, rows in zip(listing["path"].to_pylist(), listing["rows"].to_pylist(), strict=True):
        meta = pq.ParquetFile(root / path).metadata
        assert meta.num_rows == rows
        codec = meta.row_group(0).column(0).compression
        if tables == 1:  # flushed at 30,000 events, then the rest
            assert (meta.num_row_groups, codec) == (2, "ZSTD")
        else:  # 40 events a table: one flush at the task's end
            assert (meta.num_row_groups, codec) == (1, "SNAPPY")


def test_a_type_map_that_changes_between_a_tasks_slices_is_read_anew(tmp_path):
    """The task's slices share one decoder (its per-table caches: a table's type map parsed once while it
    does not change): a table altered between two slices, and back, has each event typed by its own
    message's map."""
    wide = {**ORDER_TYPES, "name": "varchar(255)"}

    def types(n: int) -> dict[str, str]:  # slices of 10,000: the first and third the old map
        return wide if 10_000 <= n < 20_000 else ORDER_TYPES

    file = messages(tmp_path / "m.jsonl", 25_000, tables=1, types=types)
    got = results(run_task(tmp_path, "task", file))

    def es(seq_text: str) -> int:
        return int(seq_text.split(".")[0]) - 1_700_000_000_000

    spans = {
        r["type_key"].split("\x1e")[1]: (es(r["seq_text_min"]), es(r["seq_text_max"])) for r in got["types"]
    }
    assert spans == {
        "int(11)\x1fvarchar(64)\x1fdecimal(10,2)\x1fdatetime(3)": (0, 24_999),
        "int(11)\x1fvarchar(255)\x1fdecimal(10,2)\x1fdatetime(3)": (10_000, 19_999),
    }
