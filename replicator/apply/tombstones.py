"""Tombstone expiry: a delete's tombstone guards its key for ``tombstones.retention`` of event time.

Every ``tombstones.expire_every_batches`` batches, each table applied in the batch drops the tombstones whose
delete is older than ``reference - retention``, where ``reference`` is the newest event time applied to the
table, capped at the wall clock (a message stamped in the future must not expire every tombstone at once).
The guarantee this gives is in docs/operations.md ("Tombstones").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from replicator.config import TombstoneConfig
from replicator.logging import get_logger
from replicator.model import table_label
from replicator.state import State, TableState

log = get_logger("replicator.apply.tombstones")

DELETED_AT = "_cdc_deleted_at"  # = apply.TOMBSTONE_DELETED_AT


def cutoff(table: TableState, retention: dt.timedelta, now: dt.datetime | None = None) -> dt.datetime | None:
    """Tombstones of deletes older than this may go; None while the table has seen no event time."""
    if table.last_event_time is None:
        return None
    newest = table.last_event_time
    if newest.tzinfo is None:
        newest = newest.replace(tzinfo=dt.UTC)
    return min(newest, now or dt.datetime.now(dt.UTC)) - retention


def expire_tombstones(
    state: State, tables: Iterable[TableState], config: TombstoneConfig, batch_id: int
) -> dict[str, int]:
    """Drop expired tombstones of ``tables`` when ``batch_id`` is an expiry batch; returns the counts."""
    if batch_id % config.expire_every_batches:
        return {}
    expired: dict[str, int] = {}
    for table in tables:
        limit = cutoff(table, config.retention)
        tombs = state.tombstones(table.id)
        if limit is None or not tombs.exists():
            continue
        n = tombs.delete_where(f"{DELETED_AT} < '{limit.astimezone(dt.UTC).isoformat()}'", None)
        if n:
            name = table_label(table.id)
            expired[name] = n
            log.info("tombstones expired", table=name, count=n, older_than=limit.isoformat())
    return expired
