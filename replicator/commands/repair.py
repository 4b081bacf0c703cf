"""``replicator repair``: rebuild mirrors that lost commits (a newest Delta log file deleted by hand, a
restore of an older copy) from the change log, where every event of every applied batch is.

The mirror start and each batch stop on such a mirror (commands.preflight, TableApplier.check_behind):
its log holds an older batch than the registry recorded as applied to it. Repair replays the table's
change-log events through the engine, as ``replicator replay`` does (a replay to now equals the live
mirror), into a folder of the job's state, then overwrites the mirror with the result in one commit that
carries the app transaction of the batch the registry recorded, so the job goes on from there. Tombstones,
the registry and history tables are the job's own and stay as they are (they were written after the lost
commit). A table renamed from another name needs both names in ``--tables`` (its earlier events are under
the old name in the change log).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from replicator import paths
from replicator.commands.preflight import Behind, behind_mirrors
from replicator.commands.replay import ReplayError, replay
from replicator.config import JobConfig
from replicator.logging import get_logger
from replicator.sinks.base import Txn
from replicator.state import State
from replicator.storage import location, remove_tree

log = get_logger("replicator.commands.repair")


@dataclass(frozen=True)
class Repaired:
    table: str
    rows: int
    batch: int


def repair(config: JobConfig, tables: str) -> list[Repaired]:
    """Rebuild the mirrors matching ``tables`` (a glob on ``database.table``) that are behind; the others
    are left alone. Raises ReplayError when none is behind or the change log cannot rebuild them."""
    from deltalake import DeltaTable

    from replicator.sinks.delta_rs import read_table

    if not config.changelog.enabled:
        raise ReplayError("repair rebuilds from the change log, and changelog.enabled is off for this job")

    def wanted(b: Behind) -> bool:
        t = b.state
        return fnmatchcase(f"{t.database}.{t.table}", tables) or fnmatchcase(b.name, tables)

    chosen = [b for b in behind_mirrors(config) if wanted(b)]
    if not chosen:  # every matching mirror up to date: nothing to repair, which is no error (exit 0)
        return []
    state = State.of(config)
    registry, writer = state.tables(), state.writer
    out = location(config.state.path) / "tmp" / f"repair-{uuid.uuid4().hex}"
    done = []
    try:
        # every event of the tables: a cut after any event time (events without one are kept by replay)
        replay(config, out, as_of="9999-12-31T00:00:00Z", tables=tables)
        from replicator.spark import writer_session

        writer_session(config)  # the overwrite below, through Spark for a delta-spark job
        for item in chosen:
            name, known = item.name, item.state
            assert known.last_batch is not None and known.last_app is not None
            table = (known.database, known.schema, known.table)
            rebuilt = paths.table_path(out, table)  # where replay's engine put it (names encoded)
            if not DeltaTable.is_deltatable(str(rebuilt)):
                raise ReplayError(
                    f"{name}: the change log holds none of its events; restore its log files instead"
                )
            data = read_table(DeltaTable(str(rebuilt)))  # (a mirror with deletion vectors: applied)
            # An overwrite replaces every row: only this table's mirror under target.path.
            state.check_mirror(table, known.mirror, "repair", registry)
            drop_orphan_checksums(known.mirror)
            writer(known.mirror).overwrite(data, Txn(known.last_app, known.last_batch))
            log.warning(
                "mirror rebuilt from the change log", table=name, rows=data.num_rows, batch=known.last_batch
            )
            done.append(Repaired(name, data.num_rows, known.last_batch))
    finally:
        remove_tree(out)
    return done


def drop_orphan_checksums(table: str) -> None:
    """Remove the checksum files of commits no longer in a local table's log: Delta's ``<version>.crc`` and
    Hadoop's hidden ``.<version>.json.crc``, which a commit deleted by hand leaves behind (a delta-spark
    mirror has both). Spark's local file system checks the new commit of that version against the old
    checksum and fails the repair's overwrite (ChecksumException)."""
    log_dir = Path(table) / "_delta_log"
    if "://" in table or not log_dir.is_dir():
        return
    for entry in log_dir.iterdir():
        version = entry.name.lstrip(".").split(".", 1)[0]
        if entry.name.endswith(".crc") and version.isdigit() and not (log_dir / f"{version}.json").exists():
            entry.unlink(missing_ok=True)
