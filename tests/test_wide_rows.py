"""Wide rows (issue 48, item 4): a mirror of at least vectors.WIDE_COLUMNS columns is MERGEd by rewriting
its changed files in Arrow (delta-rs's MERGE costs the square of the columns: 1,000 columns took 17 s for
one row). The same outcome as the MERGE: newer rows replace, older ones are ignored, deletes remove, a
column added later is NULL in the rows written before it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from replicator.sinks.vectors import WIDE_COLUMNS
from tests.helpers import Runner, canal, job

ES = 1_700_000_000_000
N = WIDE_COLUMNS + 50
TYPES = {"id": "int(11)", **{f"c{i}": "varchar(16)" for i in range(N)}}


def row(key: int, tag: str, n: int = N) -> dict[str, str]:
    return {"id": str(key), **{f"c{i}": f"{tag}{i}" for i in range(n)}}


def test_a_wide_mirror_applies_like_the_merge(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    runner.messages(tmp_path, [canal("INSERT", [row(k, "a")], es=ES + k, types=TYPES) for k in range(1, 5)])
    wider = {**TYPES, "extra": "varchar(8)"}
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [row(1, "b")], es=ES + 10, types=TYPES, old=[{"c0": "a0"}]),
            canal("UPDATE", [row(2, "old")], es=ES, types=TYPES, old=[{"c0": "a0"}]),  # older: ignored
            canal("DELETE", [row(3, "a")], es=ES + 11, types=TYPES),
            canal("INSERT", [{**row(5, "c"), "extra": "x"}], es=ES + 12, types=wider),
        ],
    )
    rows = {r["id"]: r for r in runner.mirror()}
    assert sorted(rows) == [1, 2, 4, 5]
    assert rows[1]["c0"] == "b0" and rows[1][f"c{N - 1}"] == f"b{N - 1}"
    assert rows[2]["c7"] == "a7" and rows[4]["c7"] == "a7" and rows[5]["c7"] == "c7"
    assert rows[5]["extra"] == "x" and rows[1]["extra"] is None and rows[4]["extra"] is None
    lake = Path(runner.config.target.path) / "shop" / "orders"
    log = sorted((lake / "_delta_log").glob("*.json"))[-1].read_text()
    assert "replicator rewrite" in log


def test_a_row_of_4096_columns_applies_in_seconds(spark, tmp_path):
    """MySQL's most columns; the MERGE took minutes for such a row."""
    runner = Runner(spark, job(tmp_path))
    types = {"id": "int(11)", **{f"c{i}": "varchar(16)" for i in range(4095)}}
    runner.messages(tmp_path, [canal("INSERT", [row(1, "a", 4095)], es=ES, types=types)])
    started = time.monotonic()
    runner.messages(tmp_path, [canal("UPDATE", [row(1, "b", 4095)], es=ES + 1, types=types)])
    assert time.monotonic() - started < 60
    (stored,) = runner.mirror()
    assert stored["c4094"] == "b4094"
    assert json.dumps(stored)  # every value readable
