"""Mirrors with deletion vectors (``target.deletion_vectors``, either writer: delta-spark's MERGE, or the
engine's own commit on delta-rs, replicator.sinks.vectors): a batch marks rows instead of rewriting their
files, every reader of the mirror skips the marked rows, and ``optimize`` purges them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicator.config import parse_config
from tests.helpers import Runner, canal, cli, delta_table, job, order

ES = 1_700_000_000_000


def live_deletion_vectors(table: Path) -> int:
    """Data files of the table's current version that carry a deletion vector (its log replayed). A file is
    (path, deletion vector): a commit that marks rows removes the file as it was and adds it with one."""
    live: set[tuple[str, str]] = set()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    entry = action[kind]
                    file = (entry["path"], json.dumps(entry.get("deletionVector"), sort_keys=True))
                    (live.add if kind == "add" else live.discard)(file)
    return sum(1 for _path, dv in live if dv != "null")


@pytest.mark.parametrize("writer", ["delta-rs", "delta-spark"])
def test_deletion_vectors_are_a_table_property_of_either_writer(tmp_path, writer):
    base = {"name": "j", "source": {"type": "files", "path": "in"}, "state": {"path": "s"}}
    config = parse_config(
        {**base, "target": {"path": "l", "writer": writer, "deletion_vectors": True}}, "t", tmp_path
    )
    assert config.target.mirror_properties() == {"delta.enableDeletionVectors": "true"}


@pytest.mark.slow
@pytest.mark.delta_spark
def test_the_optimize_command_purges_a_delta_rs_mirrors_deletion_vectors(spark, tmp_path):
    """`replicator optimize` of a delta-rs job's mirror with deletion vectors: through Spark, whose session
    it starts with Delta's jars though the job's writer needs none."""
    runner = Runner(spark, job(tmp_path, target={"deletion_vectors": True}))
    runner.messages(tmp_path, [canal("INSERT", [order(i, f"n{i}") for i in range(1, 5)], es=ES)])
    runner.messages(tmp_path, [canal("DELETE", [order(2)], es=ES + 1)])
    mirror = tmp_path / "lake" / "shop" / "orders"
    assert live_deletion_vectors(mirror) >= 1
    (tmp_path / "job.yaml").write_text(
        "name: test-job\nsource: {type: files, path: landing, dialect: canal-json}\n"
        "target: {path: lake, deletion_vectors: true}\nstate: {path: state}\n",
        encoding="utf-8",
    )
    done = cli("optimize", "--config", str(tmp_path / "job.yaml"), "--vacuum-hours", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    # (Delta's VACUUM prints a line of its own to the JVM's standard output before it)
    assert done.stdout.splitlines()[-1].startswith("shop.orders: 1 files rewritten as 1"), done.stdout
    assert live_deletion_vectors(mirror) == 0
    assert {r["id"]: r["name"] for r in runner.mirror()} == {1: "n1", 3: "n3", 4: "n4"}


# delta-spark's variant needs its jars and a Delta Spark session: marked as before (test-fast leaves it out)
@pytest.mark.parametrize(
    "writer", ["delta-rs", pytest.param("delta-spark", marks=[pytest.mark.slow, pytest.mark.delta_spark])]
)
def test_a_mirror_with_deletion_vectors_reads_right_everywhere_and_optimize_purges_them(
    spark, tmp_path, writer
):
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    from replicator.commands.maintenance import optimize
    from replicator.commands.replay import replay_mirror_version
    from replicator.commands.status import collect_status

    runner = Runner(spark, job(tmp_path, target={"writer": writer, "deletion_vectors": True}))
    runner.messages(tmp_path, [canal("INSERT", [order(i, f"n{i}") for i in range(1, 7)], es=ES)])
    runner.messages(
        tmp_path,
        [
            canal("DELETE", [order(2)], es=ES + 1),
            canal("UPDATE", [order(4, "four")], old=[{"name": "n4"}], es=ES + 2),
        ],
    )
    mirror = tmp_path / "lake" / "shop" / "orders"
    assert live_deletion_vectors(mirror) >= 1  # the MERGE marked rows, it did not rewrite their file
    # deltalake 1.6's pyarrow dataset refuses the table: the readers go through its query engine instead
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        DeltaTable(str(mirror)).to_pyarrow_dataset()
    expected = {1: "n1", 3: "n3", 4: "four", 5: "n5", 6: "n6"}
    assert {r["id"]: r["name"] for r in runner.mirror()} == expected  # (tests.helpers: sinks.delta_rs)
    assert {r["id"]: r["name"] for r in spark.read.format("delta").load(str(mirror)).collect()} == expected
    # the engine's key lookups, `status` and replay of a version read the same rows
    writer = runner.engine.writer(str(mirror))
    import pyarrow as pa

    found = writer.read_keys("id", pa.array([2, 4], pa.int32()), ["id", "name"]).to_pylist()
    assert found == [{"id": 4, "name": "four"}]
    status = collect_status(runner.config)
    assert [t["rows"] for t in status["tables"] if t["table"] == "shop.orders"] == [5]
    out = tmp_path / "replayed"
    assert replay_mirror_version(runner.config, out, str(DeltaTable(str(mirror)).version())) == [
        "shop.orders"
    ]
    assert {r["id"]: r["name"] for r in delta_table(out / "shop" / "orders").to_pylist()} == expected
    # a later batch on top of the marked rows, then optimize: no deletion vector is left, the rows stay
    runner.messages(tmp_path, [canal("DELETE", [order(5)], es=ES + 3)])
    del expected[5]
    [done] = optimize(runner.config, vacuum_hours=0)
    assert done.table == "shop.orders" and done.files_added >= 1 and done.vacuumed >= 1
    assert live_deletion_vectors(mirror) == 0
    assert not list(mirror.glob("deletion_vector_*.bin"))  # vacuumed with the files they marked
    assert {r["id"]: r["name"] for r in runner.mirror()} == expected


def test_config_keys_documented():
    docs = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    assert "deletion_vectors" in docs
