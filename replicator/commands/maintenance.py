"""``replicator optimize``: compact each mirror with its rows clustered by primary key, then vacuum.

MERGE rewrites whole data files (copy-on-write). A batch's key-range predicate (sinks.base.key_range)
lets it skip files whose key statistics lie outside the batch, so its cost follows the rows it touches
only while data files hold narrow key ranges. Upserts scatter new files over time; this command restores
the clustering with delta-rs' ``optimize.z_order`` on the key (a plain compaction for tables without one)
and removes files no longer referenced. Run it while the mirror job is stopped, or accept that a batch
that commits during it fails on the conflict and is applied again on restart (it is idempotent).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from replicator.config import JobConfig
from replicator.logging import get_logger
from replicator.model import table_label
from replicator.state import State

log = get_logger("replicator.commands.maintenance")


@dataclass(frozen=True)
class Optimized:
    table: str
    files_removed: int
    files_added: int
    vacuumed: int


def optimize(
    config: JobConfig,
    tables: str | None = None,
    vacuum_hours: int | None = None,
    target_size: int | None = None,
) -> list[Optimized]:
    """Cluster (z-order by key) every mirror matching the ``tables`` glob into files of about
    ``target_size`` bytes (delta-rs' default: 100 MB; smaller files make a narrow batch rewrite less);
    vacuum files older than ``vacuum_hours`` that no version needs (None: no vacuum)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from replicator.columns import ColumnMap
    from replicator.sinks.delta_rs import column_mapped, has_deletion_vectors

    state = State.of(config)
    done = []
    registry = state.tables()
    for (database, schema, name), known in sorted(registry.items(), key=lambda kv: kv[0]):
        label = table_label((database, schema, name))
        if tables is not None and not fnmatchcase(f"{database}.{name}", tables):
            continue
        if not DeltaTable.is_deltatable(known.mirror):
            continue
        # Rewrites and vacuums (deletes files): only a mirror of this job's registry under target.path.
        state.check_mirror((database, schema, name), known.mirror, "optimize", registry)
        mirror = DeltaTable(known.mirror)
        # The key's mirror columns (replicator.columns): the registry names the source's.
        names = ColumnMap(pa.schema(mirror.schema().to_arrow()))
        key = [names.assign(k) for k in known.primary_key]
        # delta-rs refuses OPTIMIZE of a column-mapped table ("not supported for write operation 'OPTIMIZE'")
        if has_deletion_vectors(mirror) or column_mapped(mirror):
            result = _optimize_with_spark(config, label, known.mirror, key, vacuum_hours)
            log.info("optimized", **result.__dict__)
            done.append(result)
            continue
        metrics: dict[str, Any] = (
            mirror.optimize.z_order(key, target_size=target_size)
            if key
            else mirror.optimize.compact(target_size=target_size)
        )
        vacuumed = 0
        if vacuum_hours is not None:
            vacuumed = len(
                DeltaTable(known.mirror).vacuum(
                    retention_hours=vacuum_hours, enforce_retention_duration=False, dry_run=False
                )
            )
        result = Optimized(
            label, int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0)), vacuumed
        )
        log.info("optimized", **result.__dict__)
        done.append(result)
    return done


def _optimize_with_spark(
    config: JobConfig, label: str, path: str, key: list[str], vacuum_hours: int | None
) -> Optimized:
    """A mirror with deletion vectors (delta-spark, ``target.deletion_vectors``), through Delta for Spark:
    OPTIMIZE (z-ordered by key) rewrites its small files, then REORG ... APPLY (PURGE) rewrites every file
    that still has a deletion vector, so the rows they mark are gone from the files; VACUUM removes the
    files (and deletion vector files) no version needs. Not delta-rs: it cannot read such a table's data
    files, and its vacuum is not proven to know deletion vector files."""
    from replicator.sinks.delta_spark import _ident
    from replicator.spark import get_spark

    spark = get_spark(config, delta_spark=True)  # (a delta-rs job's mirror with deletion vectors too)
    ref = f"delta.{_ident(path)}"
    zorder = f" ZORDER BY ({', '.join(_ident(k) for k in key)})" if key else ""
    optimized = spark.sql(f"OPTIMIZE {ref}{zorder}").collect()[0]["metrics"]
    purged = spark.sql(f"REORG TABLE {ref} APPLY (PURGE)").collect()[0]["metrics"]
    vacuumed = 0
    if vacuum_hours is not None:
        # Under Delta's default retention (7 days) only with its check off, as delta-rs' vacuum is called.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        try:
            before = _files(path)
            spark.sql(f"VACUUM {ref} RETAIN {int(vacuum_hours)} HOURS").collect()
            vacuumed = len(before - _files(path))
        finally:
            spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    return Optimized(
        label,
        int(optimized["numFilesRemoved"]) + int(purged["numFilesRemoved"]),
        int(optimized["numFilesAdded"]) + int(purged["numFilesAdded"]),
        vacuumed,
    )


def _files(path: str) -> set[str]:
    """The data and deletion vector files under a table's folder (not its log), local or in a store."""
    from replicator.storage import ObjectPath, location

    root = location(path)
    if isinstance(root, ObjectPath):
        names = (p.relative_to(root) for p, _size, _mtime in root.walk_files())
    else:
        names = (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return {n for n in names if "_delta_log" not in n.split("/") and not n.rsplit("/", 1)[-1].startswith(".")}
