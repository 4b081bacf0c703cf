"""Apply one table's share of a micro-batch to its mirror, on the driver, in Arrow.

Per table: segments of folded rows separated by barriers (DDL/TRUNCATE), each segment typed against the
mirror schema, guarded against tombstones and the table's truncate point, then MERGEd so that only newer
``_cdc_seq`` wins. The last commit of the table carries the app transaction (job, batch id); a replayed
batch finds it and skips the table. Every write is also idempotent by sequence on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replicator import payload
from replicator.apply import documents, row_types
from replicator.columns import ColumnMap, source_name, with_source
from replicator.fold import mirror_files, unavailable
from replicator.fold.arrow import delivered_after, rows_system, seq_system
from replicator.logging import get_logger
from replicator.model import (
    CDC_COLUMNS,
    CDC_EVENT_TIME,
    CDC_OP,
    CDC_POSITION,
    CDC_SEQ,
    TableId,
    parse_seq_text,
    seq_text,
    table_label,
)
from replicator.sinks.base import MergeResult, MirrorWriter, Txn, key_range, quote
from replicator.state import State, TableState
from replicator.types import REST, TYPE_ERROR, TYPED, cdc_columns, column_type, type_images

log = get_logger("replicator.apply")

CDC_FIELDS = [
    pa.field(CDC_OP, pa.string()),
    pa.field(CDC_SEQ, pa.string()),
    pa.field(CDC_EVENT_TIME, pa.timestamp("us", tz="UTC")),
    pa.field(CDC_POSITION, pa.string()),
]
TOMBSTONE_DELETED_AT = "_cdc_deleted_at"


# The delivery coordinates every seq ends with (batch, partition, offset, message, row; dialects.events).
DELIVERY_PARTS = 5
# A document mirror's columns beside ``_id`` (a delete's image has only the ``_id``: a mirror first created by
# one, or written before documents kept their merge state, gets them when a document is merged).
DOCUMENT_FIELDS = [
    pa.field("document", pa.string()),
    pa.field(documents.FIELDS, pa.string()),
    pa.field(documents.PARTIAL, pa.bool_()),
]


HORIZON = "horizon_seq"  # a barrier event's truncate point in its table's DML system (TableApplier.horizon)


def _position(seq: str | None) -> tuple[int, ...]:
    """A seq text's source position: its parts without the delivery coordinates."""
    parts = parse_seq_text(seq or "")
    return parts[:-DELIVERY_PARTS] if len(parts) > DELIVERY_PARTS else parts


IMAGE = pa.map_(pa.string(), pa.string())
UNTYPED = {"replicator.untyped": "true"}  # field metadata of a column typed string for lack of a type


@dataclass
class DeadRow:
    """An event that could not be applied; the engine fetches its raw record by coordinates."""

    coordinates: dict[str, Any]
    error: str
    database: str | None
    table: str | None


# Net changes of one segment from which freeing the images before the MERGE is worth a check of the driver's
# resident size (payload.release_memory).
LARGE_PART = 50_000


@dataclass
class TableBatch:
    table: TableId
    mirror: MirrorWriter
    rows: pa.Table  # folded rows of this table, all segments
    barriers: list[dict[str, Any]]  # barrier events of this table in seq order
    types: dict[str, str]  # column -> latest source type text, in first-seen order
    state: TableState
    bulk: bool = False  # snapshot rows of a loading table: append when safe (replicator.apply.phases)
    # Files of upserts the fold tasks wrote to the mirror's folder (replicator.fold.mirror_files), to commit
    files: pa.Table | None = None
    # Their folder when they were staged for a writer that MERGEs from files (FoldPlan.stages), not written
    # into the mirror's folder
    stage: str | None = None


@dataclass(frozen=True)
class Fill:
    """ADD COLUMN defaults set in the rows older than ``before`` (MirrorWriter.fill's arguments)."""

    values: pa.Table  # one row: column -> its default
    before: str
    match: dict[str, str] | None = None


def _renamed_key(images: pa.MapArray, rows: np.ndarray, old: str, new: str) -> pa.MapArray:
    """Images whose key ``old`` is named ``new`` in the ``rows`` (a mask). A map array's offsets index its
    whole child arrays (sliced or not)."""
    offsets = np.asarray(images.offsets)
    keys = images.keys
    in_rows = np.zeros(len(keys), bool)
    in_rows[offsets[0] : offsets[-1]] = np.repeat(rows, np.diff(offsets))
    hit = pc.and_(pa.array(in_rows), pc.fill_null(pc.equal(keys, pa.scalar(old)), False))
    renamed = pc.if_else(hit, pa.scalar(new), keys)
    return pa.MapArray.from_arrays(
        images.offsets, renamed, images.items, type=images.type, mask=pc.is_null(images)
    )


def fill_text(recorded: str | None, fill: Fill) -> str:
    """A table's recorded fills (TableState.fills) with ``fill``, which replaces one of the same DDL (a
    batch applied again records it again)."""
    import base64
    import json

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, fill.values.schema) as writer:
        writer.write_table(fill.values)
    entry = {
        "before": fill.before,
        "match": fill.match,
        "values": base64.b64encode(sink.getvalue().to_pybytes()).decode(),
    }
    # A DDL's fill is named by its seq and shard (one Fill per DDL event: flush_defaults).
    kept = [e for e in json.loads(recorded or "[]") if (e["before"], e["match"]) != (fill.before, fill.match)]
    return json.dumps([*kept, entry])


def first_row_defaults(part: pa.Table, columns: Sequence[str]) -> dict[str, dict[str, str]]:
    """The row-schema defaults of ``columns`` (dialects.row_defaults, in the rows' ``meta``) as declared
    by the oldest row declaring each: its seq -> {column: default text}."""
    import json

    from replicator.dialects.row_defaults import META

    texts = pc.map_lookup(part["meta"], META, "first")
    found = pc.is_valid(texts)
    if not columns or not pc.any(found).as_py():
        return {}
    declared = pa.table({"text": texts, "seq": part["seq_text"]}).filter(found)
    firsts = declared.group_by("text").aggregate([("seq", "min")]).sort_by("seq_min")
    first: dict[str, tuple[str, str]] = {}
    for text, seq in zip(firsts["text"].to_pylist(), firsts["seq_min"].to_pylist(), strict=True):
        for name, value in json.loads(text).items():
            if name in columns and name not in first:
                first[name] = (seq, value)
    out: dict[str, dict[str, str]] = {}
    for name, (seq, value) in first.items():
        out.setdefault(seq, {})[name] = value
    return out


def recorded_fills(recorded: str | None) -> list[Fill]:
    import base64
    import json

    return [
        Fill(pa.ipc.open_stream(base64.b64decode(e["values"])).read_all(), e["before"], e["match"])
        for e in json.loads(recorded or "[]")
    ]


def renamed_text(recorded: str | None, old: str, new: str, before: str) -> str:
    """A table's recorded column renames (TableState.renames) with this one (once, however often its
    batch is applied)."""
    import json

    entry = {"old": old, "new": new, "before": before}
    return json.dumps([*(e for e in json.loads(recorded or "[]") if e != entry), entry])


@dataclass
class TableResult:
    table: TableId
    merged: MergeResult = field(default_factory=MergeResult)
    dead: list[DeadRow] = field(default_factory=list)
    state: TableState | None = None
    skipped: bool = False
    ddl: list[dict[str, Any]] = field(default_factory=list)
    ignored_values: int = 0  # values of columns unknown to the mirror, dropped (schema_evolution: ignore)
    partial_documents: int = 0  # documents written from patches without their full image (drs-mongo)
    partial_history_versions: int = 0  # history versions written from such patches (apply.history)
    # rows at or before the table's truncate point (a bootstrap's position, a TRUNCATE): not applied
    before_horizon: int = 0
    partial_updates: int = 0  # rows whose update did not carry every column (unchanged TOAST): kept
    unavailable_lost: int = 0  # such values of rows the mirror did not hold: NULL
    # ADD COLUMN defaults given to the rows already there (replicator.apply.schema.fill_default): notes for
    # the batch summary, and the fills the history's current versions take too
    defaults: list[dict[str, Any]] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)


BarrierHandler = Callable[["TableApplier", dict[str, Any]], None]


def behind_message(table: str, mirror: str, done: int | None, expected: int, app: str) -> str:
    """The stop of a mirror whose Delta log lost commits (TableApplier.check_behind, commands.preflight)."""
    held = f"batch {done}" if done is not None else "no batch"
    return (
        f"mirror {table} ({mirror}) is behind: its Delta log holds {held} of {app}, the registry recorded "
        f"batch {expected} as applied to it (its newest log entries are missing); nothing was written. "
        f"Restore the missing {mirror}/_delta_log files, or rebuild it from the change log: "
        f"`replicator repair --config <job file> --tables {table}` (docs/operations.md, Recovering from "
        "damaged state)"
    )


def images(rows: pa.Table) -> pa.ChunkedArray:
    """Folded rows' text images: the whole images, or for rows the fold tasks typed the entries of the
    columns their mirror did not have (replicator.fold.typed)."""
    return rows["image"] if "image" in rows.column_names else rows[REST]


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


class TableApplier:
    """Applies one :class:`TableBatch`. ``on_barrier`` handles DDL events (replicator.apply.schema)."""

    def __init__(
        self,
        work: TableBatch,
        state: State,
        batch_id: int,
        *,
        timezone: str = "UTC",
        zero_dates: str = "null",
        on_barrier: BarrierHandler | None = None,
        add_columns: bool = True,
        policy: str = "lenient",
    ) -> None:
        self.work = work
        self.state = state
        self.batch_id = batch_id
        self.timezone = timezone
        self.zero_dates = zero_dates
        self.on_barrier = on_barrier
        self.add_columns = add_columns
        self.policy = policy  # schema_evolution of this table: lenient / evolve / ignore / fail
        self.result = TableResult(work.table, state=work.state)
        self.table_state = work.state
        # guard's tombstoned keys (first key column), the rows update_tombstones merges besides deletes
        self._tombstoned: pa.Array | None = None
        self._documents = False  # rows merged as documents (resolve_documents)
        self._recorded = work.state  # the state before the barrier being applied (record_state)
        self._mirror_key: tuple[tuple[str, ...], list[str]] | None = None  # (_key)

    @property
    def mirror(self) -> MirrorWriter:
        return self.work.mirror

    # ---- schema -------------------------------------------------------------------------------------------
    def data_schema(self) -> pa.Schema:
        schema = self.mirror.schema()
        return pa.schema([f for f in schema if f.name not in CDC_COLUMNS])

    def ensure_table(self, columns: Sequence[str], part: pa.Table | None = None) -> None:
        """Create the mirror on first sight, typed from the source types; add the columns of this segment's
        rows it has not seen (lenient / evolve), or drop and count them (ignore), or stop (fail)."""
        key = self.table_state.primary_key
        present = set(columns)
        # Only this segment's columns: a column dropped by a DDL earlier in the batch must not come back.
        ordered = [*key, *[c for c in self.work.types if c not in key and c in present]]
        seen = set(ordered)  # (a set: a list's membership test made a wide row's apply quadratic)
        ordered += [c for c in columns if c not in seen]
        exists = self.mirror.exists()
        # Source names -> mirror names (replicator.columns), new ones named in this order.
        names = ColumnMap(self.mirror.schema() if exists else CDC_FIELDS)
        known = {name for name in ordered if name in names}
        fields = []
        for name in ordered:
            if name in known:
                continue
            ctype = column_type(self.work.types.get(name))
            if not ctype.known and name in self.work.types:
                log.warning(
                    "unknown column type kept as string",
                    table=table_label(self.work.table),
                    column=name,
                    source_type=self.work.types.get(name),
                )
            # A string column only because no message declared a type (CKafka format one): marked, so that a
            # later CREATE / ALTER declaring its type retypes it (apply.schema.change_type).
            metadata = UNTYPED if name not in self.work.types else ctype.metadata
            column = pa.field(names.assign(name), ctype.arrow, nullable=name not in key, metadata=metadata)
            fields.append(with_source(column, name))
        if not exists:
            self.mirror.create(pa.schema([*fields, *CDC_FIELDS]))
            self.fill_row_defaults([source_name(f) for f in fields], part, created=True)
            return
        self.widen(present, part)
        missing = fields
        if not missing:
            return
        if self.policy == "ignore" or not self.add_columns:
            if part is not None and part.num_rows:
                keys = images(part).combine_chunks().keys
                unknown = pa.array([source_name(f) for f in missing], pa.string())
                self.result.ignored_values += int(pc.sum(pc.is_in(keys, value_set=unknown)).as_py() or 0)
            return
        if self.policy == "fail":
            from replicator.errors import SchemaChangeFailed

            first = part["position"][0].as_py() if part is not None and part.num_rows else None
            name = table_label(self.work.table)
            raise SchemaChangeFailed(
                f"new columns {[source_name(f) for f in missing]} in rows of {name} without a DDL "
                f"(at {first})"
                "  [schema_evolution: fail]"
            )
        self.mirror.add_columns(missing)
        self.fill_row_defaults([source_name(f) for f in missing], part)

    def fill_row_defaults(self, added: list[str], part: pa.Table | None, *, created: bool = False) -> None:
        """Columns new to the mirror because rows carry them (no DDL: Debezium PostgreSQL) whose row schema
        declares a constant default (dialects.row_defaults): the rows older than the first row declaring it
        take it, as the database's rows did at the ADD COLUMN. Those the mirror holds are set now; those of
        this batch (a late start: the older image and the first row with the column in one batch) and older
        ones arriving later through the recorded fill (older_defaults, as a DDL's default), the history's
        current versions through ``result.fills``. Newer rows carry their own values. Not when an older row
        of the batch carries the column already: its default came later (SET DEFAULT), which changes no
        row."""
        if part is None or not part.num_rows or "meta" not in part.column_names or not added:
            return
        fields = {source_name(f): f for f in self.mirror.schema()}
        firsts = first_row_defaults(part, [n for n in added if n in fields])
        for before, declared in sorted(firsts.items()):
            older = part.filter(pc.less(part["seq_text"], pa.scalar(before)))
            carried = (
                set(pc.unique(images(older).combine_chunks().keys).to_pylist()) if older.num_rows else set()
            )
            wanted = [fields[n] for n in declared if n not in carried]
            if not wanted or (created and not older.num_rows):
                continue
            image = pa.array([[(source_name(f), declared[source_name(f)]) for f in wanted]], IMAGE)
            typed, bad = type_images(image, wanted, timezone=self.timezone, zero_dates=self.zero_dates)
            if bad:  # a default that does not fit its column: the rows keep NULL, noted
                log.warning(
                    "row-schema default not applied", table=table_label(self.work.table), error=bad[0]
                )
                continue
            values = pa.Table.from_arrays(typed, schema=pa.schema(wanted))
            rows = 0 if created else self.mirror.fill(values, CDC_SEQ, before)
            fill = Fill(values, before)
            self.result.fills.append(fill)
            self.table_state = replace(self.table_state, fills=fill_text(self.table_state.fills, fill))
            rows += int(
                pc.sum(pc.not_equal(older["op"], "delete")).as_py() or 0
            )  # (the batch's, typed later)
            for f in wanted:
                note = {"column": source_name(f), "default": declared[source_name(f)], "at": before}
                self.result.defaults.append({**note, "rows_filled": rows})

    def widen(self, present: set[str], part: pa.Table | None) -> None:
        """Columns whose rows declare a wider type without a DDL (apply.row_types): widened, as the job's
        schema_evolution policy says for a type change. Not for rows the fold tasks typed already against
        the old schema (a batch of more than TYPED_ON_EXECUTORS events: the next batch widens)."""
        if (
            self.policy == "ignore"
            or not self.add_columns
            or (part is not None and TYPED in part.column_names)
        ):
            return
        wider = row_types.widened(self.mirror.schema(), self.work.types, present)
        if not wider:
            return
        name = table_label(self.work.table)
        if self.policy == "fail":
            from replicator.errors import SchemaChangeFailed

            raise SchemaChangeFailed(
                f"columns {sorted(wider)} of {name} widened by their rows without a DDL"
                "  [schema_evolution: fail]"
            )
        self.mirror.overwrite(row_types.cast(self.mirror.read(), wider))
        log.info(
            "columns widened by their rows' types", table=name, columns={k: str(v) for k, v in wider.items()}
        )

    # ---- typing -------------------------------------------------------------------------------------------
    def typed(self, rows: pa.Table) -> tuple[pa.Table, list[DeadRow]]:
        """Folded rows -> a table in the mirror's schema; rows with a value that does not fit are dead.

        Rows the fold tasks typed already (``TYPED``: the mirror's columns as a struct, ``TYPE_ERROR``) are
        taken as they are, after checking those columns are still the mirror's; columns added since (the
        images' entries in ``REST``, schema evolution without a DDL) are typed here."""
        schema = self.mirror.schema()
        fields = [f for f in schema if f.name not in CDC_COLUMNS]
        columns: dict[str, pa.Array] = {}
        if TYPED in rows.column_names:
            given = {f.name: i for i, f in enumerate(rows.schema.field(TYPED).type)}
            now = {f.name: f for f in fields}
            changed = [f.name for f in rows.schema.field(TYPED).type if now.get(f.name) != f]
            if changed:  # only columns can be added between the two (without a DDL, from REST)
                raise RuntimeError(
                    f"{table_label(self.work.table)}: columns {changed} of the mirror changed between the "
                    "fold, which typed the rows against the schema read when the batch was planned, and the "
                    "apply"
                )
            struct = rows[TYPED].combine_chunks()
            added = [f for f in fields if f.name not in given]
            rest = rows[REST].combine_chunks()
            # A mirror column in REST: a row older than its rename carried it under its old name (older_names)
            named = set(pc.unique(rest.keys).to_pylist()) if len(rest) else set()
            renamed = [f for f in fields if f.name in given and source_name(f) in named]
            typed, bad = type_images(
                rest, [*added, *renamed], timezone=self.timezone, zero_dates=self.zero_dates
            )
            columns.update(zip((f.name for f in added), typed[: len(added)], strict=True))
            columns.update((name, struct.field(i)) for name, i in given.items())
            for f, values in zip(renamed, typed[len(added) :], strict=True):
                carried = pc.is_valid(pc.map_lookup(rest, source_name(f), "first"))
                columns[f.name] = pc.if_else(carried, values, columns[f.name])
            errors = rows[TYPE_ERROR]
            whole = errors.null_count == len(errors)
            at = [] if whole else pc.indices_nonzero(pc.is_valid(errors)).to_pylist()
            for i in at:  # the mirror's own columns come first in its schema: their message is the row's
                bad[i] = errors[i].as_py()
        else:
            image = (
                rows["image"].combine_chunks()
                if rows.num_rows
                else pa.array([], rows.schema.field("image").type)
            )
            typed, bad = type_images(image, fields, timezone=self.timezone, zero_dates=self.zero_dates)
            columns.update(zip((f.name for f in fields), typed, strict=True))
        columns.update(cdc_columns(rows))
        table = pa.Table.from_arrays(
            [columns[f.name] for f in schema],
            schema=pa.schema([f.with_type(columns[f.name].type) for f in schema]),
        )
        table = self.keep_unavailable(rows, table)
        dead = [self._dead(rows, i, msg) for i, msg in sorted(bad.items())]
        if bad:
            keep = pa.array([i not in bad for i in range(rows.num_rows)])
            table = table.filter(keep)
        return table, dead

    def keep_unavailable(self, rows: pa.Table, table: pa.Table) -> pa.Table:
        """Columns an update did not carry (PostgreSQL's unchanged TOASTed values, fold.unavailable) keep
        the value the mirror stores for the row: a partial update. Counted; a row the mirror does not have
        leaves them NULL, counted apart and logged."""
        if not self.mirror.exists():
            return table
        table, partial, unresolved = unavailable.fill_from_mirror(
            rows,
            table,
            self.table_state.primary_key,
            lambda n: self.mirror_names([n])[0],
            self.mirror.read_keys,
        )
        self.result.partial_updates += partial
        self.result.unavailable_lost += unresolved
        if unresolved:
            log.warning(
                "values the source did not send (unchanged TOAST) for rows the mirror does not hold: NULL",
                table=table_label(self.work.table),
                values=unresolved,
            )
        return table

    def older_names(self, part: pa.Table) -> pa.Table:
        """Rows older than a column rename, arriving after it was applied (a later batch, another topic),
        carry the value under the old name: it is the renamed column's (the mirror's rows took it at the
        rename), so their images name it so. Renames in DDL order: a column renamed twice ends under its
        last name. (Rows the fold tasks typed keep such entries in ``REST``: :meth:`typed` takes them.)"""
        import json

        if not self.table_state.renames or part.num_rows == 0:
            return part
        column = "image" if "image" in part.column_names else REST
        carried = part[column].combine_chunks()
        names = {source_name(f) for f in self.mirror.schema()} if self.mirror.exists() else set()
        for rename in json.loads(self.table_state.renames):
            if rename["old"] in names:  # recorded, not applied yet (a kill -9 between the two, a restart)
                continue
            older = np.asarray(pc.fill_null(pc.less(part["seq_text"], pa.scalar(rename["before"])), False))
            if older.any():
                carried = _renamed_key(carried, older, rename["old"], rename["new"])
        return part.set_column(part.column_names.index(column), column, carried)

    def older_defaults(self, typed: pa.Table) -> pa.Table:
        """Rows older than an ADD COLUMN with a default, arriving after it was applied (a later batch:
        Debezium's schema changes and rows travel on different topics), take the default, as the rows the
        mirror held at the DDL did (apply.schema.fill_default) and as the source's rows did at the ALTER,
        whatever they carried. Newer rows keep their own values."""
        if not self.table_state.fills or typed.num_rows == 0:
            return typed
        for fill in recorded_fills(self.table_state.fills):
            older = pc.less(typed[CDC_SEQ], pa.scalar(fill.before))
            for name, text in (fill.match or {}).items():
                if name in typed.column_names:
                    older = pc.and_(older, pc.equal(typed[name], pa.scalar(text)))
            older = pc.fill_null(older, False)
            if not pc.any(older).as_py():
                continue
            for name in fill.values.column_names:
                if name not in typed.column_names:  # (dropped since)
                    continue
                at = typed.column_names.index(name)
                target = typed.schema.field(at)
                try:  # (retyped since: the default in the column's type now, or left as it is)
                    value = fill.values[name].cast(target.type)[0]
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
                typed = typed.set_column(at, target, pc.if_else(older, value, typed[name]))
        return typed

    def _dead(self, rows: pa.Table, index: int, message: str) -> DeadRow:
        coords = rows["coordinates"][index].as_py()
        database, _schema, name = self.work.table
        return DeadRow(coords, message, database, name)

    # ---- guards -------------------------------------------------------------------------------------------
    def _key(self) -> list[str]:
        """The key's mirror columns (the state names the source's: the fold finds them in the images).
        Kept until the key or the schema changes by a barrier: the guards ask for it several times."""
        key = self.table_state.primary_key
        if self._mirror_key is None or self._mirror_key[0] != key:
            self._mirror_key = (key, self.mirror_names(key))
        return list(self._mirror_key[1])

    def mirror_names(self, sources: Sequence[str]) -> list[str]:
        """Source column names -> the mirror's names for them (replicator.columns)."""
        names = ColumnMap(self.mirror.schema() if self.mirror.exists() else ())
        return [names.assign(s) for s in sources]  # (a key of `id` and `ID` too)

    def guard(self, batch: pa.Table) -> pa.Table:
        """Drop rows not newer than the table's truncate point or than their key's tombstone. Notes the
        first key column of the tombstones found (``_tombstoned``): the rows update_tombstones reads."""
        self._tombstoned = None
        if self.table_state.truncate_seq:
            batch = batch.filter(pc.greater(batch[CDC_SEQ], pa.scalar(self.table_state.truncate_seq)))
        tombs = self.state.tombstones(self.work.table)
        if batch.num_rows == 0 or not tombs.exists():
            self._tombstoned = pa.array([], batch.schema.field(self._key()[0]).type)
            return batch
        key = self._key()
        # The first key column as it is: the lookup's set and the join below take repeats (a pc.unique
        # first cost 20-60 ms per 300k rows on the driver).
        stored = tombs.read_keys(key[0], batch[key[0]].combine_chunks(), [*key, CDC_SEQ])
        self._tombstoned = stored[key[0]].combine_chunks()
        if stored.num_rows == 0:
            return batch
        # Joined on the key columns and a row number only, and the batch filtered only when a row goes: a
        # join of the whole typed batch, then a filter of the joined copy, cost ~80 ms per 300k rows (5M
        # catch-up) to drop a handful of rows.
        rows = pa.table([*(batch[k] for k in key), pa.array(np.arange(batch.num_rows))], names=[*key, "_row"])
        hits = rows.join(stored.rename_columns([*key, "_tomb_seq"]), key, join_type="inner")
        if hits.num_rows == 0:
            return batch
        tomb = hits["_tomb_seq"]
        # Kleene OR: a key without a tombstone compares to NULL; plain OR would make the row NULL (dropped).
        newer = pc.or_kleene(pc.is_null(tomb), pc.greater(batch[CDC_SEQ].take(hits["_row"]), tomb))
        gone = hits["_row"].filter(pc.invert(pc.fill_null(newer, False)))
        if len(gone) == 0:
            return batch
        drop = np.zeros(batch.num_rows, bool)
        drop[np.asarray(gone.combine_chunks())] = True
        return batch.filter(pa.array(~drop))

    def update_tombstones(self, batch: pa.Table) -> None:
        """Deletes leave (or renew) their key's tombstone; a newer upsert of a tombstoned key removes it.
        Only those rows are merged: the deletes, and the rows whose key had a tombstone when the batch was
        guarded (``_tombstoned``; every row when it was not). Merging every net change cost ~0.1 s per
        300k rows on the 5M catch-up, to touch a few thousand tombstones."""
        key = self._key()
        tombs = self.state.tombstones(self.work.table)
        source = batch.select([*key, CDC_SEQ, CDC_OP, CDC_EVENT_TIME]).rename_columns(
            [*key, CDC_SEQ, CDC_OP, TOMBSTONE_DELETED_AT]
        )
        deletes = pc.equal(source[CDC_OP], "delete")
        if self._tombstoned is not None:
            kept = pc.or_(deletes, pc.is_in(source[key[0]], value_set=self._tombstoned))
            if not pc.all(kept).as_py():
                source = source.filter(kept)
                deletes = pc.equal(source[CDC_OP], "delete")
            if source.num_rows == 0:
                return
        if not tombs.exists():
            if not pc.any(deletes).as_py():
                return
            tombs.create(source.drop_columns([CDC_OP]).schema)
        from replicator.sinks.delta_rs import handle, writing

        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        newer = f"s.{CDC_SEQ} > t.{CDC_SEQ}"
        with writing(tombs.path):
            (
                handle(tombs.path)
                .merge(source, predicate=on, source_alias="s", target_alias="t")
                .when_matched_update(
                    updates={CDC_SEQ: f"s.{CDC_SEQ}", TOMBSTONE_DELETED_AT: f"s.{TOMBSTONE_DELETED_AT}"},
                    predicate=f"s.{CDC_OP} = 'delete' AND {newer}",
                )
                .when_matched_delete(predicate=f"s.{CDC_OP} <> 'delete' AND {newer}")
                .when_not_matched_insert(
                    updates={quote(k): f"s.{quote(k)}" for k in [*key, CDC_SEQ, TOMBSTONE_DELETED_AT]},
                    predicate=f"s.{CDC_OP} = 'delete'",
                )
                .execute()
            )

    # ---- documents (drs-mongo) ----------------------------------------------------------------------------
    def resolve_documents(self, rows: pa.Table) -> tuple[pa.Table, list[DeadRow]]:
        """A document table's net changes (the newest full image or delete of each key in the segment and the
        patches after it, ``fold.arrow._with_patches``) merged into the stored documents by source position
        (replicator.apply.documents): the rows that change a document, each with its whole new state, or a
        delete where none is left. Rows that change nothing (a redelivery, changes older than the stored
        ones) are dropped here. Documents written from patches alone are partial, and counted."""
        if "patch_seqs" not in rows.column_names or rows.num_rows == 0:
            return rows, []
        self._documents = True
        self.work.types = {**self.work.types, **documents.COLUMN_TYPES}
        records = rows.to_pylist()
        keys = pa.array(sorted({r["key"][0] for r in records}), pa.string())
        stored = self._stored_documents(keys)
        dead: list[DeadRow] = []
        keep = []
        for i, r in enumerate(records):
            key = r["key"][0]
            state, had_row = stored.get(key, (documents.Document(key), False))
            before = state.fingerprint()
            try:
                if r["base_op"] is not None:
                    image = dict(r["image"] or [])
                    full = image.get("document") if r["base_op"] != "delete" else None
                    state.full(_position(r["base_seq"]), None if full is None else documents.loads(full))
                for patch, seq in zip(r["patches"] or [], r["patch_seqs"] or [], strict=True):
                    state.patch(_position(seq), documents.loads(patch))
            except (documents.PatchError, ValueError, RecursionError) as exc:  # RecursionError: too deep
                dead.append(self._dead(rows, i, f"document patch failed: {exc}"))
                keep.append(False)
                continue
            stored[key] = (state, had_row)
            if state.fingerprint() == before:
                keep.append(False)
                continue
            if state.exists():
                r["op"] = "update" if had_row else "insert"
                r["image"] = [
                    ("_id", key),
                    ("document", state.document_json()),
                    (documents.FIELDS, state.fields_json()),
                    (documents.PARTIAL, "true" if state.partial() else "false"),
                ]
                self.result.partial_documents += state.partial()
                at = state.newest()
            else:
                r["op"], r["image"], at = "delete", [("_id", key)], state.base
            # The source position, without delivery coordinates: a redelivery writes the same seq.
            r["seq"] = [*at, *(0,) * DELIVERY_PARTS]
            r["seq_text"] = seq_text(r["seq"])
            keep.append(True)
        if self.result.partial_documents:
            log.warning(
                "documents kept from patches without their full image (partial)",
                table=table_label(self.work.table),
                documents=self.result.partial_documents,
            )
        merged = pa.Table.from_pylist(records, rows.schema)
        return merged.filter(pa.array(keep, pa.bool_())), dead

    def _stored_documents(self, keys: pa.Array) -> dict[str, tuple[documents.Document, bool]]:
        """The merge state of each key's stored document (``_cdc_fields``), else of its tombstone."""
        found: dict[str, tuple[documents.Document, bool]] = {}
        tombs = self.state.tombstones(self.work.table)
        if tombs.exists():
            rows = tombs.read_keys("_id", keys, ["_id", CDC_SEQ])
            for key, seq in zip(rows["_id"].to_pylist(), rows[CDC_SEQ].to_pylist(), strict=True):
                found[key] = (documents.Document.tombstone(key, _position(seq)), False)
        if not self.mirror.exists():
            return found
        names = self.mirror.schema().names
        missing = [f for f in DOCUMENT_FIELDS if f.name not in names]
        if missing:  # a mirror written before documents kept their merge state, or made by a remove alone
            self.mirror.add_columns(missing)
        rows = self.mirror.read_keys("_id", keys, ["_id", "document", documents.FIELDS, CDC_SEQ])
        for key, doc, fields, seq in zip(
            *(rows[c].to_pylist() for c in ("_id", "document", documents.FIELDS, CDC_SEQ)), strict=True
        ):
            found[key] = (documents.Document.stored(key, doc, fields, _position(seq)), True)
        return found

    # ---- the table's batch --------------------------------------------------------------------------------
    def run(self) -> TableResult:
        if self.work.barriers:  # (a DDL between segments may drop, rename or alter the mirror)
            return self._run()
        with self.mirror.held():
            return self._run()

    def _run(self) -> TableResult:
        txn = self.state.txn(self.batch_id)
        if self.mirror.exists():
            done = self.mirror.applied_version(txn.app_id)
            self.check_behind(done, txn)
            if done is not None and done >= self.batch_id:
                # Already applied (a replayed batch). Its dead rows are recomputed, not written twice:
                # the dead-letter append carries its own transaction.
                self.result.skipped = True
                if self.work.rows.num_rows:
                    typed, dead = self.typed(self.resolve_documents(self.work.rows)[0])
                    self.result.dead.extend(dead)
                    # A kill -9 can land between the table's commit and its tombstones (or the registry
                    # save): write the tombstones again (a MERGE by sequence, idempotent) and advance the
                    # table's position, or a redelivered older insert of a deleted key would come back.
                    typed = self.guard(typed)
                    if typed.num_rows:
                        self.update_tombstones(typed)
                        self._advance(typed)
                if self.work.files is not None:  # (this try's files are orphans: never committed)
                    if self.work.stage is not None:  # tombstones of resurrected keys, written again
                        self._staged(txn, merge=False)
                    self._advance_files(self.work.files)
                self._applied(txn)
                self.result.state = self.table_state
                return self.result
        # The applier owns the rows from here: their images are freed once typed, before the MERGE (its
        # memory peak on the driver; measured on the 5M catch-up, ~0.2 GB of maps per 300k rows).
        rows, self.work.rows = self.work.rows, self.work.rows.slice(0, 0)
        if self.work.files is not None and self.work.stage is not None:
            return self.commit_staged(rows, txn)
        if self.work.files is not None:
            return self.commit_files(rows, txn)
        barriers = self.work.barriers
        system = rows_system(rows)
        if system is not None and system != self.table_state.seq_system:
            self.table_state = replace(self.table_state, seq_system=system)
        committed = False
        for segment in range(len(barriers) + 1):  # rows before each barrier, then the rows after the last
            last_segment = segment == len(barriers)
            if not barriers:  # one segment: every row, not a filtered copy
                part, rows = rows, rows.slice(0, 0)
            else:
                part = rows.filter(pc.equal(rows["segment"], segment)) if rows.num_rows else rows
            typed = self.prepare_rows(part) if part.num_rows else None
            large = part.num_rows >= LARGE_PART
            del part
            if large:  # a driver above its keep limit gives the freed images back to the system
                payload.release_memory()  # before the MERGE (delta-rs does not allocate from Arrow's pool)
            if typed is not None:
                committed = self.commit_rows(typed, txn if last_segment else None) or committed
            if not last_segment:
                self.apply_barrier(self.in_rows_system(barriers[segment]))
        if self.mirror.exists():
            if not committed:
                self.mirror.mark(txn)
            self._applied(txn)
        self.result.state = self.table_state
        return self.result

    def _applied(self, txn: Txn) -> None:
        """Record in the table's state that its mirror holds this batch (TableState.last_batch)."""
        self.table_state = replace(self.table_state, last_batch=txn.version, last_app=txn.app_id)

    def check_behind(self, done: int | None, txn: Txn) -> None:
        """Stop when the mirror's log holds an older batch of this job than the registry recorded as applied
        to it: its newest commits were lost (a log file deleted by hand, a restore of an old copy), and
        going on would leave their changes out for good."""
        expected = self.table_state.last_batch
        if (
            expected is None
            or self.table_state.last_app != txn.app_id
            or (done is not None and done >= expected)
        ):
            return
        from replicator.errors import StateDamaged

        raise StateDamaged(
            behind_message(table_label(self.work.table), self.mirror.path, done, expected, txn.app_id)
        )

    def commit_files(self, rows: pa.Table, txn: Txn) -> TableResult:
        """A table created for this batch (no barrier in it): the fold tasks wrote its upserts as files
        (replicator.fold.mirror_files); ``rows`` are its other net changes: deletes, rows with a value that
        does not fit, rows with columns the mirror lacks. Each is of a key of its own (a net change per
        key), so the deletes have nothing to delete: they leave their tombstones only, and only the upserts
        among ``rows`` are merged. The batch's app transaction goes with the table's last commit."""
        typed = self.prepare_rows(rows) if rows.num_rows else None  # (new columns added first)
        del rows
        upserts = None
        if typed is not None:
            upserts = typed.filter(pc.not_equal(typed[CDC_OP], "delete"))
        merge = upserts is not None and upserts.num_rows > 0
        files = self.work.files
        assert files is not None
        if gone := mirror_files.missing(self.mirror.path, files):
            raise FileNotFoundError(
                f"{gone[0]}: a fold task wrote it, the driver does not see it; on a cluster, target.path "
                "must be storage the executors and the driver share (docs/operations.md)"
            )
        self.result.merged = self.result.merged + self.mirror.add_files(files, None if merge else txn)
        self._advance_files(files)
        if merge:
            merged = self.mirror.merge_guarded(upserts, self._key(), CDC_SEQ, CDC_OP, txn)
            self.result.merged = self.result.merged + merged
        if typed is not None:
            self.update_tombstones(typed)
            self._advance(typed)
        self._applied(txn)
        self.result.state = self.table_state
        return self.result

    def commit_staged(self, rows: pa.Table, txn: Txn) -> TableResult:
        """A table whose upserts the fold tasks staged as files (no barrier in its batch): they are MERGEd
        from there on the executors (MirrorWriter.merges_staged), guarded by sequence, horizon and
        tombstones as the driver's rows; ``rows`` are its other net changes (deletes, rows with a value that
        does not fit, rows with columns the mirror lacks), applied as always. A key has one net change, so
        the two MERGEs touch different keys; the batch's app transaction goes with the last. A replay
        redoes the first: its guard by sequence makes it a no-op."""
        typed = self.prepare_rows(rows) if rows.num_rows else None  # (new columns added first)
        del rows
        self._staged(None if typed is not None else txn, merge=True)
        if typed is not None:
            self.commit_rows(typed, txn)
        elif (self.mirror.applied_version(txn.app_id) or -1) < txn.version:
            self.mirror.mark(txn)  # (a MERGE that changed nothing may commit nothing)
        assert self.work.files is not None
        self._advance_files(self.work.files)
        self._applied(txn)
        self.result.state = self.table_state
        return self.result

    def _staged(self, txn: Txn | None, *, merge: bool) -> None:
        """MERGE the staged upserts (``merge``), and remove the tombstones of the keys they bring back."""
        from replicator.sinks.delta_spark import guard_tombstones

        files, stage = self.work.files, self.work.stage
        assert files is not None and stage is not None
        key = self._key()
        paths = [f"{stage}/{p}" for p in files["path"].to_pylist()]
        if gone := mirror_files.missing(stage, files):
            raise FileNotFoundError(
                f"{gone[0]}: a fold task wrote it, the driver does not see it; on a cluster, state.path "
                "must be storage the executors and the driver share (docs/operations.md)"
            )
        mirror = self.mirror
        frame = mirror.staged_frame(paths, self.table_state.truncate_seq, CDC_SEQ)  # type: ignore[attr-defined]
        tombs = self.state.tombstones(self.work.table)
        frame, back = guard_tombstones(frame, tombs.path, key, CDC_SEQ, CDC_EVENT_TIME)
        if merge:
            bounds = _file_bounds(files, key)
            merged = mirror.merge_frame(frame, bounds, key, CDC_SEQ, CDC_OP, txn)  # type: ignore[attr-defined]
            self.result.merged = self.result.merged + merged
        if back is not None and back.num_rows:
            back = back.append_column(CDC_OP, pa.repeat(pa.scalar("update"), back.num_rows))
            self._tombstoned = None  # (every row of ``back`` had a tombstone)
            self.update_tombstones(back)

    def prepare_rows(self, part: pa.Table) -> pa.Table | None:
        """A segment's net changes -> typed rows for the mirror, past the table's horizon and tombstones
        (None: nothing left to apply)."""
        horizon = self.table_state.truncate_seq
        if horizon and part.num_rows:
            # At or before the table's horizon (a truncate, a drop, a rename away): applied already or gone.
            # Decided before anything is created, so a renamed-away name does not come back empty.
            rows = part.num_rows
            part = part.filter(pc.greater(part["seq_text"], pa.scalar(horizon)))
            self.result.before_horizon += rows - part.num_rows
            if part.num_rows == 0:
                return None
        part, dead = self.resolve_documents(part)
        self.result.dead.extend(dead)
        if part.num_rows == 0:  # documents that nothing changed (resolve_documents)
            return None
        carried = images(part)
        if self.table_state.schema_seq and part.num_rows:
            # Rows at or before the newest DDL that dropped or renamed columns add none: what they hold
            # beyond the mirror's columns was dropped by then (their other values are applied as usual).
            carried = carried.filter(pc.greater(part["seq_text"], pa.scalar(self.table_state.schema_seq)))
        keys = pc.unique(carried.combine_chunks().keys).to_pylist() if len(carried) else []
        if self._documents:  # (a segment of deletes alone must not create a mirror without them)
            keys += [f.name for f in DOCUMENT_FIELDS if f.name not in keys]
        if TYPED in part.column_names:  # typed by the fold tasks; the images' other columns are in REST
            keys = [source_name(f) for f in part.schema.field(TYPED).type] + keys
        self.ensure_table(keys, part)
        part = self.older_names(part)
        typed, dead = self.typed(part)
        self.result.dead.extend(dead)
        typed = self.older_defaults(typed)
        typed = self.guard(typed)
        return typed if typed.num_rows else None

    def commit_rows(self, typed: pa.Table, txn: Txn | None) -> bool:
        """Typed rows -> the mirror (a guarded MERGE, or an append of snapshot rows), then tombstones and
        the table's position; True when the batch's app transaction was committed with them."""
        if append_snapshot(self, typed, txn):
            merged = MergeResult(inserted=typed.num_rows)
        else:
            # Documents: the rows carry each document's whole merged state, newer or as new as the stored one
            # (resolve_documents); a late older patch changes a document without a newer seq.
            merged = self.mirror.merge_guarded(typed, self._key(), CDC_SEQ, CDC_OP, txn, ties=self._documents)
        self.result.merged = self.result.merged + merged
        self.update_tombstones(typed)
        self._advance(typed)
        return txn is not None

    def _advance(self, typed: pa.Table) -> None:
        """Move the table's last position to the newest applied event."""
        self._advance_to(typed[CDC_SEQ], typed[CDC_POSITION], typed[CDC_EVENT_TIME])

    def _advance_files(self, files: pa.Table) -> None:
        """Move it to the newest event of the files the fold tasks wrote."""
        self._advance_to(files["last_seq"], files["last_position"], files["last_event_time"])

    def _advance_to(self, seqs: pa.ChunkedArray, positions: pa.ChunkedArray, times: pa.ChunkedArray) -> None:
        last = pc.max(seqs).as_py()
        if last and (self.table_state.last_seq or "") < last:
            at = pc.index(seqs, last).as_py()
            self.table_state = replace(
                self.table_state,
                last_seq=last,
                last_position=positions[at].as_py(),
                last_event_time=times[at].as_py(),
            )

    def horizon(self, event: dict[str, Any], state: TableState | None = None) -> str:
        """A barrier's truncate point / horizon for a table (``state``: this one's): its seq, or where the
        table's DML is in another coordinate system, its place by delivery after the newest DML applied
        (fold.arrow.delivered_after; the rows of the segments before it are applied by now)."""
        state = state or self.table_state
        own = str(event.get("seq_text") or "")
        if state.seq_system is None or state.seq_system == (seq_system(event) or "") or not own:
            return own
        return delivered_after(state.last_seq, own)

    def in_rows_system(self, event: dict[str, Any]) -> dict[str, Any]:
        """The barrier event with its horizon for this table (``HORIZON``) where it differs from its seq."""
        horizon = self.horizon(event)
        return event if horizon == event.get("seq_text") else {**event, HORIZON: horizon}

    def apply_barrier(self, event: dict[str, Any]) -> None:
        self.result.ddl.append(event)
        self._mirror_key = None
        if self.on_barrier is not None:
            self._recorded = self.table_state  # (the positions before it are saved with the batch)
            self.on_barrier(self, event)
            self.record_state()
            return
        log.info(
            "ddl recorded, not applied",
            table=table_label(self.work.table),
            kind=event.get("ddl_kind"),
            sql=event.get("ddl_sql"),
        )

    def record_state(self) -> None:
        """Save the table's state now if a barrier changed it, not only with the batch's registry commit.
        A barrier's mirror change is committed at once, and once the table's batch commit is in too, a
        restart after a kill -9 finds the batch applied and skips the table (``run``), barriers included:
        what they record (the key, a drop and re-create, a truncate point, the columns removed, renames and
        fills that late rows need) would be lost with the registry save the kill prevented. Met in the
        end-to-end faults test: the re-snapshot's CREATE left its table marked dropped, its DROP COLUMN left
        no ``schema_seq``, and the snapshot rows of the next batch added the dropped column back."""
        if self.table_state != self._recorded:
            self.state.save_tables([self.table_state], self.batch_id)
            self._recorded = self.table_state

    def truncate(self, seq_text: str) -> None:
        """Empty the mirror of rows older than ``seq_text``; events at or before it can no longer bring rows
        back. A TRUNCATE that arrives late (another partition, a redelivery) keeps the newer rows and the
        newer truncate point."""
        if self.mirror.exists():
            self.state.check_mirror(self.work.table, self.mirror.path, "truncate")
            self.mirror.delete_where(f"{CDC_SEQ} < '{seq_text}'", None)
        if (self.table_state.truncate_seq or "") < seq_text:
            self.table_state = replace(self.table_state, truncate_seq=seq_text)


def _file_bounds(files: pa.Table, key: list[str]) -> str | None:
    """The MERGE's key range (base.key_range) from the staged files' statistics (mirror_files.stats)."""
    import json

    from replicator.sinks.delta_spark import _ident

    low, high = [], []
    for text in files["stats"].to_pylist():
        stats = json.loads(text)
        if key[0] not in stats["minValues"]:
            return None
        low.append(stats["minValues"][key[0]])
        high.append(stats["maxValues"][key[0]])
    if not low:
        return None
    return key_range(pa.table({key[0]: [min(low), max(high)]}), key[:1], ident=_ident)


def append_snapshot(applier: TableApplier, typed: pa.Table, txn: Txn | None) -> bool:
    """Append typed snapshot rows when allowed and safe; False when the caller must MERGE them."""
    if not applier.work.bulk or txn is None or typed.num_rows == 0:
        return False
    if not pc.all(pc.equal(typed[CDC_OP], "snapshot")).as_py():
        return False
    key = applier._key()
    mirror = applier.mirror
    if mirror.exists():
        stored = mirror.read_keys(key[0], typed[key[0]].combine_chunks(), key)
        if stored.num_rows and typed.select(key).join(stored, key, join_type="inner").num_rows:
            return False  # a key is already there (re-delivered rows): MERGE decides by seq
    mirror.append(typed, txn)
    return True
