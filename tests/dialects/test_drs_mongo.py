from __future__ import annotations

import json

import pytest

from replicator.apply.documents import apply_patches
from replicator.commands.inspect import decode_path, event_records
from tests.dialects.golden import FIXTURES, check_golden, params

FOLDER = FIXTURES / "drs-mongo"


@pytest.mark.parametrize("case", params("drs-mongo"))
def test_golden(case):
    check_golden(case, "drs-mongo")


@pytest.mark.parametrize("case", [p for p in params("drs-mongo") if p.values[0].name.startswith("seed003")])
def test_auto_detection_agrees(case):
    check_golden(case, "auto")


def test_seed_updates_carry_the_update_spec_and_replay_to_the_document():
    """Huawei DRS «Kafka消息格式»'s five messages in order: the patches in meta['mongo_update'] applied to the
    replaced
    document give the document before the remove."""
    fields = ("op", "after", "before", "seq", "meta", "coordinates")
    records = event_records(decode_path(FOLDER, "drs-mongo"), fields)
    rows = sorted(
        (
            r
            for r in records
            if "/seed003-" in r["coordinates"]["source"]
            and not r["coordinates"]["source"].endswith(".expected.json")
        ),
        key=lambda r: list(r["seq"]),
    )
    assert [r["op"] for r in rows] == ["insert", "update", "update", "update", "delete"]
    patches = [r["meta"]["mongo_update"] for r in rows[2:4]]
    assert patches == ['{"$set":{"c1":"aaa"}}', '{"$unset":{"c1":true},"$set":{"column1":"aaa"}}']
    assert all("document" not in r["after"] for r in rows[2:4])
    assert all(r["after"]["_id"] == "64650cf67dc36a464e76e583" for r in rows[:4])
    final = apply_patches(rows[1]["after"]["document"], patches)
    assert json.loads(final) == {"_id": {"$oid": "64650cf67dc36a464e76e583"}, "column1": "aaa"}
    assert "mongo_update" not in rows[0]["meta"]


def test_shell_helpers_become_extended_json():
    events = check_golden(FOLDER / "constructed-helpers.jsonl", "drs-mongo")
    document = json.loads(events[0]["after"]["document"])
    assert document["n"] == 9007199254740993  # NumberLong: exact, no float rounding
    assert document["at"] == {"$date": "2023-05-17T09:18:31.439Z"}
    assert document["price"] == {"$numberDecimal": "-12.50"}
    assert document["note"] == 'NumberLong(5) and ObjectId("x") stay text'  # helpers inside strings untouched
    assert [e["after"]["_id"] if "after" in e else e["before"]["_id"] for e in events[:4]] == [
        '"a b"',
        "42",
        "42",
        '{"j":2,"k":1}',
    ]
