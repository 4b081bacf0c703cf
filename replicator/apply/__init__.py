"""Apply: a batch's folded changes -> the mirror tables (driver side, one ``TableApplier`` per table).

Inside the package, imports go one way (tests/test_layout.py): documents, declared_types, tombstones ->
table (the applier: typing, MERGE, snapshot append) -> barriers (keys and order of DDL/TRUNCATE) ->
schema (what a DDL does to a mirror) -> phases (snapshot and load phases) -> history (history tables).
"""

from replicator.apply.barriers import declared_keys, inherited_key, plan_barriers, rename_units
from replicator.apply.declared_types import with_declared_types
from replicator.apply.history import record_history
from replicator.apply.phases import advance_all, after_horizon, bulk_load, table_activity
from replicator.apply.schema import barrier_handler
from replicator.apply.table import DeadRow, TableApplier, TableBatch, TableResult
from replicator.apply.tombstones import expire_tombstones

__all__ = [
    "DeadRow",
    "TableApplier",
    "TableBatch",
    "TableResult",
    "advance_all",
    "after_horizon",
    "barrier_handler",
    "bulk_load",
    "declared_keys",
    "expire_tombstones",
    "inherited_key",
    "plan_barriers",
    "record_history",
    "rename_units",
    "table_activity",
    "with_declared_types",
]
