"""``decode.type_counts``: each (table, type map)'s first and last seq, by ranking the seq parts (the
decode tasks send no seq text), equal to the minimum and maximum of the seq texts."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.decode import type_counts
from replicator.dialects.events import with_seq_text

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


@settings(max_examples=200, deadline=None)
@given(rows)
def test_ranked_seqs_give_the_seq_texts_minimum_and_maximum(generated):
    dml = slice_of(generated)
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
