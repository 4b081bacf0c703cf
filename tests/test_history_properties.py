"""The history table equals the reference model (tests/history_model.py), through the real engine.

As for mirrors (tests/test_properties.py): a random workload (tests/workload.py) encoded by a dialect,
delivered in a random order with some records delivered twice, cut into micro-batches. History needs every
event, so reordering across batches exercises the late-event path (an event inserted at its place, its
neighbours' bounds corrected) and redelivery the deduplication. Encoders carrying DDL get ADD / DROP COLUMN
and RENAME TABLE too (``schema_evolution: evolve``). The current versions must also equal the mirror.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import Runner, delta_table, job, write_jsonl
from tests.history_model import History, history
from tests.model import KEY, replay, scaled
from tests.test_properties import cases, ddl_case, mirror_rows
from tests.workload import ENCODERS, RENAMED, TABLE, Encoder, deliveries, job_overrides, workloads

SPARK_EXAMPLES = settings().max_examples if settings._current_profile == "soak" else 8

# Encoders whose event time is the statement's commit time in milliseconds (CKafka's TIME has seconds).
BY_NAME = {e.name: e for e in ENCODERS}
HISTORY_ENCODERS = ["canal-json", "drs-json", "debezium"]


def history_rows(target: Path, encoder: Encoder, table: str) -> list[dict[str, Any]]:
    path = target / encoder.database / f"{table}__history"
    if not path.exists():
        return []
    rows = sorted(delta_table(path, cdc=True).to_pylist(), key=lambda r: (r[KEY], r["_cdc_seq"]))
    out = []
    for r in rows:
        data = encoder.logical({k: v for k, v in r.items() if not k.startswith("_cdc_")})
        out.append(
            {**data, **{k: r[k] for k in ("_cdc_valid_from", "_cdc_valid_to", "_cdc_current", "_cdc_op")}}
        )
    return out


def run(spark, root: Path, encoder: Encoder, statements, plan, tables: dict[str, Any]) -> Runner:
    """Deliver the encoded records following ``plan`` (record indexes per micro-batch)."""
    overrides = job_overrides([encoder])
    overrides["tables"] = {**overrides["tables"], **tables}
    config = job(root, changelog={"enabled": False}, schema_evolution="evolve", **overrides)
    runner = Runner(spark, config)
    records = [text for text, _keys in encoder.encode(statements)]
    for b, batch in enumerate(plan):
        runner.batch(write_jsonl(root / f"in-{b}" / "m.jsonl", [records[i] for i in batch]).parent)
    return runner


def check(spark, root: Path, encoder: Encoder, statements, plan, track: list[str] | None = None) -> None:
    overrides: dict[str, Any] = {"history": [f"{encoder.database}.*"]}
    if track is not None:
        overrides["history_track"] = {f"{encoder.database}.*": track}
    runner = run(spark, root, encoder, statements, plan, overrides)
    model: History = history(statements, track)
    target = Path(runner.config.target.path)
    assert scaled(history_rows(target, encoder, model.name)) == scaled(model.sorted()), encoder.name
    other = RENAMED if model.name == TABLE else TABLE
    assert not (target / encoder.database / f"{other}__history").exists()
    current = [
        {k: v for k, v in r.items() if not k.startswith("_cdc_")}
        for r in history_rows(target, encoder, model.name)
        if r["_cdc_current"]
    ]
    assert (
        scaled(current)
        == scaled(mirror_rows(runner, encoder, model.name))
        == scaled(replay(statements).sorted_rows())
    )


@pytest.mark.parametrize("name", HISTORY_ENCODERS)
@settings(max_examples=SPARK_EXAMPLES)
@given(data=st.data())
def test_history_equals_model(spark, tmp_path_factory, name, data):
    encoder = BY_NAME[name]
    statements, plan = data.draw(cases([encoder]))
    check(spark, tmp_path_factory.mktemp("hist"), encoder, statements, plan)


@settings(max_examples=SPARK_EXAMPLES)
@given(data=st.data())
def test_tracked_history_equals_model(spark, tmp_path_factory, data):
    """Tracked columns, delivered in order (batch splits and redelivery): a late event inside a version
    updated in place cannot recover the values it had before (docs/history.md)."""
    encoder = BY_NAME["canal-json"]
    statements = data.draw(workloads())
    n = len(encoder.encode(statements))
    plan = data.draw(deliveries(n, reorder=False))
    check(spark, tmp_path_factory.mktemp("track"), encoder, statements, plan, track=["amount", "flag"])


@pytest.mark.parametrize("name", ["canal-json", "drs-json"])
def test_schema_changes_history_equals_model(spark, tmp_path, name):
    """The fixed DDL workload (ADD COLUMN, DROP COLUMN, RENAME TABLE), whatever hypothesis draws."""
    encoder = BY_NAME[name]
    statements, plan = ddl_case([encoder])
    assert {s.kind for s in statements} >= {"add_column", "drop_column", "rename_table"}
    check(spark, tmp_path, encoder, statements, plan)


def test_a_late_event_before_a_truncate_meets_it_after_a_rename(spark, tmp_path):
    """Found by the widened workloads: batch 0 holds only a TRUNCATE (the name has no history table yet,
    only the truncate's marker); batch 1 brings the insert that preceded it, late, and a RENAME. The
    marker moves with the rename, so the late insert's version is closed by the truncate."""
    import datetime as dt
    from decimal import Decimal

    from tests.model import Op, Statement

    def row(i: int) -> dict[str, Any]:
        return {"id": i, "name": "", "amount": Decimal("0.00"), "ts": dt.datetime(2000, 1, 1), "flag": 0}

    t = 1_700_000_000_000
    statements = [
        Statement("insert", (Op("insert", after=row(102)),), t),
        Statement("truncate", (), t),
        Statement("insert", (Op("insert", after=row(7)),), t),
        Statement("rename_table", (), t, table=RENAMED),
    ]
    check(spark, tmp_path, BY_NAME["canal-json"], statements, [[1], [2, 0, 3]])
