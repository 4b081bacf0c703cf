"""Partial updates: columns an event's image leaves out because the capture tool did not send them
(replicator.dialects.unavailable: Debezium's placeholder for PostgreSQL's unchanged TOASTed values).

A net change whose winning event names such columns takes each from the newest earlier event of the same
row in the batch that carried it (:func:`fill_from_batch`); what is still missing is left to the apply,
which takes the value the mirror stores for that row (:func:`fill_from_mirror`). Only batches with such
events pay for this: the check is one ``map_lookup`` over the events' ``meta``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.dialects.unavailable import META

IMAGE_TYPE = pa.map_(pa.string(), pa.string())
MOVED = "unavailable_from"  # meta: the old key (JSON array of its values' text) of a key-changing update
DELIVERY_PARTS = 5  # the delivery coordinates every seq ends with (fold.arrow.DELIVERY_PARTS)


def names(meta_value: str | None) -> list[str]:
    if not meta_value:
        return []
    try:
        found = json.loads(meta_value)
    except ValueError:
        return []
    return [n for n in found if type(n) is str] if type(found) is list else []


def fill_from_batch(
    folded: pa.Table,
    rows: pa.Table,
    ordered: pa.Table,
    last: pa.Table,
    key_names: Sequence[str],
    key: Sequence[str] = (),
) -> pa.Table:
    """``folded`` (``fold.arrow._folded`` of the winners ``last``) with each winner's missing columns taken
    from the newest earlier event of its (segment, key) that has them. ``rows``: the table's events;
    ``ordered``: their sort keys in seq order (``source`` indexes ``rows``, ``extra`` marks key-change
    deletes)."""
    missing_meta = pc.map_lookup(rows["meta"], META, "first")
    if missing_meta.null_count == len(missing_meta):
        return folded
    missing_meta = missing_meta.to_pylist()
    at, extra = last["source"].to_pylist(), last["extra"].to_pylist()
    wanted: dict[int, list[str]] = {}
    for g, (source, is_extra) in enumerate(zip(at, extra, strict=True)):
        if not is_extra and missing_meta[source]:
            wanted[g] = names(missing_meta[source])
    if not wanted:
        return folded
    group_keys = ["segment", *key_names]
    winners = {tuple(last[c][g].as_py() for c in group_keys): g for g in wanted}
    history: dict[int, list[int]] = {g: [] for g in wanted}  # earlier events of each wanted row, in order
    columns = [ordered[c].to_pylist() for c in group_keys]
    sources, extras = ordered["source"].to_pylist(), ordered["extra"].to_pylist()
    for i, source in enumerate(sources):
        g = winners.get(tuple(c[i] for c in columns))
        if g is not None and not extras[i] and source != at[g]:
            history[g].append(source)
    ops = rows["op"].to_pylist()
    after = rows["after"]
    images = folded["image"].to_pylist()
    metas = folded["meta"].to_pylist()
    moved = _moved_from(rows, [at[g] for g in wanted if ops[at[g]] == "insert"], key)
    old_key_events = _old_key_events(rows, ordered, moved, key)
    for g, missing in wanted.items():
        image = dict(images[g] or [])
        # its own key's earlier events, then (a key change) the old key's before the change
        for source in [*reversed(history[g]), *old_key_events.get(at[g], [])]:
            if not missing or ops[source] == "delete":
                break
            earlier = dict(after[source].as_py() or [])
            left_out = set(names(missing_meta[source]))
            for name in [m for m in missing if m in earlier and m not in left_out]:
                image[name] = earlier[name]
                missing.remove(name)
        images[g] = list(image.items())
        metas[g] = _with_missing(metas[g], missing, moved.get(at[g]) if missing else None)
    return folded.set_column(
        folded.column_names.index("image"), "image", pa.array(images, IMAGE_TYPE)
    ).set_column(folded.column_names.index("meta"), "meta", pa.array(metas, IMAGE_TYPE))


def _moved_from(rows: pa.Table, inserts: list[int], key: Sequence[str]) -> dict[int, list[str | None]]:
    """Inserts that are the new key of a primary-key update: Debezium publishes such an UPDATE as a delete
    of the old key and a create of the new one at the same source position (PostgreSQL: one ``lsn``), the
    create with placeholders for the unchanged TOASTed values. -> event index: the old key's values."""
    if not inserts or not key:
        return {}
    seqs = rows["seq"].to_pylist()
    ops = rows["op"].to_pylist()
    deletes: dict[tuple[int, ...], int] = {}
    for i, op in enumerate(ops):
        if op == "delete" and seqs[i]:
            deletes[tuple(seqs[i][:-DELIVERY_PARTS])] = i
    found = {}
    for i in inserts:
        j = deletes.get(tuple(seqs[i][:-DELIVERY_PARTS])) if seqs[i] else None
        before = dict(rows["before"][j].as_py() or []) if j is not None else {}
        if before and all(k in before for k in key):
            found[i] = [before[k] for k in key]
    return found


def _old_key_events(
    rows: pa.Table, ordered: pa.Table, moved: dict[int, list[str | None]], key: Sequence[str]
) -> dict[int, list[int]]:
    """The new key's insert of a key change -> the events of its old key earlier in the batch (same
    segment), newest first: a mirror started late has the old key's values in the batch, not stored."""
    if not moved:
        return {}
    sources, extras = ordered["source"].to_pylist(), ordered["extra"].to_pylist()
    segments = ordered["segment"].to_pylist()
    after_keys = list(zip(*(pc.map_lookup(rows["after"], k, "first").to_pylist() for k in key), strict=True))
    position = {s: i for i, s in enumerate(sources) if not extras[i]}
    found: dict[int, list[int]] = {}
    for insert, old in moved.items():
        at, wanted = position.get(insert), tuple(old)
        if at is None:
            continue
        found[insert] = [
            sources[i]
            for i in range(at - 1, -1, -1)
            if not extras[i] and segments[i] == segments[at] and after_keys[sources[i]] == wanted
        ]
    return found


def _with_missing(
    meta: list[tuple[str, str]] | None, missing: list[str], moved: list[str | None] | None = None
) -> list[tuple[str, str]]:
    """The entry stays when nothing is missing any more (``[]``): the apply counts the partial updates."""
    entries = [(k, v) for k, v in meta or [] if k not in (META, MOVED)]
    entries.append((META, json.dumps(missing)))
    if moved is not None:
        entries.append((MOVED, json.dumps(moved)))
    return entries


def fill_from_mirror(
    rows: pa.Table,
    table: pa.Table,
    key: Sequence[str],
    mirror_name: Callable[[str], str],
    read_stored: Callable[[str, pa.Array, list[str]], pa.Table],
) -> tuple[pa.Table, int, int]:
    """``table`` (``rows`` typed for the mirror, row for row) with the columns each row's ``meta`` still
    names as missing set to the value the mirror stores for that row. Returns the table, the number of
    partial updates (rows with such columns, filled in the batch or here) and of the values no stored row
    had (left NULL: the row was not in the mirror)."""
    if "meta" not in rows.column_names or rows.num_rows == 0:
        return table, 0, 0
    missing_meta = pc.map_lookup(rows["meta"], META, "first")
    if missing_meta.null_count == len(missing_meta):
        return table, 0, 0
    partial = len(missing_meta) - missing_meta.null_count
    wanted = {i: names(m) for i, m in enumerate(missing_meta.to_pylist()) if m}
    present = set(table.column_names)
    wanted = {i: [mirror_name(n) for n in ns if mirror_name(n) in present] for i, ns in wanted.items()}
    wanted = {i: ns for i, ns in wanted.items() if ns}
    if not wanted:
        return table, partial, 0
    key_columns = [mirror_name(k) for k in key]
    needed = sorted({n for ns in wanted.values() for n in ns})
    moved_meta = pc.map_lookup(rows["meta"], MOVED, "first").to_pylist()
    # The stored row of each wanted row: its own key's, or the old key's of a key-changing update (text).
    lookup = {
        i: (tuple(json.loads(moved_meta[i])), True)
        if moved_meta[i]
        else (tuple(table[k][i].as_py() for k in key_columns), False)
        for i in wanted
    }
    first = table.schema.field(key_columns[0]).type
    probe_values = [values[0] for values, _text_key in lookup.values()]
    probe = pc.unique(pa.array([str(v) if v is not None else None for v in probe_values]).cast(first))
    stored = read_stored(key_columns[0], probe, [*key_columns, *needed])
    by_key: dict[tuple[Any, ...], int] = {}
    for j in range(stored.num_rows):
        values = tuple(stored[k][j].as_py() for k in key_columns)
        by_key[values] = j
        by_key[tuple(_text(v) for v in values)] = j  # (an old key arrives as text)
    unresolved = 0
    for name in needed:
        at = table.column_names.index(name)
        values = table[name].to_pylist()
        for i, ns in wanted.items():
            if name not in ns:
                continue
            j = by_key.get(lookup[i][0])
            if j is None:
                values[i] = None
                unresolved += 1
            else:
                values[i] = stored[name][j].as_py()
        table = table.set_column(at, table.schema.field(at), pa.array(values, table.schema.field(at).type))
    return table, partial, unresolved


def _text(value: Any) -> str | None:
    """A stored key value as the text an image carries (integers and strings: the ones keys use)."""
    return None if value is None else str(value)


def by_seq(rows: pa.Table, mirror_name: Callable[[str], str]) -> dict[str, tuple[str, ...]]:
    """Events (``seq_text``, ``meta``) -> seq text: the mirror columns they did not carry (history tables:
    such a version takes them from the version before it, replicator.apply.history.versions.chain)."""
    if "meta" not in rows.column_names or rows.num_rows == 0:
        return {}
    missing_meta = pc.map_lookup(rows["meta"], META, "first")
    if missing_meta.null_count == len(missing_meta):
        return {}
    seqs = rows["seq_text"].to_pylist()
    return {
        seqs[i]: tuple(mirror_name(n) for n in names(m))
        for i, m in enumerate(missing_meta.to_pylist())
        if m and names(m)
    }
