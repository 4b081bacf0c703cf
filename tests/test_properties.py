"""The mirror equals the reference model, through the real engine (Spark, Delta), for every dialect encoding.

Each example: a random workload (tests/workload.py), encoded by every encoder into its own database,
delivered in a random order, with some records delivered twice, cut into micro-batches; then every mirror
must equal :func:`tests.model.replay` of the workload. All encoders give a total order per key, so any
reordering must converge. Example counts: few in CI (each example costs Spark jobs), many under
``HYPOTHESIS_PROFILE=soak`` (``make soak``).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import Runner, job, write_jsonl
from tests.model import KEY, Op, Statement, replay
from tests.workload import ENCODERS, TABLE, Encoder, deliveries, job_overrides, workloads

SPARK_EXAMPLES = settings().max_examples if settings._current_profile == "soak" else 2

# One job per encoding, its dialect pinned: `dialect: auto` would be cheaper in batches but its Spark plan
# holds every detectable dialect's decoder, which costs more than the batches it saves.
GROUPS = {e.name: [e] for e in ENCODERS}


def mirror_rows(runner: Runner, encoder: Encoder) -> list[dict[str, Any]]:
    path = Path(runner.config.target.path) / encoder.database / TABLE
    if not path.exists():
        return []
    return sorted((encoder.logical(r) for r in runner.mirror(encoder.database, TABLE)), key=lambda r: r[KEY])


def run(
    spark, root: Path, encoders: list[Encoder], statements: list[Statement], plan: list[list[int]]
) -> Runner:
    """Deliver the records of ``statements`` (the same record order for every encoder: index i is the i-th
    record of each encoding) following ``plan`` (lists of record indexes, one per micro-batch)."""
    runner = Runner(spark, job(root, changelog={"enabled": False}, **job_overrides(encoders)))
    encoded = [[text for text, _keys in e.encode(statements)] for e in encoders]
    for b, batch in enumerate(plan):
        lines = [records[i] for records in encoded for i in batch if i < len(records)]
        runner.batch(write_jsonl(root / f"in-{b}" / "m.jsonl", lines).parent)
    return runner


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Statement], list[list[int]]]:
    statements = draw(workloads())
    # Plan over the longest encoding (one record per row); shorter encodings skip indexes they lack.
    n = max(len(e.encode(statements)) for e in ENCODERS)
    return statements, draw(deliveries(n))


@pytest.mark.parametrize("group", sorted(GROUPS))
@settings(max_examples=SPARK_EXAMPLES)
@given(case=cases())
def test_mirror_equals_model(spark, tmp_path_factory, group, case):
    statements, plan = case
    runner = run(spark, tmp_path_factory.mktemp("prop"), GROUPS[group], statements, plan)
    expected = replay(statements).sorted_rows()
    for encoder in GROUPS[group]:
        assert mirror_rows(runner, encoder) == expected, encoder.name


# ---- one fixed workload in every dialect ----------------------------------------------------------------
def _row(i: int, name: Any, amount: Any, ts: Any, flag: Any) -> dict[str, Any]:
    return {"id": i, "name": name, "amount": amount, "ts": ts, "flag": flag}


def fixed_workload() -> list[Statement]:
    """Inserts, updates, deletes, a re-insert, a key change, NULLs and every mapped type."""
    a = _row(1, "小春😀", Decimal("-12.34"), dt.datetime(2024, 2, 29, 23, 59, 59, 999000), -128)
    b = _row(2, "", Decimal("0.00"), dt.datetime(1969, 12, 31, 23, 59, 59, 500000), 127)
    c = _row(3, None, None, None, None)
    a2 = {**a, "name": None, "amount": Decimal("99999999.99")}
    b2 = {**b, KEY: 4}
    c2 = _row(3, "back", Decimal("-0.01"), dt.datetime(1970, 1, 1), 0)
    t = 1_700_000_000_000
    return [
        Statement("insert", (Op("insert", after=a), Op("insert", after=b), Op("insert", after=c)), t),
        Statement("update", (Op("update", before=a, after=a2),), t + 1),
        Statement("delete", (Op("delete", before=c),), t + 1),
        Statement("update", (Op("update", before=b, after=b2),), t + 1000),
        Statement("insert", (Op("insert", after=c2),), t + 2000),
    ]


def test_every_dialect_gives_the_same_mirror(spark, tmp_path):
    from chispa import assert_df_equality

    statements = fixed_workload()
    expected = replay(statements).sorted_rows()
    assert [r[KEY] for r in expected] == [1, 3, 4]
    mirrors: dict[str, pa.Table] = {}
    logical: dict[str, list[dict[str, Any]]] = {}
    for name, group in GROUPS.items():
        runner = run(spark, tmp_path / name, group, statements, [list(range(100))])
        for e in group:
            logical[e.name] = mirror_rows(runner, e)
            mirrors[e.name] = _mirror_table(runner, e)
    for name in logical:
        assert logical[name] == expected, name
    # Typed dialects must produce the very same table, types included; the others (no or bare types on
    # the wire: DRS `decimal`, Debezium's INT16 for TINYINT, text) the same values read with those types.
    reference = spark.createDataFrame(mirrors["canal-json"])
    typed = [n for n, t in mirrors.items() if t.schema == mirrors["canal-json"].schema]
    assert set(typed) >= {"canal-json", "cloudcanal-json", "river-canal"}, typed
    for name in typed:
        assert_df_equality(reference, spark.createDataFrame(mirrors[name]))
    schema = mirrors["canal-json"].schema
    for rows in logical.values():
        assert_df_equality(reference, spark.createDataFrame(pa.Table.from_pylist(rows, schema)))


def _mirror_table(runner: Runner, encoder: Encoder) -> pa.Table:
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(runner.config.target.path) / encoder.database / TABLE)).to_pyarrow_table()
    table = table.drop_columns([c for c in table.column_names if c.startswith("_cdc_")])
    return table.sort_by(KEY)
