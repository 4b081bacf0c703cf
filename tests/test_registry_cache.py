"""The registry as a batch saved it is the registry a read gives (state.State.tables after save_tables),
without reading every table ever seen again; another writer's commit in between is read."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from replicator.sinks.delta_rs import DeltaRsWriter, handle
from replicator.state import State, TableState


def state(tmp_path) -> State:  # type: ignore[no-untyped-def]
    return State(tmp_path / "state", "job", DeltaRsWriter, tmp_path / "lake")


def table(tmp_path, name: str, schema: str | None = None, **values) -> TableState:  # type: ignore[no-untyped-def]
    return TableState(
        "shop", schema, name, mirror=str(tmp_path / "lake" / "shop" / name), primary_key=("id",), **values
    )


def test_saved_states_are_what_a_read_gives(tmp_path):
    mine = state(tmp_path)
    first = [table(tmp_path, "a"), table(tmp_path, "b", "public", last_seq="00000001")]
    mine.save_tables(first, 0)
    assert mine.tables() == state(tmp_path).tables()  # (a new registry: read once)
    seen = mine.tables()
    later = [
        replace(seen[("shop", None, "a")], last_seq="00000009", last_event_time=dt.datetime(2024, 1, 2)),
        table(tmp_path, "c", snapshot_rows=5),
    ]
    mine.save_tables(later, 1)
    registry = handle(str(tmp_path / "state" / "tables"))
    assert mine._registry_read is not None
    assert mine._registry_read[0] == (registry.metadata().id, registry.version())  # kept, not read again
    assert mine.tables() == state(tmp_path).tables()
    assert mine.tables()[("shop", None, "a")].last_seq == "00000009"
    assert set(mine.tables()) == {("shop", None, "a"), ("shop", "public", "b"), ("shop", None, "c")}


def test_another_writers_commit_is_read(tmp_path):
    mine, other = state(tmp_path), state(tmp_path)
    mine.save_tables([table(tmp_path, "a")], 0)
    mine.tables()
    other.save_tables([table(tmp_path, "b")], 1)  # (another process: a dead-letter retry)
    mine.save_tables([table(tmp_path, "c")], 2)
    assert set(mine.tables()) == {("shop", None, "a"), ("shop", None, "b"), ("shop", None, "c")}
    assert mine.tables() == state(tmp_path).tables()
