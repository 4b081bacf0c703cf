"""History tables (SCD type 2, replicator.apply.history) through the real engine: worked examples.

The property over delivery orders, batch splits and redelivery is in tests/test_history_properties.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from replicator.apply.history import Event, chain
from tests.helpers import WRITERS, Runner, canal, ddl, delta_table, job, order

T = 1_700_000_000_000  # ms


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def history(runner: Runner, table: str = "orders") -> list[dict[str, Any]]:
    rows = delta_table(Path(runner.config.target.path) / "shop" / f"{table}__history", cdc=True).to_pylist()
    return sorted(rows, key=lambda r: (r["id"], r["_cdc_seq"]))


def brief(rows: list[dict[str, Any]], *columns: str) -> list[tuple[Any, ...]]:
    """(id, columns..., valid_from, valid_to, current, op) per version."""
    return [
        (
            r["id"],
            *(r[c] for c in columns),
            r["_cdc_valid_from"],
            r["_cdc_valid_to"],
            r["_cdc_current"],
            r["_cdc_op"],
        )
        for r in rows
    ]


@pytest.fixture
def runner(spark, tmp_path, request):
    writer = getattr(request, "param", "delta-rs")  # (parametrize("runner", WRITERS, indirect=True))
    return Runner(
        spark,
        job(
            tmp_path,
            tables={"history": ["shop.*"]},
            changelog={"enabled": False},
            target={"writer": writer},
        ),
    )


def test_insert_update_delete_reinsert(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a"), order(2, "b")], es=T),
            canal("UPDATE", [order(1, "a2")], old=[{"name": "a"}], es=T + 1000),
            canal("UPDATE", [order(1, "a3")], old=[{"name": "a2"}], es=T + 2000),
        ],
    )
    runner.messages(
        tmp_path,
        [
            canal("DELETE", [order(1, "a3")], es=T + 3000),
            canal("INSERT", [order(1, "again")], es=T + 4000),
        ],
    )
    assert brief(history(runner), "name") == [
        (1, "a", at(T), at(T + 1000), False, "insert"),
        (1, "a2", at(T + 1000), at(T + 2000), False, "update"),
        (1, "a3", at(T + 2000), at(T + 3000), False, "update"),
        (1, "again", at(T + 4000), None, True, "insert"),
        (2, "b", at(T), None, True, "insert"),
    ]
    # The current versions are the mirror, typed alike.
    current = [{k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in history(runner)]
    mirror = runner.mirror()
    assert [r for r, h in zip(current, history(runner), strict=True) if h["_cdc_current"]] == mirror


def test_late_event_lands_at_its_place_and_redelivery_changes_nothing(runner, tmp_path):
    insert = canal("INSERT", [order(1, "a")], es=T)
    first = canal("UPDATE", [order(1, "b")], old=[{"name": "a"}], es=T + 1000)
    second = canal("UPDATE", [order(1, "c")], old=[{"name": "b"}], es=T + 2000)
    delete = canal("DELETE", [order(1, "c")], es=T + 3000)
    runner.messages(tmp_path, [insert, second])
    runner.messages(tmp_path, [delete])
    runner.messages(tmp_path, [first, insert, delete])  # late, then redelivered
    expected = [
        (1, "a", at(T), at(T + 1000), False, "insert"),
        (1, "b", at(T + 1000), at(T + 2000), False, "update"),
        (1, "c", at(T + 2000), at(T + 3000), False, "update"),
    ]
    assert brief(history(runner), "name") == expected
    runner.messages(tmp_path, [first, second, insert])
    assert brief(history(runner), "name") == expected


def test_late_insert_before_a_delete_of_an_earlier_batch(runner, tmp_path):
    """The delete closed nothing when it came; it still closes the late insert's version."""
    runner.messages(tmp_path, [canal("DELETE", [order(1, "a")], es=T + 1000)])
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a")], es=T)])
    assert brief(history(runner), "name") == [(1, "a", at(T), at(T + 1000), False, "insert")]


def test_replayed_batch_is_skipped(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a")], es=T)], batch_id=0)
    runner.messages(
        tmp_path, [canal("UPDATE", [order(1, "b")], old=[{"name": "a"}], es=T + 1000)], batch_id=1
    )
    before = history(runner)
    # Batch 1 again with other content: its app transaction is in the history table already.
    runner.messages(
        tmp_path, [canal("UPDATE", [order(1, "z")], old=[{"name": "b"}], es=T + 5000)], batch_id=1
    )
    assert history(runner) == before


@pytest.mark.parametrize("runner", WRITERS, indirect=True)
def test_truncate_closes_every_current_version(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1), order(2), order(3)], es=T)])
    runner.messages(
        tmp_path,
        [
            canal("DELETE", [order(3)], es=T + 500),
            ddl("TRUNCATE", "TRUNCATE TABLE `orders`", es=T + 1000),
            canal("INSERT", [order(2, "new")], es=T + 2000),
        ],
    )
    assert brief(history(runner), "name") == [
        (1, "x", at(T), at(T + 1000), False, "insert"),
        (2, "x", at(T), at(T + 1000), False, "insert"),
        (2, "new", at(T + 2000), None, True, "insert"),
        (3, "x", at(T), at(T + 500), False, "insert"),
    ]


def test_tracked_columns_update_the_current_version_in_place(spark, tmp_path):
    config = job(
        tmp_path,
        tables={"history": ["shop.orders"], "history_track": {"shop.orders": ["amount"]}},
        changelog={"enabled": False},
    )
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a", "1.00")], es=T),
            canal("UPDATE", [order(1, "b", "1.00")], old=[{"name": "a"}], es=T + 1000),
            canal("UPDATE", [order(1, "c", "2.00")], old=[{"name": "b", "amount": "1.00"}], es=T + 2000),
        ],
    )
    # A redelivery of the in-place update does not bring its older name back.
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "b", "1.00")], old=[{"name": "a"}], es=T + 1000)])
    assert brief(history(runner), "name") == [
        (1, "b", at(T), at(T + 2000), False, "insert"),
        (1, "c", at(T + 2000), None, True, "update"),
    ]


def test_add_column_and_rename_table_carry_the_history(spark, tmp_path):
    config = job(
        tmp_path,
        tables={"history": ["shop.*"]},
        changelog={"enabled": False},
        schema_evolution="evolve",
    )
    runner = Runner(spark, config)
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a")], es=T)])
    types = {"id": "int(11)", "name": "varchar(64)", "amount": "decimal(10,2)", "ts": "datetime(3)"}
    runner.messages(
        tmp_path,
        [
            ddl("ALTER", "ALTER TABLE `orders` ADD COLUMN `note` varchar(16)", es=T + 1000),
            canal(
                "UPDATE",
                [{**order(1, "a"), "note": "n"}],
                old=[{"note": None}],
                es=T + 2000,
                types={**types, "note": "varchar(16)"},
            ),
            ddl("RENAME", "RENAME TABLE `orders` TO `orders_v2`", es=T + 3000, table="orders_v2"),
            canal(
                "DELETE",
                [{**order(1, "a"), "note": "n"}],
                es=T + 4000,
                table="orders_v2",
                types={**types, "note": "varchar(16)"},
            ),
        ],
    )
    target = Path(config.target.path) / "shop"
    assert not (target / "orders__history").exists()
    assert brief(history(runner, "orders_v2"), "note") == [
        (1, None, at(T), at(T + 2000), False, "insert"),
        (1, "n", at(T + 2000), at(T + 4000), False, "update"),
    ]


def test_chain_orders_by_seq_and_dedupes():
    row = {"id": 1}
    events = [
        Event("2", "update", at(2), {"id": 1, "v": "b"}),
        Event("1", "insert", at(1), {"id": 1, "v": "a"}),
        Event("2", "update", at(2), {"id": 1, "v": "b"}, source=2),
        Event("3", "delete", at(3), row),
        Event("4", "truncate", at(4), None),
    ]
    versions = chain(events)
    assert [(v.row["v"], v.valid_from, v.valid_to, v.current) for v in versions] == [
        ("a", at(1), at(2), False),
        ("b", at(2), at(3), False),
    ]


def test_replay_rebuilds_the_history_as_of_a_time(spark, tmp_path):
    """``replay --as-of`` runs the same batch code over the change log: the history as of the cut is the
    live history's versions that started by then, those ended after it still current."""
    from replicator.commands.replay import replay

    config = job(tmp_path, tables={"history": ["shop.*"]})
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a"), order(2, "b")], es=T),
            canal("UPDATE", [order(1, "a2")], old=[{"name": "a"}], es=T + 1000),
        ],
    )
    runner.messages(
        tmp_path,
        [canal("DELETE", [order(2, "b")], es=T + 2000), canal("INSERT", [order(3, "c")], es=T + 3000)],
    )
    out = tmp_path / "replayed"
    replay(config, out, as_of=str(T + 2000))
    replayed = delta_table(out / "shop" / "orders__history", cdc=True).to_pylist()
    assert brief(sorted(replayed, key=lambda r: (r["id"], r["_cdc_seq"])), "name") == [
        (1, "a", at(T), at(T + 1000), False, "insert"),
        (1, "a2", at(T + 1000), None, True, "update"),
        (2, "b", at(T), at(T + 2000), False, "insert"),
    ]
    assert brief(history(runner), "name")[-1] == (3, "c", at(T + 3000), None, True, "insert")


def test_bootstrap_from_table_files_opens_the_first_versions(spark, tmp_path):
    """Snapshot rows open a version each (``_cdc_op = snapshot``, from the snapshot's time: its files' time
    when the snapshot names none, never NULL); the mirror's events after the position go on from there."""
    import os

    from replicator.commands.bootstrap import bootstrap
    from tests.test_bootstrap import POSITION, write_snapshot

    config = job(tmp_path, tables={"keys": {"shop.orders": ["id"]}, "history": ["shop.*"]})
    snapshot = write_snapshot(tmp_path / "snap", [[1, 2], [3]])
    es = int(POSITION)
    for f in (snapshot / "shop" / "orders").iterdir():  # the export wrote them at the snapshot's time
        os.utime(f, (es / 1000, es / 1000))
    bootstrap(config, snapshot, POSITION, progress=False)
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "new")], old=[{"name": "snap1"}], es=es + 1),
            canal("DELETE", [order(3)], es=es + 10),
        ],
    )
    assert brief(history(runner), "name") == [
        (1, "snap1", at(es), at(es + 1), False, "snapshot"),
        (1, "new", at(es + 1), None, True, "update"),
        (2, "snap2", at(es), None, True, "snapshot"),
        (3, "snap3", at(es), at(es + 10), False, "snapshot"),
    ]


def test_job_file_keys(tmp_path):
    config = job(
        tmp_path,
        tables={"history": ["shop.*"], "history_track": {"shop.o*": ["amount"]}},
        target={"change_data_feed": True},
    )
    assert config.tables.history_for("shop.orders") and not config.tables.history_for("crm.orders")
    assert config.tables.tracked("shop.orders") == ["amount"]
    assert config.tables.tracked("shop.items") is None
    assert config.target.mirror_properties() == {"delta.enableChangeDataFeed": "true"}
    assert job(tmp_path).target.mirror_properties() == {}
    assert not job(tmp_path).tables.history_for("shop.orders")
