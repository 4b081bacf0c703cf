"""Array documents (a ``*.json`` file or one Kafka value holding many messages): parsed once, and each
element's dead letter carries that element's own bytes and index (issue 14, items 4 and 5)."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from replicator.dialects.arrays import element_bytes
from replicator.dialects.base import decode
from tests.dialects.golden import raw_records


def debezium(i: int, weight: str = "3.140000104904175") -> str:
    """A Debezium message with a fractional number (the exact parse's case), as text."""
    source = {"connector": "mysql", "db": "inventory", "table": "products", "file": "mysql-bin.000003"}
    after = {"id": i, "name": f"n{i}", "weight": orjson.Fragment(weight)}  # the number as written
    source |= {"pos": 154 + i, "row": 0}
    return orjson.dumps(
        {"before": None, "after": after, "source": source, "op": "c", "ts_ms": 1589355606100}
    ).decode()


def test_a_document_is_parsed_once_however_many_messages_it_holds(monkeypatch):
    """Counted on the standard library's JSON scanner (the exact parse of fractional numbers): the
    characters it reads stay within the document's size, where re-parsing the document for each message
    read it once per message (quadratic: 500 messages of a 4 MB document took 12.8 s)."""
    read = []
    original = json.JSONDecoder.raw_decode

    def counting(self, s, idx=0):  # type: ignore[no-untyped-def]
        value, end = original(self, s, idx)
        read.append(end - idx)
        return value, end

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", counting)
    messages = [debezium(i) for i in range(200)]
    document = ("[\n" + ",\n".join(messages) + "\n]").encode()
    events = decode(raw_records([document], "file:/in/doc.json"), "debezium")
    assert events.column("error").to_pylist() == [None] * 200
    assert [dict(a)["weight"] for a in events.column("after").to_pylist()] == ["3.140000104904175"] * 200
    # every element went through the counted scanner (a count of nothing would pass the bound below) ...
    assert sum(read) >= sum(len(m) for m in messages)
    # ... and no character of the document was read twice
    assert sum(read) <= len(document)


def test_an_element_dead_letter_carries_its_own_bytes_and_index():
    """Three bad elements of one document: each error row holds that element's bytes (exactly as written,
    UTF-8 included) and its index; rows that decoded carry no bytes."""
    bad = ['{"op":"x","after":{"id":1}}', '{"source": "ü"}', '{"before":null,"after":null,"op":"c"}']
    elements = [debezium(0), bad[0], debezium(1), bad[1], debezium(2), bad[2], debezium(3)]
    document = ("[" + " ,\n ".join(elements) + "]").encode()
    events = decode(raw_records([document], "file:/in/doc.json"), "debezium").to_pylist()
    errors = [e for e in events if e["error"] is not None]
    assert [(e["coordinates"]["index"], e["raw"]) for e in errors] == [
        (1, bad[0].encode()),
        (3, bad[1].encode()),
        (5, bad[2].encode()),
    ]
    assert [e["raw"] for e in events if e["error"] is None] == [None] * 4


def test_a_single_message_dead_letter_is_the_record():
    record = b'{"op":"x","after":{"id":1}}'
    [event] = decode(raw_records([record]), "debezium").to_pylist()
    assert event["error"] is not None and event["raw"] == record


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
spaces = st.text(alphabet=" \t\r\n", max_size=2)


@given(st.lists(st.tuples(json_values, spaces, spaces), max_size=6), spaces, st.booleans())
def test_element_bytes_cuts_each_element_exactly(items, tail, ascii_only):
    texts = [json.dumps(v, ensure_ascii=ascii_only) for v, _a, _b in items]
    document = (
        "[" + ",".join(a + t + b for t, (_v, a, b) in zip(texts, items, strict=True)) + tail + "]"
    ).encode()
    for index, text in enumerate(texts):
        assert element_bytes(document, index) == text.encode()
    assert element_bytes(document, len(texts)) == document  # no such element: the whole record


def test_element_bytes_of_what_is_not_an_array_is_the_record():
    for record in (b'{"a": [1, 2]}', b"\xff\xfe", b"[1, 2", b"Obj\x01binary", b""):
        assert element_bytes(record, 0) == record
