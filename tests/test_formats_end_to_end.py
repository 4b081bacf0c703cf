"""Formats through the whole engine: document patches (drs-mongo), keyless formats, the decode command."""

from __future__ import annotations

import json
import shutil
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


def test_decode_command_prints_one_event_per_line(tmp_path, capsys, spark):
    from replicator.commands.cli import main

    assert main(["decode", str(FIXTURES / "canal-json" / "seed002-update-multirow.json"), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["op"], e["after"]["ID"], e["before"]["TEST_NAME"]) for e in lines] == [
        ("update", "22", None),
        ("update", "2223", None),
    ]
    assert {"dialect", "op", "database", "table", "primary_key", "position", "event_time"} <= set(lines[0])
