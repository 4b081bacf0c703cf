"""The mirror equals the reference model, through the real engine (Spark, Delta), for every dialect encoding.

Each example: a random workload (tests/workload.py), encoded by every encoder into its own database,
delivered in a random order, with some records delivered twice, cut into micro-batches; then every mirror
must equal :func:`tests.model.replay` of the workload. All encoders give a total order per key, so any
reordering must converge, except across a schema change: a DDL record is a barrier that no record crosses
(tests/workload.py ``deliveries``). Encoders whose format carries DDL (canal-json, cloudcanal-json, drs-json)
get workloads with ADD COLUMN / DROP COLUMN / RENAME TABLE, mirrored under ``schema_evolution: evolve`` (the
mirror's schema is the source's: a dropped column is gone); the others get DML-only workloads. After a
rename the mirror is under the new name only. Example counts: 10 per encoding in CI,
many under ``HYPOTHESIS_PROFILE=soak`` (``make soak``).
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

from tests.helpers import Runner, delta_table, job, write_jsonl
from tests.model import KEY, Op, Statement, Table, replay, scaled
from tests.workload import ADDED, ENCODERS, RENAMED, TABLE, Encoder, deliveries, job_overrides, workloads

# Each example runs several micro-batches through the engine (about a second): 10 per encoding in CI.
SPARK_EXAMPLES = settings().max_examples if settings._current_profile == "soak" else 10

# One job per encoding, its dialect pinned: each decoder is exercised on its own (detection has its golden
# tests).
GROUPS = {e.name: [e] for e in ENCODERS}


def mirror_rows(runner: Runner, encoder: Encoder, table: str = TABLE) -> list[dict[str, Any]]:
    return read_rows(Path(runner.config.target.path), encoder, table)


def read_rows(target: Path, encoder: Encoder, table: str = TABLE) -> list[dict[str, Any]]:
    """The logical rows (``_cdc_*`` columns left out) of the mirror ``target/<database>/<table>``."""
    path = target / encoder.database / table
    if not path.exists():
        return []
    data = delta_table(path)
    return sorted((encoder.logical(r) for r in data.to_pylist()), key=lambda r: r[KEY])


def assert_mirror_is(target: Path, encoder: Encoder, rows: list[dict[str, Any]], model: Table) -> None:
    """``rows`` (read from the mirror of ``model.name``) equal the model's table, with its columns; no
    mirror is left under the other name of a rename."""
    assert scaled(rows) == scaled(model.sorted_rows()), encoder.name
    path = target / encoder.database / model.name
    if path.exists():
        from deltalake import DeltaTable

        fields = {
            f.name: f.type
            for f in pa.schema(DeltaTable(str(path)).schema().to_arrow())
            if not f.name.startswith("_cdc_")
        }
        assert set(fields) == set(model.columns), (encoder.name, set(fields))
        amount = fields.get("amount")
        if amount is not None and pa.types.is_decimal(amount):  # as declared: decimal(10,2)
            assert (amount.precision, amount.scale) == (10, 2), (encoder.name, amount)
    other = RENAMED if model.name == TABLE else TABLE
    assert not (target / encoder.database / other).exists(), (encoder.name, other)


def run(
    spark,
    root: Path,
    encoders: list[Encoder],
    statements: list[Statement],
    plan: list[list[int]],
    **overrides: Any,
) -> Runner:
    """Deliver the records of ``statements`` (the same record order for every encoder: index i is the i-th
    record of each encoding) following ``plan`` (lists of record indexes, one per micro-batch)."""
    overrides = {"changelog": {"enabled": False}, "schema_evolution": "evolve", **overrides}
    runner = Runner(spark, job(root, **overrides, **job_overrides(encoders)))
    encoded = [[text for text, _keys in e.encode(statements)] for e in encoders]
    for b, batch in enumerate(plan):
        lines = [records[i] for records in encoded for i in batch if i < len(records)]
        runner.batch(write_jsonl(root / f"in-{b}" / "m.jsonl", lines).parent)
    return runner


@st.composite
def cases(draw: st.DrawFn, encoders: list[Encoder]) -> tuple[list[Statement], list[list[int]]]:
    """A workload with the schema changes every one of ``encoders`` can carry, and a delivery plan."""
    ddl = frozenset.intersection(*(e.ddl for e in encoders))
    statements = draw(workloads(ddl=ddl))
    # Plan over the longest encoding (one record per row); shorter encodings skip indexes they lack. DDL
    # records are barriers (same statements, same record indexes in every DDL-carrying encoding).
    n = max(len(e.encode(statements)) for e in encoders)
    return statements, draw(deliveries(n, barriers=encoders[0].barriers(statements)))


def ddl_workload() -> list[Statement]:
    """Every schema change once (a CI example, whatever hypothesis draws): a column added then written, a
    column dropped, the table renamed, with row changes around each."""
    t = 1_700_000_000_000
    a = _row(1, "a", Decimal("1.00"), None, 1)
    b = _row(2, None, None, dt.datetime(1970, 1, 1), None)
    a2 = {**a, "name": "a2", ADDED: "n"}
    b2 = {**b, ADDED: None}
    c = {KEY: 3, "name": "c", "amount": None, "ts": None, "flag": 0, ADDED: "ü"}
    return [
        Statement("insert", (Op("insert", after=a), Op("insert", after=b)), t),
        Statement("add_column", (), t + 1, column=ADDED),
        Statement("update", (Op("update", before={**a, ADDED: None}, after=a2),), t + 1),
        Statement("drop_column", (), t + 1000, column="amount"),
        Statement("insert", (Op("insert", after={k: v for k, v in c.items() if k != "amount"}),), t + 1000),
        Statement("rename_table", (), t + 2000, table=RENAMED),
        Statement("delete", (Op("delete", before={k: v for k, v in b2.items() if k != "amount"}),), t + 2001),
    ]


def ddl_case(encoders: list[Encoder]) -> tuple[list[Statement], list[list[int]]]:
    """:func:`ddl_workload` without the changes ``encoders`` cannot carry (each carries ADD / DROP COLUMN),
    in two batches in source order with the last record delivered twice."""
    kinds = frozenset.intersection(*(e.ddl for e in encoders))
    assert {"add_column", "drop_column"} <= kinds
    statements = [s for s in ddl_workload() if not s.ddl or s.kind in kinds]
    n = max(len(e.encode(statements)) for e in encoders)
    return statements, [list(range(n // 2)), [*range(n // 2, n), n - 1]]


@pytest.mark.parametrize("group", sorted(GROUPS))
@settings(max_examples=SPARK_EXAMPLES)
@given(data=st.data())
def test_mirror_equals_model(spark, tmp_path_factory, group, data):
    encoders = GROUPS[group]
    statements, plan = data.draw(cases(encoders))
    check(spark, tmp_path_factory.mktemp("prop"), encoders, statements, plan)


@pytest.mark.parametrize("group", ["canal-json", "debezium"])
@settings(max_examples=SPARK_EXAMPLES)
@given(data=st.data())
def test_mirror_equals_model_with_batches_rewritten_in_arrow(spark, tmp_path_factory, group, data):
    """Every batch by the rewrite a large batch gets (DeltaRsWriter.rewrite_share: uniform changes into a
    full mirror), not by delta-rs's MERGE: the same mirror as the model."""
    from replicator.sinks.delta_rs import DeltaRsWriter

    encoders = GROUPS[group]
    statements, plan = data.draw(cases(encoders))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (("small_rows", 0), ("large_rows", 1), ("rewrite_share", 1e-9)):
            patch.setattr(DeltaRsWriter, name, value)
        check(spark, tmp_path_factory.mktemp("prop"), encoders, statements, plan)


@pytest.mark.parametrize("group", sorted(g for g, encoders in GROUPS.items() if encoders[0].ddl))
def test_schema_changes_mirror_equals_model(spark, tmp_path, group):
    """The fixed DDL workload, so that CI covers every schema change whatever hypothesis draws."""
    encoders = GROUPS[group]
    statements, plan = ddl_case(encoders)
    assert any(s.ddl for s in statements)
    check(spark, tmp_path, encoders, statements, plan)


def check(spark, root: Path, encoders: list[Encoder], statements, plan) -> None:
    runner = run(spark, root, encoders, statements, plan)
    model = replay(statements, policy="evolve")
    for encoder in encoders:
        rows = mirror_rows(runner, encoder, model.name)
        assert_mirror_is(Path(runner.config.target.path), encoder, rows, model)


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
        assert scaled(logical[name]) == scaled(expected), name
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
    return delta_table(Path(runner.config.target.path) / encoder.database / TABLE).sort_by(KEY)


def test_scaled_tells_decimal_scales_apart():
    """The comparison the model tests use: 1.0 and 1.00 are equal Decimals but not the same mirror value."""
    assert scaled([{"amount": Decimal("1.00")}]) != scaled([{"amount": Decimal("1.0")}])
    assert scaled([{"amount": Decimal("-0.00")}]) == scaled([{"amount": Decimal("0.00")}])
    assert scaled([{"amount": None, "id": 1}]) == [{"amount": None, "id": 1}]
