"""Engine state under ``state.path``, all Delta tables: dead letters, batch summaries, table registry
(keys, phases, positions), tombstones per mirror table, and the change log (bronze)."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from replicator import paths
from replicator.dialects.events import decoded_schema
from replicator.model import table_label
from replicator.sinks.base import MirrorWriter, Txn, WriterFactory
from replicator.storage import ObjectPath, is_uri, location, write_whole

if TYPE_CHECKING:
    from replicator.config import JobConfig
    from replicator.model import TableId


def _changelog_schema() -> pa.Schema:
    """The change log: the change-event contract (model.EVENT_COLUMNS) plus the batch id. Lists name their
    items "element", as delta-rs writes them on append: every file of the table has one physical schema."""
    fields = []
    for f in decoded_schema():
        if f.name in ("error", "raw"):
            continue
        if pa.types.is_list(f.type):
            f = pa.field(f.name, pa.list_(pa.field("element", f.type.value_type)))
        fields.append(f)
    return pa.schema([*fields, ("batch_id", pa.int64())])


CHANGELOG_SCHEMA = _changelog_schema()

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("dialect", pa.string()),
        ("database", pa.string()),
        ("table", pa.string()),
        ("error", pa.string()),
        ("raw", pa.binary()),
        ("raw_text", pa.string()),
        ("source", pa.string()),
        ("partition", pa.int64()),
        ("offset", pa.int64()),
        ("index", pa.int32()),
        ("row", pa.int32()),
    ]
)

# What a batch read, noted until it is applied (State.note_pending, Engine.recover): its files (source = the
# URI, partition = the modification time in ms, first/last NULL) or its Kafka ranges (topic, partition, the
# first and the last offset read).
MANIFEST = pa.schema(
    [("source", pa.string()), ("partition", pa.int64()), ("first", pa.int64()), ("last", pa.int64())]
)

BATCH_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("duration_ms", pa.int64()),
        ("records_in", pa.int64()),
        ("events", pa.int64()),
        ("applied", pa.int64()),
        ("filtered", pa.int64()),
        ("dead_letters", pa.int64()),
        ("tables", pa.string()),  # JSON: per table inserted/updated/deleted
    ]
)

TABLE_SCHEMA = pa.schema(
    [
        ("database", pa.string()),
        ("schema", pa.string()),
        ("table", pa.string()),
        ("mirror", pa.string()),
        ("primary_key", pa.list_(pa.field("element", pa.string()))),
        ("phase", pa.string()),
        ("dropped", pa.bool_()),
        ("truncate_seq", pa.string()),
        ("last_seq", pa.string()),
        ("last_position", pa.string()),
        ("last_event_time", pa.timestamp("us", tz="UTC")),
        ("snapshot_rows", pa.int64()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("seq_system", pa.string()),
        # The newest batch whose app transaction (last_app, last_batch) the mirror's log holds, as recorded
        # after its apply: a mirror whose log holds an older one lost commits (commands.preflight).
        ("last_batch", pa.int64()),
        ("last_app", pa.string()),
        # The newest DDL that dropped or renamed columns of the mirror (TableState.schema_seq).
        ("schema_seq", pa.string()),
        # ADD COLUMN defaults the rows older than their DDL took (TableState.fills).
        ("fills", pa.string()),
        # Columns renamed by a DDL (TableState.renames).
        ("renames", pa.string()),
    ]
)


def _normal(path: str | Path | ObjectPath) -> str:
    """A path in one spelling for comparison (local: ``..`` folded; a URI is kept normalized)."""
    return str(location(path)) if is_uri(path) else os.path.normpath(path)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class TableState:
    database: str
    schema: str | None
    table: str
    mirror: str
    primary_key: tuple[str, ...] = ()
    phase: str = "incremental"
    dropped: bool = False
    truncate_seq: str | None = None
    last_seq: str | None = None
    last_position: str | None = None
    last_event_time: dt.datetime | None = None
    snapshot_rows: int = 0
    updated_at: dt.datetime | None = None
    # The coordinate system of the table's DML seqs (meta.seq_system; "" the dialect's usual one, None not
    # known yet): a barrier of another system gets its truncate point in this one
    # (fold.arrow.delivered_after).
    seq_system: str | None = None
    last_batch: int | None = None
    last_app: str | None = None
    # The truncate point (in the table's DML system) of the newest DDL that dropped or renamed columns of the
    # mirror: a row at or before it adds no column. The columns it holds that the mirror lacks were gone by
    # then (a snapshot row delivered after the DROP COLUMN it preceded, from another topic, must not bring
    # the dropped column back).
    schema_seq: str | None = None
    # The ADD COLUMN defaults given to the rows older than their DDL (apply.table.Fill, JSON: fill_text):
    # a row older than one that arrives after it (a later batch, another topic) takes the default too.
    fills: str | None = None
    # The columns renamed under ``evolve`` (JSON: [{"old", "new", "before"}], apply.table.renamed_text): a
    # row older than a rename that arrives after it gives its old column's value to the new name.
    renames: str | None = None

    @property
    def id(self) -> TableId:
        return (self.database, self.schema, self.table)

    def row(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: its deep copy cost ~1.7 ms a table (a batch of 1,000).
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["primary_key"] = list(self.primary_key)
        return data


@dataclass
class BatchSummary:
    batch_id: int
    records_in: int = 0
    events: int = 0
    applied: int = 0
    filtered: int = 0
    dead_letters: int = 0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    duration_ms: int = 0
    phases_ms: dict[str, int] = field(default_factory=dict)


class State:
    """``target``: the job's target.path. The registry stores each mirror relative to it (a job folder
    copied elsewhere uses its own mirrors) and refuses a stored path outside it (:meth:`tables`)."""

    def __init__(
        self, root: str | Path, job: str, writer: WriterFactory, target: str | Path | None = None
    ) -> None:
        self.root = location(root)
        self.job = job
        self.writer = writer  # the mirrors' writer (the job's target.writer)
        self.target = location(target) if target is not None else None
        # The engine's own tables (registry, tombstones, change log, dead letters, batches) stay on delta-rs
        # whichever writer the mirrors use: the engine MERGEs into them with deltalake directly, and they
        # are small (a Spark job per commit would cost more than the commit).
        from replicator.sinks.delta_rs import DeltaRsWriter

        self._own: WriterFactory = DeltaRsWriter
        # Apply threads record renames in the registry mid-batch; delta-rs refuses concurrent MERGEs into
        # one table (CommitFailedError), so the registry's commits take turns.
        self._registry_lock = threading.Lock()
        self._registry_read: tuple[tuple[str, int], dict[TableId, TableState]] | None = None

    # ---- locations --------------------------------------------------------------------------------------
    @property
    def checkpoint(self) -> str:
        return str(self.root / "checkpoint")

    def table(self, name: str) -> MirrorWriter:
        return self._own(self.root / name)

    @classmethod
    def of(cls, config: JobConfig) -> State:
        from replicator.sinks import writer_factory

        return cls(config.state.path, config.name, writer_factory(config.target.writer), config.target.path)

    def tombstones(self, table: TableId) -> MirrorWriter:
        return self._own(self.table_folder("tombstones", table))

    def table_folder(self, kind: str, table: TableId) -> Path | ObjectPath:
        """A table's folder under ``state.path/<kind>`` (tombstones, history markers). One a version before
        replicator.paths made under the raw names (a table named with a ``.`` or a space) is moved to the
        encoded name the first time it is asked for."""
        base = self.root / kind
        folder = paths.table_path(base, table)
        legacy = paths.legacy_parts(table)
        if legacy is not None and not isinstance(folder, ObjectPath) and not folder.exists():
            old = base.joinpath(*legacy)
            if (old / "_delta_log").is_dir() and paths.inside(base, old):
                folder.parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, folder)
        return folder

    # ---- mirrors' paths ---------------------------------------------------------------------------------
    def mirror_path(self, table: TableId) -> str:
        """Where a table's mirror goes: ``target.path`` / its names as components (replicator.paths)."""
        assert self.target is not None, "a State without target.path maps no mirror"
        return str(paths.table_path(self.target, table))

    def _stored(self, mirror: str) -> str:
        """A mirror path as the registry keeps it: relative to target.path."""
        if self.target is None or not (os.path.isabs(mirror) or is_uri(mirror)):
            return mirror
        relative = paths.relative_under(self.target, mirror)
        if relative is None:
            raise paths.UnsafePath(f"the mirror {mirror} is not inside target.path {self.target}")
        return relative

    def _loaded(self, stored: str, table: TableId) -> str:
        """A registry path as an absolute path under target.path. A registry written before paths became
        relative holds absolute ones: those under target.path are kept (written relative at the next
        commit); one elsewhere means the state belongs to another job folder, and the job stops."""
        if self.target is None:
            return stored
        if not (os.path.isabs(stored) or is_uri(stored)):
            if not paths.safe_relative(stored):
                raise paths.StateMismatch(
                    f"{self.root / 'tables'}: the mirror of {table_label(table)} is recorded as {stored!r}, "
                    "which is not a folder under target.path; the registry was edited by hand"
                )
            return str(self.target / stored)
        if paths.relative_under(self.target, stored) is not None:
            return _normal(stored)
        raise paths.StateMismatch(
            f"state {self.root} records the mirror of {table_label(table)} at {stored}, outside "
            f"target.path {self.target}: this state was written by a job whose target was elsewhere (a "
            "copied or moved job folder, or a changed target.path). Nothing was written. Point "
            "target.path back at the folder holding these mirrors, or start this copy with a fresh "
            'state.path (docs/operations.md, "Security and trust")'
        )

    def check_mirror(
        self,
        table: TableId,
        path: str | Path,
        action: str,
        registry: dict[TableId, TableState] | None = None,
    ) -> str:
        """Before a destructive file operation (drop, move, truncate) on a mirror: ``path`` must lie under
        target.path and be this table's mirror (the registry's, or its mapped folder), and hold no other
        table's mirror; else :class:`replicator.paths.UnsafePath` and nothing is done."""
        if self.target is None:
            return str(path)
        paths.ensure_inside(self.target, path, action)
        registry = self.tables() if registry is None else registry
        known = registry.get(table)
        own = {_normal(self.mirror_path(table))}
        if known is not None:
            own.add(_normal(known.mirror))
        if _normal(path) not in own:
            raise paths.UnsafePath(
                f"refused to {action} {path}: it is not the mirror of {table_label(table)} "
                f"({' or '.join(sorted(own))})"
            )
        for other, state in registry.items():
            if other != table and paths.inside(path, state.mirror):
                raise paths.UnsafePath(
                    f"refused to {action} {path}: the mirror of {table_label(other)} lies inside it"
                )
        return str(path)

    def check_state_path(self, path: str | Path, action: str) -> str:
        """Before a destructive file operation under state.path (tombstones, history markers)."""
        return paths.ensure_inside(self.root, path, action)

    def txn(self, batch_id: int) -> Txn:
        return Txn(self.job, batch_id)

    def done(self, name: str, batch_id: int, stage: str = "") -> bool:
        version = self.table(name).applied_version(self.job + stage)
        return version is not None and version >= batch_id

    # ---- tables registry --------------------------------------------------------------------------------
    def tables(self) -> dict[TableId, TableState]:
        """The registry at its newest version (read once per version: each batch asks, most find it as
        the last batch left it)."""
        from replicator.sinks.delta_rs import handle, read_table

        writer = self.table("tables")
        if not writer.exists():
            return {}
        table = handle(writer.path)
        version = (table.metadata().id, table.version())  # (a registry made again starts over at 0)
        read = self._registry_read
        if read is not None and read[0] == version:
            return dict(read[1])
        result = self._states(read_table(table))
        self._registry_read = (version, result)
        return dict(result)

    def _states(self, rows: pa.Table) -> dict[TableId, TableState]:
        result = {}
        for row in rows.to_pylist():
            row["primary_key"] = tuple(row["primary_key"] or ())
            state = TableState(**row)
            result[state.id] = replace(state, mirror=self._loaded(state.mirror, state.id))
        return result

    def _registry_saved(self, before: tuple[str, int], after: tuple[str, int], data: pa.Table) -> None:
        """The registry as read (:meth:`tables`) brought up to date with the rows just merged, when that
        commit directly followed the version read: the next batch reads none of it again (it cost ~0.3 ms
        per table ever seen, each batch). Any other commit between (another process's) and the next
        :meth:`tables` reads it all."""
        read = self._registry_read
        if read is None or read[0] != before or after != (before[0], before[1] + 1):
            return
        if any(s == "" for s in data["schema"].to_pylist()):  # ('' and NULL are one row: read it back)
            return
        self._registry_read = (after, {**read[1], **self._states(data)})

    def save_tables(self, states: Iterable[TableState], batch_id: int) -> None:
        rows = [replace(s, updated_at=now(), mirror=self._stored(s.mirror)).row() for s in states]
        if not rows:
            return
        # A NULL schema must match a NULL schema: compare through coalesce.
        on = (
            't.database = s.database AND t."table" = s."table" '
            "AND coalesce(t.schema, '') = coalesce(s.schema, '')"
        )
        data = pa.Table.from_pylist(rows, TABLE_SCHEMA)
        from replicator.sinks.delta_rs import handle, writing

        with self._registry_lock:
            writer = self.table("tables")
            if not writer.exists():
                writer.create(TABLE_SCHEMA)
            with writing(writer.path):
                table = handle(writer.path)
                before = (table.metadata().id, table.version())
                (
                    table.merge(data, predicate=on, source_alias="s", target_alias="t", merge_schema=True)
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )
                after = (table.metadata().id, table.version())  # (execute advances the handle it ran on)
            self._registry_saved(before, after, data)

    # ---- batches applied behind the next one (Engine.submit) ----------------------------------------------
    @property
    def pending_folder(self) -> Path | ObjectPath:
        return self.root / "pending"

    def note_pending(self, batch_id: int, source: str, manifest: pa.Table) -> None:
        """Note a batch's inputs (:data:`MANIFEST`) before Spark commits it, until its apply ends: one JSON
        file per batch, written whole (a temporary file renamed) and flushed to disk."""
        note = {"batch_id": batch_id, "source": source, "inputs": manifest.to_pylist()}
        write_whole(self.pending_folder / f"{batch_id:020d}.json", json.dumps(note))

    def pending(self) -> list[tuple[int, str, pa.Table]]:
        """The noted batches not yet applied, in batch order: (batch id, source kind, inputs)."""
        notes = []
        folder = self.pending_folder
        found = folder.iterdir() if folder.is_dir() else ()
        for path in sorted(p for p in found if p.name.endswith(".json") and not p.name.startswith(".")):
            note = json.loads(path.read_text(encoding="utf-8"))
            inputs = pa.Table.from_pylist(note["inputs"], MANIFEST)
            notes.append((int(note["batch_id"]), str(note["source"]), inputs))
        return notes

    def clear_pending(self, batch_id: int) -> None:
        (self.pending_folder / f"{batch_id:020d}.json").unlink(missing_ok=True)

    # ---- files the landing folder holds and the stream does not read (sources.scan_landing) ---------------
    @property
    def skipped_file(self) -> Path | ObjectPath:
        return self.root / "skipped_files.json"

    def save_skipped(self, report: dict[str, Any]) -> None:
        """The newest scan's skipped files (counts and a few names), written whole, for ``status``."""
        write_whole(self.skipped_file, json.dumps({**report, "scanned_at": now().isoformat()}))

    def skipped(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.skipped_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    # ---- dead letters and batches ------------------------------------------------------------------------
    def write_dead_letters(self, rows: pa.Table, batch_id: int, stage: str) -> None:
        """Append a batch's dead letters once per stage (``:decode`` before apply, ``:apply`` after): each
        stage carries its own app transaction so a replayed batch writes neither twice."""
        if rows.num_rows == 0 or self.done("dead_letters", batch_id, stage):
            return
        self.table("dead_letters").append(
            rows.select(DEAD_LETTER_SCHEMA.names).cast(DEAD_LETTER_SCHEMA), Txn(self.job + stage, batch_id)
        )

    def record_batch(self, summary: BatchSummary) -> None:
        if self.done("batches", summary.batch_id):
            return
        row = asdict(summary)
        row.pop("phases_ms")
        row["tables"] = json.dumps(summary.tables, sort_keys=True)
        row["finished_at"] = now()
        self.table("batches").append(pa.Table.from_pylist([row], BATCH_SCHEMA), self.txn(summary.batch_id))

    def record_partitions(self, rows: pa.Table, batch_id: int) -> None:
        """A Kafka batch's account per partition (sources.partitions_schema), once per batch."""
        if rows.num_rows and not self.done("kafka_partitions", batch_id):
            self.table("kafka_partitions").append(rows, self.txn(batch_id))

    # ---- change log -------------------------------------------------------------------------------------
    def commit_changelog(self, files: pa.Table, batch_id: int) -> None:
        """Commit the change-log files the decode tasks wrote (replicator.decode.ChangelogFiles) in one
        Delta transaction with the batch's app transaction: a replayed batch adds nothing twice (its
        files of a second try are never committed: orphans that ``optimize``'s vacuum removes)."""
        from urllib.parse import quote

        from deltalake import CommitProperties, Schema, Transaction
        from deltalake.transaction import AddAction, create_table_with_add_actions

        from replicator.sinks.delta_rs import committed, handle, table_exists, version_stamp, writing

        if files.num_rows == 0 or self.done("changelog", batch_id):
            return
        adds = [
            AddAction(
                path=quote(f["path"], safe="/="),
                size=f["size"],
                partition_values={"database": f["database"], "table": f["table"]},
                modification_time=f["mtime"],
                data_change=True,
                stats=json.dumps({"numRecords": f["rows"]}),
            )
            for f in files.to_pylist()
        ]
        uri = str(self.root / "changelog")
        props = CommitProperties(app_transactions=[Transaction(self.job, batch_id)])
        partition_by = ["database", "table"]
        if table_exists(uri):
            with writing(uri):
                table = handle(uri)
                before = version_stamp(table, uri)
                table.create_write_transaction(
                    adds,
                    mode="append",
                    schema=CHANGELOG_SCHEMA,
                    partition_by=partition_by,
                    commit_properties=props,
                )
                committed(uri, before, table, Txn(self.job, batch_id), advanced=False)
        else:
            create_table_with_add_actions(
                uri,
                Schema.from_arrow(CHANGELOG_SCHEMA),
                adds,
                mode="append",
                partition_by=partition_by,
                commit_properties=props,
            )
