"""Formats through the whole engine: document patches (drs-mongo), keyless formats, the decode command."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from tests.helpers import Runner, job

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MONGO_SEED = [
    "seed003-insert",
    "seed003-replace",
    "seed003-update-set",
    "seed003-update-unset-set",
    "seed003-remove",
]


def mongo_docs(runner: Runner) -> dict[str, dict]:
    return {r["_id"]: json.loads(r["document"]) for r in runner.mirror("ljx", "ljx")}


def copy_seed(names: list[str], folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        shutil.copy(FIXTURES / "drs-mongo" / f"{name}.json", folder / f"{name}.json")
    return folder


def test_mongo_patches_apply_in_order_within_one_batch(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, source={"dialect": "drs-mongo"}))
    runner.batch(copy_seed(MONGO_SEED[:4], tmp_path / "b0"))
    # insert {c1: baz, tags}, replace -> {c1: sss}, $set c1=aaa, $unset c1 + $set column1=aaa
    assert mongo_docs(runner) == {
        "64650cf67dc36a464e76e583": {"_id": {"$oid": "64650cf67dc36a464e76e583"}, "column1": "aaa"}
    }


def test_mongo_patches_apply_to_the_stored_document_across_batches(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, source={"dialect": "drs-mongo"}))
    runner.batch(copy_seed(MONGO_SEED[:2], tmp_path / "b0"))
    assert mongo_docs(runner)["64650cf67dc36a464e76e583"] == {
        "_id": {"$oid": "64650cf67dc36a464e76e583"},
        "c1": "sss",
    }
    runner.batch(copy_seed(MONGO_SEED[2:3], tmp_path / "b1"))
    assert mongo_docs(runner)["64650cf67dc36a464e76e583"]["c1"] == "aaa"
    runner.batch(copy_seed(MONGO_SEED[3:4], tmp_path / "b2"))
    assert mongo_docs(runner)["64650cf67dc36a464e76e583"] == {
        "_id": {"$oid": "64650cf67dc36a464e76e583"},
        "column1": "aaa",
    }
    runner.batch(copy_seed(MONGO_SEED[4:], tmp_path / "b3"))
    assert mongo_docs(runner) == {}


def test_keyless_format_takes_keys_from_the_job_file(spark, tmp_path):
    """CKafka format one carries no primary key: `tables.keys` supplies it; without it rows are dead."""
    folder = tmp_path / "b0"
    folder.mkdir()
    for name in ("seed001-dml-insert", "seed001-dml-update"):
        matches = list((FIXTURES / "ckafka").glob(f"{name}*.json"))
        matches = [m for m in matches if not m.name.endswith(".expected.json")]
        if not matches:
            pytest.fail(f"fixture {name} missing from tests/fixtures/ckafka")
        shutil.copy(matches[0], folder / matches[0].name)
    keyed = Runner(
        spark, job(tmp_path / "keyed", source={"dialect": "ckafka"}, tables={"keys": {"inventory.*": ["id"]}})
    )
    keyed.batch(folder)
    assert keyed.mirror("inventory", "customers") == [
        {"id": "1004", "last_name": "Kretchmar", "first_name": "Anne Marie", "email": "annek@noanswer.org"}
    ]
    unkeyed = Runner(spark, job(tmp_path / "unkeyed", source={"dialect": "ckafka"}))
    summary = unkeyed.batch(folder)
    dead = unkeyed.dead_letters()
    assert summary.dead_letters == 2 and len(dead) == 2
    assert all("no primary key known for inventory.customers" in d["error"] for d in dead)
    assert all(b'"inventory"' in d["raw"] for d in dead)


def _line(fixture: str, number: int) -> str:
    return (FIXTURES / fixture).read_text(encoding="utf-8").splitlines()[number - 1]


def _canal_without_key() -> str:
    from tests.helpers import canal, order

    message = canal("INSERT", [order(1, "pen")], es=1_700_000_000_000, table="items")
    return json.dumps({**message, "pkNames": []})


# A message of a table without a primary key in each format that can send one, as (file name, content),
# the mirror it reaches and its row.
WITHOUT_KEY = {
    "canal-json": (
        ("m.jsonl", _canal_without_key),
        ("shop", "items"),
        {"id": 1, "name": "pen", "amount": Decimal("1.00"), "ts": dt.datetime(2024, 1, 1)},
    ),
    "cloudcanal-json": (
        ("m.json", lambda: (FIXTURES / "cloudcanal-json" / "seed004-dml.json").read_text(encoding="utf-8")),
        ("db_test", "table_test"),
        {"col1": "11", "col2": "11", "col_pk": "11"},
    ),
    "river-canal": (
        ("m.jsonl", lambda: _line("river-canal/bad-messages.jsonl", 8)),
        ("TestCanal", "t"),
        {"id": 1, "x": "a"},
    ),
    "dts-avro": (
        ("m.b64", lambda: _line("dts-avro/bad.b64", 4)),
        ("shop", "orders"),
        {"id": 1, "name": "pen", "price": Decimal("1.50"), "note": None},
    ),
}


@pytest.mark.parametrize("dialect", WITHOUT_KEY)
def test_a_table_without_a_primary_key_takes_it_from_tables_keys(spark, tmp_path, dialect):
    """Empty pkNames / pks / keys / pk_uk_info (a source table without a primary key): `tables.keys` gives
    the key and the events apply (docs/configuration.md); without it they are the engine's dead letters
    asking for it."""
    (name, content), (database, table), row = WITHOUT_KEY[dialect]
    folder = tmp_path / "in"
    folder.mkdir()
    text = content()
    (folder / name).write_text(text + "\n", encoding="utf-8")
    key = next(iter(row))
    keys = {"tables": {"keys": {f"{database}.{table}": [key]}}}
    keyed = Runner(spark, job(tmp_path / "keyed", source={"dialect": dialect}, **keys))
    summary = keyed.batch(folder)
    assert (summary.applied, summary.dead_letters) == (1, 0)
    [got] = keyed.mirror(database, table)
    assert {c: got[c] for c in row} == row
    unkeyed = Runner(spark, job(tmp_path / "unkeyed", source={"dialect": dialect}))
    assert unkeyed.batch(folder).dead_letters == 1
    [dead] = unkeyed.dead_letters()
    assert f"no primary key known for {database}.{table}" in dead["error"]
    raw = base64.b64decode(text) if name.endswith(".b64") else text.strip().encode()
    assert dead["raw"].strip() == raw and dead["source"].endswith(name)


def test_decode_command_prints_one_event_per_line(tmp_path, capsys, spark):
    from replicator.commands.cli import main

    assert main(["decode", str(FIXTURES / "canal-json" / "seed002-update-multirow.json"), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["op"], e["after"]["ID"], e["before"]["TEST_NAME"]) for e in lines] == [
        ("update", "22", None),
        ("update", "2223", None),
    ]
    assert {"dialect", "op", "database", "table", "primary_key", "position", "event_time"} <= set(lines[0])


def test_dts_avro_datums_and_a_container_file_reach_the_mirror(spark, tmp_path):
    """dts-avro through a real job: one base64 datum per line (*.b64) and an Avro object container file in
    one batch (tests/fixtures/dts-avro/make_fixtures.py). Ordered by the DTS record id: the .b64 records
    (ids 10-15: BEGIN, insert, update, delete of id 1, COMMIT, HEARTBEAT) before the container's (70-74:
    insert 100 and 101, update 101, delete 100, HEARTBEAT); the mirror keeps 101 as last written."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = (FIXTURES / "dts-avro" / "dml.b64").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 7
    # the last line (a minimal-image update of a row never inserted) is left out: no full row to mirror
    (folder / "dml.b64").write_text("\n".join(lines[:6]) + "\n", encoding="utf-8")
    shutil.copy(FIXTURES / "dts-avro" / "container.avro", folder / "container.avro")
    runner = Runner(spark, job(tmp_path, source={"dialect": "dts-avro"}))
    summary = runner.batch(folder)
    assert summary.dead_letters == 0 and runner.dead_letters() == []
    assert runner.mirror("shop", "orders") == [
        {
            "id": 101,
            "name": "mug",
            "price": Decimal("4.50"),
            "created": dt.datetime(2023, 11, 14, 22, 13, 20, 123000),  # DateTime: millis holds µs
            "note": "blue",
        }
    ]


def test_a_container_block_over_the_job_files_limit_is_a_dead_letter(spark, tmp_path):
    """`source.max_decompressed_bytes` reaches the decode tasks: a deflate container whose block holds more
    is a dead letter naming the file (its raw record kept); a container within it, beside it, applies."""
    from tests.dialects.test_dts_avro import _container_with_block, _deflated_zeros

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(FIXTURES / "dts-avro" / "container.avro", folder / "good.avro")
    bomb = _container_with_block("deflate", _deflated_zeros(8 << 20))
    (folder / "bomb.avro").write_bytes(bomb)
    config = job(tmp_path, source={"dialect": "dts-avro", "max_decompressed_bytes": 4 << 20})
    runner = Runner(spark, config)
    summary = runner.batch(folder)
    [dead] = runner.dead_letters()
    assert dead["source"].endswith("bomb.avro") and dead["offset"] is not None and dead["raw"] == bomb
    assert "a deflate block decompresses to more than 4,194,304 bytes" in dead["error"]
    assert summary.dead_letters == 1 and [r["id"] for r in runner.mirror("shop", "orders")] == [101]


def test_drs_json_c_files_reach_the_mirror_typed_in_the_source_zone(spark, tmp_path):
    """drs-json-c through a real job: JSON-C writes TIMESTAMP as the source zone's wall clock, read in
    source.timezone (Asia/Shanghai, as Huawei DRS «Kafka消息格式»'s DATETIME shows): the mirror holds the
    instant drs-json
    carries as epoch seconds. Binary values are byte lists; an update replaces the row."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(FIXTURES / "drs-json-c" / "seed003-mysql-init-as-json-c.json", folder / "init.json")
    lines = (FIXTURES / "drs-json-c" / "constructed-dml.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "dml.jsonl").write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")  # INSERT, UPDATE
    config = job(tmp_path, source={"dialect": "drs-json-c", "timezone": "Asia/Shanghai"})
    runner = Runner(spark, config)
    summary = runner.batch(folder)
    assert summary.dead_letters == 0
    instant = dt.datetime(2021, 6, 25, 9, 51, 53, 201000, tzinfo=dt.UTC)
    assert runner.mirror("shop", "t1") == [
        {
            "id": 1,
            "b": b"\x00\x7f\x80\xff",  # [0, 127, -128, -1]: Java's signed bytes
            "ts": instant,
            "dt": dt.datetime(2021, 6, 25, 17, 51, 53, 500000),  # DATETIME: the wall clock as written
            "d": "-12.3400",  # DECIMAL without precision: its exact text
            "f": 12510357.0,
            "t": "new",
        }
    ]
    [row] = runner.mirror("test01", "test")
    assert (row["id"], row["c3"], row["c5"], row["c4"], row["c12"][:4], row["c9"]) == (
        104,
        103,
        instant,
        dt.datetime(2021, 6, 25, 17, 51, 53),
        b"jgoj",
        "9874510357",
    )
