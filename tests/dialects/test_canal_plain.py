"""canal_plain's fast readers against canal-json's general decoding: the same table, message for message.

The general path (CanalJson.decode with ``plain`` off) is the reference; the fast readers only take the
usual row message and must leave every other one to it, so both ways give equal Arrow tables (schema,
values, NULLs, type keys) for the golden inputs and for generated messages of every shape."""

from __future__ import annotations

import json

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.dialects.base import Decoder, record_tuples
from replicator.dialects.canal_plain import read_records
from replicator.dialects.events import Events
from tests.dialects.golden import cases, raw_records


def both_ways(records: pa.Table) -> tuple[pa.Table, pa.Table, int]:
    """(fast, general) decoded tables of the records, and how many records the msgspec reader took."""
    tables = []
    for plain in (True, False):
        decoder = Decoder("canal-json")
        decoder.fixed.plain = plain  # type: ignore[union-attr]
        events = decoder.records(record_tuples(records), 3)
        table = events.to_arrow().append_column("type_key", events.type_keys())
        tables.append(table)
    left: list[bytes] = []  # the records the msgspec reader hands to the general path
    read_records(
        Decoder("canal-json").fixed,  # type: ignore[arg-type]
        record_tuples(records),
        3,
        Events(),
        lambda raw, at, out: left.append(raw),
    )
    return tables[0], tables[1], records.num_rows - len(left)


def assert_same(fast: pa.Table, general: pa.Table, ordered: bool = False) -> None:
    """Equal tables. The fast reader gives a row image's columns in the table's order (mysqlType's), the
    general path in the message's: unless ``ordered`` (messages whose rows follow mysqlType's order, as
    canal writes them), the images' entries are compared as sets."""
    assert fast.schema == general.schema
    if ordered:
        assert fast.to_pylist() == general.to_pylist()
        assert fast.equals(general)
        return

    def entries(table: pa.Table) -> list[dict]:
        rows = table.to_pylist()
        for r in rows:
            for name in ("after", "before"):
                r[name] = None if r[name] is None else sorted(r[name])
        return rows

    assert entries(fast) == entries(general)


def fixture_records() -> pa.Table:
    lines: list[bytes] = []
    for case in cases("canal-json"):
        text = case.read_bytes()
        lines.extend(line for line in text.splitlines() if line.strip()) if case.suffix == ".jsonl" else [
            text
        ]
    return raw_records(lines)


def test_golden_inputs_decode_the_same_both_ways():
    fast, general, taken = both_ways(fixture_records())
    assert_same(fast, general, ordered=True)
    assert taken > 0  # the fixtures hold usual row messages: the fast reader is exercised


def test_workload_messages_take_the_fast_reader():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from workload import events

    records = raw_records([orjson.dumps(m) for m in events(300, 40)])
    fast, general, taken = both_ways(records)
    assert_same(fast, general, ordered=True)
    assert taken == 300


TYPES = {"id": "bigint(20)", "name": "varchar(8)", "bin": "varbinary(4)", "n": "decimal(5,2)"}


def mostly(usual, *others):  # type: ignore[no-untyped-def]
    """The usual value nine times in ten (so most messages are the usual kind), else one of ``others``."""
    return st.one_of(*[usual] * 9, st.sampled_from(others)) if others else usual


text_value = st.one_of(st.none(), st.text(max_size=4), st.sampled_from(["1.50", "\u00ff\u0100", ""]))
value = mostly(text_value, 7, 1.5, True, [1], {"a": 1})
row = st.dictionaries(st.sampled_from(["id", "name", "bin", "n"]), value, max_size=4).map(
    lambda r: r if "id" not in r or r["id"] is not None else {**r, "id": "1"}
)
whole = mostly(
    st.integers(-(2**63), 2**63 - 1), 0, 1_700_000_000, 2**63, -(2**63) - 1, "12", "x", None, 1.5, True
)
usual_message = st.fixed_dictionaries(
    {
        "type": mostly(st.sampled_from(["INSERT", "UPDATE", "DELETE", "INIT"]), "insert", "TRUNCATE", 7),
        "database": mostly(st.just("db"), "", None, 5),
        "table": mostly(st.sampled_from(["t", "u"]), "", None),
        "es": whole,
        "id": whole,
        "isDdl": mostly(st.just(False), True, None, "false"),
        "data": mostly(
            st.lists(row.map(lambda r: {"id": "1", **r}), min_size=1, max_size=3), None, [], [1], [{}]
        ),
        "pkNames": mostly(st.sampled_from([["id"], ["id", "name"]]), [], ["id", "id"], None, ["x"], [1]),
        "mysqlType": mostly(st.sampled_from([TYPES, {"id": "bigint"}]), {}, None, {"id": 5}),
        "sqlType": mostly(st.just({"id": -5, "bin": -3}), {"id": 1.5}, {}, None),
    },
    optional={
        "old": mostly(st.lists(row, max_size=3), None, [None], [3]),
        "ts": whole,
        "sql": st.sampled_from(["", None, "ALTER TABLE t ADD c int"]),
    },
)
# Keys the usual message lacks, now and then (each sends a message the general way).
message = st.tuples(
    usual_message, mostly(st.just({}), {"gtid": "uuid:1-5"}, {"gtid": None}, {"_tidb": {"watermarkTs": 1}})
).map(lambda parts: {**parts[0], **parts[1]})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message, min_size=1, max_size=6))
def test_any_message_decodes_the_same_both_ways(messages):
    records = raw_records([json.dumps(m) for m in messages] + [json.dumps(messages)])  # + one array doc
    fast, general, _ = both_ways(records)
    assert_same(fast, general)


USUAL = {
    "type": "UPDATE",
    "database": "db",
    "table": "t",
    "es": 1_700_000_000_000,
    "id": 4,
    "isDdl": False,
    "data": [{"id": "1", "name": "a", "bin": "\u00ff", "n": "1.50"}],
    "old": [{"name": None}],
    "pkNames": ["id"],
    "mysqlType": TYPES,
    "sqlType": {"id": -5, "bin": -3},
    "ts": 1_700_000_000_005,
}
EDGES = [
    {"ts": 2**63},
    {"ts": -(2**63)},
    {"ts": "5"},
    {"es": 2**63 - 1},
    {"es": 99_999_999_999},
    {"es": -100_000_000_000},
    {"id": 2**63},
    {"data": [{"id": "1", "name": 2}]},
    {"data": [{"id": None}]},
    {"old": [{"name": 1.5}]},
    {"old": [None, {"name": "x"}]},
    {"type": "DELETE", "old": None},
    {"pkNames": ["id", "name", "id"]},
    {"sqlType": {"id": 1.5}},
    {"gtid": None},
]


def test_a_stream_of_tables_keys_and_type_maps_reads_the_same_both_ways():
    """The fast reader keeps the last message's table, type maps and key in hand: each change of them
    between messages is read as the general path reads it."""
    other_types = {**TYPES, "n": "decimal(9,4)"}
    stream = [
        USUAL,
        {**USUAL, "table": "u"},
        {**USUAL, "table": "u", "mysqlType": other_types},
        {**USUAL, "database": "db2", "table": "u"},
        {**USUAL, "pkNames": ["id", "name"]},
        {**USUAL, "pkNames": ["id", "name"], "sqlType": {"id": -5}},
        {**USUAL, "data": [{"id": None}]},  # the general path's error row
        {**USUAL, "table": "u", "data": [{"id": "2", "bin": "\u00fe"}, {"id": "3"}]},
        USUAL,
    ]
    fast, general, taken = both_ways(raw_records([json.dumps(m) for m in stream]))
    assert_same(fast, general)
    assert taken == len(stream) - 1
    assert fast["table"].to_pylist()[:4] == ["t", "u", "u", "u"]
    assert fast["database"].to_pylist()[3] == "db2"


# Usual messages that differ in what the fast reader keeps from one message to the next.
stream_message = st.fixed_dictionaries(
    {
        "database": st.sampled_from(["db", "db2"]),
        "table": st.sampled_from(["t", "u"]),
        "mysqlType": st.sampled_from([TYPES, {**TYPES, "n": "decimal(9,4)"}, {"id": "bigint"}]),
        "sqlType": st.sampled_from([{"id": -5, "bin": -3}, {"id": -5}]),
        "pkNames": st.sampled_from([["id"], ["id", "name"], []]),
        "type": st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
        "data": st.lists(
            st.fixed_dictionaries(
                {"id": st.sampled_from(["1", "2", None]), "name": st.sampled_from(["a", "\u00ff"])},
                optional={"bin": st.sampled_from(["\u00ff", None])},
            ),
            min_size=1,
            max_size=3,
        ),
    }
).map(lambda change: {**USUAL, **change})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stream_message, min_size=2, max_size=8))
def test_a_stream_of_usual_messages_reads_the_same_both_ways(messages):
    fast, general, taken = both_ways(raw_records([json.dumps(m) for m in messages]))
    assert_same(fast, general)
    usual = [
        m
        for m in messages
        if m["pkNames"]
        and all(r["id"] is not None for r in m["data"])
        # a row holding a column the type maps do not name is read the general way
        and all(set(r) <= {*m["mysqlType"], *m["sqlType"]} for r in m["data"])
    ]
    assert taken == len(usual)


@pytest.mark.parametrize("change", EDGES, ids=[json.dumps(e)[:40] for e in EDGES])
def test_edge_messages_decode_the_same_both_ways(change):
    fast, general, _ = both_ways(raw_records([json.dumps({**USUAL, **change}), json.dumps(USUAL)]))
    assert_same(fast, general)


def test_records_that_are_not_a_message_go_the_general_way():
    usual = json.dumps(USUAL).encode()
    records = raw_records([b"\xff" + usual, usual[:-1], b"", b"[]", b"[" + usual + b"]", usual, b"null"])
    fast, general, taken = both_ways(records)
    assert_same(fast, general)
    assert taken == 1
    # not UTF-8, not JSON, empty, not an object: four dead letters; the empty array is filtered
    assert general.num_rows - general["error"].null_count == 4
    # repeated keys: the last one counts either way
    twice = usual[:-1] + b', "type": "DELETE", "es": 5, "data": [{"id": "9"}]}'
    fast, general, taken = both_ways(raw_records([twice]))
    assert_same(fast, general)
    assert taken == 1 and general["op"].to_pylist() == ["delete"]


def test_a_row_without_one_of_its_tables_columns_reads_the_same_both_ways():
    """Rows read as their table's values (no binary column: no dicts on the way) where one row lacks a
    column the type maps name: its image holds the columns it has, as the general path's does."""
    types = {"id": "bigint(20)", "name": "varchar(8)", "n": "decimal(5,2)"}
    plain = {**USUAL, "mysqlType": types, "sqlType": {"id": -5, "name": 12, "n": 3}}
    stream = [
        {**plain, "type": "INSERT", "data": [{"id": "1", "name": "a", "n": "1.50"}], "old": None},
        {**plain, "type": "INSERT", "data": [{"id": "2", "n": None}], "old": None},
        {**plain, "data": [{"id": "3", "name": "c", "n": "2.00"}], "old": [{"n": "1.00"}]},
        {**plain, "data": [{"id": "4", "name": None}], "old": [{"name": "d"}]},
        {**plain, "type": "DELETE", "data": [{"id": "5", "name": "e", "n": "3.00"}], "old": None},
    ]
    fast, general, taken = both_ways(raw_records([json.dumps(m) for m in stream]))
    assert_same(fast, general, ordered=True)
    assert taken == len(stream)
    assert fast["after"].to_pylist()[1] == [("id", "2"), ("n", None)]
    assert fast["before"].to_pylist()[3] == [("id", "4"), ("name", "d")]


def test_tables_read_as_values_and_as_dicts_in_one_slice_read_the_same_both_ways():
    """One table with a binary column (its rows normalized as dicts) beside one without (its rows kept as
    values): both kinds of image in one Arrow column."""
    types = {"id": "bigint(20)", "name": "varchar(8)"}
    plain = {**USUAL, "table": "u", "mysqlType": types, "sqlType": {"id": -5, "name": 12}}
    stream = [USUAL, {**plain, "old": [{"name": "z"}]}, USUAL, {**plain, "type": "DELETE", "old": None}]
    stream[1]["data"] = stream[3]["data"] = [{"id": "7", "name": "y"}]
    fast, general, taken = both_ways(raw_records([json.dumps(m) for m in stream]))
    assert_same(fast, general, ordered=True)
    assert taken == len(stream)
    assert fast["table"].to_pylist() == ["t", "u", "t", "u"]
    assert fast["before"].to_pylist()[1] == [("id", "7"), ("name", "z")]
