"""Tombstone retention: a delete guards its key against older late events until it expires."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from replicator.apply.tombstones import cutoff
from replicator.state import TableState
from tests.helpers import Runner, canal, job, order

ES = 1_700_000_000_000  # 2023-11-14
HOUR = 3_600_000


def tombstone_keys(runner: Runner) -> list[int]:
    from deltalake import DeltaTable

    path = Path(runner.config.state.path) / "tombstones" / "shop" / "orders"
    return sorted(DeltaTable(str(path)).to_pyarrow_table()["id"].to_pylist())


def test_expired_tombstones_no_longer_guard_and_kept_ones_do(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, tombstones={"retention": "1 hour", "expire_every_batches": 1}))
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1), order(2)], es=ES),
            canal("DELETE", [order(1)], es=ES + 1000),  # older than the newest event minus 1 hour: expires
            canal("DELETE", [order(2)], es=ES + 2 * HOUR),  # within the retention: kept
        ],
    )
    assert tombstone_keys(runner) == [2]
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "late")], old=[{"name": "x"}], es=ES + 500),
            canal("UPDATE", [order(2, "late")], old=[{"name": "x"}], es=ES + 2 * HOUR - 1),
        ],
    )
    # Documented: an event later than the retention can bring its row back; within it, never.
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [(1, "late")]


def test_a_future_event_time_does_not_expire_everything():
    state = TableState("shop", None, "orders", "m", last_event_time=dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
    now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    assert cutoff(state, dt.timedelta(days=7), now) == now - dt.timedelta(days=7)
    assert cutoff(TableState("shop", None, "orders", "m"), dt.timedelta(days=7), now) is None


def test_a_late_truncate_keeps_newer_rows(spark, tmp_path):
    """Regression: a TRUNCATE applied after newer rows (it arrived late) used to empty the whole mirror."""
    from tests.helpers import ddl

    runner = Runner(spark, job(tmp_path))
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), canal("INSERT", [order(2)], es=ES + 10)])
    runner.messages(tmp_path, [ddl("TRUNCATE", "TRUNCATE TABLE orders", es=ES + 5)])
    assert [r["id"] for r in runner.mirror()] == [2]
    # the older truncate point does not replace a newer one
    runner.messages(tmp_path, [ddl("TRUNCATE", "TRUNCATE TABLE orders", es=ES + 20)])
    runner.messages(tmp_path, [ddl("TRUNCATE", "TRUNCATE TABLE orders", es=ES + 15)])
    runner.messages(tmp_path, [canal("INSERT", [order(3)], es=ES + 17)])
    assert runner.mirror() == []


def test_a_newer_upsert_removes_its_keys_tombstone_and_others_stay(spark, tmp_path):
    """Only the deletes and the rows of tombstoned keys reach the tombstones' MERGE: a re-inserted key
    loses its tombstone, an untouched deleted key keeps its own, a row older than its tombstone changes
    nothing, and a batch without deletes or tombstoned keys leaves the table as it was."""
    runner = Runner(spark, job(tmp_path))
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1), order(2), order(3), order(4)], es=ES),
            canal("DELETE", [order(1), order(2), order(3)], es=ES + 10),
        ],
    )
    assert tombstone_keys(runner) == [1, 2, 3]
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "back")], es=ES + 20),  # newer: the tombstone goes
            canal("INSERT", [order(3, "stale")], es=ES + 5),  # older than its tombstone: dropped, kept
            canal("UPDATE", [order(4, "x")], old=[{"name": "y"}], es=ES + 30),  # no tombstone
        ],
    )
    assert tombstone_keys(runner) == [2, 3]
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [(1, "back"), (4, "x")]
    runner.messages(tmp_path, [canal("UPDATE", [order(4, "z")], old=[{"name": "x"}], es=ES + 40)])
    assert tombstone_keys(runner) == [2, 3]
