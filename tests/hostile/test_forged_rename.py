"""A forged RENAME TABLE onto a live table (issue 48, item 5): MySQL refuses it ("Table 'orders' already
exists"), so the mirror does too: a dead letter naming both tables, both mirrors as they were. A rename onto
a name whose table was dropped (its mirror kept by lenient) still moves the kept mirror aside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import Runner, canal, ddl, job, order

ES = 1_700_000_000_000


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_a_rename_onto_a_live_table_is_refused(spark, tmp_path, policy):
    runner = Runner(spark, job(tmp_path, schema_evolution=policy))
    runner.messages(
        tmp_path,
        [canal("INSERT", [order(1, "o")], es=ES), canal("INSERT", [order(5, "i")], es=ES + 1, table="items")],
    )
    forged = ddl("RENAME", "RENAME TABLE shop.items TO shop.orders", es=ES + 2, table="orders")
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(6, "i")], es=ES + 3, table="items"),
            forged,
            canal("INSERT", [order(2, "o")], es=ES + 4),
            canal("INSERT", [order(7, "i")], es=ES + 5, table="items"),
        ],
    )
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [(1, "o"), (2, "o")]
    assert [r["id"] for r in runner.mirror(table="items")] == [5, 6, 7]
    assert not list((Path(runner.config.target.path) / "shop").glob("*replaced*"))
    (dead,) = runner.dead_letters()
    assert "RENAME TABLE shop.items TO shop.orders refused: shop.orders exists" in dead["error"]
    assert json.loads(dead["raw"])["sql"] == forged["sql"]


def test_a_rename_onto_a_dropped_table_moves_the_kept_mirror_aside(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    runner.messages(
        tmp_path,
        [canal("INSERT", [order(1, "o")], es=ES), canal("INSERT", [order(5, "i")], es=ES + 1, table="items")],
    )
    runner.messages(
        tmp_path,
        [
            ddl("ERASE", "DROP TABLE orders", es=ES + 2),
            ddl("RENAME", "RENAME TABLE shop.items TO shop.orders", es=ES + 3, table="orders"),
        ],
    )
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [(5, "i")]
    assert len(list((Path(runner.config.target.path) / "shop").glob("orders.replaced-*"))) == 1
    assert runner.dead_letters() == []
