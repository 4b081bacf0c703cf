"""The fold as Spark runs it (decode tasks bucket their events into Arrow files by key hash, a key change
copied to its old key's bucket; a task folds a few buckets at once; net changes through files or through
Spark's results) keeps exactly what one fold over all the batch's events keeps.

Engine tests' batches are small enough to be folded by the driver (``FoldPlan.driver_batch``): this property
forces one task (``small_batch``) or the buckets, whatever the events' split across decode tasks, their
delivery order, and whether a message names its key (events that name none are routed by the fold with the
driver's key); and the driver's fold, which must keep the same."""

from __future__ import annotations

import itertools
import random
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replicator import exchange
from replicator.decode import FOLD_COLUMNS
from replicator.dialects.base import decode
from replicator.fold import FoldPlan, fold_batch, fold_tasks
from replicator.fold import typed as fold_typed
from replicator.fold.arrow import fold
from replicator.model import _uniform_layout, map_values, map_without, text_buffers
from tests.dialects.golden import raw_records
from tests.helpers import canal, order

TABLE = ("shop", None, "orders")
OPS = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]), st.integers(0, 5), st.integers(0, 5), st.integers(0, 9)
)


def messages(ops: list[tuple[str, int, int, int]]) -> list[dict]:
    """One message per op, ``es`` in op order; an UPDATE whose two keys differ moves its row."""
    out = []
    for es, (op, key, new_key, value) in enumerate(ops, start=1):
        if op == "UPDATE":
            old = [{"id": str(key)}] if new_key != key else [{"name": "before"}]
            out.append(canal(op, [order(new_key, name=f"v{value}")], es=es, old=old))
        else:
            out.append(canal(op, [order(key, name=f"v{value}")], es=es))
    return out


def net(table) -> list[tuple]:  # type: ignore[no-untyped-def]
    rows = table.select(["key", "op", "image", "seq"]).to_pylist()
    return sorted((tuple(r["key"]), r["op"], r["image"], tuple(r["seq"])) for r in rows)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(OPS, min_size=1, max_size=40),
    tasks=st.integers(1, 4),
    buckets=st.integers(1, 3),
    fold_tasks=st.integers(1, 3),
    spill=st.booleans(),
    typed=st.booleans(),
    small=st.booleans(),
    driver=st.booleans(),
    unkeyed=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
# Keys that move to a key of another task's bucket: that task needs the update's copy (the delete half).
@example(
    ops=[("INSERT", 1, 1, 0), ("UPDATE", 1, 2, 1), ("INSERT", 3, 3, 0), ("UPDATE", 3, 4, 1),
         ("UPDATE", 5, 0, 1)],
    tasks=1, buckets=2, fold_tasks=2, spill=False, small=False, driver=False, unkeyed=0, seed=0, typed=True,
)  # fmt: skip
def test_the_spark_fold_keeps_what_one_fold_keeps(
    spark, ops, tasks, buckets, fold_tasks, spill, small, driver, unkeyed, seed, typed
):
    sent = messages(ops)
    random.Random(seed).shuffle(sent)  # delivery order is not the order of the changes: seq decides
    events = decode(raw_records(sent), "canal-json", sort_keys=True).select(list(FOLD_COLUMNS))
    if unkeyed:  # every unkeyed-th message names no key (as CKafka's format one)
        named = pa.array([i % (unkeyed + 1) != 0 for i in range(events.num_rows)])
        no_key = pa.array([[]] * events.num_rows, events.schema.field("primary_key").type)
        events = events.set_column(
            events.schema.get_field_index("primary_key"),
            "primary_key",
            pc.if_else(named, events["primary_key"], no_key),
        )
    expected = dict(fold(events, {TABLE: ["id"]}, ()))
    with tempfile.TemporaryDirectory() as folder:
        size = -(-events.num_rows // tasks)
        indexes = []
        for start in range(0, events.num_rows, size):  # one decode task's file per share
            out = exchange.EventFile(folder)
            for bucket, secondary, rows in exchange.split(events.slice(start, size), buckets):
                out.write(bucket, secondary, rows)
            indexes.append(out.close())
        plan = FoldPlan(
            keys=((TABLE, ("id",)),),
            barriers=(),
            buckets=buckets,
            events=events.num_rows,
            spill=folder if spill else None,
            small_batch=events.num_rows if small else 0,
            driver_batch=events.num_rows if driver else 0,
            tasks=min(fold_tasks, buckets),  # (engine tests: as fold_tasks chooses)
            typing=((TABLE, MIRROR),) if typed else (),
        )
        got, files, _keyless = fold_batch(spark, pa.concat_tables(indexes), plan)
    assert files == {}  # no table to write (plan.writes)
    if typed:  # the tasks typed the net changes as one typing of the whole fold's would
        assert typed_net(got[TABLE]) == typed_net(fold_typed(expected[TABLE], MIRROR, plan))
    else:
        assert net(got[TABLE]) == net(expected[TABLE])


# A mirror of the orders table without `name`: its values stay text, in REST.
MIRROR = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("amount", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us")),
        ("_cdc_seq", pa.string()),
    ]
)


def typed_net(table) -> list[tuple]:  # type: ignore[no-untyped-def]
    assert "image" not in table.column_names
    rows = table.select(["key", "op", "seq", "typed", "type_error", "rest"]).to_pylist()
    fields = ("op", "type_error", "rest")
    return sorted((tuple(r["key"]), tuple(r["seq"]), repr(r["typed"]), *(r[f] for f in fields)) for r in rows)


def test_fold_tasks_follow_the_batch_and_its_tables() -> None:
    one_table = ((TABLE, ("id",)),)
    many = tuple(((f"db{i}", None, "t"), ("id",)) for i in range(200))
    plan = FoldPlan(keys=one_table, barriers=(), buckets=8, events=1_000_000)
    assert fold_tasks(plan) == 8  # one per bucket: 125k events each
    assert fold_tasks(FoldPlan(keys=one_table, barriers=(), buckets=8, events=300_000)) == 3
    assert fold_tasks(FoldPlan(keys=one_table, barriers=(), buckets=8, events=100_000)) == 1
    # 200 tables of 500 events: each task's fold is per table, so one task folds them all
    assert fold_tasks(FoldPlan(keys=many, barriers=(), buckets=8, events=100_000)) == 1
    assert fold_tasks(FoldPlan(keys=many, barriers=(), buckets=8, events=5_000_000)) == 5


def reference_hash(text: str | None) -> int:
    """exchange.text_hash spelled out byte by byte: a polynomial in the UTF-8 bytes modulo 2^64, the
    length mixed in, then splitmix64's finalizer."""
    mask = (1 << 64) - 1
    data = (text or "").encode()
    h = 0
    for byte in data:
        h = (h * 0x100000001B3 + byte) & mask
    h ^= len(data)
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & mask
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & mask
    return h ^ (h >> 31)


@given(
    texts=st.lists(st.none() | st.text(max_size=40), max_size=50),
    start=st.integers(0, 10),
    horner=st.sampled_from([64, 8, -1]),
)
def test_a_key_hashes_alike_in_every_process(texts, start, horner):
    """The bucket hash depends on the text's bytes only (not on a process's salt, a chunk or a slice), and
    its two ways (a byte position at a time up to ``HORNER_BYTES``, else a sum of terms) agree."""
    array = pa.array([None] * start + texts, pa.string()).slice(start)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exchange, "HASH_ROWS", 7)  # several chunks
        patch.setattr(exchange, "HORNER_BYTES", horner)
        assert [int(h) for h in exchange.text_hash(array)] == [reference_hash(t) for t in texts]


def test_the_examples_key_moves_cross_buckets() -> None:
    """The fold property's explicit example moves keys 1 -> 2 and 3 -> 4 across the two buckets."""
    label = pa.array(["shop.orders"] * 5)
    keys = exchange.list_key_text(pa.array([[str(k)] for k in range(5)]))
    buckets = exchange.bucket_of(label, keys, 2).to_pylist()
    assert buckets[1] != buckets[2] and buckets[3] != buckets[4]


images = st.lists(
    st.none()
    | st.lists(
        st.tuples(st.sampled_from(["id", "name", "é", ""]), st.none() | st.text(max_size=3)), max_size=6
    ),
    max_size=30,
)


@given(rows=images, start=st.integers(0, 3))
def test_map_values_reads_a_map_as_map_lookup_does(rows, start):
    """One flattening of the images gives each column what ``map_lookup(..., "first")`` gives: NULL for a
    NULL map or an absent key, a repeated key's first value (the key's values for the fold's key changes
    and the apply's typing)."""
    maps = pa.array([None] * start + rows, pa.map_(pa.string(), pa.string())).slice(start)
    names = ["id", "name", "é", "", "absent"]
    got = map_values(maps, names)
    for name, values in zip(names, got, strict=True):
        assert values.equals(pc.map_lookup(maps, pa.scalar(name, pa.string()), "first")), name


@given(
    texts=st.lists(st.none() | st.text(max_size=6), max_size=20),
    start=st.integers(0, 3),
    kind=st.sampled_from([pa.string(), pa.large_string(), pa.binary()]),
)
def test_text_buffers_are_each_value_s_bytes(texts, start, kind):
    """model.text_buffers reads a (sliced) string or binary array's offsets and data: each value's UTF-8
    bytes between its two offsets (a NULL's: none)."""
    values = [t if t is None or kind != pa.binary() else t.encode() for t in texts]
    array = pa.array(["pad"] * start + values, kind).slice(start)
    offsets, data = text_buffers(array)
    assert len(offsets) == len(texts) + 1
    got = [data[a:b].tobytes() for a, b in itertools.pairwise(offsets.tolist())]
    assert got == [b"" if t is None else t.encode() for t in texts]


patterns = st.lists(st.sampled_from(["id", "name", "é", "", "ab", "ba", "nom"]), min_size=1, max_size=5)


@st.composite
def same_keys(draw):
    """Images that mostly hold one key list in one order (the usual images), with NULL and empty maps, and
    now and then one that differs by a key of the same length ("ab"/"ba"), a missing or an added entry."""
    pattern = draw(patterns)
    rows = []
    for kind in draw(st.lists(st.sampled_from(["same"] * 6 + ["null", "empty", "other"]), max_size=25)):
        values = draw(st.lists(st.none() | st.text(max_size=3), min_size=len(pattern), max_size=len(pattern)))
        row = list(zip(pattern, values, strict=True))
        if kind == "null":
            row = None
        elif kind == "empty":
            row = []
        elif kind == "other":
            change = draw(st.sampled_from(["swap", "drop", "add"]))
            if change == "swap":
                at = draw(st.integers(0, len(row) - 1))
                row[at] = ({"ab": "ba", "ba": "ab"}.get(row[at][0], "x" * len(row[at][0])), row[at][1])
            elif change == "drop":
                row = row[:-1]
            else:
                row = [*row, ("id", "extra")]
        rows.append(row)
    return rows


@given(rows=same_keys(), start=st.integers(0, 3), chunks=st.integers(1, 3))
def test_map_values_reads_same_key_images_as_map_lookup_does(rows, start, chunks):
    """The usual images (one key list in one order) are read by position (model._uniform_layout), and give
    what ``map_lookup(..., "first")`` gives, NULL and empty maps, a repeated key, slices and chunks included;
    an image that differs anywhere sends the array the general way, with the same result. The slice has
    neighbours in its buffers (another table's images, as a table's slice of a batch sorted by table has),
    whose entries are not its own."""
    neighbour = [("other", "x"), ("id", "n")]
    whole = pa.array([neighbour] * start + rows + [neighbour] * start, pa.map_(pa.string(), pa.string()))
    maps = whole.slice(start, len(rows))
    cut = [len(rows) * i // chunks for i in range(chunks + 1)]
    chunked = pa.chunked_array([maps.slice(a, b - a) for a, b in itertools.pairwise(cut)], maps.type)
    names = ["id", "name", "é", "", "ab", "ba", "nom", "absent"]
    for array in (maps, chunked):
        got = map_values(array, names)
        for name, values in zip(names, got, strict=True):
            expected = pc.map_lookup(maps, pa.scalar(name, pa.string()), "first")
            assert values.equals(expected), name


def test_same_key_images_are_read_by_position_and_others_are_not() -> None:
    """The positional read is taken for the usual images only (NULL and empty maps among them); a key of
    the same length in another row ("ba" for "ab") is caught by the bytes' check."""
    usual = [[("id", "1"), ("ab", None)], None, [], [("id", "2"), ("ab", "y")]]
    maps = pa.array(usual, pa.map_(pa.string(), pa.string()))
    starts, pattern, usable = _uniform_layout(maps)
    assert (starts.tolist(), pattern, usable.tolist()) == (
        [0, 2, 2, 2],
        ["id", "ab"],
        [True, False, False, True],
    )
    assert _uniform_layout(pa.array([*usual, [("id", "3"), ("ba", "z")]], maps.type)) is None
    assert _uniform_layout(pa.array([*usual, [("id", "3")]], maps.type)) is None
    none = map_values(pa.chunked_array([], maps.type), ["id", "x"])  # no chunks: a column per name still
    assert [c.to_pylist() for c in none] == [[], []]


@given(rows=images, start=st.integers(0, 3), names=st.lists(st.sampled_from(["id", "name", "é", "x"])))
def test_map_without_keeps_the_other_entries_in_order(rows, start, names):
    """What the fold tasks send beside the typed columns (fold.typed's REST): each row's entries whose key
    is not a mirror column, in their order; a NULL map or a row with none left is an empty map."""
    maps = pa.array([None] * start + rows, pa.map_(pa.string(), pa.string())).slice(start)
    got = map_without(maps, names).to_pylist()
    assert got == [[(k, v) for k, v in row or [] if k not in names] for row in rows]


def test_a_fold_task_sends_many_tables_net_changes_together(monkeypatch, tmp_path) -> None:
    """A fold task (``fold_buckets``, in this process as a Python worker runs it) sends the untyped net
    changes of many tables together, a file per ``FOLDED_ROWS`` of them (not a file per table), and the
    driver's split of them by table (``_by_table``) keeps what one fold keeps."""
    from replicator import payload
    from replicator.fold import FOLDED_ROWS, _by_table, fold_buckets

    assert FOLDED_ROWS >= 10_000
    monkeypatch.setattr("replicator.fold.FOLDED_ROWS", 7)
    sent = []
    for n in range(60):  # 12 tables, a key or two each, with updates
        sent.append(canal("INSERT", [order(n % 2, name=f"v{n}")], es=n + 1, table=f"t{n % 12:02d}"))
    events = decode(raw_records(sent), "canal-json", sort_keys=True).select(list(FOLD_COLUMNS))
    tables = [("shop", None, f"t{i:02d}") for i in range(12)]
    expected = dict(fold(events, {t: ["id"] for t in tables}, ()))
    out = exchange.EventFile(str(tmp_path / "events"))
    for bucket, secondary, rows in exchange.split(events, 2):
        out.write(bucket, secondary, rows)
    listing = out.close()
    plan = FoldPlan(
        keys=tuple((t, ("id",)) for t in tables), barriers=(), buckets=2, events=events.num_rows,
        spill=str(tmp_path / "spill"), tasks=1,
    )  # fmt: skip
    whole = listing.filter(pc.invert(listing["secondary"]))
    batches = payload.rows([("listing", exchange.UNBUCKETED, whole)])
    sent_back = list(fold_buckets(plan, batches))
    kinds = [k for b in sent_back for k in b["kind"].to_pylist()]
    assert kinds and set(kinds) == {"folded" + payload.IN_FILE}
    assert len(kinds) < len(tables)  # together, not a file per table
    parts: dict[str, list[pa.Table]] = {"folded": [], "typed": [], "written": [], "keyless": []}
    for kind, _bucket, table in payload.items(sent_back):
        parts[kind].append(table)
    got, files, keyless = _by_table(parts)
    assert files == {} and keyless is None
    assert set(got) == set(expected)
    for table in tables:
        assert net(got[table]) == net(expected[table])
