"""``decode.type_counts``: each (table, type map)'s first and last seq, by ranking the seq parts (the
decode tasks send no seq text), equal to the minimum and maximum of the seq texts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator import decode
from replicator.decode import type_counts
from replicator.dialects.events import seq_texts, with_seq_text
from replicator.model import seq_text

seqs = st.lists(st.one_of(st.integers(-5, 2**63 - 1), st.none()), min_size=3, max_size=3)
rows = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["k1", "k2"]), st.one_of(seqs, st.none())),
    min_size=1,
    max_size=30,
)


def slice_of(generated: list[tuple]) -> pa.Table:
    n = len(generated)
    return pa.table(
        {
            "database": [r[0] for r in generated],
            "schema": pa.nulls(n, pa.string()),
            "table": ["t"] * n,
            "type_key": [r[1] for r in generated],
            "seq": pa.array([r[2] for r in generated], pa.list_(pa.int64())),
        }
    )


@pytest.mark.parametrize("walked", [16, 0], ids=["walked", "lexsorted"])
@settings(max_examples=200, deadline=None)
@given(generated=rows, null_seqs=st.booleans())
def test_ranked_seqs_give_the_seq_texts_minimum_and_maximum(generated, walked, null_seqs):
    """A group's first and last seq, found by walking its rows' parts (a few groups) or by one lexsort of
    the slice (many), are the minimum and maximum of its seq texts. (A slice with a NULL seq takes the
    texts' way: half the examples have none, so that long slices are ranked too.)"""
    if not null_seqs:
        generated = [(d, k, [0, 0, 0] if seq is None else seq) for d, k, seq in generated]
    dml = slice_of(generated)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "_WALKED_GROUPS", walked)
        ranked = type_counts(dml)  # no seq_text: ranked (or, with a NULL seq, made and aggregated)
    by_text = type_counts(with_seq_text(dml))  # the aggregate of the texts
    assert ranked.schema == by_text.schema
    assert sorted(ranked.to_pylist(), key=str) == sorted(by_text.to_pylist(), key=str)


def test_a_group_s_ends_are_its_lowest_and_highest_seq():
    dml = slice_of(
        [("a", "k1", [5, 0, 2]), ("a", "k1", [5, 0, 10]), ("a", "k1", [4, 9, 9]), ("b", "k1", [1, 1, 1])]
    )
    ends = {r["database"]: (r["seq_text_min"], r["seq_text_max"]) for r in type_counts(dml).to_pylist()}
    assert [int(p) for p in ends["a"][0].split(".")] == [4, 9, 9]
    assert [int(p) for p in ends["a"][1].split(".")] == [5, 0, 10]
    assert ends["b"][0] == ends["b"][1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.lists(st.one_of(st.integers(-5, 2**63 - 1), st.none()), max_size=4))),
    st.integers(0, 2),
)
def test_seq_texts_are_model_seq_text(generated, start):
    """The vectorized seq texts (Arrow: cast, ASCII pad, join) are ``model.seq_text`` of each row, a NULL
    part as 0, a negative one as 0, a NULL row as an empty seq (""); sliced arrays too."""
    array = pa.array([[1]] * start + generated, pa.list_(pa.int64())).slice(start)
    expected = [seq_text([p or 0 for p in row or []]) for row in generated]
    assert seq_texts(array).to_pylist() == expected


def test_column_sets_count_a_table_s_distinct_columns_not_their_order_or_types():
    """``decode.column_sets`` (Engine._typing's test for a column added or dropped within a batch): maps of
    the same columns in another order or with other types are one set; a map typing no column is none."""

    def part(keys: list[str | None], table: str = "t") -> pa.Table:
        n = len(keys)
        return pa.table(
            {
                "database": ["d"] * n,
                "schema": pa.nulls(n, pa.string()),
                "table": [table] * n,
                "type_key": keys,
            }
        )

    one = part(["id\x1fc\x1eint\x1fint", "c\x1fid\x1ebigint\x1fint", "\x1e", None])
    assert decode.column_sets([one]) == {("d", None, "t"): 1}
    added = part(["id\x1fc\x1fe\x1eint\x1fint\x1ftext"])
    assert decode.column_sets([one, added, part(["id\x1eint"], "u")]) == {
        ("d", None, "t"): 2,
        ("d", None, "u"): 1,
    }


span_rows = st.lists(
    st.tuples(
        st.sampled_from(["shop", "crm"]),
        st.sampled_from([None, "public"]),
        st.sampled_from(["orders", "items"]),
        st.sampled_from(["id\x1ename", "id\x1fname\x1ebigint\x1ftext"]),
        st.text("0123456789.", min_size=1, max_size=6),
        st.text("0123456789.", min_size=1, max_size=6),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(span_rows, min_size=0, max_size=5))
def test_a_task_s_type_counts_compacted_merge_as_they_were(parts):
    """``decode.compact_types`` (a task's slices' type maps as one row per table and map, so that a task
    over many tables does not send a row per table and slice): what the driver merges of it
    (``merge_types``) and the column sets it counts are those of the parts."""
    # a part is one slice's type_counts: a row per table and map
    parts = [list({r[:4]: r for r in part}.values()) for part in parts]
    tables = [
        pa.table(
            {
                name: pa.array([r[i] for r in part], pa.string())
                for i, name in enumerate(
                    ["database", "schema", "table", "type_key", "seq_text_min", "seq_text_max"]
                )
            }
        )
        for part in parts
    ]
    compacted = decode.compact_types(tables)
    assert len(compacted) <= 1
    assert decode.merge_types(compacted) == decode.merge_types(tables)
    assert decode.column_sets(compacted) == decode.column_sets(tables)
    if compacted:
        keys = {(r[0], r[1], r[2], r[3]) for part in parts for r in part}
        assert compacted[0].num_rows == len(keys)


group_rows = st.lists(
    st.tuples(
        st.sampled_from(["shop", None]),
        st.sampled_from(["orders", "items", None]),
        st.sampled_from(["insert", "update", "filtered"]),
        st.booleans(),
        st.sampled_from(["id", "id\x1fline", None]),
        st.integers(0, 1000),
        st.integers(0, 1000),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(group_rows, min_size=0, max_size=5))
def test_a_task_s_group_counts_compacted_merge_as_they_were(parts):
    """``decode.compact_groups``: the batch summary the driver makes of it (``merge_groups``: events,
    records and the longest key per table, op and outcome) is that of the parts."""
    tables = [
        pa.table(
            {
                "database": pa.array([r[0] for r in part], pa.string()),
                "schema": pa.nulls(len(part), pa.string()),
                "table": pa.array([r[1] for r in part], pa.string()),
                "op": pa.array([r[2] for r in part], pa.string()),
                "ok": pa.array([r[3] for r in part], pa.bool_()),
                "pk": pa.array([r[4] for r in part], pa.string()),
                "first_sum": pa.array([r[5] for r in part], pa.int64()),
                "first_count": pa.array([r[6] for r in part], pa.int64()),
            }
        )
        for part in parts
    ]
    compacted = decode.compact_groups(tables)
    assert len(compacted) <= 1

    def summary(parts):  # (the order of merge_groups' rows follows the parts')
        return sorted(decode.merge_groups(parts), key=repr)

    assert summary(compacted) == summary(tables)
