"""A ``\\u`` escape of a lone UTF-16 surrogate (``"\\ud800"``) is valid JSON syntax but not Unicode text:
no string column can hold it. Such a record is a dead letter with its own bytes; it once made the whole
batch fail (UnicodeEncodeError while building the Arrow columns)."""

from __future__ import annotations

import orjson
import pytest

from replicator.dialects.base import decode
from replicator.dialects.drs_mongo import parse_json
from tests.dialects.golden import raw_records

CANAL = (
    '{"data":[{"id":"%s","name":"%s"}],"database":"d","table":"t","type":"INSERT","es":1,"ts":2,"id":1,'
    '"isDdl":false,"pkNames":["id"],"mysqlType":{"id":"int","name":"varchar(10)"},'
    '"sqlType":{"id":4,"name":12},"old":null,"sql":""}'
)


def debezium_fraction(i: int, name: str = "n") -> str:
    """A Debezium message with a fractional number (the standard library's exact parse), ``name`` as
    written in the JSON text (escapes kept)."""
    after = f'{{"id":{i},"name":"{name}","weight":3.14}}'
    source = f'{{"connector":"mysql","db":"inventory","table":"products","file":"f","pos":{154 + i},"row":0}}'
    return f'{{"before":null,"after":{after},"source":{source},"op":"c","ts_ms":1589355606100}}'


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDC00", "x\\udbffy"])
def test_a_lone_surrogate_is_a_dead_letter_and_the_batch_decodes(escape):
    bad = CANAL % ("1", escape)
    table = decode(raw_records([bad, CANAL % ("2", "ok")]), "canal-json")
    rows = table.select(["op", "error", "raw"]).to_pylist()
    assert rows[0]["op"] is None and rows[0]["error"] and rows[0]["raw"] == bad.encode()
    assert rows[1]["op"] == "insert" and rows[1]["error"] is None


def test_a_surrogate_pair_is_one_character():
    """An escaped pair (an emoji, as Java writes it) stays one character on every parse path."""
    table = decode(raw_records([CANAL % ("1", "\\ud83d\\ude00")]), "canal-json")
    assert table["after"][0].as_py() == [("id", "1"), ("name", "\U0001f600")]
    exact = debezium_fraction(1, name="\\ud83d\\ude00")
    table = decode(raw_records([exact]), "debezium")
    assert dict(table["after"][0].as_py())["name"] == "\U0001f600"


def test_the_exact_parse_and_an_array_element_refuse_it_too():
    """Fractional numbers take the standard library's parser, which accepts the escape: refused there too,
    for a record and for one element of an array document (its dead letter holds that element)."""
    bad = debezium_fraction(2, name="\\ud800")
    good = debezium_fraction(3)
    table = decode(raw_records([bad, good]), "debezium")
    assert [r["error"] is not None for r in table.select(["error"]).to_pylist()] == [True, False]
    document = "[" + good + "," + bad + "]"
    table = decode(raw_records([document]), "debezium")
    rows = table.select(["op", "error", "raw"]).to_pylist()
    assert [r["error"] is not None for r in rows] == [False, True]
    assert rows[1]["raw"] == bad.encode() and "surrogate" in rows[1]["error"]


@pytest.mark.parametrize("dialect", ["canal-json", "drs-json-c"])
@pytest.mark.parametrize("encoded", [b"\xed\xad\x97", b"x\xed\xa0\x80y"])
def test_a_surrogate_encoded_in_the_bytes_is_a_dead_letter(dialect, encoded):
    """Invalid UTF-8 bytes that encode a surrogate, no escape: orjson refuses them, and the standard
    library's parse (the fallback) decoded them with "surrogatepass" into a lone surrogate that failed the
    whole batch when the Arrow columns were built (CI's fuzzing of drs-json-c, 2026-11-27)."""
    # DRS's JSON has canal's keys (Huawei DRS
    # «Kafka消息格式»)
    bad = (CANAL % ("1", "@")).encode().replace(b"@", encoded)
    table = decode(raw_records([bad, CANAL % ("2", "ok")]), dialect)
    rows = table.select(["op", "error", "raw"]).to_pylist()
    assert rows[0]["op"] is None and "UTF-8" in rows[0]["error"] and rows[0]["raw"] == bad
    assert rows[1]["op"] == "insert" and rows[1]["error"] is None


def test_mongo_json_text_with_a_lone_surrogate_is_not_json():
    assert parse_json('{"a": "\\ud800"}') == (False, None)
    assert parse_json('{"a": "\\ud83d\\ude00"}') == (True, {"a": "\U0001f600"})
    assert orjson.loads(b'"\\ud83d\\ude00"') == "\U0001f600"
