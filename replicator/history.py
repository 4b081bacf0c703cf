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
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator import ddl
from replicator.apply import TableApplier, TableBatch, TableResult
from replicator.changelog import IMAGE_TYPE, PATCH_META, TableId, keep, split_by_table
from replicator.logging import get_logger
from replicator.model import CDC_COLUMNS, CDC_EVENT_TIME, CDC_OP, CDC_SEQ, DML_OPS, table_label
from replicator.sinks.base import MirrorWriter, Txn, key_range, quote

if TYPE_CHECKING:
    from replicator.config import JobConfig
    from replicator.sinks.base import WriterFactory
    from replicator.state import State

log = get_logger("replicator.history")

VALID_FROM = "_cdc_valid_from"
VALID_TO = "_cdc_valid_to"
CURRENT = "_cdc_current"
UTC_TS = pa.timestamp("us", tz="UTC")
HISTORY_FIELDS = [
    pa.field(VALID_FROM, UTC_TS),
    pa.field(VALID_TO, UTC_TS),
    pa.field(CURRENT, pa.bool_()),
    pa.field(CDC_OP, pa.string()),
    pa.field(CDC_SEQ, pa.string()),
]
HISTORY_COLUMNS = tuple(f.name for f in HISTORY_FIELDS)
MARKER_FIELDS = [
    pa.field(CDC_SEQ, pa.string()),
    pa.field(CDC_OP, pa.string()),
    pa.field(CDC_EVENT_TIME, UTC_TS),
]
TRUNCATE_SCHEMA = pa.schema(MARKER_FIELDS)
OPENS = ("insert", "update", "snapshot")
SUFFIX = "__history"


# ---- where ------------------------------------------------------------------------------------------------
def _parts(table: TableId) -> list[str]:
    database, schema, name = table
    return [database, schema, name] if schema else [database, name]


def history_path(mirror: str | Path) -> str:
    """The history table of the mirror at ``mirror``."""
    return f"{mirror}{SUFFIX}"


def markers_root(state: State, table: TableId) -> Path:
    return state.root.joinpath("history", *_parts(table))


# ---- events -----------------------------------------------------------------------------------------------
@dataclass
class Event:
    seq: str
    op: str  # insert / update / snapshot open or replace a version; delete / truncate close it
    time: dt.datetime | None
    row: dict[str, Any] | None  # the typed data columns (None: a TRUNCATE, or a marker's image unknown)
    source: int = 0  # 2: this batch, 1: a stored version, 0: a marker (the higher wins a duplicate seq)


@dataclass
class Version:
    row: dict[str, Any]
    seq: str
    op: str
    valid_from: dt.datetime | None
    valid_to: dt.datetime | None = None
    current: bool = True
    extra: list[Event] | None = None  # events folded into it in place (untracked changes)

    def record(self) -> dict[str, Any]:
        return {
            **self.row,
            VALID_FROM: self.valid_from,
            VALID_TO: self.valid_to,
            CURRENT: self.current,
            CDC_OP: self.op,
            CDC_SEQ: self.seq,
        }


def chain(events: Iterable[Event], track: Sequence[str] | None = None) -> list[Version]:
    """One key's events (any order, duplicates by seq allowed) -> its versions, oldest first.

    An insert / update / snapshot closes the open version and opens the next one, unless ``track`` names
    the columns that matter and none of them changed: then the open version takes the new values in place.
    A delete or a TRUNCATE closes the open version."""
    unique: dict[str, Event] = {}
    for e in events:
        ident = change_id(e.seq)
        had = unique.get(ident)
        if had is None:
            unique[ident] = e
        else:  # the newest knowledge of its values, the first delivery's seq (stable across redeliveries)
            best = e if e.source > had.source else had
            unique[ident] = replace(best, seq=min(e.seq, had.seq))
    versions: list[Version] = []
    open_: Version | None = None
    for ident in sorted(unique):
        e = unique[ident]
        if e.op in OPENS and e.row is not None:
            if open_ is not None and track is not None and _same(open_.row, e.row, track):
                open_.row = e.row
                open_.extra = [*(open_.extra or []), e]
                continue
            if open_ is not None:
                open_.valid_to, open_.current = e.time, False
            open_ = Version(dict(e.row), e.seq, e.op, e.time)
            versions.append(open_)
        elif e.op in ("delete", "truncate") and open_ is not None:
            open_.valid_to, open_.current = e.time, False
            open_ = None
    return versions


def change_id(seq: str) -> str:
    """The source change a ``seq_text`` names: without the parts that say where a delivery of it came from
    (batch id, partition, offset), so that a redelivered record is the same change. The message index and
    row stay: the rows of one multi-row message are distinct changes."""
    parts = seq.split(".")
    if len(parts) < 5 + 1:
        return seq
    return ".".join([*parts[:-5], *parts[-2:]])


def _same(a: dict[str, Any], b: dict[str, Any], track: Sequence[str]) -> bool:
    return all(a.get(c) == b.get(c) for c in track)


def event_rows(events: pa.Table, key: Sequence[str]) -> pa.Table:
    """A table's DML events -> one row per event in the columns ``TableApplier.typed`` reads (those of
    ``changelog.fold``'s output): the image is ``after`` (``before`` for a delete); an update that changes
    the key is also a delete of the old key, as the fold makes it."""
    events = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
    patches = pc.is_valid(pc.map_lookup(events["meta"], PATCH_META, "first"))
    if events.num_rows and pc.any(patches).as_py():
        # drs-mongo $set/$unset patches carry no full image: not kept in history (docs/history.md).
        log.warning("history skips document patches", events=pc.sum(patches).as_py())
        events = events.filter(pc.invert(patches))
    op = events["op"].combine_chunks()
    is_delete = pc.equal(op, "delete")
    after, before = events["after"].combine_chunks(), events["before"].combine_chunks()
    base = pa.table(
        {
            "op": op,
            "image": pc.if_else(is_delete, before, after).cast(IMAGE_TYPE),
            "seq_text": events["seq_text"].combine_chunks(),
            "event_time": events["event_time"].combine_chunks().cast(UTC_TS),
            "position": events["position"].combine_chunks(),
            "coordinates": events["coordinates"].combine_chunks(),
        }
    )
    changed = pc.equal(op, "update")
    differs = pa.array([False] * len(op), pa.bool_())
    for k in key:
        old, new = pc.map_lookup(before, k, "first"), pc.map_lookup(after, k, "first")
        changed = pc.and_(changed, pc.is_valid(old))
        differs = pc.or_(differs, pc.fill_null(pc.not_equal(old, new), False))
    changed = pc.fill_null(pc.and_(changed, differs), False)
    if not pc.any(changed).as_py():
        return base
    old_rows = base.filter(changed)
    old_rows = old_rows.set_column(0, "op", pa.array(["delete"] * old_rows.num_rows, pa.string()))
    old_rows = old_rows.set_column(1, "image", before.filter(changed).cast(IMAGE_TYPE))
    return pa.concat_tables([base, old_rows])


def _barriers(events: pa.Table, ops: Sequence[str]) -> list[dict[str, Any]]:
    """Barrier events as ``ddl.parse_event`` reads them (maps as dicts)."""
    rows = events.filter(pc.is_in(events["op"], pa.array(list(ops)))).to_pylist()
    return [{k: dict(v) if isinstance(v, list) and k in MAPS else v for k, v in r.items()} for r in rows]


MAPS = ("after", "before", "source_types", "meta")


def _truncates(events: pa.Table) -> list[Event]:
    rows = _barriers(events, ["truncate", "ddl"])
    out = []
    for r in rows:
        if r["op"] == "ddl":
            try:
                if not any(isinstance(c, ddl.TruncateTable) for c in ddl.parse_event(r)):
                    continue
            except ddl.DdlError:
                continue
        out.append(Event(r["seq_text"], "truncate", _utc(r["event_time"]), None, 2))
    return out


def _source_types(events: pa.Table) -> dict[str, str]:
    """Column -> source type text, the newest event's type of each column (first-seen column order)."""
    dml = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
    types: dict[str, str] = {}
    for i in pc.sort_indices(dml["seq_text"]).to_pylist():
        for name, text in dml["source_types"][i].as_py() or []:
            if text:
                types[name] = text
    return types


def _renamed_columns(events: pa.Table) -> list[tuple[str, str]]:
    renames = []
    for r in _barriers(events, ["ddl"]):
        try:
            changes = ddl.parse_event(r)
        except ddl.DdlError:
            continue
        renames += [(c.old, c.new) for c in changes if isinstance(c, ddl.RenameColumn)]
    return renames


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.UTC)


# ---- schema -----------------------------------------------------------------------------------------------
def sync_schema(history: MirrorWriter, mirror: pa.Schema, renames: Sequence[tuple[str, str]] = ()) -> None:
    """The history's data columns follow the mirror's: added, renamed, retyped and dropped alike."""
    data = [f for f in mirror if f.name not in CDC_COLUMNS]
    if not history.exists():
        history.create(pa.schema([*data, *HISTORY_FIELDS]))
        return
    names = {f.name for f in data}
    stored = {f.name: f for f in history.schema() if f.name not in HISTORY_COLUMNS}
    rename = {o: n for o, n in renames if o in stored and o not in names and n in names and n not in stored}
    drop = [n for n in stored if n not in names and n not in rename]
    wanted = {f.name: f for f in data}
    retype = {
        n: wanted[rename.get(n, n)].type
        for n, f in stored.items()
        if rename.get(n, n) in wanted and f.type != wanted[rename.get(n, n)].type
    }
    if rename or drop or retype:
        table = history.read().drop_columns(drop)
        for name, target in retype.items():
            i = table.schema.get_field_index(name)
            try:
                table = table.set_column(i, name, table.column(i).cast(target))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                log.warning("history column kept with its type", column=name, error=str(exc))
        table = table.rename_columns([rename.get(n, n) for n in table.column_names])
        history.overwrite(table)
    have = {rename.get(n, n) for n in stored if n not in drop}
    missing = [f for f in data if f.name not in have]
    if missing:
        history.add_columns(missing)


# ---- one table's batch ------------------------------------------------------------------------------------
@dataclass
class HistoryTable:
    """One mirror's history: the versions table and its markers (deletes / in-place updates, TRUNCATEs)."""

    applier: TableApplier  # the mirror's applier: its schema and typing
    history: MirrorWriter
    markers: MirrorWriter
    truncates: MirrorWriter
    track: Sequence[str] | None = None

    @property
    def key(self) -> list[str]:
        return list(self.applier.table_state.primary_key)

    def apply(self, events: pa.Table, txn: Txn) -> int:
        """This table's events of a batch (decoded events: DML, truncate, ddl) -> versions written."""
        done = self.history.applied_version(txn.app_id)
        if done is not None and done >= txn.version:
            return 0
        # TRUNCATEs first, even of a table without rows yet: a later batch's older events end at them.
        truncates = self._stored_truncates()
        known = {change_id(e.seq) for e in truncates}
        batch_truncates = _truncates(events)
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
            rows = event_rows(events, self.key)
            if rows.num_rows == 0:
                return 0
            self.applier.work.types = _source_types(events)
            self.applier.ensure_table(pc.unique(rows["image"].combine_chunks().keys).to_pylist())
        schema = mirror.schema()
        sync_schema(self.history, schema, _renamed_columns(events))
        data = [f.name for f in schema if f.name not in CDC_COLUMNS]
        typed, dead = self.applier.typed(event_rows(events, self.key))
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
                Event(r[CDC_SEQ], r[CDC_OP], _utc(r[CDC_EVENT_TIME]), row, 2)
            )
        # A TRUNCATE closes the open version of every key: the batch recomputes them all (rare; the same on a
        # replay, where the TRUNCATE is stored already).
        everything = bool(batch_truncates)
        versions, markers = self._stored(list(batch), everything)
        keys = set(batch) | (set(versions) if everything else set())
        new_versions: list[dict[str, Any]] = []
        gone: list[dict[str, Any]] = []
        new_markers: list[dict[str, Any]] = []
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
            starts = {change_id(v.seq) for v in result}
            marked = {change_id(m.seq) for m in known_markers}
            for e in chain_events:
                ident = change_id(e.seq)
                if e.op != "truncate" and ident not in starts and ident not in marked:
                    marked.add(ident)
                    new_markers.append(
                        {
                            **dict(zip(self.key, k, strict=True)),
                            CDC_SEQ: e.seq,
                            CDC_OP: e.op,
                            CDC_EVENT_TIME: e.time,
                        }
                    )
            before = {v[CDC_SEQ]: v for v in stored}
            for v in result:
                record = v.record()
                if before.get(v.seq) != record:
                    new_versions.append(record)
            kept = {v.seq for v in result}
            gone += [{**dict(zip(self.key, k, strict=True)), CDC_SEQ: s} for s in before if s not in kept]
        if new_markers:
            fields = [self.history.schema().field(k) for k in self.key]
            self.markers.append(
                pa.Table.from_pylist(
                    new_markers, pa.schema([*(f.with_nullable(True) for f in fields), *MARKER_FIELDS])
                ),
                None,
            )
        self._merge(new_versions, gone, txn)
        return len(new_versions)

    def _stored_truncates(self) -> list[Event]:
        if not self.truncates.exists():
            return []
        return [
            Event(r[CDC_SEQ], "truncate", r[CDC_EVENT_TIME], None, 0)
            for r in self.truncates.read().to_pylist()
        ]

    def _stored(
        self, keys: list[tuple[Any, ...]], everything: bool
    ) -> tuple[dict[tuple[Any, ...], list[dict[str, Any]]], dict[tuple[Any, ...], list[Event]]]:
        """The stored versions and markers of ``keys`` (of every key when ``everything``)."""
        wanted = set(keys)

        def read(writer: MirrorWriter) -> list[dict[str, Any]]:
            if not writer.exists() or not (keys or everything):
                return []
            if everything:
                rows = writer.read().to_pylist()
            else:
                first = pa.array(sorted({k[0] for k in keys}), writer.schema().field(self.key[0]).type)
                rows = writer.read_keys(self.key[0], first, writer.schema().names).to_pylist()
            return [r for r in rows if everything or tuple(r[c] for c in self.key) in wanted]

        versions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in read(self.history):
            versions.setdefault(tuple(r[c] for c in self.key), []).append(r)
        markers: dict[tuple[Any, ...], list[Event]] = {}
        for r in read(self.markers):
            markers.setdefault(tuple(r[c] for c in self.key), []).append(
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
        columns = {c: f"s.{quote(c)}" for c in schema.names}
        (
            DeltaTable(self.history.path)
            .merge(source, predicate=on, source_alias="s", target_alias="t", commit_properties=_commit(txn))
            .when_matched_delete(predicate="s._gone")
            .when_matched_update(updates=columns, predicate="NOT s._gone")
            .when_not_matched_insert(updates=columns, predicate="NOT s._gone")
            .execute()
        )


def _from_versions(stored: list[dict[str, Any]]) -> list[Event]:
    data = [c for c in (stored[0] if stored else {}) if c not in HISTORY_COLUMNS]
    return [Event(v[CDC_SEQ], v[CDC_OP], _utc(v[VALID_FROM]), {c: v[c] for c in data}, 1) for v in stored]


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
        out.append(replace(m, time=_utc(m.time)))
    return out


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
    return written


def _move(
    config: JobConfig, state: State, writer: WriterFactory, old: TableId, new: TableId, batch_id: int
) -> None:
    """The old name's history (and markers) to the new name, once (a replayed batch finds it moved)."""
    target = Path(config.target.path)
    source = writer(history_path(target.joinpath(*_parts(old))))
    if not source.exists():
        return
    moved = writer(history_path(target.joinpath(*_parts(new))))
    if moved.exists():
        done = moved.applied_version(state.txn(batch_id).app_id)
        if done is not None and done >= batch_id:
            return
        moved.move_to(f"{moved.path}.replaced-{batch_id}")
    source.move_to(moved.path)
    markers, markers_to = markers_root(state, old), markers_root(state, new)
    if markers.exists():
        if markers_to.exists():
            writer(markers_to).move_to(f"{markers_to}.replaced-{batch_id}")
        writer(markers).move_to(markers_to)


__all__ = ["HISTORY_FIELDS", "HistoryTable", "chain", "history_path", "record_history"]
