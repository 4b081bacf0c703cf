"""History versions, pure: events -> each key's chain of versions; decoded events -> rows to type; the
history table's schema following its mirror's (see replicator/apply/history/__init__.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator import ddl
from replicator.columns import ColumnMap, source_name, with_source
from replicator.fold.arrow import IMAGE_TYPE
from replicator.logging import get_logger
from replicator.model import CDC_COLUMNS, CDC_EVENT_TIME, CDC_OP, CDC_SEQ, DML_OPS, keep, key_changes
from replicator.sinks.base import MirrorWriter

log = get_logger("replicator.apply.history")

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
# seeded: the version a mirror's row had when its history was turned on (seed_history), valid from then.
OPENS = ("insert", "update", "snapshot", "seeded")
SEEDED = "seeded"


# ---- events -----------------------------------------------------------------------------------------------
@dataclass
class Event:
    seq: str
    op: str  # insert / update / snapshot open or replace a version; delete / truncate close it
    time: dt.datetime | None
    row: dict[str, Any] | None  # the typed data columns (None: a TRUNCATE, or a marker's image unknown)
    source: int = 0  # 2: this batch, 1: a stored version, 0: a marker (the higher wins a duplicate seq)
    # columns the capture tool did not send (unchanged TOAST, fold.unavailable): the previous version's
    missing: tuple[str, ...] = ()


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
        if e.missing and e.row is not None and open_ is not None:  # a partial update: the rest is unchanged
            e = replace(e, row={**e.row, **{c: open_.row.get(c) for c in e.missing if c in open_.row}})
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
    ``fold.arrow.fold``'s output): the image is ``after`` (``before`` for a delete); an update that changes
    the key is also a delete of the old key, as the fold makes it. (Document collections' versions are
    built from their changes instead: replicator.apply.history.documents.)"""
    events = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
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
            **({"meta": events["meta"].combine_chunks()} if "meta" in events.column_names else {}),
        }
    )
    _old, _new, changed = key_changes(op, before, after, key)  # the fold's rule
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


def truncate_events(events: pa.Table) -> list[Event]:
    rows = _barriers(events, ["truncate", "ddl"])
    out = []
    for r in rows:
        if r["op"] == "ddl":
            try:
                if not any(isinstance(c, ddl.TruncateTable) for c in ddl.parse_event(r)):
                    continue
            except ddl.DdlError:
                continue
        out.append(Event(r["seq_text"], "truncate", utc(r["event_time"]), None, 2))
    return out


def source_types(events: pa.Table) -> dict[str, str]:
    """Column -> source type text, the newest event's type of each column (first-seen column order)."""
    dml = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
    types: dict[str, str] = {}
    for i in pc.sort_indices(dml["seq_text"]).to_pylist():
        for name, text in dml["source_types"][i].as_py() or []:
            if text:
                types[name] = text
    return types


def renamed_columns(events: pa.Table) -> list[tuple[str, str]]:
    renames = []
    for r in _barriers(events, ["ddl"]):
        try:
            changes = ddl.parse_event(r)
        except ddl.DdlError:
            continue
        renames += [(c.old, c.new) for c in changes if isinstance(c, ddl.RenameColumn)]
    return renames


def utc(value: dt.datetime | None) -> dt.datetime | None:
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
    # The renames name source columns: their mirror names (replicator.columns), the old one as stored.
    stored_names = {source_name(f): n for n, f in stored.items()}
    mirror_names = ColumnMap(mirror)
    renames = [(stored_names.get(o, o), mirror_names.name(n)) for o, n in renames]
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
        fields = [
            with_source(f, source_name(wanted[f.name])) if f.name in wanted else f for f in table.schema
        ]
        history.overwrite(pa.Table.from_arrays(table.columns, schema=pa.schema(fields)))
    have = {rename.get(n, n) for n in stored if n not in drop}
    missing = [f for f in data if f.name not in have]
    if missing:
        history.add_columns(missing)
