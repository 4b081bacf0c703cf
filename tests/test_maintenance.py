"""``replicator optimize``: mirrors clustered by key stay equal, and later batches skip the files outside
their key range."""

from __future__ import annotations

from deltalake import DeltaTable

from replicator.commands.maintenance import optimize
from tests.helpers import Runner, canal, job, order

ES = 1_700_000_000_000


def test_optimize_clusters_by_key_keeps_the_rows_and_batches_then_skip_files(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    # four batches of interleaved keys: four data files that each span the whole key range
    for b in range(4):
        runner.messages(tmp_path, [canal("INSERT", [order(k * 4 + b) for k in range(1500)], es=ES + b)])
    before = runner.mirror()
    mirror = str(tmp_path / "lake" / "shop" / "orders")
    assert len(DeltaTable(mirror).file_uris()) == 4

    [done] = optimize(runner.config, vacuum_hours=0, target_size=20_000)  # small files: several
    assert done.table == "shop.orders" and done.files_removed == 4 and done.vacuumed == 4
    assert done.files_added >= 3
    assert runner.mirror() == before
    # an update of a narrow key range now reads only the file(s) holding it
    summary = runner.messages(
        tmp_path, [canal("UPDATE", [order(3, name="y")], old=[{"name": "x"}], es=ES + 10)]
    )
    stats = summary.tables["shop.orders"]
    assert stats["updated"] == 1
    assert stats["files_scanned"] == 1  # the one file whose key range holds 3
    assert stats["files_skipped"] == done.files_added - 1
