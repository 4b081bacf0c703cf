"""drs-mongo through the engine (issue 35): documents equal the source's whatever the delivery order and
however often a message is redelivered; patches without their document are kept and counted; numbers stay
as written. Huawei DRS «Kafka消息格式»'s messages are the golden examples."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import Runner, delta_table, job, write_jsonl
from tests.test_document_merge import deliveries, histories, parse, render

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "drs-mongo"
SEED = [
    "seed003-insert",
    "seed003-replace",
    "seed003-update-set",
    "seed003-update-unset-set",
    "seed003-remove",
]
OID = "64650cf67dc36a464e76e583"


def seed(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def deliver(runner: Runner, tmp: Path, messages: list[dict]):
    return runner.messages(tmp, messages)


def rows(runner: Runner, cdc: bool = False) -> dict[str, dict]:
    path = Path(runner.config.target.path) / "ljx" / "ljx"
    return {r["_id"]: r for r in delta_table(path, cdc).to_pylist()}


def documents_of(runner: Runner) -> dict[str, object]:
    return {key: parse(r["document"]) for key, r in rows(runner).items()}


def mongo_job(tmp_path: Path):
    return job(tmp_path, source={"dialect": "drs-mongo"})


def test_seed_in_reverse_order_one_batch_each_then_redelivered(spark, tmp_path):
    """Huawei DRS «Kafka消息格式»'s insert, replace, $set, $unset+$set delivered newest first, a batch each:
    the document is
    the source's; every message delivered again changes nothing; the remove deletes it, and a redelivered
    $set older than the remove does not bring it back."""
    runner = Runner(spark, mongo_job(tmp_path))
    for name in reversed(SEED[:4]):
        deliver(runner, tmp_path, [seed(name)])
    expected = {OID: {"_id": {"$oid": OID}, "column1": "aaa"}}
    assert documents_of(runner) == expected
    [row] = rows(runner, cdc=True).values()
    assert row["_cdc_partial"] is False
    assert row["_cdc_seq"].startswith("0000000001684345648.0000000000000000001.0000000000000000414")
    before = rows(runner, cdc=True)
    summary = deliver(runner, tmp_path, [seed(n) for n in SEED[:4]] * 2)
    assert rows(runner, cdc=True) == before  # not even a CDC column moved
    assert summary.tables.get("ljx.ljx", {}).get("updated", 0) == 0
    deliver(runner, tmp_path, [seed("seed003-remove")])
    assert documents_of(runner) == {}
    deliver(runner, tmp_path, [seed("seed003-update-set"), seed("seed003-replace"), seed("seed003-insert")])
    assert documents_of(runner) == {}
    assert runner.dead_letters() == []


def test_a_late_older_patch_is_applied_not_lost(spark, tmp_path):
    """The issue's second case: `$unset note` arrives after the replace before it and the `$set qty` after
    it were applied; it is applied (its field is older than neither)."""
    runner = Runner(spark, mongo_job(tmp_path))
    where = f'{{"_id": ObjectId("{OID}")}}'

    def message(ident: int, record: str, value: str) -> dict:
        op = {"insert": "INSERT", "doc": "DELETE"}.get(record, "UPDATE")
        body = {"id": ident, "op": op, "dbType": "MongoDB", "db": "ljx", "coll": "ljx", "value": value}
        return body | {
            "where": None if record in ("insert", "doc") else where,
            "recordType": record,
            "extra": record,
            "es": 1684315111439 + ident,
            "ts": 1684315111576 + ident,
            "clusterTime": f"1684344064:{ident}",
        }

    replace = message(2, "replace", f'{{"_id": ObjectId("{OID}"), "status": "PAID", "note": "x", "qty": 1}}')
    unset = message(3, "update", '{"$unset": {"note": true}}')
    set_qty = message(4, "update", '{"$set": {"qty": 2}}')
    deliver(runner, tmp_path, [replace, set_qty])
    deliver(runner, tmp_path, [unset])
    assert documents_of(runner) == {OID: {"_id": {"$oid": OID}, "status": "PAID", "qty": 2}}
    # the replace and the $set again, with an older replace: nothing moves
    old = message(1, "replace", f'{{"_id": ObjectId("{OID}"), "status": "CANCELLED"}}')
    deliver(runner, tmp_path, [set_qty, old, replace])
    assert documents_of(runner) == {OID: {"_id": {"$oid": OID}, "status": "PAID", "qty": 2}}


def test_patches_without_their_document_are_kept_partial_and_counted(spark, tmp_path):
    runner = Runner(spark, mongo_job(tmp_path))
    summary = deliver(runner, tmp_path, [seed("seed003-update-set")])
    assert summary.tables["ljx.ljx"]["partial_documents"] == 1
    [row] = rows(runner, cdc=True).values()
    assert row["_cdc_partial"] is True
    assert parse(row["document"]) == {"_id": {"$oid": OID}, "c1": "aaa"}
    summary = deliver(runner, tmp_path, [seed("seed003-insert")])  # older than the $set
    assert "partial_documents" not in summary.tables["ljx.ljx"]
    [row] = rows(runner, cdc=True).values()
    assert row["_cdc_partial"] is False
    assert parse(row["document"]) == {
        "_id": {"$oid": OID},
        "c1": "aaa",
        "tags": ["mongodb", "database", "NoSQL"],
    }


def test_a_remove_of_a_document_never_seen_then_its_insert(spark, tmp_path):
    """A batch of only the remove of a document not in the mirror created the mirror without its
    `document` column, and the next batch failed reading it (found with history tables, Huawei DRS
    «Kafka消息格式» newest
    first). The remove's tombstone keeps the older insert out; a newer insert comes in."""
    runner = Runner(spark, mongo_job(tmp_path))
    deliver(runner, tmp_path, [seed("seed003-remove")])
    deliver(runner, tmp_path, [seed("seed003-insert")])
    assert documents_of(runner) == {}
    deliver(runner, tmp_path, [seed("seed003-insert") | {"clusterTime": "1684346300:1", "id": 500}])
    assert documents_of(runner) == {
        OID: {"_id": {"$oid": OID}, "c1": "baz", "tags": ["mongodb", "database", "NoSQL"]}
    }
    assert runner.dead_letters() == []


def test_numbers_stay_as_written(spark, tmp_path):
    runner = Runner(spark, mongo_job(tmp_path))
    insert = seed("seed003-insert") | {
        "value": f'{{"_id": ObjectId("{OID}"), "p": 1.50, "n": NumberLong(7)}}'
    }
    patch = seed("seed003-update-set") | {"value": '{"$set": {"q": 12345678901234567890.12, "r": -0.0010}}'}
    deliver(runner, tmp_path, [insert, patch])
    [row] = rows(runner).values()
    assert (
        row["document"]
        == f'{{"_id":{{"$oid":"{OID}"}},"p":1.50,"n":7,"q":12345678901234567890.12,"r":-0.0010}}'
    )


def message_of(position, key, kind, payload) -> dict:
    """A DRS DDS message (Huawei DRS «Kafka消息格式»'s shape) of the model's change."""
    secs, inc, ident = position
    oid = f'ObjectId("{key}")'
    record = {"insert": "insert", "replace": "replace", "patch": "update", "delete": "doc"}[kind]
    op = {"insert": "INSERT", "delete": "DELETE"}.get(kind, "UPDATE")
    if kind in ("insert", "replace"):
        value = payload.replace(json.dumps({"$oid": key}, separators=(",", ":")), oid)
    elif kind == "delete":
        value = f'{{"_id": {oid}}}'
    else:
        value = payload
    return {
        "id": ident,
        "op": op,
        "dbType": "MongoDB",
        "db": "ljx",
        "coll": "ljx",
        "value": value,
        "where": None if kind in ("insert", "delete") else f'{{"_id": {oid}}}',
        "recordType": record,
        "extra": record,
        "es": secs * 1000,
        "ts": secs * 1000 + 5,
        "clusterTime": f"{secs}:{inc}",
    }


KEYS = tuple(f"64650cf67dc36a464e76e58{i}" for i in range(3))


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_shuffled_and_redelivered_streams_mirror_the_source(spark, data):
    """Random documents and patch sequences, shuffled, partly redelivered, split into micro-batches (files
    of a batch in random order too): the mirror equals the source's final documents, field by field."""
    changes, final = data.draw(
        histories(keys=KEYS, id_of=lambda key: {"$oid": key}, min_steps=10, max_steps=18)
    )
    batches = data.draw(deliveries(changes, min_batches=2))
    tmp = Path(tempfile.mkdtemp())
    try:
        runner = Runner(spark, mongo_job(tmp))
        for i, batch in enumerate(batches):
            folder = tmp / f"in-{i}"
            rng = random.Random(i)
            for j in range(0, len(batch), 3):  # a few files per batch
                write_jsonl(
                    folder / f"{rng.randrange(10**6):06d}-{j}.jsonl",
                    [message_of(*c) for c in batch[j : j + 3]],
                )
            runner.batch(folder)
        assert runner.dead_letters() == []
        got = documents_of(runner) if (tmp / "lake" / "ljx" / "ljx").exists() else {}
        assert got == {key: parse(render(doc)) for key, doc in final.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _history(oid: str) -> list[tuple]:
    """One document's changes in source order: (position, key, kind, payload)."""
    doc = json.dumps({"$oid": oid}, separators=(",", ":"))
    specs = [
        ("insert", f'{{"_id":{doc},"a":1,"meta":{{"x":1}}}}'),
        ("patch", '{"$set":{"b":2}}'),
        ("patch", '{"$set":{"meta.y":1.50},"$unset":{"a":true}}'),
        ("replace", f'{{"_id":{doc},"c":3}}'),
        ("patch", '{"$set":{"d":4.0}}'),
        ("delete", None),
        ("insert", f'{{"_id":{doc},"e":5}}'),
        ("patch", '{"$unset":{"e":true}}'),
    ]
    return [((1_700_000_100 + i, 1, 500 + i), oid, kind, payload) for i, (kind, payload) in enumerate(specs)]


def _source_as_of(changes: list[tuple], secs: int) -> dict[str, object]:
    """The model: the changes up to ``secs`` applied in source order."""
    docs: dict[str, dict] = {}
    for (at, _inc, _id), key, kind, payload in changes:
        if at > secs:
            break
        if kind in ("insert", "replace"):
            docs[key] = parse(payload)
        elif kind == "delete":
            docs.pop(key, None)
        else:
            spec = parse(payload)
            for path, value in (spec.get("$set") or {}).items():
                head, _, rest = path.partition(".")
                if rest:
                    docs[key].setdefault(head, {})[rest] = value
                else:
                    docs[key][head] = value
            for path in spec.get("$unset") or {}:
                head, _, rest = path.partition(".")
                (docs[key].get(head, {}) if rest else docs[key]).pop(rest or head, None)
    return docs


def test_replay_as_of_a_time_follows_the_same_rule(spark, tmp_path):
    """Delivered shuffled and partly twice, in three batches: a replay from the change log as of each cut
    time equals the source then (the change log's events merged by the same rule)."""
    from replicator.commands.replay import replay

    changes = _history(OID)
    order = [[7, 2, 0], [4, 1, 6, 2], [3, 5, 0]]
    runner = Runner(spark, mongo_job(tmp_path))
    for batch in order:
        deliver(runner, tmp_path, [message_of(*changes[i]) for i in batch])
    assert documents_of(runner) == _source_as_of(changes, 10**10)
    for cut in (2, 4, 5, 7):
        secs = changes[cut][0][0]
        out = tmp_path / f"out-{cut}"
        replay(runner.config, out, as_of=str(secs * 1000))
        path = out / "ljx" / "ljx"
        got = {r["_id"]: parse(r["document"]) for r in delta_table(path).to_pylist()} if path.exists() else {}
        assert got == _source_as_of(changes, secs), cut
