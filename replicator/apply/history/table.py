"""One history table's batch (versions recomputed for the touched keys, one MERGE with the batch's app
transaction), and the engine's hook :func:`record_history` (see replicator/apply/history/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator import paths
from replicator.apply.documents import COLUMN_TYPES, PARTIAL
from replicator.apply.history import documents
from replicator.apply.history.versions import (
    CDC_EVENT_TIME,
    CDC_OP,
    CDC_SEQ,
    CURRENT,
    HISTORY_COLUMNS,
    MARKER_FIELDS,
    OPENS,
    SEEDED,
    TRUNCATE_SCHEMA,
    UTC_TS,
    VALID_FROM,
    VALID_TO,
    Event,
    Version,
    chain,
    change_id,
    event_rows,
    renamed_columns,
    source_types,
    sync_schema,
    truncate_events,
    utc,
)
from replicator.apply.table import DOCUMENT_FIELDS, TableApplier, TableBatch, TableResult
from replicator.fold import unavailable
from replicator.fold.arrow import split_by_table
from replicator.logging import get_logger
from replicator.model import CDC_COLUMNS, TableId, table_label
from replicator.sinks.base import MirrorWriter, Txn, key_range, quote

if TYPE_CHECKING:
    from replicator.config import JobConfig
    from replicator.sinks.base import WriterFactory
    from replicator.state import State

log = get_logger("replicator.apply.history")

SUFFIX = "__history"


# ---- where ------------------------------------------------------------------------------------------------
def history_path(mirror: str | Path) -> str:
    """The history table of the mirror at ``mirror``."""
    return f"{mirror}{SUFFIX}"


# op of a truncates-table row recording a bootstrap's position: no event at or before it opens a version
SNAPSHOT_MARK = "snapshot"


def markers_root(state: State, table: TableId) -> Path:
    return state.table_folder("history", table)


# ---- one table's batch ------------------------------------------------------------------------------------
@dataclass
class HistoryTable:
    """One mirror's history: the versions table and its markers (deletes / in-place updates, TRUNCATEs)."""

    applier: TableApplier  # the mirror's applier: its schema and typing
    history: MirrorWriter
    markers: MirrorWriter
    truncates: MirrorWriter
    track: Sequence[str] | None = None
    partial_versions: int = 0  # document versions written from patches without their full image

    @cached_property
    def key(self) -> list[str]:
        """The key's columns in the mirror and its history (replicator.columns)."""
        return self.applier._key()

    @property
    def source_key(self) -> list[str]:
        """The key's source columns: how the events' images name them."""
        return list(self.applier.table_state.primary_key)

    def apply(self, events: pa.Table, txn: Txn) -> int:
        """This table's events of a batch (decoded events: DML, truncate, ddl) -> versions written."""
        done = self.history.applied_version(txn.app_id)
        if done is not None and done >= txn.version:
            return 0
        # TRUNCATEs first, even of a table without rows yet: a later batch's older events end at them.
        truncates = self._stored_truncates()
        # A bootstrap's snapshot (its marker, seed_snapshot): each key's first version is the snapshot's row;
        # an event at or before its position is in that row already, and never a version of its own.
        floor = max((e.seq for e in truncates if e.op == SNAPSHOT_MARK), default=None)
        truncates = [e for e in truncates if e.op != SNAPSHOT_MARK]
        if floor is not None and events.num_rows:
            events = events.filter(pc.greater(events["seq_text"], pa.scalar(floor)))
        known = {change_id(e.seq) for e in truncates}
        batch_truncates = truncate_events(events)
        new_truncates = []
        for e in batch_truncates:
            if change_id(e.seq) not in known:
                known.add(change_id(e.seq))
                new_truncates.append(e)
        if new_truncates:
            rows = [{CDC_SEQ: e.seq, CDC_OP: e.op, CDC_EVENT_TIME: e.time} for e in new_truncates]
            self.truncates.append(pa.Table.from_pylist(rows, TRUNCATE_SCHEMA), None)
        truncates += new_truncates
        mirror = self.applier.mirror
        if not self.key:
            return 0
        if not mirror.exists():
            # Every event of the batch preceded a TRUNCATE the mirror had already applied: the mirror
            # wrote nothing, the history still keeps them. The mirror is created (empty) to type them.
            rows = event_rows(events, self.source_key)
            if rows.num_rows == 0:
                return 0
            self.applier.work.types = source_types(events)
            columns = pc.unique(rows["image"].combine_chunks().keys).to_pylist()
            if documents.is_documents(events, None):  # (a delete's image has only the _id)
                self.applier.work.types |= COLUMN_TYPES
                columns = [*columns, *(c for c in documents.DATA if c not in columns)]
            self.applier.ensure_table(columns)
        is_documents = documents.is_documents(events, mirror.schema())
        if is_documents:
            # (a mirror written before documents kept their merge state: the history follows its columns)
            missing = [f for f in DOCUMENT_FIELDS if f.name not in mirror.schema().names]
            if missing:
                mirror.add_columns(missing)
        schema = mirror.schema()
        sync_schema(self.history, schema, renamed_columns(events))
        # A TRUNCATE closes the open version of every key: the batch recomputes them all (rare; the same on a
        # replay, where the TRUNCATE is stored already).
        everything = bool(batch_truncates)
        if is_documents:
            return self._apply_documents(events, truncates, everything, txn)
        data = [f.name for f in schema if f.name not in CDC_COLUMNS]
        rows = event_rows(events, self.source_key)
        missing = unavailable.by_seq(rows, lambda n: self.applier.mirror_names([n])[0])
        # (without meta: the mirror's own apply counts and fills its partial updates; chain fills versions)
        typed, dead = self.applier.typed(rows.drop_columns([c for c in ("meta",) if c in rows.column_names]))
        if dead:  # the mirror's own apply reports the values that do not fit (dead letters)
            log.warning(
                "history skips events whose values do not fit",
                table=table_label(self.applier.work.table),
                events=len(dead),
            )
        batch: dict[tuple[Any, ...], list[Event]] = {}
        for r in typed.to_pylist():
            row = {c: r[c] for c in data}
            batch.setdefault(tuple(row[k] for k in self.key), []).append(
                Event(r[CDC_SEQ], r[CDC_OP], utc(r[CDC_EVENT_TIME]), row, 2, missing.get(r[CDC_SEQ], ()))
            )
        versions, markers = self._stored(_oldest(batch), everything)
        keys = set(batch) | (set(versions) if everything else set())
        changes = _Changes()
        for k in keys:
            stored = versions.get(k, [])
            known_markers = markers.get(k, [])
            chain_events = [
                *batch.get(k, []),
                *truncates,
                *_from_versions(stored),
                *_from_markers(known_markers, stored),
            ]
            result = chain(chain_events, self.track)
            changes.add(self.key, k, stored, known_markers, chain_events, result, change_id)
        return self._write(changes, txn)

    def _apply_documents(self, events: pa.Table, truncates: list[Event], everything: bool, txn: Txn) -> int:
        """A document collection's batch (drs-mongo, replicator.apply.history.documents): each touched
        document's versions replayed by source position from the version open before the batch's oldest
        change; versions from patches without a full image before them are partial, and counted."""
        label = table_label(self.applier.work.table)
        batch, bad = documents.batch_changes(events)
        if bad:  # the mirror's own apply reports them (dead letters)
            log.warning("history skips document changes that do not apply", table=label, events=bad)
        if self.track is not None:
            log.warning("history_track does not apply to documents: each change opens a version", table=label)
        versions, markers = self._stored(_oldest(batch), everything)
        keys = set(batch) | (set(versions) if everything else set())
        closing = [documents.Change(t.seq, "truncate", t.time) for t in truncates]
        changes = _Changes()
        for k in keys:
            stored = versions.get(k, [])
            known_markers = markers.get(k, [])
            chain_events = [
                *batch.get(k, []),
                *closing,
                *(documents.stored_change(v) for v in stored),
                *(documents.Change(m.seq, m.op, utc(m.time)) for m in known_markers if m.op in CLOSES),
            ]
            result = documents.chain(k[0], chain_events)
            changes.add(self.key, k, stored, known_markers, chain_events, result, _position_id)
        self.partial_versions = sum(1 for v in changes.versions if v.get(PARTIAL))
        if self.partial_versions:
            log.warning(
                "history versions from patches without their full image (partial)",
                table=label,
                versions=self.partial_versions,
            )
        return self._write(changes, txn)

    def _write(self, changes: _Changes, txn: Txn) -> int:
        """New markers appended (deduplicated on read), then the versions' MERGE with the transaction."""
        if changes.markers:
            fields = [self.history.schema().field(k) for k in self.key]
            self.markers.append(
                pa.Table.from_pylist(
                    changes.markers, pa.schema([*(f.with_nullable(True) for f in fields), *MARKER_FIELDS])
                ),
                None,
            )
        self._merge(changes.versions, changes.gone, txn)
        return len(changes.versions)

    def _stored_truncates(self) -> list[Event]:
        if not self.truncates.exists():
            return []
        return [
            Event(
                r[CDC_SEQ],
                SNAPSHOT_MARK if r[CDC_OP] == SNAPSHOT_MARK else "truncate",
                r[CDC_EVENT_TIME],
                None,
                0,
            )
            for r in self.truncates.read().to_pylist()
        ]

    def _stored(
        self, oldest: dict[tuple[Any, ...], str], everything: bool
    ) -> tuple[dict[tuple[Any, ...], list[dict[str, Any]]], dict[tuple[Any, ...], list[Event]]]:
        """What the batch can change of the stored versions and markers of its keys (of every key when
        ``everything``): per key, the version open at the batch's oldest event and everything after it.
        Older versions are closed by older events, which the batch does not move: their chain up to there
        stays as it is (so the cost follows the batch, not the length of the keys' histories)."""
        key = self.key
        floors: dict[tuple[Any, ...], str] = {}

        def read(writer: MirrorWriter, versions: bool) -> list[dict[str, Any]]:
            if not writer.exists() or not (oldest or everything):
                return []
            if everything:
                return writer.read().to_pylist()
            first = pa.array(sorted({k[0] for k in oldest}), writer.schema().field(key[0]).type)
            table = writer.read_keys(key[0], first, writer.schema().names)
            # Decide on the key and seq columns alone; only the rows kept become Python values.
            idents = [change_id(s) for s in table[CDC_SEQ].to_pylist()]
            keys = list(zip(*(table[c].to_pylist() for c in key), strict=True))
            if versions:
                for k, ident in zip(keys, idents, strict=True):
                    if k in oldest and ident < oldest[k] and ident > floors.get(k, ""):
                        floors[k] = ident  # the newest version that started before the batch
            mask = [k in oldest and ident >= floors.get(k, "") for k, ident in zip(keys, idents, strict=True)]
            return table.filter(pa.array(mask, pa.bool_())).to_pylist()

        versions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in read(self.history, True):
            versions.setdefault(tuple(r[c] for c in key), []).append(r)
        markers: dict[tuple[Any, ...], list[Event]] = {}
        for r in read(self.markers, False):
            markers.setdefault(tuple(r[c] for c in key), []).append(
                Event(r[CDC_SEQ], r[CDC_OP], r[CDC_EVENT_TIME], None, 0)
            )
        return versions, markers

    def _merge(self, versions: list[dict[str, Any]], gone: list[dict[str, Any]], txn: Txn) -> None:
        """Replace the changed versions of the touched keys: one commit carrying the batch's transaction."""
        if not versions and not gone:
            self.history.mark(txn)
            return
        schema = self.history.schema()
        rows = [{**v, "_gone": False} for v in versions] + [{**g, "_gone": True} for g in gone]
        source = pa.Table.from_pylist(
            rows, pa.schema([*(f.with_nullable(True) for f in schema), pa.field("_gone", pa.bool_())])
        )
        from deltalake import DeltaTable

        from replicator.sinks.delta_rs import _commit

        on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in [*self.key, CDC_SEQ])
        bounds = key_range(source, self.key)
        if bounds:
            on = f"{on} AND {bounds}"
        columns = {quote(c): f"s.{quote(c)}" for c in schema.names}  # names quoted as keys too
        (
            DeltaTable(self.history.path)
            .merge(source, predicate=on, source_alias="s", target_alias="t", commit_properties=_commit(txn))
            .when_matched_delete(predicate="s._gone")
            .when_matched_update(updates=columns, predicate="NOT s._gone")
            .when_not_matched_insert(updates=columns, predicate="NOT s._gone")
            .execute()
        )


CLOSES = ("delete", "truncate")


def _oldest(batch: dict[tuple[Any, ...], list[Any]]) -> dict[tuple[Any, ...], str]:
    """Each key's oldest change in the batch (its ``change_id``): where its stored chain is read from."""
    return {k: min(change_id(e.seq) for e in events) for k, events in batch.items()}


def _position_id(seq: str) -> str:
    """A document change's identity: its source position (the seq without any delivery coordinate)."""
    return ".".join(str(p) for p in documents.position(seq))


@dataclass
class _Changes:
    """What a batch changes in a history table: versions to write, versions gone, markers to append."""

    versions: list[dict[str, Any]] = field(default_factory=list)
    gone: list[dict[str, Any]] = field(default_factory=list)
    markers: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        key: Sequence[str],
        k: tuple[Any, ...],
        stored: list[dict[str, Any]],
        known_markers: list[Event],
        chain_events: Sequence[Any],
        result: list[Version],
        ident: Callable[[str], str],
    ) -> None:
        """One key: the events that opened no version become markers (once), the versions that differ
        from the stored ones are written, the stored ones no longer in the chain go."""
        named = dict(zip(key, k, strict=True))
        starts = {ident(v.seq) for v in result}
        marked = {ident(m.seq) for m in known_markers}
        for e in chain_events:
            i = ident(e.seq)
            if e.op != "truncate" and i not in starts and i not in marked:
                marked.add(i)
                self.markers.append({**named, CDC_SEQ: e.seq, CDC_OP: e.op, CDC_EVENT_TIME: e.time})
        before = {v[CDC_SEQ]: v for v in stored}
        for v in result:
            record = v.record()
            if before.get(v.seq) != record:
                self.versions.append(record)
        kept = {v.seq for v in result}
        self.gone += [{**named, CDC_SEQ: s} for s in before if s not in kept]


def _from_versions(stored: list[dict[str, Any]]) -> list[Event]:
    data = [c for c in (stored[0] if stored else {}) if c not in HISTORY_COLUMNS]
    return [Event(v[CDC_SEQ], v[CDC_OP], utc(v[VALID_FROM]), {c: v[c] for c in data}, 1) for v in stored]


def _from_markers(markers: list[Event], stored: list[dict[str, Any]]) -> list[Event]:
    """Markers as events; an in-place update takes the image of the version it was folded into."""
    starts = sorted(stored, key=lambda v: change_id(v[CDC_SEQ]))
    data = [c for c in (stored[0] if stored else {}) if c not in HISTORY_COLUMNS]
    out = []
    for m in markers:
        if m.op in OPENS:
            holder = [v for v in starts if change_id(v[CDC_SEQ]) <= change_id(m.seq)]
            if not holder:
                continue
            m = replace(m, row={c: holder[-1][c] for c in data})
        out.append(replace(m, time=utc(m.time)))
    return out


# ---- bootstrap from table files ---------------------------------------------------------------------------
def seed_snapshot(
    writer: WriterFactory,
    mirror: MirrorWriter,
    rows: pa.Table,
    txn: Txn,
    truncates: MirrorWriter | None = None,
) -> None:
    """A bootstrap's snapshot rows (in the mirror's schema, ``_cdc_*`` columns of ``bootstrap.with_cdc``)
    open the first version of each key at the snapshot's time, appended with the file's transaction.
    ``truncates`` (the table's markers of TRUNCATEs) records the snapshot's position once: events at or
    before it are in the snapshot and open no version (HistoryTable.apply)."""
    if truncates is not None and rows.num_rows:
        seq = rows[CDC_SEQ][0].as_py()
        stored = truncates.read().to_pylist() if truncates.exists() else []
        if not any(r[CDC_SEQ] == seq and r[CDC_OP] == SNAPSHOT_MARK for r in stored):
            marker = {CDC_SEQ: seq, CDC_OP: SNAPSHOT_MARK, CDC_EVENT_TIME: rows[CDC_EVENT_TIME][0].as_py()}
            truncates.append(pa.Table.from_pylist([marker], TRUNCATE_SCHEMA), None)
    history = writer(history_path(mirror.path))
    done = history.applied_version(txn.app_id)
    if done is not None and done >= txn.version:
        return
    sync_schema(history, mirror.schema())
    n = rows.num_rows
    data = [f.name for f in mirror.schema() if f.name not in CDC_COLUMNS]
    versions = rows.select(data)
    for name, column in (
        (VALID_FROM, rows[CDC_EVENT_TIME]),
        (VALID_TO, pa.nulls(n, UTC_TS)),
        (CURRENT, pa.array([True] * n, pa.bool_())),
        (CDC_OP, rows[CDC_OP]),
        (CDC_SEQ, rows[CDC_SEQ]),
    ):
        versions = versions.append_column(name, column)
    history.append(versions.cast(history.schema()), txn)


# ---- the engine's hook -------------------------------------------------------------------------------------
def record_history(
    config: JobConfig,
    state: State,
    writer: WriterFactory,
    events: pa.Table,
    results: list[TableResult],
    links: list[tuple[TableId, TableId, str]],
    batch_id: int,
    *,
    timezone: str = "UTC",
    zero_dates: str = "null",
) -> dict[str, int]:
    """After a batch's mirrors are applied: the history of every history-enabled table among ``results``.

    ``events``: the batch's decoded events (DML and barriers, with ``seq_text``) of any tables; ``links``:
    the batch's renames (old, new, seq_text), whose history moves with the mirror, the old name's events
    up to the rename going to the new name's history. Returns versions written per table."""
    if not config.tables.history or events.num_rows == 0:
        return {}
    by_table = dict(split_by_table(events))
    for old, new, seq in links:
        _move(config, state, writer, old, new, batch_id)
        if old in by_table:
            rows = by_table.pop(old)
            early = pc.less_equal(rows["seq_text"], seq)
            by_table[new] = pa.concat_tables(
                [t for t in (by_table.get(new), rows.filter(early)) if t is not None]
            )
            if pc.any(pc.invert(early)).as_py():
                by_table[old] = rows.filter(pc.invert(early))
    targets = {new for _old, new, _seq in links}
    written: dict[str, int] = {}
    # Renamed-to tables first: a replay after a crash finds their history done before the old name moves.
    for result in sorted(results, key=lambda r: r.table not in targets):
        table, table_state = result.table, result.state
        name = f"{table[0]}.{table[2]}"
        if table_state is None or table not in by_table or not config.tables.history_for(name):
            continue
        rows = by_table[table]
        if table_state.dropped and table_state.truncate_seq:  # renamed away or dropped: as the mirror does
            rows = rows.filter(pc.greater(rows["seq_text"], table_state.truncate_seq))
            if rows.num_rows == 0:
                continue
        mirror = writer(table_state.mirror)
        work = TableBatch(table, mirror, rows.slice(0, 0), [], {}, table_state)
        applier = TableApplier(work, state, batch_id, timezone=timezone, zero_dates=zero_dates)
        root = markers_root(state, table)
        history = HistoryTable(
            applier,
            writer(history_path(table_state.mirror)),
            writer(root / "markers"),
            writer(root / "truncates"),
            config.tables.tracked(name),
        )
        written[table_label(table)] = history.apply(rows, state.txn(batch_id))
        result.partial_history_versions = history.partial_versions
        fill_current(history.history, result)
    return written


def fill_current(history: MirrorWriter, result: TableResult) -> None:
    """An ADD COLUMN's default reaches the history as the schema change it is, not as a row change: the
    versions still current that began before the DDL take it (they are the mirror's rows it filled); no
    version opens or closes, and a version that ended since keeps NULL."""
    if not result.fills or not history.exists():
        return
    names = set(history.schema().names)
    for fill in result.fills:
        values = fill.values.select([c for c in fill.values.column_names if c in names])
        if values.num_columns:
            history.fill(values, CDC_SEQ, fill.before, fill.match, flag=CURRENT)


def _move(
    config: JobConfig, state: State, writer: WriterFactory, old: TableId, new: TableId, batch_id: int
) -> None:
    """The old name's history (and markers) to the new name, once (a replayed batch finds it moved).

    The markers move even when the old name has no history table yet: a TRUNCATE (or a delete) may be all
    it has seen, and a late event of the old name that the rename carries over must still meet it."""
    target = config.target.path
    known = state.tables().get(old)  # a mirror made before replicator.paths may have its raw name
    source = writer(history_path(known.mirror if known is not None else paths.table_path(target, old)))
    if source.exists():
        moved = writer(history_path(paths.table_path(target, new)))
        for path in (source.path, moved.path):
            paths.ensure_inside(target, path, "move a history table")
        if moved.exists():
            done = moved.applied_version(state.txn(batch_id).app_id)
            if done is not None and done >= batch_id:
                return
            moved.move_to(paths.beside(moved.path, f".replaced-{batch_id}"))
        source.move_to(moved.path)
    markers, markers_to = markers_root(state, old), markers_root(state, new)
    if markers.exists():
        for path in (markers, markers_to):
            state.check_state_path(path, "move history markers")
        if markers_to.exists():
            writer(markers_to).move_to(paths.beside(markers_to, f".replaced-{batch_id}"))
        writer(markers).move_to(markers_to)


__all__ = ["HistoryTable", "history_path", "markers_root", "record_history", "seed_snapshot"]


# ---- history turned on for a mirror that has rows ---------------------------------------------------------
def seed_history(config: JobConfig, state: State) -> dict[str, int]:
    """For each history-enabled mirror without a history table yet: one current version per row it holds,
    valid from the mirror's last commit, marked ``seeded`` (``_cdc_op``), with the row's ``_cdc_seq`` — so
    the history and the mirror agree from then on (a later change or delete of an older key closes its
    seeded version). Run at a job's start; a mirror's seed is one commit. Returns rows seeded per table."""
    import datetime as dt

    if not config.tables.history:
        return {}
    seeded: dict[str, int] = {}
    for table in state.tables().values():
        name = f"{table.database}.{table.table}"
        if table.dropped or not config.tables.history_for(name):
            continue
        mirror = state.writer(table.mirror)
        history = state.writer(history_path(table.mirror))
        if history.exists() or not mirror.exists():
            continue
        rows = mirror.read()
        if rows.num_rows == 0:
            continue  # an empty mirror's history starts with its next change
        from deltalake import DeltaTable

        committed = DeltaTable(table.mirror).history(1)[0]["timestamp"]  # ms since the epoch
        since = dt.datetime.fromtimestamp(committed / 1000, dt.UTC)
        sync_schema(history, rows.schema)
        data = [f.name for f in history.schema() if f.name not in HISTORY_COLUMNS]
        n = rows.num_rows
        columns = {c: rows.column(c) for c in data}
        columns |= {
            VALID_FROM: pa.array([since] * n, UTC_TS),
            VALID_TO: pa.nulls(n, UTC_TS),
            CURRENT: pa.array([True] * n, pa.bool_()),
            CDC_OP: pa.array([SEEDED] * n, pa.string()),
            CDC_SEQ: rows.column(CDC_SEQ),
        }
        history.append(pa.table(columns).cast(history.schema()), None)
        seeded[table_label(table.id)] = n
        log.info("history seeded from the mirror", table=table_label(table.id), rows=n, valid_from=str(since))
    return seeded
