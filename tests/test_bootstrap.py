"""``replicator bootstrap``: table files (Parquet, CSV, manifest) with a declared position, then incremental
events before and after it; snapshot messages through the engine; interrupted and repeated runs."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from replicator.commands.bootstrap import BootstrapError, bootstrap
from replicator.positions import horizon, parse_position
from tests.drs import dml, init_ddl, item, reference
from tests.helpers import WRITERS, Runner, canal, cli, ddl, job, job_file, order, write_jsonl

ES = 1_700_000_000_000
POSITION = str(ES + 50)  # canal-json: seq starts with es (ms); everything at or before es = ES + 50
SCHEMA = pa.schema(
    [("id", pa.int32()), ("name", pa.string()), ("amount", pa.decimal128(10, 2)), ("ts", pa.timestamp("us"))]
)
TS = dt.datetime(2024, 1, 1)


def orders(ids, name="snap"):
    return pa.Table.from_pylist(
        [{"id": i, "name": f"{name}{i}", "amount": Decimal("1.00"), "ts": TS} for i in ids], SCHEMA
    )


def write_snapshot(root: Path, parts: list[list[int]]) -> Path:
    folder = root / "shop" / "orders"
    folder.mkdir(parents=True, exist_ok=True)
    for i, ids in enumerate(parts):
        pq.write_table(orders(ids), folder / f"part-{i}.parquet")
    return root


def names(runner):
    return {r["id"]: r["name"] for r in runner.mirror()}


def state_of(runner, table="orders"):
    return {t[2]: s for t, s in runner.engine.state.tables().items()}[table]


def test_positions_per_dialect():
    assert parse_position("mysql-bin.000070:6816") == (70, 6816)
    assert parse_position("mysql-bin.000065:800;2bf665dc-f8e2-11eb:1-251167") == (65, 800)
    assert parse_position("27677") == (27677,)
    assert parse_position("id=27677 es=1624614713000") == (27677, 1624614713000)
    assert parse_position("1700000000000,17") == (1700000000000, 17)
    cut = horizon("mysql-bin.000070:6816")
    assert parse_position(cut.rstrip("~")) == (70, 6816)
    # inclusive: every seq that starts with the position sorts under the horizon, later ones above it
    from replicator.model import seq_text

    assert seq_text([70, 6816, 5, 0, 9, 0, 0]) < cut < seq_text([70, 6817, 0])


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_parquet_snapshot_then_events_before_and_after_its_position(spark, tmp_path, vectors):
    config = job(tmp_path, tables={"keys": {"shop.orders": ["id"]}}, target={"deletion_vectors": vectors})
    snapshot = write_snapshot(tmp_path / "snap", [[1, 2, 3], [4, 5]])
    [loaded] = bootstrap(config, snapshot, POSITION, progress=False)
    assert (loaded.phase, loaded.snapshot_rows, loaded.last_position) == ("snapshot_done", 5, POSITION)

    runner = Runner(spark, config)
    assert names(runner) == {i: f"snap{i}" for i in range(1, 6)}
    runner.messages(
        tmp_path,
        [
            # at or before the position: already in the snapshot, skipped (the TRUNCATE too)
            canal("UPDATE", [order(1, "old")], old=[{"name": "x"}], es=ES + 10),
            canal("DELETE", [order(2)], es=ES + 20),
            ddl("TRUNCATE", "TRUNCATE TABLE orders", es=ES + 30),
            canal("INSERT", [order(9, "old")], es=ES + 50),
            # after it: merged
            canal("UPDATE", [order(1, "new")], old=[{"name": "snap1"}], es=ES + 51),
            canal("DELETE", [order(3)], es=ES + 60),
            canal("INSERT", [order(10, "new")], es=ES + 70),
        ],
    )
    assert names(runner) == {1: "new", 2: "snap2", 4: "snap4", 5: "snap5", 10: "new"}
    row = runner.mirror(cdc=True)[1]
    assert (row["_cdc_op"], row["_cdc_seq"], row["_cdc_position"]) == (
        "snapshot",
        horizon(POSITION),
        POSITION,
    )
    assert state_of(runner).phase == "incremental"
    if vectors:  # the bootstrap created the mirror with the job's properties; the batch marked rows in it
        from deltalake import DeltaTable

        folder = tmp_path / "lake" / "shop" / "orders"
        assert DeltaTable(str(folder)).metadata().configuration.get("delta.enableDeletionVectors") == "true"
        assert any('"deletionVector"' in p.read_text() for p in (folder / "_delta_log").glob("*.json"))

    # Bootstrapping again over a mirror that went on: refused without --restart
    with pytest.raises(BootstrapError, match="--restart"):
        bootstrap(config, snapshot, POSITION, progress=False)


def test_interrupted_bootstrap_resumes_without_duplicates(tmp_path):
    config = job(tmp_path, tables={"keys": {"shop.orders": ["id"]}})
    snapshot = write_snapshot(tmp_path / "snap", [[1, 2], [3, 4], [5]])
    broken = snapshot / "shop" / "orders" / "part-2.parquet"
    good = broken.read_bytes()
    broken.write_bytes(b"not parquet")  # the run dies while reading the third file
    with pytest.raises(pa.ArrowInvalid):
        bootstrap(config, snapshot, POSITION, progress=False)
    mirror = tmp_path / "lake" / "shop" / "orders"
    assert DeltaTable(str(mirror)).to_pyarrow_table().num_rows == 4
    registry = json.dumps([s.phase for s in _states(config)])
    assert "snapshot_loading" in registry

    broken.write_bytes(good)
    [loaded] = bootstrap(config, snapshot, POSITION, progress=False)  # resumes at the third file
    ids = sorted(DeltaTable(str(mirror)).to_pyarrow_table()["id"].to_pylist())
    assert ids == [1, 2, 3, 4, 5]
    assert (loaded.phase, loaded.snapshot_rows) == ("snapshot_done", 5)
    writes = [h for h in DeltaTable(str(mirror)).history() if h["operation"] == "WRITE"]
    assert len(writes) == 3  # one commit per file, none repeated

    bootstrap(config, snapshot, POSITION, progress=False)  # a finished bootstrap re-run: nothing added
    assert DeltaTable(str(mirror)).to_pyarrow_table().num_rows == 5
    [again] = bootstrap(config, snapshot, POSITION, progress=False, restart=True)  # --restart: replaced
    assert sorted(DeltaTable(str(mirror)).to_pyarrow_table()["id"].to_pylist()) == ids
    assert again.snapshot_rows == 5


def _states(config):
    from replicator.state import State

    return list(State.of(config).tables().values())


def test_manifest_of_csv_files_with_types(tmp_path):
    config = job(tmp_path)
    folder = tmp_path / "snap" / "files"
    folder.mkdir(parents=True)
    (folder / "a.csv").write_text("id,price,born\n1,10.50,2020-01-02\n2,-0.01,\n", encoding="utf-8")
    manifest = tmp_path / "snap" / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "position": "mysql-bin.000070:6816",
                "event_time": "2024-05-01T00:00:00Z",
                "tables": [
                    {
                        "database": "shop",
                        "table": "prices",
                        "files": ["files/*.csv"],
                        "key": ["id"],
                        "types": {"id": "bigint", "price": "decimal(10,2)", "born": "date"},
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    [loaded] = bootstrap(config, manifest, progress=False)
    data = DeltaTable(str(tmp_path / "lake" / "shop" / "prices")).to_pyarrow_table()
    assert data.schema.field("price").type == pa.decimal128(10, 2)
    assert data.select(["id", "price", "born"]).sort_by("id").to_pylist() == [
        {"id": 1, "price": Decimal("10.50"), "born": dt.date(2020, 1, 2)},
        {"id": 2, "price": Decimal("-0.01"), "born": None},
    ]
    assert loaded.last_event_time == dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    assert loaded.truncate_seq == horizon("mysql-bin.000070:6816")


BAD_MANIFESTS = {  # case -> (manifest, the start of its error line)
    "top-level-list": ([{"database": "shop"}], "  (top level): Input should be a valid dictionary"),
    "misspelt-tables": ({"tabels": []}, "  tabels: Extra inputs are not permitted"),
    "misspelt-key": (
        {"tables": [{"database": "shop", "table": "orders", "kye": ["id"]}]},
        "  tables.0.kye: Extra inputs are not permitted",
    ),
    "no-table": ({"tables": [{"database": "shop"}]}, "  tables.0.table: Field required"),
    "unknown-type": (
        {"tables": [{"database": "shop", "table": "prices", "types": {"price": "decimal(10,2"}}]},
        "  tables.0.types: Value error, price: unknown source type 'decimal(10,2'",
    ),
    "format": (
        {"tables": [{"database": "shop", "table": "t", "format": "orc"}]},
        "  tables.0.format: Input should be 'parquet' or 'csv'",
    ),
    "position": ({"position": "last tuesday", "tables": []}, "  position: Value error, cannot read position"),
    "time": (
        {"tables": [{"database": "shop", "table": "t", "event_time": "soon"}]},
        "  tables.0.event_time: Value error, cannot read time 'soon'",
    ),
}


@pytest.mark.parametrize(("manifest", "expected"), BAD_MANIFESTS.values(), ids=BAD_MANIFESTS)
@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_manifest_is_validated_with_one_line_per_error(tmp_path, manifest, expected, given):
    """Like the job file: unknown keys, wrong shapes, unknown types, unreadable positions and times are
    errors naming the manifest and the key path, each on a line of its own."""
    folder = tmp_path / "snap"
    write_snapshot(folder, [[1]])
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BootstrapError) as caught:
        bootstrap(job(tmp_path), folder if given == "folder" else path, progress=False)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"{path}: invalid manifest"
    assert [line for line in lines[1:] if line.startswith(expected)], lines


def test_drs_snapshot_messages_then_mirror(spark, tmp_path):
    config = job(tmp_path, source={"dialect": "drs-json"})
    snap = tmp_path / "snap"
    first = [init_ddl(), *[dml("INIT", [item(i, f"s{i}", i)], id_=10 + i) for i in (1, 2, 3)]]
    second = [dml("INIT", [item(i, f"s{i}", i)], id_=10 + i) for i in (4, 5)]
    write_jsonl(snap / "0.jsonl", first)
    write_jsonl(snap / "1.jsonl", second)
    states = bootstrap(config, snap, progress=False, files_per_batch=1)
    assert [(s.table, s.phase, s.snapshot_rows) for s in states] == [("items", "snapshot_done", 5)]
    # A re-run skips both batches, unread: were they decoded again, these lines would be dead letters (the
    # mirror's writes are idempotent per batch anyway, so only the files' reading tells).
    write_jsonl(snap / "0.jsonl", ["not JSON, batch 0"])
    write_jsonl(snap / "1.jsonl", ["not JSON, batch 1"])
    bootstrap(config, snap, progress=False, files_per_batch=1)
    assert Runner(spark, config).dead_letters() == []

    runner = Runner(spark, config)
    later = [
        dml("UPDATE", [item(2, "u2", 9)], old=[item(2, "s2", 2)], id_=100),
        dml("DELETE", [item(5)], id_=101),
    ]
    runner.messages(tmp_path, later)
    assert {r["id"]: r for r in runner.mirror("shop", "items")} == reference([*first, *second, *later])
    assert state_of(runner, "items").phase == "incremental"


@pytest.mark.slow
@pytest.mark.parametrize("writer", WRITERS)
def test_cli_bootstrap_and_status(tmp_path, writer):
    """Through the command with either writer: the mirror made from table files and its history table
    seeded with the snapshot's rows (a delta-spark job's bootstrap starts the session it writes through)."""
    config = str(
        job_file(tmp_path, "tables: {keys: {shop.orders: [id]}, history: [shop.orders]}\n", writer=writer)
    )
    write_snapshot(tmp_path / "snap", [[1, 2, 3]])

    done = cli(
        "bootstrap",
        "--snapshot",
        str(tmp_path / "snap"),
        "--position",
        "mysql-bin.000070:6816",
        "--config",
        config,
    )
    assert done.returncode == 0, done.stderr
    assert "shop.orders: snapshot_done, 3 snapshot rows" in done.stdout
    # stderr is a pipe here: no progress bar drawn into it (issue 53, item 12)
    assert "bootstrap:" not in done.stderr and "\r" not in done.stderr, done.stderr[-2000:]
    status = cli("status", "--json", "--config", config)
    assert status.returncode == 0, status.stderr
    [table] = json.loads(status.stdout)["tables"]
    assert (table["phase"], table["rows"], table["last_position"]) == (
        "snapshot_done",
        3,
        "mysql-bin.000070:6816",
    )
    shown = cli("show", "--history", "--config", config)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("== shop.orders history (3 versions, key id)"), shown.stdout


def test_csv_decimals_are_never_guessed_as_doubles(tmp_path):
    """A plain CSV snapshot gives no types: a fractional column is refused rather than stored as an
    approximate double, naming the column and where to declare it; with tables.types it is exact."""
    snapshot = tmp_path / "snap" / "shop" / "prices"
    snapshot.mkdir(parents=True)
    (snapshot / "a.csv").write_text("id,price\n1,10.10\n2,0.30\n", encoding="utf-8")
    keys = {"keys": {"shop.prices": ["id"]}}
    with pytest.raises(BootstrapError, match=r"\['price'\].*tables\.types"):
        bootstrap(job(tmp_path, tables=keys), tmp_path / "snap", POSITION, progress=False)
    assert not (tmp_path / "lake" / "shop" / "prices" / "_delta_log").exists()
    config = job(tmp_path, tables={**keys, "types": {"shop.prices": {"price": "decimal(10,2)"}}})
    bootstrap(config, tmp_path / "snap", POSITION, progress=False)
    data = DeltaTable(str(tmp_path / "lake" / "shop" / "prices")).to_pyarrow_table()
    assert data.schema.field("price").type == pa.decimal128(10, 2)
    assert sorted(data["price"].to_pylist()) == [Decimal("0.30"), Decimal("10.10")]


def test_history_after_a_bootstrap_starts_at_the_snapshot(spark, tmp_path):
    """An UPDATE older than the snapshot's position, delivered after the bootstrap, is in the snapshot
    already: it opens no history version (none that the mirror never held), the snapshot's version starts
    at the snapshot's time (its files' time where none is given, never NULL), and the batch summary does not
    count that event as applied."""
    from tests.helpers import delta_table

    config = job(tmp_path, tables={"keys": {"shop.orders": ["id"]}, "history": ["shop.orders"]})
    snapshot = write_snapshot(tmp_path / "snap", [[1, 2]])
    bootstrap(config, snapshot, POSITION, progress=False)
    runner = Runner(spark, config)
    summary = runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "old")], old=[{"name": "x"}], es=ES + 10),  # before the snapshot
            canal("UPDATE", [order(2, "new")], old=[{"name": "snap2"}], es=ES + 60),  # after it
        ],
    )
    assert names(runner) == {1: "snap1", 2: "new"}
    assert (summary.events, summary.applied) == (2, 1)
    assert summary.tables["shop.orders"]["before_horizon"] == 1
    rows = delta_table(tmp_path / "lake" / "shop" / "orders__history", cdc=True).to_pylist()
    versions = sorted((r["id"], r["name"], r["_cdc_current"], r["_cdc_valid_to"] is None) for r in rows)
    assert versions == [(1, "snap1", True, True), (2, "new", True, True), (2, "snap2", False, False)]
    assert all(r["_cdc_valid_from"] is not None for r in rows)
