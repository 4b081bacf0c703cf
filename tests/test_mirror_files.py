"""A new table's upserts written by the fold tasks (``replicator.fold.mirror_files``) and committed by the
driver as add actions (``Engine._created``, ``TableApplier.run``): the same mirrors, dead letters, counts
and positions as the driver's MERGE; the files carry the statistics the later MERGEs and key lookups
choose files by; the batch's app transaction is in the table's commit, so a replayed batch adds nothing."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from replicator import engine
from tests.helpers import Runner, canal, job, order, write_jsonl

T = {"id": "int(11)", "name": "varchar(64)", "amount": "decimal(10,2)", "ts": "datetime(3)"}


def stream() -> list[list[dict[str, Any]]]:
    es = itertools.count(1_700_000_000_000, 10)
    first = [
        canal("INSERT", [order(i, f"n{i}") for i in range(1, 9)], es=next(es), types=T),
        canal("UPDATE", [order(1, "b", "2.50")], es=next(es), types=T, old=[{"name": "n1"}]),
        canal("DELETE", [order(2)], es=next(es), types=T),  # a net delete: its tombstone, on the driver
        canal("INSERT", [order(9, amount="n/a")], es=next(es), types=T),  # does not fit: a dead letter
        canal("UPDATE", [order(3, ts="0000-00-00 00:00:00")], es=next(es), types=T),  # a zero date
        # a column no message types: not in the mirror created from the types; added on the driver
        canal("INSERT", [{**order(10), "note": "n10"}], es=next(es), types=T),
        canal("INSERT", [order(11), order(12)], es=next(es), types=T, table="items"),
    ]
    second = [  # the MERGE of the next batch finds the rows in the files the fold tasks wrote
        canal("UPDATE", [order(4, "c")], es=next(es), types=T, old=[{"name": "n4"}]),
        canal("DELETE", [order(5)], es=next(es), types=T),
        canal("INSERT", [order(2, "back")], es=next(es), types=T),  # newer than its tombstone
        canal("UPDATE", [order(12, "d")], es=next(es), types=T, table="items", old=[{"name": "x"}]),
    ]
    return [first, second]


def run(spark, tmp_path: Path, monkeypatch, threshold: int) -> dict[str, Any]:
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", threshold)
    runner = Runner(spark, job(tmp_path))
    summaries = [runner.messages(tmp_path, messages) for messages in stream()]
    registry = runner.engine.state.tables()
    return {
        "mirrors": {t: runner.mirror("shop", t) for t in ("orders", "items")},
        # Fields by name: a column no message typed comes after the CDC columns when the table was created
        # from the types at planning (as a later batch's new column is added), before them when the driver
        # created it from the first rows.
        "schemas": {
            t: {f.name: f for f in runner.engine.writer(str(tmp_path / "lake" / "shop" / t)).schema()}
            for t in ("orders", "items")
        },
        "dead": sorted((d["table"], d["error"]) for d in runner.dead_letters()),
        # What the writes cost (files read, rows copied) differs: the files are not the MERGE's.
        "tables": [
            {t: {k: v for k, v in c.items() if k in COUNTS} for t, c in s.tables.items()} for s in summaries
        ],
        "applied": [s.applied for s in summaries],
        # (a position names its message's id, which the two runs number apart)
        "positions": sorted((t, s.last_event_time) for t, s in registry.items()),
    }


COUNTS = ("inserted", "updated", "deleted", "ddl", "dead_letters")


def adds(table: Path) -> list[tuple[int, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(version, add actions, app transactions) of each commit of the table's Delta log."""
    commits = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        commits.append(
            (
                int(commit.stem),
                [a["add"] for a in actions if "add" in a],
                [a["txn"] for a in actions if "txn" in a],
            )
        )
    return commits


def test_a_new_tables_upserts_written_by_the_fold_tasks_make_the_drivers_mirror(spark, tmp_path, monkeypatch):
    on_driver = run(spark, tmp_path / "driver", monkeypatch, 10**9)
    on_executors = run(spark, tmp_path / "executors", monkeypatch, 1)
    assert on_executors == on_driver
    # what both say: the premise of the comparison
    orders = {r["id"]: r for r in on_driver["mirrors"]["orders"]}
    assert sorted(orders) == [1, 2, 3, 4, 6, 7, 8, 10]
    assert (orders[1]["name"], orders[2]["name"], orders[4]["name"], orders[3]["ts"]) == (
        "b",
        "back",
        "c",
        None,
    )
    assert orders[10]["note"] == "n10" and orders[8]["note"] is None
    assert [(t, "amount" in e) for t, e in on_driver["dead"]] == [("orders", True)]
    assert on_driver["tables"][0]["shop.orders"]["inserted"] == 8
    # the executors' run wrote the first batch's upserts of both tables as files: one commit of adds each
    lake = tmp_path / "executors" / "lake" / "shop"
    for table, rows in (("orders", 7), ("items", 2)):
        first = next((v, a, t) for v, a, t in adds(lake / table) if a)
        assert all(
            a["path"].startswith("part-00000-") and a["path"].endswith("-c000.snappy.parquet")
            for a in first[1]
        )
        assert sum(json.loads(a["stats"])["numRecords"] for a in first[1]) == rows
    # items' rows were all written: the files' commit carries the batch's app transaction
    _version, _files, txns = next((v, a, t) for v, a, t in adds(lake / "items") if a)
    assert [t["version"] for t in txns] == [0]


def test_the_files_statistics_bound_their_keys_and_a_replay_adds_nothing(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 1)
    runner = Runner(spark, job(tmp_path))
    messages = [canal("INSERT", [order(i, f"n{i}") for i in range(5, 40)], es=1_700_000_000_000, types=T)]
    folder = tmp_path / "batch-0"
    write_jsonl(folder / "m.jsonl", messages)
    summary = runner.batch(folder)
    assert summary.tables["shop.orders"]["inserted"] == 35
    table = tmp_path / "lake" / "shop" / "orders"
    commits = adds(table)
    [(_version, files, txns)] = [c for c in commits if c[1]]
    stats = [json.loads(f["stats"]) for f in files]
    assert sum(s["numRecords"] for s in stats) == 35
    assert min(s["minValues"]["id"] for s in stats) == 5 and max(s["maxValues"]["id"] for s in stats) == 39
    assert all(s["nullCount"]["name"] == 0 and "name" not in s["minValues"] for s in stats)
    assert [t["version"] for t in txns] == [0]
    # the writer's key lookup chooses files by those statistics
    writer = runner.engine.writer(str(table))
    found = writer.read_keys("id", pa.array([7, 39, 40], pa.int32()), ["id", "name"]).to_pylist()
    assert sorted((r["id"], r["name"]) for r in found) == [(7, "n7"), (39, "n39")]
    # the same batch again (a replay after a crash): applied already, its new files never committed
    again = runner.batch(folder, batch_id=0)
    assert again.tables == {}
    assert adds(table) == commits
    assert len(runner.mirror()) == 35
    # the table's position: the newest event of the files
    newest = max(r["_cdc_seq"] for r in runner.mirror(cdc=True))
    assert runner.engine.state.tables()[("shop", None, "orders")].last_seq == newest


def test_the_driver_names_the_files_it_does_not_see(tmp_path):
    """An executor that wrote to its own disk (target.path not shared on a cluster): the apply fails with
    the file's name before it commits anything (TableApplier.commit_files)."""
    from replicator.fold.mirror_files import files_schema, missing

    (tmp_path / "part-00000-here-c000.snappy.parquet").write_bytes(b"PAR1")
    files = pa.Table.from_pylist(
        [{"path": f"part-00000-{n}-c000.snappy.parquet", "size": 4, "rows": 1} for n in ("here", "gone")],
        files_schema(),
    )
    assert [Path(p).name for p in missing(str(tmp_path), files)] == ["part-00000-gone-c000.snappy.parquet"]
