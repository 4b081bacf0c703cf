"""The change log's files of a decode task (replicator.decode.ChangelogFiles): one file per (database,
table), each with that pair's events in their order, however many tables a slice holds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.decode import ChangelogFiles
from replicator.state import CHANGELOG_SCHEMA

NAMES = [("shop", "orders"), ("shop", "line\nbreak"), (None, "orders"), ("shop", None), ("crm", "orders")]


def events(pairs: list[tuple[str | None, str | None]]) -> pa.Table:
    n = len(pairs)
    columns = {f.name: pa.nulls(n, f.type) for f in CHANGELOG_SCHEMA}
    columns["database"] = pa.array([d for d, _t in pairs], pa.string())
    columns["table"] = pa.array([t for _d, t in pairs], pa.string())
    columns["op"] = pa.array([f"op{i}" for i in range(n)], pa.string())  # each event's own mark
    return pa.table(columns, schema=CHANGELOG_SCHEMA)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slices=st.lists(st.lists(st.sampled_from(NAMES), max_size=40), min_size=1, max_size=4),
    flush_rows=st.sampled_from([1, 7, 30_000]),  # every slice written at once, some kept, all kept
    rows_per_table=st.sampled_from([0, 3, 100]),  # the events a table the slices kept must hold first
    flush_bytes=st.sampled_from([1, 256 << 20]),  # ... unless they hold this many bytes
)
def test_each_pair_gets_its_own_events_in_order(
    tmp_path_factory, slices, flush_rows, rows_per_table, flush_bytes
):
    root = tmp_path_factory.mktemp("changelog")
    files = ChangelogFiles(str(root), 3, flush_rows, rows_per_table, flush_bytes)
    expected: dict[tuple[str | None, str | None], list[str]] = {}
    for number, pairs in enumerate(slices):
        table = events(pairs)
        marks = [f"{number}-{m}" for m in table["op"].to_pylist()]
        files.write(table.set_column(table.schema.get_field_index("op"), "op", pa.array(marks)))
        for pair, mark in zip(pairs, marks, strict=True):
            expected.setdefault(pair, []).append(mark)
    written = files.close()
    found = {}
    for row in written.to_pylist():
        data = pq.read_table(root / row["path"])
        assert data.num_rows == row["rows"]
        assert set(data["batch_id"].to_pylist()) == {3}
        found[(row["database"], row["table"])] = data["op"].to_pylist()
    assert found == expected
