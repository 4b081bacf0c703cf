"""A ``*.json`` array document through the engine: every dead letter of an element, decode-stage or
apply-stage, carries that element's own bytes and index, not the document (issue 14, item 5)."""

from __future__ import annotations

import json

from tests.helpers import Runner, canal, job, order

ES = 1_700_000_000_000


def test_dead_letters_of_elements_carry_their_own_bytes(spark, tmp_path):
    elements = [
        canal("INSERT", [order(1, "a")], es=ES),
        canal("MERGE", [order(2)], es=ES + 1),  # decode stage: unknown op type
        canal("INSERT", [order(3, amount="123456789012.00")], es=ES + 2),  # apply stage: too wide
        canal("INSERT", [order(4, "ü")], es=ES + 3),
    ]
    texts = [json.dumps(e, ensure_ascii=False) for e in elements]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "doc.json").write_bytes(("[\n  " + ",\n  ".join(texts) + "\n]\n").encode())
    runner = Runner(spark, job(tmp_path))
    runner.batch(folder)
    assert [r["id"] for r in runner.mirror()] == [1, 4]
    letters = sorted(runner.dead_letters(), key=lambda d: d["index"])
    assert [(d["index"], d["dialect"] is None, d["raw"]) for d in letters] == [
        (1, False, texts[1].encode()),
        (2, True, texts[2].encode()),  # the engine's: cut out of the record by its coordinates
    ]
    assert "unknown op type" in letters[0]["error"] and "'amount'" in letters[1]["error"]
