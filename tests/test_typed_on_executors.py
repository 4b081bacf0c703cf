"""The fold tasks type a table's net changes against its mirror's schema when the driver plans it
(``Engine._typing``, ``replicator.fold.typed``): the same mirrors, dead letters and counts as the
driver's typing, with values that do not fit, zero dates, deletes, and columns that arrive without a DDL
under ``lenient`` (added) and ``ignore`` (counted)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from replicator import engine
from tests.helpers import Runner, canal, job, order

T = {"id": "int(11)", "name": "varchar(64)", "amount": "decimal(10,2)", "ts": "datetime(3)"}
NOTE = {**T, "note": "varchar(10)"}
TABLES = ("orders", "ig_orders")


def stream() -> list[list[dict[str, Any]]]:
    es = itertools.count(1_700_000_000_000, 10)
    one, two = [], []
    for table in TABLES:
        one.append(canal("INSERT", [order(i) for i in range(1, 7)], es=next(es), table=table, types=T))
        two += [
            canal("UPDATE", [order(1, "b", "2.50")], es=next(es), table=table, types=T, old=[{"name": "x"}]),
            canal("DELETE", [order(2)], es=next(es), table=table, types=T),
            # does not fit decimal(10,2): a dead letter naming the column
            canal("INSERT", [order(7, amount="n/a")], es=next(es), table=table, types=T),
            canal("UPDATE", [order(3, ts="0000-00-00 00:00:00")], es=next(es), table=table, types=T),
            # a column without a DDL: added (lenient), or its values counted and dropped (ignore)
            canal("INSERT", [{**order(8), "note": "n8"}], es=next(es), table=table, types=NOTE),
            canal("UPDATE", [{**order(4, "c"), "note": "n4"}], es=next(es), table=table, types=NOTE),
            canal("INSERT", [order(9, amount="12.345")], es=next(es), table=table, types=T),  # too precise
        ]
    return [one, two]


def run(spark, tmp_path, monkeypatch, threshold: int) -> dict[str, Any]:
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", threshold)
    config = job(tmp_path, schema_evolution={"default": "lenient", "tables": {"shop.ig_*": "ignore"}})
    runner = Runner(spark, config)
    summaries = [runner.messages(tmp_path, messages) for messages in stream()]
    dead = sorted((d["table"], d["error"]) for d in runner.dead_letters())
    return {
        "mirrors": {t: runner.mirror("shop", t) for t in TABLES},
        "dead": dead,
        "tables": summaries[-1].tables,
        "applied": [s.applied for s in summaries],
    }


def test_the_fold_tasks_type_as_the_driver_does(spark, tmp_path, monkeypatch):
    on_driver = run(spark, tmp_path / "driver", monkeypatch, 10**9)
    on_executors = run(spark, tmp_path / "executors", monkeypatch, 1)
    assert on_executors == on_driver
    # what both say: the premise of the comparison
    orders = {r["id"]: r for r in on_driver["mirrors"]["orders"]}
    assert sorted(orders) == [1, 3, 4, 5, 6, 8]
    assert (orders[4]["note"], orders[8]["note"], orders[3]["ts"]) == ("n4", "n8", None)
    assert "note" not in on_driver["mirrors"]["ig_orders"][0]
    assert on_driver["tables"]["shop.ig_orders"]["ignored_values"] == 2
    assert [table for table, _error in on_driver["dead"]] == ["ig_orders"] * 2 + ["orders"] * 2
    assert all("amount" in error for _table, error in on_driver["dead"])


@pytest.mark.parametrize("events", [9, 10])
def test_the_driver_plans_typing_from_the_threshold(spark, tmp_path, monkeypatch, events):
    """Tables under the threshold are typed on the driver: the plan names only tables at or over it."""
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 10)
    runner = Runner(spark, job(tmp_path))
    es = itertools.count(1_700_000_000_000, 10)
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=next(es))])
    frame_events = [canal("UPDATE", [order(1, f"v{i}")], es=next(es)) for i in range(events)]
    planned: list[Any] = []
    real = runner.engine._typing
    monkeypatch.setattr(runner.engine, "_typing", lambda *a: planned.append(real(*a)) or planned[-1])
    runner.messages(tmp_path, frame_events)
    expected = [("shop", None, "orders")] if events >= 10 else []
    assert [[t for t, _schema in typing] for typing, _writes, _stages in planned] == [expected]
    # the table has a mirror: the driver MERGEs (delta-rs stages nothing)
    assert [(writes, stages) for _typing, writes, stages in planned] == [((), ())]
    assert runner.mirror()[0]["name"] == f"v{events - 1}"


@pytest.mark.slow
def test_a_real_large_batch_is_typed_and_written_by_the_fold_tasks(spark, tmp_path, monkeypatch):
    """At the real threshold (no patched constant): a batch of TYPED_ON_EXECUTORS inserts into a new table is
    written by the fold tasks, the next batch's as many updates are typed by them against the mirror; every
    row of the mirror is the one the messages describe."""
    n = 10_000  # engine.TYPED_ON_EXECUTORS, the split benchmarks/LOG.md measured
    runner = Runner(spark, job(tmp_path))
    planned: list[Any] = []
    real = runner.engine._typing
    monkeypatch.setattr(runner.engine, "_typing", lambda *a: planned.append(real(*a)) or planned[-1])
    es = itertools.count(1_700_000_000_000, 10)

    def rows(first: int, name: str) -> list[dict[str, Any]]:
        return [order(i, f"{name}{i}", f"{i // 100}.{i % 100:02d}") for i in range(first, first + 100)]

    inserts = [canal("INSERT", rows(i, "n"), es=next(es), types=T) for i in range(1, n + 1, 100)]
    runner.messages(tmp_path, inserts)
    updates = [
        canal("UPDATE", rows(i, "u"), es=next(es), types=T, old=[{}] * 100) for i in range(1, n + 1, 100)
    ]
    summary = runner.messages(tmp_path, updates)

    table = ("shop", None, "orders")
    assert [[t for t, _schema in typing] for typing, _writes, _stages in planned] == [[table], [table]]
    assert [[t for t, _uri in writes] for _typing, writes, _stages in planned] == [[table], []]
    assert summary.applied == n and summary.dead_letters == 0
    mirror = runner.mirror()
    assert len(mirror) == n
    assert [(r["id"], r["name"], str(r["amount"])) for r in mirror[:2] + mirror[-1:]] == [
        (1, "u1", "0.01"),
        (2, "u2", "0.02"),
        (10_000, "u10000", "100.00"),
    ]
    assert all(r["name"] == f"u{r['id']}" and r["amount"] * 100 == r["id"] for r in mirror)


@pytest.mark.delta_spark
def test_delta_spark_merges_the_staged_upserts_as_delta_rs_applies_them(spark, tmp_path, monkeypatch):
    """With delta-spark the fold tasks stage a table's typed upserts as files and the MERGE reads them on
    the executors (TableApplier.commit_staged): the same mirrors, dead letters and counts as delta-rs,
    with a tombstone that drops an older redelivered insert and a newer insert that removes it."""
    from replicator.apply import table

    staged: list[int] = []
    real = table.TableApplier.commit_staged
    monkeypatch.setattr(
        table.TableApplier, "commit_staged", lambda self, *a: staged.append(1) or real(self, *a)
    )
    late = [  # key 2 was deleted in the second batch: an older insert stays out, a newer one comes back
        canal("INSERT", [order(2, "old")], es=1_700_000_000_001, table="orders", types=T),
        canal("INSERT", [order(5, "x")], es=1_800_000_000_000, table="orders", types=T),
    ]
    again = [canal("INSERT", [order(2, "new")], es=1_800_000_000_001, table="orders", types=T)]
    results = {}
    for writer in ("delta-rs", "delta-spark"):
        monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 1)
        config = job(
            tmp_path / writer,
            target={"writer": writer},
            schema_evolution={"default": "lenient", "tables": {"shop.ig_*": "ignore"}},
        )
        runner = Runner(spark, config)
        summaries = [runner.messages(tmp_path / writer, m) for m in [*stream(), late]]
        middle = runner.mirror("shop", "orders")
        summaries.append(runner.messages(tmp_path / writer, again))
        results[writer] = {
            "mirrors": {t: runner.mirror("shop", t) for t in TABLES},
            "middle": middle,
            "dead": sorted((d["table"], d["error"]) for d in runner.dead_letters()),
            "counts": [  # (delta-spark's MERGE reports no files scanned nor rows copied)
                {
                    t: {k: c[k] for k in ("inserted", "updated", "deleted", "dead_letters")}
                    for t, c in s.tables.items()
                }
                for s in summaries
            ],
        }
    assert staged, "the delta-spark batches did not stage"
    assert results["delta-spark"] == results["delta-rs"]
    names = {r["id"]: r["name"] for r in results["delta-rs"]["middle"]}
    assert 2 not in names and names[5] == "x"
    assert {r["id"]: r["name"] for r in results["delta-rs"]["mirrors"]["orders"]}[2] == "new"
