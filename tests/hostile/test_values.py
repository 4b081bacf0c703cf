"""Hostile values (issue 34, items 4 and 5): a number of any length is stored exactly or becomes a dead
letter naming its column, never a wrong value; one record (deep nesting, a 10,000-digit JSON number, a
column name with backticks) never stops the job.

Numbers go through the real engine on both typing paths: the driver's (TableApplier.typed) and the fold
tasks' for a new table (replicator.fold.mirror_files, taken at TYPED_ON_EXECUTORS events of one table: the
threshold is lowered here, as tests/test_typed_on_executors.py does, so a small batch takes it).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from decimal import Decimal, localcontext
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator import engine
from replicator.types import column_type, parse_values
from tests.helpers import WRITERS, Runner, canal, job, write_jsonl

ES = 1_700_000_000_000
LENGTHS = (100, 400, 1_000, 4_300, 10_000)
# every numeric source type: column -> type text (unsigned types widen: bigint unsigned is decimal(20,0))
NUMERIC = {
    "t8": "tinyint(4)",
    "t8u": "tinyint(3) unsigned",
    "t16": "smallint(6)",
    "t16u": "smallint(5) unsigned",
    "t24": "mediumint(9)",
    "t32": "int(11)",
    "t32u": "int(10) unsigned",
    "t64": "bigint(20)",
    "t64u": "bigint(20) unsigned",
    "d10_2": "decimal(10,2)",
    "d18_4": "decimal(18,4)",
    "d38_0": "decimal(38,0)",
    "d38_10": "decimal(38,10)",
    "d38_38": "decimal(38,38)",
    "f": "float",
    "d": "double",
}


# ---- the oracle: what a column of each type holds, from the text alone ----------------------------------


def expected(text: str, source_type: str) -> Any:
    """The value a column of ``source_type`` must hold for ``text``, or ``None`` when it cannot hold it
    (a dead letter). Exact: Decimal reads any length of digits; no cast's overflow is involved."""
    target = column_type(source_type).arrow
    text = text.strip()
    if pa.types.is_floating(target):
        if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
            return None
        number = float(text)
        if math.isinf(number) or (number == 0 and Decimal(text) != 0):
            return None
        return number
    if pa.types.is_integer(target):
        if not re.fullmatch(r"-?\d+", text):
            return None
        value = Decimal(text)
        bits = target.bit_width
        return int(value) if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1) else None
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        return None
    value = Decimal(text)
    with localcontext(prec=40_000, Emax=10**8, Emin=-(10**8)):
        step = Decimal(1).scaleb(-target.scale)
        if value != value.quantize(step) or abs(value) >= Decimal(10) ** (target.precision - target.scale):
            return None
        return value.quantize(step)


def stored(text: str, source_type: str) -> Any:
    """What parse_values makes of ``text``: the value, or None when it reports the row."""
    typed, errors = parse_values(pa.array([text]), column_type(source_type).arrow)
    assert len(errors) <= 1
    value = typed.to_pylist()[0]
    assert (value is None) == bool(errors)
    return value


def _digits(min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(alphabet="0123456789", min_size=min_size, max_size=30)


@st.composite
def numbers(draw: st.DrawFn) -> str:
    """Number text of any length: a few random digits around long runs of zeros or nines (up to 10,000),
    leading zeros, fractions, exponents and signs."""
    sign = draw(st.sampled_from(["", "-", "+"]))
    run = draw(st.sampled_from("09")) * draw(
        st.sampled_from([0, 0, 1, 17, 37, 38, 39, 100, 400, 4_300, 10_000])
    )
    lead = "0" * draw(st.sampled_from([0, 0, 1, 50, 5_000]))
    whole = lead + draw(_digits(1)) + (run if draw(st.booleans()) else "")
    text = sign + whole
    if draw(st.booleans()):
        text += "." + draw(_digits()) + (run if draw(st.booleans()) else "")
    if draw(st.integers(0, 4)) == 0:
        text += draw(st.sampled_from("eE")) + str(draw(st.integers(-400, 400)))
    return text


@settings(max_examples=300)
@given(text=numbers(), source_type=st.sampled_from(sorted(set(NUMERIC.values()))))
def test_a_number_of_any_length_is_stored_exactly_or_refused(text, source_type):
    want = expected(text, source_type)
    got = stored(text, source_type)
    assert got == want, (text[:80], len(text), source_type)


def small(source_type: str, length: int) -> str:
    """A small number every column of the type holds, written with ``length`` zeros around it."""
    if "int" in source_type:
        return "0" * length + "7"
    if source_type == "decimal(38,38)":
        return "0" * length + ".5" + "0" * length
    return "0" * length + "7." + "0" * length


@pytest.mark.parametrize("source_type", sorted(set(NUMERIC.values())))
@pytest.mark.parametrize("length", LENGTHS)
def test_long_numbers_never_wrap(source_type, length):
    """The reported cases: 1 and zeros, nines, negative nines, a tiny fraction: refused (but for a double
    of 100 digits, which holds them); the same digits behind zeros stored as the small number they are."""
    for text in hostile(length):
        assert stored(text, source_type) == expected(text, source_type), (text[:20], length, source_type)
        assert expected(text, source_type) is None or (source_type in ("float", "double") and length < 309)
    text = small(source_type, length)
    assert stored(text, source_type) == expected(text, source_type) is not None


def hostile(length: int) -> tuple[str, ...]:
    return ("1" + "0" * (length - 1), "9" * length, "-" + "9" * length, "0." + "0" * length + "1")


# ---- through the engine, on both typing paths -------------------------------------------------------------

_keys = itertools.count(1)


def number_messages() -> tuple[list[dict[str, Any]], dict[int, Any], dict[tuple[int, int], str]]:
    """One message per (column, length): four numbers no column holds and one it does. Returns the
    messages, the stored value expected per key, and the column of each row that must be a dead letter
    (by line and row of the message)."""
    types = {"id": "bigint(20)", **NUMERIC}
    messages, good, bad = [], {}, {}
    es = itertools.count(ES)
    line = itertools.count(1)
    for column, source_type in NUMERIC.items():
        for length in LENGTHS:
            rows, at = [], next(line)
            for text in (*hostile(length), small(source_type, length)):
                value = expected(text, source_type)
                key = next(_keys)
                if value is None:
                    bad[(at, len(rows))] = column
                else:
                    good[key] = (column, value)
                rows.append({"id": str(key), column: text})
            messages.append(canal("INSERT", rows, es=next(es), table="numbers", types=types))
    return messages, good, bad


@pytest.mark.parametrize("threshold", [10**9, 1], ids=["driver", "executors"])
def test_long_numbers_through_the_engine(spark, tmp_path, monkeypatch, threshold):
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", threshold)
    messages, good, bad = number_messages()
    runner = Runner(spark, job(tmp_path))
    summary = runner.messages(tmp_path, messages)
    rows = {r["id"]: r for r in runner.mirror(table="numbers")}
    assert sorted(rows) == sorted(good)
    for key, (column, value) in good.items():
        assert rows[key][column] == value
        assert all(v is None for c, v in rows[key].items() if c not in ("id", column))
    dead = runner.dead_letters()
    assert summary.dead_letters == len(dead) == len(bad)
    assert sorted((d["offset"], d["row"]) for d in dead) == sorted(bad)
    for letter in dead:
        assert f"column '{bad[(letter['offset'], letter['row'])]}'" in letter["error"], letter["error"][:200]
        assert "does not fit" in letter["error"]
        assert len(letter["error"]) < 400  # the value is cut in the message, not 10,000 digits long


# ---- names with backticks and quotes: quoted wherever an expression is built --------------------------

ODD = ["i`d", 'n"a`me', "a.b"]


@pytest.fixture(params=["delta-rs", "delta-spark"])
def writer(request, spark, tmp_path):
    from replicator.sinks import writer_factory

    return writer_factory(request.param)(tmp_path / "t")


def test_the_guarded_merge_quotes_every_column_name(writer):
    """A key column and a column whose names hold a backtick, a double quote and a dot: the
    MERGE (delta-rs's update_all wrote the names unquoted and failed on every rerun) and a delete."""
    from replicator.sinks.base import Txn

    schema = pa.schema([(ODD[0], pa.int32()), (ODD[1], pa.string()), (ODD[2], pa.string())])
    schema = schema.append(pa.field("_cdc_op", pa.string())).append(pa.field("_cdc_seq", pa.string()))

    def rows(data: list[tuple]) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in data], schema)

    writer.create(schema)
    writer.merge_guarded(
        rows([(1, "a", "x", "insert", "01"), (2, "b", "y", "insert", "01")]),
        [ODD[0]],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 0),
    )
    writer.merge_guarded(
        rows([(1, "A", "X", "update", "02"), (2, None, None, "delete", "02"), (3, "c", "z", "insert", "02")]),
        [ODD[0]],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 1),
    )
    got = sorted(tuple(r[c] for c in ODD) for r in writer.read().to_pylist())
    assert got == [(1, "A", "X"), (3, "c", "z")]


def test_a_column_name_with_backticks_is_mirrored(spark, tmp_path):
    """Its values reach the mirror on every batch (the MERGE failed on every rerun before)."""
    types = {"i`d": "int(11)", "we`ird": "varchar(10)", 'q"uote': "decimal(10,2)"}
    runner = Runner(spark, job(tmp_path))
    for b in range(2):
        summary = runner.messages(
            tmp_path,
            [
                canal(
                    "INSERT",
                    [{"i`d": str(b + 1), "we`ird": "v", 'q"uote': "1.50"}],
                    es=ES + 10 * b,
                    types=types,
                    pk=["i`d"],
                ),
                canal(
                    "UPDATE",
                    [{"i`d": "1", "we`ird": f"w{b}", 'q"uote': "2.50"}],
                    es=ES + 10 * b + 1,
                    types=types,
                    pk=["i`d"],
                ),
            ],
        )
        assert (summary.applied, summary.dead_letters) == (2, 0)
    assert runner.mirror() == [
        {"i`d": 1, "we`ird": "w1", 'q"uote': Decimal("2.50")},
        {"i`d": 2, "we`ird": "v", 'q"uote': Decimal("1.50")},
    ]


# ---- names with blanks and `,;{}()=`: delta-spark maps them (Delta column mapping), delta-rs stores them ---

SPECIAL = ["order id", "a,b;c", "x=y{z}(w)"]
ADDED = "new\tcol"


def _mapping(path) -> str:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).metadata().configuration.get("delta.columnMapping.mode", "none")


def _special_rows(names: list[str], data: list[tuple]) -> pa.Table:
    types = {SPECIAL[0]: pa.int32(), "id": pa.int32(), "_cdc_seq": pa.string(), "_cdc_op": pa.string()}
    schema = pa.schema(
        [pa.field(n, types.get(n, pa.string()), nullable=n not in (SPECIAL[0], "id")) for n in names]
    )
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in data], schema)


def test_column_names_delta_spark_refuses_without_column_mapping(writer):
    """A key and columns named with a blank, ``,;{}()=`` and a tab: delta-spark creates the table with
    column mapping by name, delta-rs a plain table; MERGE, a column added and the reads (delta-rs reads a
    column-mapped table through its query engine: its pyarrow dataset gave every value as NULL) hold the
    same rows with either writer."""
    from replicator.sinks.base import Txn
    from replicator.sinks.delta_spark import DeltaSparkWriter

    names = [*SPECIAL, "_cdc_op", "_cdc_seq"]
    writer.create(_special_rows(names, []).schema)
    writer.merge_guarded(
        _special_rows(names, [(1, "a", "x", "insert", "01"), (2, "b", "y", "insert", "01")]),
        [SPECIAL[0]], "_cdc_seq", "_cdc_op", Txn("job", 0),
    )  # fmt: skip
    writer.add_columns([pa.field(ADDED, pa.string())])
    names.append(ADDED)
    writer.merge_guarded(
        _special_rows(names, [(1, "A", "X", "update", "02", "n"), (2, None, None, "delete", "02", None)]),
        [SPECIAL[0]], "_cdc_seq", "_cdc_op", Txn("job", 1),
    )  # fmt: skip
    assert writer.schema().names == names
    assert [tuple(r[c] for c in [*SPECIAL, ADDED]) for r in writer.read().to_pylist()] == [(1, "A", "X", "n")]
    keys = writer.read_keys(SPECIAL[0], pa.array([1], pa.int32()), SPECIAL[:2])
    assert keys.to_pylist() == [{SPECIAL[0]: 1, SPECIAL[1]: "A"}]
    assert _mapping(writer.path) == ("name" if isinstance(writer, DeltaSparkWriter) else "none")


def test_a_column_delta_spark_refuses_added_to_a_plain_table_turns_column_mapping_on(writer):
    from replicator.sinks.base import Txn
    from replicator.sinks.delta_spark import DeltaSparkWriter

    names = ["id", "_cdc_op", "_cdc_seq"]
    writer.create(_special_rows(names, []).schema)
    writer.merge_guarded(
        _special_rows(names, [(1, "insert", "01")]), ["id"], "_cdc_seq", "_cdc_op", Txn("j", 0)
    )
    assert _mapping(writer.path) == "none"
    writer.add_columns([pa.field(SPECIAL[1], pa.string())])
    names.append(SPECIAL[1])
    rows = _special_rows(names, [(1, "update", "02", "v"), (2, "insert", "02", "w")])
    writer.merge_guarded(rows, ["id"], "_cdc_seq", "_cdc_op", Txn("j", 1))
    assert sorted((r["id"], r[SPECIAL[1]]) for r in writer.read().to_pylist()) == [(1, "v"), (2, "w")]
    assert _mapping(writer.path) == ("name" if isinstance(writer, DeltaSparkWriter) else "none")


@pytest.mark.parametrize("target", WRITERS)
def test_a_source_table_with_such_names_is_mirrored_alike_by_both_writers(spark, tmp_path, target):
    """Through the engine: a table keyed by `order id` with such columns, and a table that gets one by a
    later message; inserts, an update, a delete (its tombstone keyed by `order id`), a column added."""
    types = {SPECIAL[0]: "int(11)", SPECIAL[1]: "varchar(10)", SPECIAL[2]: "decimal(10,2)"}
    plain = {"id": "int(11)", "name": "varchar(10)"}
    runner = Runner(spark, job(tmp_path, target={"writer": target}))

    def odd(i: int, a: str, **extra: str) -> dict[str, str]:
        return {SPECIAL[0]: str(i), SPECIAL[1]: a, SPECIAL[2]: "1.50", **extra}

    first = [
        canal("INSERT", [odd(1, "a"), odd(2, "b")], es=ES, types=types, pk=[SPECIAL[0]], table="odd"),
        canal("INSERT", [{"id": "1", "name": "p"}], es=ES, types=plain, table="plain"),
    ]
    assert runner.messages(tmp_path, first).applied == 3
    wider = {**types, ADDED: "varchar(10)"}
    second = [
        canal("UPDATE", [odd(1, "A", **{ADDED: "n"})], old=[{SPECIAL[1]: "a"}], es=ES + 1, types=wider,
              pk=[SPECIAL[0]], table="odd"),
        canal("DELETE", [odd(2, "b")], es=ES + 2, types=types, pk=[SPECIAL[0]], table="odd"),
        canal("INSERT", [{"id": "2", "name": "q", "order note": "late"}], es=ES + 3,
              types={**plain, "order note": "varchar(10)"}, table="plain"),
    ]  # fmt: skip
    summary = runner.messages(tmp_path, second)
    assert (summary.applied, summary.dead_letters) == (3, 0)
    assert runner.mirror("shop", "odd") == [
        {SPECIAL[0]: 1, SPECIAL[1]: "A", SPECIAL[2]: Decimal("1.50"), ADDED: "n"}
    ]
    assert runner.mirror("shop", "plain") == [
        {"id": 1, "name": "p", "order note": None},
        {"id": 2, "name": "q", "order note": "late"},
    ]
    summary = runner.messages(tmp_path, [canal("INSERT", [odd(2, "late")], es=ES + 1, types=types,
                                               pk=[SPECIAL[0]], table="odd")])  # fmt: skip
    assert summary.applied == 1 and len(runner.mirror("shop", "odd")) == 1  # the tombstone holds
    from replicator.commands.maintenance import optimize

    before = runner.mirror("shop", "odd")
    assert [o.table for o in optimize(runner.config, "shop.odd")] == ["shop.odd"]
    assert runner.mirror("shop", "odd") == before


# ---- one record never stops the job: deep nesting, numbers too long for Python's int ----------------------

DEEP = 1_000


def nested(depth: int, kind: str = "[") -> str:
    return "[" * depth + "]" * depth if kind == "[" else '{"a":' * depth + "1" + "}" * depth


def hostile_json() -> list[tuple[str, bytes, str]]:
    """(case, record, a fragment of its dead letter's error). Canal-json messages around them are good."""
    good = canal("INSERT", [order_row(1)], es=ES, types=ORDER)
    text = json.dumps(good)

    def with_value(value: str) -> bytes:  # the row's "name" as a raw JSON value, not a string
        return text.replace('"name": "x"', f'"name": {value}').encode()

    digits = "1" * 10_000
    return [
        ("1,000 nested arrays", nested(DEEP).encode(), "not a JSON object"),
        ("5,000 nested arrays", nested(5 * DEEP).encode(), "nested too deeply"),
        ("1,000 nested objects", nested(DEEP, "{").encode(), ""),
        ("5,000 nested objects", nested(5 * DEEP, "{").encode(), "nested too deeply"),
        ("a value of 1,000 nested arrays", with_value(nested(DEEP)), "nested too deeply"),
        ("a value of 1,000 nested objects", with_value(nested(DEEP, "{")), "nested too deeply"),
        # a fraction sends the message to the exact parser (stdlib json), whose limit is ~1,000 levels
        ("exact parse, 1,000 levels", with_value(f"[1.5, {nested(DEEP)}]"), "nested too deeply"),
        ("an array document, 1,000 levels", f"[{text}, {nested(DEEP)}]".encode(), ""),
        ("a 10,000-digit value", with_value(digits), "more than 4,300 digits"),
        ("a 10,000-digit es", text.replace(f'"es": {ES}', f'"es": {digits}').encode(), "4,300 digits"),
        ("a 10,000-digit value in a document", f"[{with_value(digits).decode()}]".encode(), "4,300 digits"),
        (
            "a 10,000-digit decimal",
            with_value(digits + ".5").replace(b'"amount": "1.00"', b'"amount": ' + digits.encode() + b".5"),
            "'amount'",
        ),
    ]


ORDER = {"id": "int(11)", "name": "varchar(64)", "amount": "decimal(10,2)"}


def order_row(i: int) -> dict[str, str]:
    return {"id": str(i), "name": "x", "amount": "1.00"}


@pytest.mark.parametrize(
    "dialect",
    [
        "auto",
        "canal-json",
        "debezium",
        "ckafka",
        "cloudcanal-json",
        "drs-json",
        "drs-json-c",
        "drs-mongo",
        "river-canal",
    ],
)
def test_hostile_json_never_raises_in_decode(dialect):
    """Every JSON dialect's parsing path: each record is an outcome of its own, never an exception."""
    from replicator.dialects.base import decode

    cases = hostile_json()
    raws = [raw for _case, raw, _error in cases]
    table = decode(
        pa.table(
            {
                "raw": pa.array(raws, pa.binary()),
                "source": ["f"] * len(raws),
                "partition": pa.array([0] * len(raws), pa.int32()),
                "offset": pa.array(range(1, len(raws) + 1), pa.int64()),
            }
        ),
        dialect,
    )
    offsets = table["coordinates"].combine_chunks().field("offset").to_pylist()
    assert set(offsets) == set(range(1, len(raws) + 1))  # each record has its outcome


def test_hostile_json_through_the_engine(spark, tmp_path):
    """Each hostile record is a dead letter saying why; the good records around them are applied, and
    the next batch goes on."""
    cases = hostile_json()
    folder = tmp_path / "in"
    lines = [json.dumps(canal("INSERT", [order_row(100)], es=ES - 1, types=ORDER)).encode()]
    lines += [raw for _case, raw, _error in cases]
    lines += [json.dumps(canal("INSERT", [order_row(101)], es=ES + 1, types=ORDER)).encode()]
    write_jsonl(folder / "m.jsonl", [line.decode() for line in lines])
    runner = Runner(spark, job(tmp_path))
    runner.batch(folder)
    dead: dict[int, list[str]] = {}
    for letter in runner.dead_letters():
        dead.setdefault(letter["offset"], []).append(letter["error"])
    for line, (case, _raw, error) in enumerate(cases, start=2):
        assert dead.get(line), case
        assert all(error in e and len(e) < 400 for e in dead[line]), (case, [e[:200] for e in dead[line]])
    ids = [r["id"] for r in runner.mirror()]
    assert 100 in ids and 101 in ids
    summary = runner.messages(tmp_path, [canal("INSERT", [order_row(102)], es=ES + 2, types=ORDER)])
    assert summary.applied == 1 and 102 in [r["id"] for r in runner.mirror()]


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag, as Avro writes a long
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes([*out, n])


@pytest.mark.timeout(120)
def test_an_avro_container_claiming_endless_empty_items_is_a_dead_letter():
    """Found by fuzzing dts-avro: a container file brings its own schema; an array of nulls takes no bytes
    per item, so 179 bytes claiming 2**40 of them never finished reading (10 million: a minute, 266 MB)."""
    import io

    import fastavro

    from replicator.dialects.base import decode

    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}],
    }
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), [{"a": [None]}], codec="null")
    sync = buffer.getvalue()[-16:]
    head = buffer.getvalue()[: buffer.getvalue().index(sync) + 16]
    data = _varint(2**40) + b"\x00"
    raw = head + _varint(1) + _varint(len(data)) + data + sync
    table = decode(
        pa.table(
            {
                "raw": pa.array([raw], pa.binary()),
                "source": ["f"],
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([0], pa.int64()),
            }
        ),
        "dts-avro",
    )
    assert table.num_rows == 1
    assert "items take no bytes" in table["error"][0].as_py()
