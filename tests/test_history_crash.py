"""kill -9 of the real mirror process around a history table's commit, then a restart: the history equals
that of a run without crashes, each batch committed once to it.

Crash points, chained on one job (tests/test_crash.py's workload: two tables, deletes, an ADD COLUMN, a
redelivery of earlier inserts): after batch 0's mirror commits and before its history (``before@0``); after
batch 1's markers (its deletes) are appended and before the history's MERGE (``markers@1``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import delta_table, run_here
from tests.test_crash import TABLES, finish, mirror_rows, txns, workload, write_job
from tests.test_crash import crash_at as crash

HARNESS = textwrap.dedent("""
    import os, signal, sys
    from replicator.apply.history.table import HistoryTable

    point, _, at = sys.argv[2].partition("@")
    at = int(at)

    def die():
        print(f"CRASH-POINT {point}@{at}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    name = {"before": "apply", "markers": "_merge"}[point]
    original = getattr(HistoryTable, name)
    def hooked(self, *args):
        if args[-1].version == at:  # the batch's Txn is the last argument of both
            die()
        return original(self, *args)
    setattr(HistoryTable, name, hooked)
    from replicator.commands.cli import main
    sys.exit(main(["mirror", "--config", sys.argv[1], "--available-now"]))
""")


def history_job(root: Path, files: list[list[dict]]) -> Path:
    config = write_job(root, files)
    config.write_text(config.read_text() + 'tables: {history: ["shop.*"]}\n', encoding="utf-8")
    return config


def crash_at(config: Path, point: str) -> None:
    crash(config, point, HARNESS)


def history_rows(root: Path, table: str) -> list[dict]:
    rows = delta_table(root / "lake" / "shop" / f"{table}__history", cdc=True).to_pylist()
    return sorted(rows, key=lambda r: (r["id"], r["_cdc_seq"]))


@pytest.mark.timeout(1200)  # a dozen crashed and restarted jobs, each a Spark start
@pytest.mark.slow
def test_history_survives_kills_around_its_commit(spark, tmp_path):
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"
    files, _model = workload(seed=0)  # once: the messages' ids are drawn from a counter
    config = history_job(crashed, files)
    crash_at(config, "before@0")
    assert txns(crashed / "lake" / "shop" / "orders")[("crash-job", 0)] == 1
    assert not any(txns(crashed / "lake" / "shop" / f"{t}__history") for t in TABLES)
    crash_at(config, "markers@1")
    finish(config)
    run_here(spark, history_job(clean, files))  # the uninterrupted reference, in this process's session
    for table in TABLES:
        rows = history_rows(crashed, table)
        assert rows == history_rows(clean, table), table
        assert any(not r["_cdc_current"] for r in rows), table  # the workload closes versions
        current = [
            {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows if r["_cdc_current"]
        ]
        assert current == sorted(mirror_rows(crashed, table), key=lambda r: r["id"]), table
        counts = txns(crashed / "lake" / "shop" / f"{table}__history")
        assert counts and set(counts.values()) == {1}, (table, counts)
