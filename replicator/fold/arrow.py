"""Order and fold: a batch's decoded events (Arrow) -> one net change per (table, segment, primary key).

The batch's decoded events are one Arrow table on the driver; ordering and folding are Arrow compute,
bounded by the trigger size (``max_files_per_trigger`` / ``maxOffsetsPerTrigger``). Measured on 2 cores
(benchmarks/LOG.md): the former Spark aggregate over map columns cost 25 µs per event, this about 1 µs.

Barriers (DDL, TRUNCATE) split a table's events into segments applied in source order; inside a segment
the event with the newest ``seq`` wins. An update that changes the primary key becomes a delete of the old
key and an upsert of the new one. Document patches (drs-mongo ``$set``/``$unset``, carried in
``meta['mongo_update']``) are collected in order instead of being folded away, because each one applies
on top of the previous state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replicator.dialects.events import SEQ_SYSTEM, decoded_schema, with_seq_text
from replicator.fold import unavailable
from replicator.model import DML_OPS, SEQ_WIDTH, TableId, keep, key_changes, seq_text

PATCH_META = "mongo_update"
# meta key of every drs-mongo DML event: its table's net changes are documents, merged field by field by
# the applier (replicator.apply.documents) from the newest full image and the patches after it.
DOCUMENT_META = "mongo_doc"
IMAGE_TYPE = pa.map_(pa.string(), pa.string())


# Every seq ends with the delivery coordinates: batch id, partition (or file mtime), offset (or line),
# message index, row (events.Events.row).
DELIVERY_PARTS = 5
DELIVERY_CHARS = DELIVERY_PARTS * (SEQ_WIDTH + 1) - 1  # their text at the end of seq_text


@dataclass(frozen=True)
class Barrier:
    table: TableId
    seq: tuple[int, ...]
    system: str | None = None  # meta.seq_system of the barrier event


def delivered_after(newest: str | None, barrier_seq_text: str) -> str:
    """The seq, in the coordinate system of a table's DML, of a barrier stated in another system (CKafka:
    canal-shaped DDL by es/id beside format-one DML by binlog file/pos, Tencent CKafka
    «MySQL 订阅消息官方格式说明»): placed by delivery, right
    after ``newest`` (the newest DML of the table applied before it, a seq text of that system; None: before
    any), i.e. that DML's source part followed by the barrier's delivery coordinates. The truncate point and
    horizon a TRUNCATE, DROP or RENAME leaves then compare with the table's DML by seq as the delivery order
    decided (:func:`_segments` splits a batch's DML at the barrier the same way)."""
    delivery = barrier_seq_text[-DELIVERY_CHARS:]
    if newest and len(newest) > DELIVERY_CHARS:
        return newest[:-DELIVERY_CHARS] + delivery
    return "0" * SEQ_WIDTH + "." + delivery


def rows_system(rows: pa.Table) -> str | None:
    """The coordinate system of a table's folded rows (meta.seq_system, "" the dialect's usual one), None
    without rows."""
    if rows.num_rows == 0:
        return None
    if "meta" not in rows.column_names:
        return ""
    systems = pc.map_lookup(rows["meta"].slice(0, 1), SEQ_SYSTEM, "first").to_pylist()
    return systems[0] or ""


def seq_system(event: Mapping[str, object]) -> str | None:
    """The coordinate system an event (a dict, maps as dicts) states for its seq, or None."""
    meta = event.get("meta")
    return meta.get(SEQ_SYSTEM) if isinstance(meta, Mapping) else None


def split_by_table(events: pa.Table) -> Iterable[tuple[TableId, pa.Table]]:
    """Each table's rows, in their batch order: one stable sort of the table codes and one ``take`` of
    the whole batch, then zero-copy slices (a batch of one table is passed through as it is).

    A ``take`` per table would cost the whole batch each time: taking from a chunked map column
    concatenates its chunks first (measured: 200 tables, 4 s)."""
    if events.num_rows == 0:
        return
    ident = pc.binary_join_element_wise(
        pc.fill_null(events["database"], ""),
        pc.fill_null(events["schema"], "\x00"),
        pc.fill_null(events["table"], ""),
        "\x1f",
    )
    codes = pc.dictionary_encode(ident).combine_chunks()
    if len(codes.dictionary) == 1:
        yield (events["database"][0].as_py(), events["schema"][0].as_py(), events["table"][0].as_py()), events
        return
    order = pc.sort_indices(codes.indices)  # stable: rows of a table keep their order
    ordered = events.take(order)
    sorted_codes = codes.indices.take(order)
    n = len(sorted_codes)
    changes = pc.indices_nonzero(
        pc.not_equal(sorted_codes.slice(1), sorted_codes.slice(0, n - 1))
    ).to_pylist()
    starts = [0, *[i + 1 for i in changes]]
    for start, end in zip(starts, [*starts[1:], n], strict=True):
        part = ordered.slice(start, end - start)
        yield (part["database"][0].as_py(), part["schema"][0].as_py(), part["table"][0].as_py()), part


def _with_key(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """Fill ``primary_key`` where the message carried none (ckafka format one, DTS without keys)."""
    lengths = pc.fill_null(pc.list_value_length(rows["primary_key"]), 0)
    missing = pc.equal(lengths, 0)
    if not pc.any(missing).as_py():
        return rows
    filled = pc.if_else(missing, pa.scalar(list(key), pa.list_(pa.string())), rows["primary_key"])
    return rows.set_column(rows.schema.get_field_index("primary_key"), "primary_key", filled)


def _constant(value: bool | int, n: int) -> pa.Array:
    """An array of ``n`` equal values (without an ``n``-long Python list)."""
    if isinstance(value, bool):
        return pa.array(np.full(n, value, dtype=bool))
    return pa.array(np.full(n, value, dtype=np.int32))


def _segments(
    rows: pa.Table, seqs: Sequence[tuple[int, ...]], systems: Sequence[str | None] | None = None
) -> pa.Array:
    """How many of the table's barriers in this batch precede each event: by seq when the event and the
    barrier state the same coordinate system (``systems``, meta.seq_system), else by delivery order (the
    coordinates every seq ends with)."""
    segment = _constant(0, rows.num_rows)
    row_systems = delivered = None
    for i, s in enumerate(seqs):
        text = seq_text(list(s))
        later = pc.greater(rows["seq_text"], text)
        if "meta" in rows.column_names:
            if row_systems is None:
                row_systems = pc.fill_null(pc.map_lookup(rows["meta"], SEQ_SYSTEM, "first"), "")
            differs = pc.not_equal(row_systems, (systems[i] if systems else None) or "")
            if pc.any(differs).as_py():
                if delivered is None:
                    delivered = pc.utf8_slice_codeunits(rows["seq_text"], -DELIVERY_CHARS)
                by_delivery = pc.greater(delivered, text[-DELIVERY_CHARS:])
                later = pc.if_else(differs, by_delivery, later)
        segment = pc.add(segment, pc.cast(later, pa.int32()))
    return segment


def _key_list(values: list[pa.Array]) -> pa.Array:
    n = len(values[0]) if values else 0
    width = len(values)
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    if width == 1:
        return pa.ListArray.from_arrays(offsets, values[0])
    order = (np.arange(width)[None, :] * n + np.arange(n)[:, None]).ravel()  # row by row, column by column
    return pa.ListArray.from_arrays(offsets, pa.concat_arrays(values).take(pa.array(order)))


def _seq_sort_keys(rows: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
    """Sort keys in ``seq`` order: its parts as integer columns when every ``seq`` has the same length
    (compared as ``seq_text`` compares them: negative parts as 0), else the text itself (slower; made
    from ``seq`` where the rows came without)."""
    seq = rows["seq"]
    seq = seq.combine_chunks() if isinstance(seq, pa.ChunkedArray) else seq
    lengths = pc.list_value_length(seq)
    n = len(seq)
    if n == 0 or seq.null_count or pc.min(lengths).as_py() != pc.max(lengths).as_py():
        return {"_s": with_seq_text(rows)["seq_text"]}
    width = pc.min(lengths).as_py()
    flat = np.maximum(pc.list_flatten(seq).to_numpy(), 0).reshape(n, width)
    varying = [
        j for j in range(width) if flat[:, j].min() != flat[:, j].max()
    ]  # constant parts decide nothing
    return {f"_s{j}": pa.array(flat[:, j]) for j in varying} or {"_s0": pa.array(flat[:, 0])}


def fold_table(
    rows: pa.Table,
    key: Sequence[str],
    barriers: Sequence[tuple[int, ...]],
    systems: Sequence[str | None] | None = None,
) -> pa.Table:
    """One table's DML events (one primary key) -> its net changes, in the columns apply.py reads.
    ``systems``: each barrier's meta.seq_system (see :func:`_segments`).

    Only small columns are sorted (segment, key values, seq text); the row images are gathered once, for
    the winning event of each key."""
    rows = keep(rows, pc.is_in(rows["op"], pa.array(DML_OPS)))
    n = rows.num_rows
    # The decode tasks send no seq text (~150 characters an event, 0.7 µs to make): it is made here for the
    # winners alone, or for every event where barriers or patches compare it.
    if barriers:
        rows = with_seq_text(rows)
    segment = _segments(rows, barriers, systems)
    op = rows["op"].combine_chunks()
    is_delete = pc.equal(op, "delete")
    # Map columns stay chunked (one chunk per decoded slice): combining them costs more than every lookup
    # and take below together (measured: 1.3 s for 1M events).
    after = rows["after"]
    before = rows["before"]
    # An update whose key differs between before and after: delete(old key) + upsert(new key).
    old_key, new_key, changed = key_changes(op, before, after, key)
    key_cols = [pc.if_else(is_delete, o, a) for o, a in zip(old_key, new_key, strict=True)]
    patch = pc.map_lookup(rows["meta"], PATCH_META, "first")
    document = pc.map_lookup(rows["meta"], DOCUMENT_META, "first")
    if patch.null_count < len(patch) or document.null_count < len(document):
        rows = with_seq_text(rows)
        return _fold_with_patches(rows, key, segment, changed, before, after, key_cols, old_key, patch)

    # The sort keys of every event, plus one "delete of the old key" per key change (extra = True).
    source = pa.array(np.arange(n, dtype=np.int64))
    seq_keys = _seq_sort_keys(rows)
    small = {
        "segment": segment,
        **{f"_k{i}": c for i, c in enumerate(key_cols)},
        **seq_keys,
        "source": source,
        "extra": _constant(False, n),
    }
    table = pa.table(small)
    if pc.any(changed).as_py():
        extra = pa.table(
            {
                "segment": segment.filter(changed),
                **{f"_k{i}": old.filter(changed) for i, old in enumerate(old_key)},
                **{name: small[name].filter(changed) for name in seq_keys},
                "source": source.filter(changed),
                "extra": _constant(True, pc.sum(changed).as_py()),
            }
        )
        table = pa.concat_tables([table, extra]).combine_chunks()
    key_names = [f"_k{i}" for i in range(len(key))]
    # Sort by seq alone (integers), then a hash aggregate keeps each (segment, key)'s last row in that
    # order: measured 3x faster than one sort by segment, key text and seq.
    order = pc.sort_indices(table, [(c, "ascending") for c in seq_keys])
    ordered = table.take(order)
    ordered = ordered.append_column("_pos", pa.array(np.arange(ordered.num_rows, dtype=np.int64)))
    winners = ordered.group_by(["segment", *key_names], use_threads=False).aggregate([("_pos", "last")])
    last = ordered.take(winners["_pos_last"])
    at = last["source"].combine_chunks()
    extra = last["extra"].combine_chunks()
    use_before = pc.or_(extra, is_delete.take(at))
    # One gather from the two image columns side by side (row i's before image is row n + i): measured
    # 0.2 µs per winner, against 0.8 for both gathers and an if_else between the two maps.
    images = pa.chunked_array([*_chunks(after), *_chunks(before)], after.type)
    picks = np.asarray(at, dtype=np.int64) + np.where(np.asarray(use_before), n, 0)
    folded = _folded(
        segment=last["segment"],
        keys=_key_list([last[k].combine_chunks() for k in key_names]),
        op=pc.if_else(extra, pa.scalar("delete"), op.take(at)),
        image=images.take(pa.array(picks)),
        rows=with_seq_text(  # the winners' text, where the events came without
            rows.select([c for c in _WINNER_COLUMNS if c in rows.column_names]).take(at)
        ),
    )
    if "meta" not in rows.column_names:
        return folded
    return unavailable.fill_from_batch(folded, rows, ordered, last, key_names, key)  # partial updates (TOAST)


# What a net change keeps of its winning event (seq_text where the events have it, meta where they do).
_WINNER_COLUMNS = ("primary_key", "seq", "seq_text", "event_time", "position", "coordinates", "meta")


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return column.chunks if isinstance(column, pa.ChunkedArray) else [column]


def _folded(segment: pa.Array, keys: pa.Array, op: pa.Array, image: pa.Array, rows: pa.Table) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "segment": segment,
            "key": keys,
            "op": op,
            "image": image,
            "primary_key": rows["primary_key"],
            "seq": rows["seq"],
            "seq_text": rows["seq_text"],
            "event_time": rows["event_time"],
            "position": rows["position"],
            "coordinates": rows["coordinates"],
            # the winner's meta: its seq_system orders it against barriers when folded again (replicator.fold)
            "meta": rows["meta"] if "meta" in rows.column_names else pa.nulls(n, IMAGE_TYPE),
            "patches": pa.nulls(n, pa.list_(pa.string())),
            "has_patches": _constant(False, n),
            "base_op": pa.nulls(n, pa.string()),
        }
    )


def _fold_with_patches(  # type: ignore[no-untyped-def]
    rows, key, segment, changed, before, after, key_cols, old_key, patch
) -> pa.Table:
    """Document patches (drs-mongo): every event of a key in order, the newest full image the base."""
    is_delete = pc.equal(rows["op"], "delete")
    base = {
        "segment": segment,
        "op": rows["op"].combine_chunks(),
        "image": pc.if_else(is_delete, before, after),
        "primary_key": rows["primary_key"].combine_chunks(),
        "seq": rows["seq"].combine_chunks(),
        "seq_text": rows["seq_text"].combine_chunks(),
        "event_time": rows["event_time"].combine_chunks(),
        "position": rows["position"].combine_chunks(),
        "coordinates": rows["coordinates"].combine_chunks(),
        "patch": patch,
        **{f"_k{i}": c for i, c in enumerate(key_cols)},
    }
    events = pa.table(base)
    if pc.any(changed).as_py():
        extra = events.filter(changed)
        extra = extra.set_column(
            extra.schema.get_field_index("op"), "op", pa.array(["delete"] * extra.num_rows, pa.string())
        )
        extra = extra.set_column(extra.schema.get_field_index("image"), "image", before.filter(changed))
        extra = extra.set_column(
            extra.schema.get_field_index("patch"), "patch", pa.nulls(extra.num_rows, pa.string())
        )
        for i, old in enumerate(old_key):
            extra = extra.set_column(extra.schema.get_field_index(f"_k{i}"), f"_k{i}", old.filter(changed))
        events = pa.concat_tables([events, extra])
    key_names = [f"_k{i}" for i in range(len(key))]
    ordered = events.sort_by(
        [("segment", "ascending"), *[(k, "ascending") for k in key_names], ("seq_text", "ascending")]
    )
    n = ordered.num_rows
    boundary = pa.array([False] * (n - 1), pa.bool_())
    for name in ["segment", *key_names]:
        col = pc.fill_null(ordered[name].combine_chunks(), "" if name != "segment" else -1)
        boundary = pc.or_(boundary, pc.not_equal(col.slice(1), col.slice(0, n - 1)))
    ends = [*pc.indices_nonzero(boundary).to_pylist(), n - 1]
    last = ordered.take(pa.array(ends, pa.int64()))
    folded = _folded(
        segment=last["segment"],
        keys=_key_list([last[k].combine_chunks() for k in key_names]),
        op=last["op"],
        image=last["image"],
        rows=last,
    ).drop_columns(["patches", "has_patches", "base_op"])
    return _with_patches(ordered, folded, ends)


def _with_patches(ordered: pa.Table, folded: pa.Table, ends: list[int]) -> pa.Table:
    """The newest full image (or delete) is the base; patches newer than it apply on top, in order. Each
    with its seq (``base_seq``, ``patch_seqs``): the applier merges them into the stored document by their
    source positions (replicator.apply.documents), whatever the batch they came in."""
    ops = ordered["op"].to_pylist()
    patches_col = ordered["patch"].to_pylist()
    seqs = ordered["seq_text"].to_pylist()
    images = ordered["image"]
    image_out = folded["image"].to_pylist()
    patches, patch_seqs, has, base_ops, base_seqs = [], [], [], [], []
    start = 0
    for g, end in enumerate(ends):
        full = [i for i in range(start, end + 1) if patches_col[i] is None or ops[i] == "delete"]
        last_full = full[-1] if full else None
        pending = [
            i
            for i in range(start, end + 1)
            if patches_col[i] is not None and ops[i] != "delete" and (last_full is None or i > last_full)
        ]
        base_ops.append(ops[last_full] if last_full is not None else None)
        base_seqs.append(seqs[last_full] if last_full is not None else None)
        if pending:
            patches.append([patches_col[i] for i in pending])
            patch_seqs.append([seqs[i] for i in pending])
            has.append(True)
            if last_full is not None and images[last_full].is_valid:
                image_out[g] = images[last_full].as_py()
        else:
            patches.append(None)
            patch_seqs.append(None)
            has.append(False)
        start = end + 1
    folded = folded.set_column(
        folded.schema.get_field_index("image"), "image", pa.array(image_out, IMAGE_TYPE)
    )
    return (
        folded.append_column("patches", pa.array(patches, pa.list_(pa.string())))
        .append_column("has_patches", pa.array(has))
        .append_column("base_op", pa.array(base_ops, pa.string()))
        .append_column("base_seq", pa.array(base_seqs, pa.string()))
        .append_column("patch_seqs", pa.array(patch_seqs, pa.list_(pa.string())))
    )


COORDINATES_TYPE = decoded_schema().field("coordinates").type


def no_changes() -> pa.Table:
    """The folded rows of a table that has only barriers in a batch."""
    return pa.table(
        {
            "segment": pa.array([], pa.int32()),
            "key": pa.array([], pa.list_(pa.string())),
            "op": pa.array([], pa.string()),
            "image": pa.array([], IMAGE_TYPE),
            "primary_key": pa.array([], pa.list_(pa.string())),
            "seq": pa.array([], pa.list_(pa.int64())),
            "seq_text": pa.array([], pa.string()),
            "event_time": pa.array([], pa.timestamp("us", tz="UTC")),
            "position": pa.array([], pa.string()),
            "coordinates": pa.array([], COORDINATES_TYPE),
            "patches": pa.array([], pa.list_(pa.string())),
            "has_patches": pa.array([], pa.bool_()),
            "base_op": pa.array([], pa.string()),
        }
    )


def keyless(rows: pa.Table, key: Sequence[str], table: TableId) -> tuple[pa.Table, pa.Table | None]:
    """A table's DML events (one key) -> those with a value for every key column (a delete's in its before
    image, the others' in their after image), and the rest as (``coordinates``, ``error``) naming the first
    key column each lacks, or None. Such an event cannot be folded or merged by key (its NULL key would
    fold together with the others' and break the mirror's non-nullable key): a dead letter, e.g. where
    ``tables.keys`` names a column the table does not have."""
    from replicator.model import map_values, table_label

    is_delete = pc.fill_null(pc.equal(rows["op"], "delete"), False)
    values = [
        pc.if_else(is_delete, b, a)
        for b, a in zip(map_values(rows["before"], key), map_values(rows["after"], key), strict=True)
    ]
    absent = [pc.is_null(v) for v in values]
    lacking = absent[0]
    for mask in absent[1:]:
        lacking = pc.or_(lacking, mask)
    if not pc.any(lacking).as_py():
        return rows, None
    error = pa.nulls(rows.num_rows, pa.string())
    for name, mask in reversed(list(zip(key, absent, strict=True))):  # the first column lacking names it
        text = (
            f"table {table_label(table)}: key column {name!r} is absent or NULL in this event (key "
            f"{list(key)}, from the message or tables.keys): it cannot be applied by key"
        )
        error = pc.if_else(mask, pa.scalar(text), error)
    rejected = pa.table({"coordinates": rows["coordinates"], "error": error}).filter(lacking)
    return rows.filter(pc.invert(lacking)), rejected


def fold(
    events: pa.Table,
    keys: Mapping[TableId, Sequence[str]],
    barriers: Sequence[Barrier],
    rejected: list[tuple[TableId, pa.Table]] | None = None,
) -> Iterable[tuple[TableId, pa.Table]]:
    """The batch's DML events -> per table, one row per (segment, key); tables without a key are skipped.
    Events lacking a key value (:func:`keyless`) are left out and, with ``rejected``, appended to it."""
    by_table: dict[TableId, list[tuple[int, ...]]] = {}
    systems: dict[TableId, list[str | None]] = {}
    for barrier in barriers:
        by_table.setdefault(barrier.table, []).append(barrier.seq)
        systems.setdefault(barrier.table, []).append(barrier.system)
    for table, rows in split_by_table(events):
        key = keys.get(table)
        if not key:
            continue
        rows = _with_key(rows, key)
        own, own_systems = by_table.get(table, []), systems.get(table)
        # A message may name another key than the table's (rare): each key is folded on its own.
        joined = pc.binary_join(rows["primary_key"], "\x1f")
        distinct = pc.unique(joined).to_pylist()
        parts = []
        for d in distinct:
            part = rows if len(distinct) == 1 else rows.filter(pc.equal(joined, d))
            part, lacking = keyless(part, d.split("\x1f"), table)
            if lacking is not None and rejected is not None:
                rejected.append((table, lacking))
            if part.num_rows:
                parts.append(fold_table(part, d.split("\x1f"), own, own_systems))
        if parts:
            yield table, parts[0] if len(parts) == 1 else pa.concat_tables(parts)
