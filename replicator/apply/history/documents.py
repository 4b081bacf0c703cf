"""History versions of document collections (drs-mongo), pure: one version per source change.

A full image (``insert``, ``replace``) or a patch (``$set`` / ``$unset``) opens a version whose ``document``
is the document as the source had it right after that change; a delete closes the open version (a
marker, as for row formats). Versions follow the source's position (clusterTime seconds, increment, DRS id:
the seq without its delivery coordinates), never the delivery order: the same merge as the mirror's
(replicator.apply.documents), done here as the source did it, change after change in position order.

What a version stores to be recomputed: its ``document`` (the state after it) and, in ``_cdc_fields``, its
own change: ``{"base": position, "kind": "image"|"delete"|null, "patch": spec}``, where ``base`` / ``kind``
are the newest full image or delete at or before it (none: only patches so far, the version is partial,
``_cdc_partial``) and ``patch`` the update spec of a version a patch opened (absent for a full image, whose
``document`` is the image). A late change at position ``q`` therefore needs only the document of the
version open before ``q`` (the oldest version the history table reads back) and the changes after it: each
version holds its change once, so the storage grows with the changes, not with their square.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.apply.documents import (
    DELETE,
    FIELDS,
    IMAGE,
    PARTIAL,
    PatchError,
    apply_patch,
    document_text,
    loads,
    patch_ops,
)
from replicator.apply.history.versions import CDC_OP, CDC_SEQ, SEEDED, VALID_FROM, Version, utc
from replicator.dialects.jsontext import dumps
from replicator.fold.arrow import DELIVERY_PARTS, DOCUMENT_META, PATCH_META
from replicator.model import DML_OPS, keep, parse_seq_text

Position = tuple[int, ...]
DATA = ("_id", "document", FIELDS, PARTIAL)  # a document mirror's data columns


def position(seq: str) -> Position:
    """The source position a seq text names: without its delivery coordinates (a redelivery has the same)."""
    parts = parse_seq_text(seq)
    return parts[:-DELIVERY_PARTS] if len(parts) > DELIVERY_PARTS else parts


def is_documents(events: pa.Table, mirror: pa.Schema | None) -> bool:
    """A document collection: its DML events carry ``meta['mongo_doc']`` (the dialect's mark the fold reads
    too), or its mirror keeps the merge state."""
    if mirror is not None and FIELDS in mirror.names:
        return True
    if events.num_rows == 0 or "meta" not in events.column_names:
        return False
    return bool(pc.any(pc.is_valid(pc.map_lookup(events["meta"], DOCUMENT_META, "first"))).as_py())


@dataclass
class Change:
    """One source change of a document, from this batch (``source`` 2), a stored version (1) or a marker
    (0): the higher source wins a duplicate position, the first delivery's seq stays."""

    seq: str
    op: str  # insert / update (replace or patch) / delete / truncate, or a stored version's op
    time: dt.datetime | None
    image: dict[str, Any] | None = None  # a full image's document
    patch: dict[str, Any] | None = None  # a $set / $unset spec
    source: int = 0
    stored: dict[str, Any] | None = None  # a stored version's row: its state, when it is the oldest read

    @property
    def closes(self) -> bool:
        return self.op in ("delete", "truncate")


def batch_changes(events: pa.Table) -> tuple[dict[tuple[Any, ...], list[Change]], int]:
    """A document table's decoded DML events -> each key's changes, and how many could not be read (an
    image or spec that is not a JSON object of $set / $unset: the mirror's apply dead-letters them)."""
    dml = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
    out: dict[tuple[Any, ...], list[Change]] = {}
    bad = 0
    columns = ("op", "after", "before", "meta", "seq_text", "event_time")
    for op, after, before, meta, seq, time in zip(*(dml[c].to_pylist() for c in columns), strict=True):
        image_map = dict((before if op == "delete" else after) or [])
        key = image_map.get("_id")
        spec = dict(meta or []).get(PATCH_META)
        try:
            if key is None:
                raise ValueError("no _id")
            change = Change(seq, op, utc(time), source=2)
            if op == "delete":
                pass
            elif spec is not None:
                change.patch = loads(spec)
                patch_ops(change.patch)  # refuses what is not an update spec of $set / $unset
            else:
                change.image = loads(image_map["document"])
                if not isinstance(change.image, dict):
                    raise ValueError("the document is not a JSON object")
        except (PatchError, ValueError, KeyError, RecursionError):
            bad += 1
            continue
        out.setdefault((key,), []).append(change)
    return out, bad


def stored_change(row: dict[str, Any]) -> Change:
    """A stored version -> the change that opened it (its patch, else its document as a full image)."""
    state = loads(row[FIELDS]) if row.get(FIELDS) else {}
    change = Change(row[CDC_SEQ], row[CDC_OP], utc(row[VALID_FROM]), source=1, stored=row)
    if isinstance(state, dict) and "patch" in state:
        change.patch = state["patch"]
    elif row.get("document") is not None:
        change.image = loads(row["document"])
    return change


def chain(key: str, changes: Iterable[Change]) -> list[Version]:
    """One document's changes (any order, duplicates by position allowed) -> its versions, oldest first.

    The oldest change, when it is a stored version, keeps its stored state (every change before it is
    older than the batch, so it is right as it stands), as does a ``seeded`` version (the mirror's state
    when history was turned on); every other change is replayed on the state before it."""
    unique: dict[Position, Change] = {}
    for c in changes:
        at = position(c.seq)
        had = unique.get(at)
        if had is None:
            unique[at] = c
        else:
            best = c if c.source > had.source else had
            if SEEDED in (c.op, had.op):  # the mirror's state when history began, not a redelivered change
                best = c if c.op == SEEDED else had
            unique[at] = replace(best, seq=min(c.seq, had.seq), stored=best.stored or had.stored or c.stored)
    versions: list[Version] = []
    open_: Version | None = None
    doc: dict[str, Any] | None = None
    base: Position = ()
    kind: str | None = None
    for i, at in enumerate(sorted(unique)):
        c = unique[at]
        if c.stored is not None and (i == 0 or c.op == SEEDED):
            row = {name: c.stored.get(name) for name in DATA}
            state = loads(row[FIELDS]) if row[FIELDS] else {}
            doc = loads(row["document"]) if row["document"] is not None else None
            base = tuple(state.get("base") or at)
            kind = state.get("kind", IMAGE) if state else (None if row[PARTIAL] else IMAGE)
        elif c.closes:
            doc, base, kind = None, at, DELETE
            if open_ is not None:
                open_.valid_to, open_.current = c.time, False
            open_ = None
            continue
        else:
            fields: dict[str, Any]
            if c.patch is not None:
                doc = apply_patch(copy.deepcopy(doc) if doc is not None else {}, c.patch)
                fields = {"base": list(base), "kind": kind, "patch": c.patch}
            else:
                doc, base, kind = c.image, at, IMAGE
                fields = {"base": list(base), "kind": kind}
            row = {
                "_id": key,
                "document": document_text(key, doc or {}),
                FIELDS: dumps(fields),
                PARTIAL: kind != IMAGE,
            }
        if open_ is not None:
            open_.valid_to, open_.current = c.time, False
        open_ = Version(row, c.seq, c.op, c.time)
        versions.append(open_)
    return versions
