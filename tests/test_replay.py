"""``replicator replay``: mirrors rebuilt from the change log as of a time or position equal a reference
model at those cut points, with the DDL in force then; a replay to now equals the live mirror."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from replicator.commands.bootstrap import bootstrap
from replicator.commands.replay import ReplayError, replay, replay_mirror_version
from tests.helpers import ORDER_TYPES, Runner, canal, ddl, job, order
from tests.test_bootstrap import POSITION, write_snapshot

ES = 1_700_000_000_000
NOTE_TYPES = {**ORDER_TYPES, "note": "varchar(10)"}
TS = dt.datetime(2024, 1, 1)

BATCHES = [
    [
        canal("INSERT", [order(1, "a"), order(2, "b"), order(3, "c")], es=ES + 1000),
        canal("UPDATE", [order(2, "b2")], old=[{"name": "b"}], es=ES + 2000),
    ],
    [
        canal("DELETE", [order(1, "a")], es=ES + 3000),
        ddl("ALTER", "ALTER TABLE orders ADD COLUMN note varchar(10)", es=ES + 4000),
        canal("INSERT", [{**order(4, "d"), "note": "n4"}], es=ES + 5000, types=NOTE_TYPES),
    ],
    [
        canal(
            "UPDATE", [{**order(3, "c2"), "note": "n3"}], old=[{"name": "c"}], es=ES + 6000, types=NOTE_TYPES
        ),
        canal("INSERT", [{**order(1, "a-again"), "note": None}], es=ES + 7000, types=NOTE_TYPES),
    ],
]


def reference(cut_es: int) -> list[dict]:
    """The source table after every message with es <= cut_es, in es order (the canal sequence)."""
    rows: dict[int, dict] = {}
    has_note = False
    for m in sorted((m for batch in BATCHES for m in batch), key=lambda m: m["es"]):
        if m["es"] > cut_es:
            continue
        if m["isDdl"]:
            has_note = True
            continue
        for r in m["data"]:
            if m["type"] == "DELETE":
                rows.pop(int(r["id"]), None)
            else:
                rows[int(r["id"])] = {
                    "id": int(r["id"]),
                    "name": r["name"],
                    "amount": Decimal(r["amount"]),
                    "ts": TS,
                    **({"note": r.get("note")} if has_note else {}),
                }
    # rows written before the ALTER have the added column too, NULL
    return [{**rows[k], "note": rows[k].get("note")} if has_note else rows[k] for k in sorted(rows)]


def table_rows(path: Path, cdc: bool = False) -> list[dict]:
    data = DeltaTable(str(path)).to_pyarrow_table()
    if not cdc:
        data = data.drop_columns([c for c in data.column_names if c.startswith("_cdc_")])
    return data.sort_by("id").to_pylist()


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    runner = Runner(spark, job(tmp))
    for batch in BATCHES:
        runner.messages(tmp, batch)
    return runner, tmp


@pytest.mark.parametrize(
    ("as_of", "position", "cut_es"),
    [
        (str(ES + 2000), None, ES + 2000),  # epoch ms, inclusive: before the ALTER, no `note`
        ((dt.datetime.fromtimestamp((ES + 4000) / 1000, dt.UTC)).isoformat(), None, ES + 4000),  # the ALTER
        (None, f"es={ES + 5000}", ES + 5000),  # a canal position (es, then id): inclusive of that es
    ],
)
def test_replay_at_cut_points_equals_the_reference(spark, live, tmp_path, as_of, position, cut_es):
    runner, _ = live
    replay(runner.config, tmp_path / "out", as_of=as_of, position=position)
    assert table_rows(tmp_path / "out" / "shop" / "orders") == reference(cut_es)


def test_replay_to_now_equals_the_live_mirror(spark, live, tmp_path):
    runner, tmp = live
    summary = replay(runner.config, tmp_path / "out", as_of=str(ES + 10**9), tables="shop.*")
    assert summary.tables["shop.orders"]["ddl"] == 1
    replayed = DeltaTable(str(tmp_path / "out" / "shop" / "orders")).to_pyarrow_table()
    mirror = DeltaTable(str(tmp / "lake" / "shop" / "orders")).to_pyarrow_table()
    assert_df_equality(
        spark.createDataFrame(mirror.to_pandas()),
        spark.createDataFrame(replayed.to_pandas()),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert table_rows(tmp_path / "out" / "shop" / "orders") == reference(ES + 10**9)


def test_mirror_version_time_travel(live, tmp_path):
    runner, tmp = live
    mirror = tmp / "lake" / "shop" / "orders"
    assert replay_mirror_version(runner.config, tmp_path / "v1", "1") == ["shop.orders"]
    assert table_rows(tmp_path / "v1" / "shop" / "orders", cdc=True) == [
        *sorted(DeltaTable(str(mirror), version=1).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    ]
    with pytest.raises(ReplayError, match="not empty"):
        replay_mirror_version(runner.config, tmp_path / "v1", "1")


def test_replay_of_a_table_bootstrapped_from_files(spark, tmp_path):
    config = job(tmp_path, tables={"keys": {"shop.orders": ["id"]}})
    bootstrap(config, write_snapshot(tmp_path / "snap", [[1, 2, 3]]), POSITION, progress=False)
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            canal("DELETE", [order(1)], es=ES + 10),
            canal("UPDATE", [order(2, "new")], old=[{"name": "x"}], es=ES + 60),
        ],
    )
    replay(config, tmp_path / "out", position=f"{ES + 100}")
    assert table_rows(tmp_path / "out" / "shop" / "orders", cdc=True) == table_rows(
        tmp_path / "lake" / "shop" / "orders", cdc=True
    )
    with pytest.raises(ReplayError, match="before its snapshot position"):
        replay(config, tmp_path / "early", position=f"{ES + 10}")


def test_changelog_is_idempotent_per_batch_and_schema_stable(live, tmp_path):
    import pyarrow.parquet as pq

    from replicator.model import EVENT_COLUMNS

    runner, tmp = live
    root = tmp / "state" / "changelog"
    before = DeltaTable(str(root)).to_pyarrow_table()
    assert before.num_rows == sum(len(m["data"] or [None]) for batch in BATCHES for m in batch)
    runner.messages(tmp, BATCHES[1], batch_id=1)  # a restart replays batch 1: nothing appended twice
    assert DeltaTable(str(root)).to_pyarrow_table().num_rows == before.num_rows
    assert sorted(before.column_names) == sorted([*EVENT_COLUMNS, "batch_id"])
    # every batch's files, before and after the ALTER, have one physical schema
    files = DeltaTable(str(root)).file_uris()
    assert len({pq.read_schema(f.removeprefix("file://")) for f in files}) == 1


def test_changelog_disabled(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, changelog={"enabled": False}))
    runner.messages(tmp_path, BATCHES[0])
    assert len(runner.mirror()) == 3
    assert not (tmp_path / "state" / "changelog").exists()
    with pytest.raises(ReplayError, match="no change log"):
        replay(runner.config, tmp_path / "out", as_of="0")


def test_replay_over_a_change_log_with_database_statements(spark, tmp_path):
    """A database-level DDL (CREATE DATABASE, USE: no table; Debezium's snapshot writes them) has a change-log
    partition without a table: replay leaves it out (it changes no mirror) instead of failing to sort it."""
    config = job(tmp_path)
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            {**ddl("QUERY", "CREATE DATABASE shop", es=ES + 1), "table": ""},
            canal("INSERT", [order(1, "a")], es=ES + 10),
        ],
    )
    replay(config, tmp_path / "out", as_of=str(ES + 100))
    assert table_rows(tmp_path / "out" / "shop" / "orders") == table_rows(
        tmp_path / "lake" / "shop" / "orders"
    )


def test_replay_of_events_that_become_dead_letters(spark, tmp_path):
    """Events the change log holds that the engine refuses after decoding (a table without a known key,
    as Debezium publishes a keyless table) are dead letters of the replay too: there is no raw record to
    read again from the change log, and the replay goes on."""
    config = job(tmp_path, source={"type": "files", "path": "landing", "dialect": "debezium"})
    runner = Runner(spark, config)
    row = {
        "op": "c",
        "before": None,
        "after": {"a": 1},
        "source": {"db": "shop", "table": "nokey", "file": "b.000001", "pos": 4, "row": 0, "ts_ms": ES},
    }
    runner.messages(tmp_path, [row])
    assert [d["table"] for d in runner.dead_letters()] == ["nokey"]
    summary = replay(config, tmp_path / "out", as_of=str(ES + 100))
    assert summary.dead_letters == 1
