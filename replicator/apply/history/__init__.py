"""History tables (SCD type 2): every change of a mirrored key kept as a version with validity bounds.

Beside a mirror ``<target.path>/<database>/<table>``, its history ``<table>__history`` holds the mirror's
data columns and ``_cdc_valid_from`` / ``_cdc_valid_to`` (event times of the changes that opened and closed
the version, UTC), ``_cdc_current``, ``_cdc_op`` and ``_cdc_seq`` of the opening change (docs/history.md).

History needs every event of a batch, not the folded net change. Per table and batch (after the mirror's
apply, whose final schema types the values exactly like the mirror, ``TableApplier.typed``):

1. the batch's events of the keys they touch are merged with what is stored for those keys: the versions
   (each one the event that opened it) and the *markers* (the events that opened no version: deletes,
   updates of untracked columns; TRUNCATEs, which concern every key), deduplicated by ``seq``;
2. each touched key's chain of versions is recomputed in ``seq`` order, so a late event lands at its place
   and its neighbours' bounds follow, and a redelivered event changes nothing;
3. new markers are appended (their own table under ``<state.path>/history/``, deduplicated on read), then
   one MERGE restricted to the touched keys replaces those keys' changed versions, carrying the batch's
   app transaction: a replayed batch finds it and skips the table.

A TRUNCATE closes every open version, so a batch that brings a new one recomputes every key (rare).
Document collections (drs-mongo patches) replay each touched document's changes by source position in
step 2 instead (replicator.apply.history.documents).
"""

from replicator.apply.history.table import (
    HistoryTable,
    history_path,
    markers_root,
    record_history,
    seed_history,
    seed_snapshot,
)
from replicator.apply.history.versions import HISTORY_FIELDS, Event, Version, chain, change_id

__all__ = [
    "HISTORY_FIELDS",
    "Event",
    "HistoryTable",
    "Version",
    "chain",
    "change_id",
    "history_path",
    "markers_root",
    "record_history",
    "seed_history",
    "seed_snapshot",
]
