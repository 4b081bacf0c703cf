"""Phases of a table through a DRS full sync then incremental stream, through the real engine: INIT_DDL,
INIT rows appended in bulk, overlap with incremental events resolved by sequence."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from replicator.apply.phases import Activity, next_phase
from replicator.commands.status import collect_status
from tests.drs import dml, init_ddl, item, reference
from tests.helpers import Runner, job


@pytest.fixture
def runner(spark, tmp_path):
    return Runner(spark, job(tmp_path, source={"dialect": "drs-json"}))


def phase(runner, table="items"):
    states = {t[2]: s for t, s in runner.engine.state.tables().items()}
    return states[table].phase, states[table].snapshot_rows


def operations(runner, table="items"):
    path = f"{runner.config.target.path}/shop/{table}"
    return [h["operation"] for h in reversed(DeltaTable(path).history())]


def rows(runner):
    return {r["id"]: r for r in runner.mirror("shop", "items")}


def test_drs_full_sync_then_incremental_walks_the_phases(runner, tmp_path):
    sent: list[dict] = []

    def batch(messages, batch_id=None):
        sent.extend(messages)
        return runner.messages(tmp_path, messages, batch_id)

    batch([init_ddl()])
    assert phase(runner) == ("snapshot_schema", 0)

    first = [dml("INIT", [item(i, f"s{i}", i)], id_=10 + i) for i in range(1, 5)]
    batch(first)
    assert phase(runner) == ("snapshot_loading", 4)
    assert operations(runner)[-1] == "WRITE"  # appended, not merged
    assert rows(runner) == reference(sent)

    # The same batch id again (a restart replays it): the table holds it already, nothing twice.
    runner.messages(tmp_path, first, batch_id=1)
    assert len(runner.mirror("shop", "items")) == 4

    # Re-delivered snapshot rows in a new batch: a key is already there, so the part is MERGEd.
    batch(
        [dml("INIT", [item(5, "s5", 5), item(6, "s6", 6)], id_=15), dml("INIT", [item(2, "s2", 2)], id_=12)]
    )
    assert phase(runner) == ("snapshot_loading", 7)
    assert operations(runner)[-1] == "MERGE"
    assert rows(runner) == reference(sent)

    batch([dml("INSERT", [item(1, "other")], id_=90, table="other")])  # the loader moved on
    assert phase(runner) == ("snapshot_done", 7)
    assert phase(runner, "other") == ("incremental", 0)

    # Incremental events, overlapping snapshot rows: an older snapshot image never wins over a newer change.
    batch(
        [
            dml("UPDATE", [item(1, "u1", 100)], old=[item(1, "s1", 1)], id_=100),
            dml("DELETE", [item(3, "s3", 3)], id_=101),
            dml("INSERT", [item(7, "i7", 7)], id_=102),
            dml("INIT", [item(1, "s1-late", 1)], id_=50),
            dml("INIT", [item(8, "s8", 8)], id_=60),
        ]
    )
    assert phase(runner) == ("incremental", 9)
    assert rows(runner) == reference(sent)

    # Snapshot rows arriving after the incremental phase began: merged by sequence, no resurrection.
    batch(
        [
            dml("INIT", [item(3, "s3-late", 3)], id_=13),
            dml("INIT", [item(7, "s7", 7)], id_=19),
            dml("UPDATE", [item(2, "u2", 2)], old=[item(2, "s2", 2)], id_=103),
        ]
    )
    assert phase(runner)[0] == "incremental"
    assert operations(runner)[-1] == "MERGE"
    assert rows(runner) == reference(sent)
    assert sorted(rows(runner)) == [1, 2, 4, 5, 6, 7, 8]

    status = {t["table"]: t for t in collect_status(runner.config)["tables"]}
    assert status["shop.items"]["phase"] == "incremental"
    assert status["shop.items"]["rows"] == 7
    assert status["shop.items"]["snapshot_rows"] == 11


def test_next_phase_rules():
    assert next_phase(None, Activity(schema=True)) == "snapshot_schema"
    assert next_phase(None, Activity(snapshot_rows=3)) == "snapshot_loading"
    assert next_phase("snapshot_loading", Activity(schema=True)) == "snapshot_loading"
    assert next_phase("snapshot_done", Activity(snapshot_rows=1)) == "snapshot_loading"
    assert next_phase("snapshot_loading", Activity(snapshot_rows=1, incremental=1)) == "incremental"
    assert next_phase("incremental", Activity(snapshot_rows=5)) == "incremental"
    assert next_phase(None, Activity(incremental=2)) == "incremental"


def test_a_batch_applied_again_gives_the_same_phase():
    """A batch replayed after a kill -9 (its tables skipped: the mirror holds it) advances the phase as the
    registry save the kill prevented would have: the rules give the phase they gave the first time."""
    from itertools import product

    from replicator.apply.phases import INCREMENTAL, SNAPSHOT_DONE, SNAPSHOT_LOADING, SNAPSHOT_SCHEMA

    for phase, (rows, incremental, schema) in product(
        [None, SNAPSHOT_SCHEMA, SNAPSHOT_LOADING, SNAPSHOT_DONE, INCREMENTAL],
        product([0, 2], [0, 1], [False, True]),
    ):
        activity = Activity(snapshot_rows=rows, incremental=incremental, schema=schema)
        once = next_phase(phase, activity)
        assert next_phase(once, activity) == once, (phase, activity)


def test_a_skipped_table_advances_its_phase_without_counting_its_rows_again():
    from replicator.apply.phases import INCREMENTAL, SNAPSHOT_LOADING, advance_all
    from replicator.apply.table import TableResult
    from replicator.state import TableState

    table = ("shop", None, "items")
    known = TableState(*table, mirror="m", phase=SNAPSHOT_LOADING, snapshot_rows=10)
    activity = {table: Activity(snapshot_rows=5, incremental=2)}
    applied = advance_all([TableResult(table, state=known)], {table: known}, activity)
    skipped = advance_all([TableResult(table, state=known, skipped=True)], {table: known}, activity)
    assert [(s.phase, s.snapshot_rows) for s in applied] == [(INCREMENTAL, 15)]
    assert [(s.phase, s.snapshot_rows) for s in skipped] == [(INCREMENTAL, 10)]
