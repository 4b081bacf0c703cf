"""``target.change_data_feed``: mirrors with Delta's Change Data Feed; a batch's feed is its net change."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.helpers import Runner, canal, ddl, job, order

T = 1_700_000_000_000


def feed(path: Path, after_version: int) -> list[tuple[str, int, str]]:
    """(change type, id, name) of the commits after ``after_version``."""
    from deltalake import DeltaTable

    table = pa.table(DeltaTable(str(path)).load_cdf(starting_version=after_version + 1).read_all())
    rows = [(r["_change_type"], r["id"], r["name"]) for r in table.to_pylist()]
    return sorted(rows, key=lambda r: (r[1], r[0]))


def test_a_batch_feed_holds_its_net_inserts_updates_and_deletes(spark, tmp_path):
    from deltalake import DeltaTable

    config = job(tmp_path, target={"change_data_feed": True}, changelog={"enabled": False})
    runner = Runner(spark, config)
    path = Path(config.target.path) / "shop" / "orders"
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a"), order(2, "b"), order(3, "c")], es=T)])
    assert DeltaTable(str(path)).metadata().configuration.get("delta.enableChangeDataFeed") == "true"
    assert feed(path, -1) == [("insert", 1, "a"), ("insert", 2, "b"), ("insert", 3, "c")]

    before = DeltaTable(str(path)).version()
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "a1")], old=[{"name": "a"}], es=T + 1),
            canal("UPDATE", [order(1, "a2")], old=[{"name": "a1"}], es=T + 2),
            canal("DELETE", [order(2, "b")], es=T + 3),
            canal("INSERT", [order(4, "d")], es=T + 4),
            canal("INSERT", [order(5, "e")], es=T + 5),
            canal("DELETE", [order(5, "e")], es=T + 6),  # inserted and deleted within the batch: no change
        ],
    )
    assert feed(path, before) == [
        ("update_postimage", 1, "a2"),
        ("update_preimage", 1, "a"),
        ("delete", 2, "b"),
        ("insert", 4, "d"),
    ]

    # A redelivered batch (an older event of every key) changes nothing: an empty feed.
    before = DeltaTable(str(path)).version()
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "a1")], old=[{"name": "a"}], es=T + 1)])
    assert feed(path, before) == []

    # A TRUNCATE: its rows leave by a Delta delete, in the feed as deletes.
    before = DeltaTable(str(path)).version()
    runner.messages(tmp_path, [ddl("TRUNCATE", "TRUNCATE TABLE `orders`", es=T + 10)])
    assert feed(path, before) == [("delete", 1, "a2"), ("delete", 3, "c"), ("delete", 4, "d")]


def test_without_the_option_mirrors_have_no_feed(spark, tmp_path):
    from deltalake import DeltaTable

    config = job(tmp_path, changelog={"enabled": False})
    Runner(spark, config).messages(tmp_path, [canal("INSERT", [order(1)], es=T)])
    path = Path(config.target.path) / "shop" / "orders"
    assert "delta.enableChangeDataFeed" not in DeltaTable(str(path)).metadata().configuration
