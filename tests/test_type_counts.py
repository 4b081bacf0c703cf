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
