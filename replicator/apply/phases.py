"""Table phases (full load, then incremental) and the snapshot bulk-append path.

A table walks ``snapshot_schema`` (INIT_DDL or a snapshot's schema seen) -> ``snapshot_loading`` (snapshot
rows: DRS INIT, Debezium ``r``; ``snapshot_rows`` counts them) -> ``snapshot_done`` (the loader moved on: a
micro-batch without its snapshot rows, or ``replicator bootstrap`` finished it) -> ``incremental`` (its
first non-snapshot event). A table first seen with incremental events starts ``incremental``.

While a table is in a snapshot phase and its batch holds no incremental event, its snapshot rows are
appended (no MERGE scan) when none of their keys is in the mirror yet; a key already there (a redelivered
message) sends the whole part through the guarded MERGE, so the append never duplicates a row. Appends
are made only by the table's last commit of the batch, which carries the app transaction: a replayed batch
skips it.

``truncate_seq`` of a table is its horizon: no event at or before it changes the mirror (a TRUNCATE, or
the declared position of a bootstrapped snapshot). Barrier events at or before it are dropped too, so that
a re-delivered TRUNCATE or an old DDL cannot undo a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replicator.apply.table import TableResult
    from replicator.model import TableId
    from replicator.state import TableState

SNAPSHOT_SCHEMA = "snapshot_schema"
SNAPSHOT_LOADING = "snapshot_loading"
SNAPSHOT_DONE = "snapshot_done"
INCREMENTAL = "incremental"
PHASES: tuple[str, ...] = (SNAPSHOT_SCHEMA, SNAPSHOT_LOADING, SNAPSHOT_DONE, INCREMENTAL)
LOADING: tuple[str, ...] = (SNAPSHOT_SCHEMA, SNAPSHOT_LOADING, SNAPSHOT_DONE)
INCREMENTAL_OPS: tuple[str, ...] = ("insert", "update", "delete", "truncate")


@dataclass(frozen=True)
class Activity:
    """What one micro-batch holds for one table."""

    snapshot_rows: int = 0
    incremental: int = 0  # insert/update/delete/truncate events and DDL other than INIT_DDL
    schema: bool = False  # an INIT_DDL


def table_activity(groups: Iterable[Any], barriers: Iterable[Mapping[str, Any]]) -> dict[TableId, Activity]:
    """Per table activity from the engine's per (table, op) summary rows and its barrier events."""
    counts: dict[TableId, dict[str, Any]] = {}
    for g in groups:
        if not g["ok"] or g["table"] is None:
            continue
        entry = counts.setdefault((g["database"], g["schema"], g["table"]), {"s": 0, "i": 0, "d": False})
        if g["op"] == "snapshot":
            entry["s"] += int(g["n"])
        elif g["op"] in INCREMENTAL_OPS:
            entry["i"] += int(g["n"])
    for b in barriers:
        entry = counts.setdefault((b["database"], b["schema"], b["table"]), {"s": 0, "i": 0, "d": False})
        if b.get("ddl_kind") == "INIT_DDL":
            entry["d"] = True
        elif b.get("op") == "ddl":
            entry["i"] += 1
    return {t: Activity(c["s"], c["i"], c["d"]) for t, c in counts.items()}


def next_phase(phase: str | None, activity: Activity) -> str:
    """The phase after a batch; ``phase`` None for a table not seen before."""
    if activity.incremental:
        return INCREMENTAL
    if phase == INCREMENTAL:
        return INCREMENTAL  # late snapshot rows after incremental events merge by seq, the phase stays
    if activity.snapshot_rows:
        return SNAPSHOT_LOADING
    if activity.schema:
        return phase if phase in (SNAPSHOT_LOADING, SNAPSHOT_DONE) else SNAPSHOT_SCHEMA
    return phase or INCREMENTAL


def bulk_load(known: TableState | None, activity: Activity | None) -> bool:
    """Whether this batch's snapshot rows of a table may be appended instead of merged."""
    if activity is None or activity.incremental or not activity.snapshot_rows:
        return False
    return known is None or known.phase in LOADING


def advance(
    state: TableState, known: TableState | None, activity: Activity | None, count: bool = True
) -> TableState:
    if activity is None:
        return state
    phase = next_phase(known.phase if known is not None else None, activity)
    rows = activity.snapshot_rows if count else 0
    return replace(state, phase=phase, snapshot_rows=state.snapshot_rows + rows)


def advance_all(
    results: Sequence[TableResult],
    registry: Mapping[TableId, TableState],
    activity: Mapping[TableId, Activity],
) -> list[TableState]:
    """The table states to save after a batch: applied tables advance their phase; a loading table the
    batch did not touch is ``snapshot_done``. A replayed table its mirror holds already (skipped) advances
    too, as the save a kill -9 prevented would have (the phase rules give the same phase again), but does
    not count its snapshot rows twice."""
    states = []
    for r in results:
        if r.state is None:
            continue
        states.append(advance(r.state, registry.get(r.table), activity.get(r.table), count=not r.skipped))
    touched = {r.table for r in results} | set(activity)
    for table, known in registry.items():
        if table not in touched and known.phase == SNAPSHOT_LOADING:
            states.append(replace(known, phase=SNAPSHOT_DONE))
    return states


def after_horizon(rows: list[dict[str, Any]], registry: Mapping[TableId, TableState]) -> list[dict[str, Any]]:
    """Barrier events newer than their table's horizon (``truncate_seq``)."""
    kept = []
    for r in rows:
        known = registry.get((r["database"], r["schema"], r["table"]))
        horizon = known.truncate_seq if known is not None else None
        if horizon and str(r.get("seq_text") or "") <= horizon:
            continue
        kept.append(r)
    return kept
