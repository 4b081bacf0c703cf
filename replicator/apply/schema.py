"""Apply barrier events (DDL, TRUNCATE) to a mirror under the table's schema-evolution policy.

``barrier_handler(config)`` returns the ``on_barrier`` hook of :class:`replicator.apply.table.TableApplier`:
the event is parsed into change objects (replicator.ddl) and each one is applied by :func:`apply_change`,
a ``functools.singledispatch`` over the change types. Policies (docs/schema-evolution.md):

- ``lenient`` (default) never loses data: add columns, keep dropped ones, add renamed ones under the new
  name, widen types when lossless, keep dropped tables (marked ``dropped``);
- ``evolve`` applies exactly: drop / rename / retype by rewriting the table, delete dropped tables;
- ``ignore`` keeps the schema (unknown DML columns are dropped and counted);
- ``fail`` stops the job at any DDL that changes a mirror.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import singledispatch
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator import ddl, defaults, paths
from replicator.apply.barriers import resolve_ref
from replicator.apply.row_types import is_untyped, lossless
from replicator.apply.table import CDC_FIELDS, HORIZON, DeadRow, Fill, fill_text, renamed_text
from replicator.columns import ColumnMap, by_source, source_name, with_source
from replicator.config import JobConfig, SchemaPolicy
from replicator.errors import SchemaChangeFailed
from replicator.logging import get_logger
from replicator.model import CDC_SEQ, table_label
from replicator.routing import META_DATABASE, META_TABLE, SOURCE_COLUMNS, SOURCE_DATABASE, SOURCE_TABLE
from replicator.sinks.base import quote
from replicator.state import TableState
from replicator.storage import location
from replicator.types import column_type, parse_values

if TYPE_CHECKING:
    from replicator.apply.table import TableApplier
    from replicator.model import TableId

log = get_logger("replicator.apply.schema")


class SchemaApplyError(RuntimeError):
    """A change that cannot be applied to the mirror (e.g. existing values do not fit a narrower type)."""


def mirror_path(config: JobConfig, table: TableId) -> str:
    return str(paths.table_path(config.target.path, table))


@dataclass
class Context:
    applier: TableApplier
    event: dict[str, Any]
    policy: SchemaPolicy
    config: JobConfig
    handler: BarrierHandler
    # ADD COLUMN defaults of this event for the rows already there: set together (one MERGE) once all its
    # changes are applied (flush_defaults); column -> (typed value, summary note)
    defaults: dict[str, tuple[pa.Array, dict[str, Any]]] = field(default_factory=dict)

    @property
    def table(self) -> TableId:
        return self.applier.work.table

    @property
    def seq_text(self) -> str:
        """The event's seq: what names it (a rename's move between the two names' appliers)."""
        return str(self.event.get("seq_text") or "")

    @property
    def horizon(self) -> str:
        """Its truncate point / horizon for this table: its seq, or its place by delivery among the table's
        DML where those are in another coordinate system (TableApplier.horizon)."""
        return str(self.event.get(HORIZON) or self.seq_text)

    @property
    def source(self) -> tuple[str, str] | None:
        """The shard (database, table) of a routed event, None for a table mirrored as itself."""
        meta = self.event.get("meta") or {}
        meta = dict(meta) if not isinstance(meta, dict) else meta
        return (meta[META_DATABASE], meta[META_TABLE]) if meta.get(META_TABLE) else None

    @property
    def routed(self) -> bool:
        return self.source is not None or self.config.tables.routed_target(table_label(self.table))

    def source_in_key(self) -> bool:
        name = table_label(self.table)
        return any(rule.to == name and rule.source_in_key for rule in self.config.tables.route)

    def resolve(self, ref: ddl.TableRef | None) -> TableId:
        return resolve_ref(self.event, ref)

    def set_state(self, **changes: Any) -> None:
        self.applier.table_state = replace(self.applier.table_state, **changes)

    def columns_removed(self) -> None:
        """The mirror lost columns here (dropped or renamed): rows up to this point add none back."""
        if self.horizon > (self.applier.table_state.schema_seq or ""):
            self.set_state(schema_seq=self.horizon)


# ---- mirror helpers ----------------------------------------------------------------------------------------


def data_fields(schema: pa.Schema) -> dict[str, pa.Field]:
    """The mirror's source columns by their source names (replicator.columns)."""
    return by_source(schema)


def arrow_field(column: ddl.Column, key: Iterable[str] = (), names: ColumnMap | None = None) -> pa.Field:
    """A declared source column as a mirror field, named by ``names`` (given a name there if new)."""
    name = names.assign(column.name) if names is not None else column.name
    ctype = column_type(column.type)
    field = pa.field(name, ctype.arrow, nullable=column.name not in set(key), metadata=ctype.metadata)
    return with_source(field, column.name)


def create_mirror(ctx: Context, columns: Iterable[ddl.Column], key: tuple[str, ...]) -> tuple[str, ...]:
    """Create the mirror with the declared columns (plus shard columns when routed); returns the key."""
    columns = list(columns)
    if ctx.routed:
        columns += [ddl.Column(name=c, type="varchar(255)") for c in SOURCE_COLUMNS]
        if key and ctx.source_in_key():
            key = (*key, *SOURCE_COLUMNS)
    names = ColumnMap(CDC_FIELDS)
    fields = [arrow_field(c, key, names) for c in columns]
    ctx.applier.mirror.create(pa.schema([*fields, *CDC_FIELDS]))
    return key


def rewrite(ctx: Context, transform: Callable[[pa.Table], pa.Table]) -> None:
    """Read the whole mirror, transform it, write it back with the new schema (one Delta commit)."""
    mirror = ctx.applier.mirror
    mirror.overwrite(transform(mirror.read()))


def add_columns(ctx: Context, columns: Iterable[ddl.Column]) -> None:
    names = ColumnMap(ctx.applier.mirror.schema())
    missing = [arrow_field(c, (), names) for c in columns if c.name not in names]
    if missing:
        ctx.applier.mirror.add_columns(missing)


def change_type(ctx: Context, name: str, source_type: str) -> None:
    """lenient: widen when lossless, else keep; evolve: retype (rewrite), failing on values that don't fit."""
    current = data_fields(ctx.applier.mirror.schema()).get(name)
    target = column_type(source_type).arrow
    if current is None:
        add_columns(ctx, [ddl.Column(name=name, type=source_type)])
        return
    if current.type == target:
        return
    if is_untyped(current):
        retype_untyped(ctx, current, source_type, target)
        return
    if ctx.policy == "lenient" and not lossless(current.type, target):
        log.warning(
            "type change kept: not lossless; values that do not fit become dead letters",
            table=table_label(ctx.table),
            column=name,
            mirror_type=str(current.type),
            source_type=source_type,
        )
        return

    def cast(data: pa.Table) -> pa.Table:
        index = data.schema.get_field_index(current.name)
        try:
            column = data.column(index).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaApplyError(
                f"column {name!r}: stored values do not fit {source_type}: {exc}"
            ) from None
        return data.set_column(index, current.with_type(target), column)

    rewrite(ctx, cast)


def retype_untyped(ctx: Context, current: pa.Field, source_type: str, target: pa.DataType) -> None:
    """A string column only because no message declared its type (apply.UNTYPED) takes the type a DDL
    now declares, under lenient and evolve alike: its values are parsed strictly (types.parse_values);
    a value that does not fit becomes NULL and a dead letter naming the column, the row's key and the
    value (the row came from an earlier batch, so there is no raw record to attach)."""
    name = current.name
    source = source_name(current)
    key = ctx.applier._key()
    dead: list[DeadRow] = []

    def cast(data: pa.Table) -> pa.Table:
        index = data.schema.get_field_index(name)
        values = data.column(index).combine_chunks()
        typed, errors = parse_values(
            values, target, timezone=ctx.config.source.timezone, zero_dates=ctx.config.source.zero_dates
        )
        if errors and name in key:
            raise SchemaApplyError(f"key column {source!r}: stored values do not fit {source_type}")
        for error in errors:
            row = {k: data.column(k)[error.row].as_py() for k in key}
            dead.append(
                DeadRow(
                    coordinates={
                        "source": None,
                        "partition": None,
                        "offset": None,
                        "index": None,
                        "row": None,
                    },
                    error=f"column {source!r}: stored value of row {row} set to NULL: {error.message} "
                    f"(declared {source_type} by a DDL at {ctx.seq_text})",
                    database=ctx.table[0],
                    table=ctx.table[2],
                )
            )
        typed_field = with_source(pa.field(name, target, nullable=current.nullable), source)
        return data.set_column(index, typed_field, typed)

    rewrite(ctx, cast)
    ctx.applier.result.dead.extend(dead)


def reconcile(ctx: Context, columns: tuple[ddl.Column, ...], key: tuple[str, ...], exact: bool) -> None:
    """Bring an existing mirror to a declared schema: add, retype, and (``exact``) drop undeclared columns."""
    add_columns(ctx, columns)
    for column in columns:
        if column.type:
            change_type(ctx, column.name, column.type)
    if exact and not ctx.routed:
        declared = {c.name for c in columns}
        fields = data_fields(ctx.applier.mirror.schema())
        extra = [f.name for n, f in fields.items() if n not in declared]
        if extra:
            rewrite(ctx, lambda data: data.drop_columns(extra))
            ctx.columns_removed()
    if key:
        set_key(ctx, key)


def set_key(ctx: Context, key: tuple[str, ...]) -> None:
    if ctx.routed and ctx.source_in_key():
        key = (*key, *[c for c in SOURCE_COLUMNS if c not in key])
    ctx.set_state(primary_key=tuple(key))


# ---- one change --------------------------------------------------------------------------------------------


@singledispatch
def apply_change(change: Any, ctx: Context) -> None:
    raise TypeError(f"no handler for schema change {type(change).__name__}")


@apply_change.register
def _(change: ddl.CreateTable, ctx: Context) -> None:
    mirror, state = ctx.applier.mirror, ctx.applier.table_state
    if not mirror.exists():
        key = create_mirror(ctx, change.columns, change.primary_key or state.primary_key)
        ctx.set_state(
            primary_key=key, dropped=False, truncate_seq=ctx.horizon if state.dropped else state.truncate_seq
        )
        return
    if ctx.routed:  # another shard's CREATE: the merged mirror takes its columns
        if ctx.policy in ("lenient", "evolve"):
            reconcile(ctx, change.columns, change.primary_key, exact=False)
        return
    if state.dropped:
        # Re-created after a lenient drop: the new source table starts empty. The old rows are deleted
        # (they stay in the Delta history) and events older than this CREATE can no longer bring them back.
        ctx.applier.truncate(ctx.horizon)
        ctx.set_state(dropped=False)
    if ctx.policy in ("lenient", "evolve"):
        reconcile(ctx, change.columns, change.primary_key, exact=ctx.policy == "evolve")


@apply_change.register
def _(change: ddl.DeclareSchema, ctx: Context) -> None:
    if not ctx.applier.mirror.exists():
        if ctx.applier.table_state.dropped:
            # A name renamed (or dropped) away: a declared schema names what the table is, not that it
            # exists. Debezium's RENAME carries the new name's tableChanges; read for the old name it
            # would bring the old name back as an empty mirror.
            log.info("declared schema of a dropped table: no mirror created", table=table_label(ctx.table))
            return
        if change.columns:
            key = create_mirror(
                ctx, change.columns, change.primary_key or ctx.applier.table_state.primary_key
            )
            ctx.set_state(primary_key=key)
        return
    if ctx.policy in ("lenient", "evolve"):
        reconcile(ctx, change.columns, change.primary_key, exact=ctx.policy == "evolve")


@apply_change.register
def _(change: ddl.AddColumn, ctx: Context) -> None:
    # Without a mirror yet, the first DML creates it with every column its message types.
    if ctx.policy in ("lenient", "evolve") and ctx.applier.mirror.exists():
        add_columns(ctx, [change.column])
        if change.column.type:
            change_type(ctx, change.column.name, change.column.type)
        if change.column.default is not None:
            fill_default(ctx, change.column)


def fill_default(ctx: Context, column: ddl.Column) -> None:
    """The rows the mirror held at the ADD COLUMN take the column's default, as the database's rows do
    without a row event (:func:`flush_defaults` sets them). A default the mirror cannot evaluate leaves
    them NULL, noted in the batch summary with their number."""
    default = column.default
    mirror = ctx.applier.mirror
    current = data_fields(mirror.schema()).get(column.name)
    if default is None or current is None or not ctx.horizon:
        return
    value, why = default_value(ctx, default, current, column.type)
    note: dict[str, Any] = {"column": column.name, "default": default.sql, "at": ctx.seq_text}
    if why is not None:
        match = _shard(ctx)
        stored = mirror.read([CDC_SEQ, *(match or {})])
        older = pc.less(stored[CDC_SEQ], pa.scalar(ctx.horizon))
        for name, text in (match or {}).items():
            older = pc.and_(older, pc.equal(stored[name], pa.scalar(text)))
        note |= {"rows_left_null": int(pc.sum(older).as_py() or 0), "reason": why}
        log.warning("default not applied to existing rows", table=table_label(ctx.table), **note)
        ctx.applier.result.defaults.append(note)
    elif value is not None:  # (None: a NULL, e.g. a zero date under source.zero_dates: null)
        ctx.defaults[current.name] = (value, note)  # (by its mirror name)


def _shard(ctx: Context) -> dict[str, str] | None:
    """The source columns' values of a routed shard's rows in a merged mirror (None: every row)."""
    source = ctx.source
    return dict(zip((SOURCE_DATABASE, SOURCE_TABLE), source, strict=True)) if source else None


def flush_defaults(ctx: Context) -> None:
    """Set the event's defaults in one MERGE: in the rows whose ``_cdc_seq`` is older than the DDL's (rows
    written after it, in this batch or delivered again, carry their own values), only the shard's rows in
    a merged mirror. A schema change, not a row change: ``_cdc_seq`` stays, and setting them again (a
    replayed or redelivered batch) leaves the same values."""
    if not ctx.defaults or not ctx.applier.mirror.exists():  # (dropped by a later change of the event)
        return
    names = set(ctx.applier.mirror.schema().names)
    pending = {n: v for n, v in ctx.defaults.items() if n in names}  # (a column dropped again meanwhile)
    ctx.defaults = {}
    if not pending:
        return
    values = pa.table({n: value for n, (value, _note) in pending.items()})
    match = _shard(ctx)
    rows = ctx.applier.mirror.fill(values, CDC_SEQ, ctx.horizon, match)
    fill = Fill(values, ctx.horizon, match)
    ctx.applier.result.fills.append(fill)
    ctx.set_state(fills=fill_text(ctx.applier.table_state.fills, fill))
    for _value, note in pending.values():
        ctx.applier.result.defaults.append({**note, "rows_filled": rows})
    log.info(
        "defaults applied to existing rows", table=table_label(ctx.table), columns=list(pending), rows=rows
    )


def default_value(
    ctx: Context, default: ddl.Default, target: pa.Field, source_type: str | None
) -> tuple[pa.Array | None, str | None]:
    """A default typed as the mirror's column (one value), or why it cannot be."""
    source = ctx.config.source
    if default.kind == "expression":
        return None, f"the mirror cannot evaluate DEFAULT {default.sql}"
    if default.kind == "now":
        at = ctx.event.get("event_time")
        if at is None:
            return None, f"DEFAULT {default.sql}: the DDL event carries no time"
        if defaults.fractional_digits(source_type):
            # The database stored the ALTER's time to the fraction (MariaDB through Debezium: 13:25:22.654);
            # a binlog event's time has whole seconds: the mirror does not know the value (tests/test_e2e.py).
            return None, (
                f"DEFAULT {default.sql} on a column with fractional seconds: the DDL event's time has whole "
                "seconds only"
            )
        value = defaults.now_value(target.type, at, source.timezone)
        if value is None:
            return None, f"DEFAULT {default.sql} for a column of type {target.type}"
        return value.cast(target.type), None
    typed, errors = parse_values(
        pa.array([default.value], pa.string()),
        target.type,
        timezone=source.timezone,
        zero_dates=source.zero_dates,
    )
    if errors:
        return None, f"DEFAULT {default.sql}: {errors[0].message}"
    return (typed.cast(target.type), None) if typed.null_count == 0 else (None, None)


@apply_change.register
def _(change: ddl.DropColumn, ctx: Context) -> None:
    # lenient: the column stays; rows written from now on carry NULL in it.
    mirror = ctx.applier.mirror
    if ctx.policy != "evolve" or not mirror.exists():
        return
    column = data_fields(mirror.schema()).get(change.name)
    present = column is not None
    if present and change.name in ctx.applier.table_state.primary_key:
        raise SchemaApplyError(f"column {change.name!r} is part of the mirror's key; it cannot be dropped")
    # Recorded before the mirror changes (and when the column is gone already): a restart after a kill -9
    # between the two applies this batch's rows before the DROP again, and they must not add it back.
    ctx.columns_removed()
    ctx.applier.record_state()
    if column is not None:
        rewrite(ctx, lambda data: data.drop_columns([column.name]))


@apply_change.register
def _(change: ddl.RenameColumn, ctx: Context) -> None:
    mirror = ctx.applier.mirror
    if ctx.policy not in ("lenient", "evolve") or not mirror.exists():
        return
    fields = data_fields(mirror.schema())
    to_rename = change.old in fields and change.new not in fields
    # A rename that changes only the case is applied under lenient too: the mirror cannot keep both names
    # as they are (Delta compares them without case), and the values move with the column.
    case_only = change.old != change.new and change.old.casefold() == change.new.casefold()
    exact = ctx.policy == "evolve" or case_only
    done = exact and change.old not in fields and change.new in fields
    if not (to_rename or done):
        return
    if not exact:  # lenient: the old column keeps its values; the new name is added next to it
        names = ColumnMap(mirror.schema())
        added = fields[change.old].remove_metadata().with_name(names.assign(change.new))
        mirror.add_columns([with_source(added, change.new)])
        return
    # Recorded before the mirror changes (and when it has changed already): a restart after a kill -9
    # between the two applies this batch's rows before the RENAME again, under the old name
    # (TableApplier.older_names gives their values to the new one once the mirror has it).
    ctx.columns_removed()
    state = ctx.applier.table_state
    ctx.set_state(renames=renamed_text(state.renames, change.old, change.new, ctx.horizon))
    ctx.applier.record_state()

    def rename(data: pa.Table) -> pa.Table:
        # The new source name's mirror name among the others' (the old one's is free again).
        names = ColumnMap(data.schema)
        old = names.get(change.old)
        names.release(change.old)
        new = names.assign(change.new)
        at = data.schema.get_field_index(old)
        renamed = with_source(data.schema.field(at).with_name(new), change.new)
        return data.set_column(at, renamed, data.column(at))

    old_name = fields[change.old].name if to_rename else change.old
    if to_rename:
        rewrite(ctx, rename)
    key = ctx.applier.table_state.primary_key
    if change.old in key:
        rename_tombstones(ctx, old_name, ColumnMap(mirror.schema()).name(change.new))
        ctx.set_state(primary_key=tuple(change.new if k == change.old else k for k in key))


def rename_tombstones(ctx: Context, old: str, new: str) -> None:
    """A renamed key column's tombstones follow it (the guard reads them by the key's mirror names)."""
    tombstones = ctx.applier.state.tombstones(ctx.table)
    if not tombstones.exists():
        return
    names = tombstones.schema().names
    if old in names and new not in names:
        ctx.applier.state.check_state_path(tombstones.path, "rewrite")
        data = tombstones.read()
        tombstones.overwrite(data.rename_columns([new if n == old else n for n in data.column_names]))


@apply_change.register
def _(change: ddl.ChangeType, ctx: Context) -> None:
    if ctx.policy in ("lenient", "evolve") and ctx.applier.mirror.exists():
        change_type(ctx, change.name, change.type)


@apply_change.register
def _(change: ddl.AddPrimaryKey, ctx: Context) -> None:
    if ctx.policy in ("lenient", "evolve"):
        set_key(ctx, change.columns)


@apply_change.register
def _(change: ddl.DropPrimaryKey, ctx: Context) -> None:
    # A mirror needs a key to MERGE: the known key stays until a new one is declared.
    log.info(
        "primary key drop recorded; the mirror keeps its key",
        table=table_label(ctx.table),
        key=list(ctx.applier.table_state.primary_key),
    )


@apply_change.register
def _(change: ddl.TruncateTable, ctx: Context) -> None:
    source = ctx.source
    if source is None:
        ctx.applier.truncate(ctx.horizon)
        return
    # One shard of a merged mirror: only its rows go.
    if ctx.applier.mirror.exists():
        database, table = (v.replace("'", "''") for v in source)
        ctx.applier.mirror.delete_where(
            f"{quote(SOURCE_DATABASE)} = '{database}' AND {quote(SOURCE_TABLE)} = '{table}'", None
        )


@apply_change.register
def _(change: ddl.DropTable, ctx: Context) -> None:
    if ctx.routed:
        log.info(
            "drop of a routed shard recorded; the merged mirror stays",
            table=table_label(ctx.table),
            source=ctx.source,
        )
        return
    if ctx.policy == "evolve":
        state = ctx.applier.state
        tombstones = state.tombstones(ctx.table)
        state.check_mirror(ctx.table, ctx.applier.mirror.path, "drop")
        state.check_state_path(tombstones.path, "drop")
        ctx.applier.mirror.drop()
        tombstones.drop()
        # Recorded now, not with the batch's registry commit: a CREATE later in this batch makes a new mirror
        # whose log holds no batch of this job, and a restart after a crash must not take it for a mirror
        # that lost its newest commits (TableApplier.check_behind) but replay the batch over it.
        ctx.set_state(dropped=True, truncate_seq=ctx.horizon, last_batch=None, last_app=None)
        ctx.applier.record_state()
        return
    ctx.set_state(dropped=True)


@apply_change.register
def _(change: ddl.RenameTable, ctx: Context) -> None:
    if ctx.routed:
        log.info("rename of a routed shard recorded; the merged mirror stays", table=table_label(ctx.table))
        return
    old, new = ctx.resolve(change.old), ctx.resolve(change.new)
    # The old name keeps a horizon at the rename: its events up to the rename (delivered again, or a change
    # log replayed over this mirror) are in the new name's mirror already and are not applied again, nor is
    # the rename itself (whichever name's events carry it).
    if ctx.table == old:
        if _renamed_already(ctx.applier.table_state, ctx.horizon):
            return
        ctx.handler.move(ctx, old, new, ctx.applier.table_state)
        ctx.set_state(dropped=True, truncate_seq=ctx.horizon)
        # Recorded now, not after the barrier (TableApplier.apply_barrier): a replay after a crash later
        # in this barrier must find the rename done rather than re-create the old name from this batch's rows.
        ctx.applier.record_state()
    elif ctx.table == new:
        if ctx.handler.refused(ctx.seq_text, new):  # the old name's barrier refused it: one dead letter
            return
        moved = ctx.handler.take_moved(ctx.seq_text, new)
        if moved is None:  # the old name had nothing in this batch: move it from the registry
            previous = ctx.applier.state.tables().get(old) or TableState(
                old[0], old[1], old[2], mirror=mirror_path(ctx.config, old)
            )
            horizon = ctx.applier.horizon(ctx.event, previous)
            if _renamed_already(previous, horizon):
                return
            moved = ctx.handler.move(ctx, old, new, previous, keep=False)
            ctx.applier.state.save_tables(
                [replace(previous, dropped=True, truncate_seq=horizon)], ctx.applier.batch_id
            )
        state = ctx.applier.table_state
        ctx.applier.table_state = replace(
            moved,
            database=state.database,
            schema=state.schema,
            table=state.table,
            mirror=state.mirror,
            primary_key=moved.primary_key or state.primary_key,
            dropped=False,
        )


def _renamed_already(old_state: TableState, seq_text: str) -> bool:
    """The old name was dropped at or after this rename: the rename is applied already."""
    done = old_state.dropped and bool(seq_text) and (old_state.truncate_seq or "") >= seq_text
    if done:
        log.info(
            "rename applied already",
            table=table_label((old_state.database, old_state.schema, old_state.table)),
        )
    return done


def _no_op(change: Any, ctx: Context) -> None:
    log.info("ddl recorded (no change to the mirror)", table=table_label(ctx.table), change=change.kind)


for _kind in ddl.NO_OPS:
    apply_change.register(_kind, _no_op)


# ---- the barrier hook --------------------------------------------------------------------------------------


def changes_schema(change: Any, ctx: Context) -> bool:
    """Whether ``fail`` must stop at this change: anything that alters an existing mirror."""
    if isinstance(change, (*ddl.NO_OPS, ddl.TruncateTable, ddl.DropPrimaryKey)):
        return False
    exists = ctx.applier.mirror.exists() and not ctx.applier.table_state.dropped
    if isinstance(change, ddl.CreateTable):
        return exists
    if isinstance(change, ddl.DeclareSchema):
        if not exists:
            return False
        fields = data_fields(ctx.applier.mirror.schema())
        declared = {c.name: column_type(c.type).arrow for c in change.columns}
        return {n: f.type for n, f in fields.items()} != declared
    return True


class BarrierHandler:
    """The ``on_barrier`` hook. Holds, between the appliers of one rename unit, the state moved away by
    the old name's applier until the new name's applier takes it."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self._moved: dict[tuple[str, TableId], TableState] = {}
        self._refused: set[tuple[str, TableId]] = set()  # renames onto a live mirror (seq_text, new)
        self._lock = threading.Lock()

    def __call__(self, applier: TableApplier, event: dict[str, Any]) -> None:
        table = applier.work.table
        ctx = Context(applier, event, self.config.schema_policy(table_label(table)), self.config, self)
        where = (
            f"{table_label(table)} at {event.get('position')} (seq {event.get('seq_text')}, "
            f"statement {event.get('ddl_sql')!r})"
        )
        try:
            changes = ddl.parse_event(event)
        except ddl.DdlError as exc:
            if ctx.policy == "fail":
                raise SchemaChangeFailed(
                    f"unreadable DDL on {where}: {exc}  [schema_evolution: fail]"
                ) from None
            self._dead(applier, event, f"DDL not applied: {exc}: {event.get('ddl_sql')!r}")
            return
        relevant = [c for c in changes if self._concerns(c, ctx)]
        if ctx.policy == "fail":
            for change in relevant:
                if changes_schema(change, ctx):
                    raise SchemaChangeFailed(
                        f"schema change ({change.kind}) on {where}  [schema_evolution: fail]"
                    )
        for change in relevant:
            try:
                apply_change(change, ctx)
            except (SchemaApplyError, paths.PathRefused, paths.UnmappableName) as exc:
                self._dead(
                    applier, event, f"DDL not applied ({change.kind}): {exc}: {event.get('ddl_sql')!r}"
                )
                return
        flush_defaults(ctx)
        log.info(
            "ddl applied",
            table=table_label(table),
            policy=ctx.policy,
            kind=event.get("ddl_kind"),
            changes=[c.kind for c in relevant],
        )

    @staticmethod
    def _concerns(change: Any, ctx: Context) -> bool:
        """A statement can name several tables (DROP TABLE a, b; RENAME TABLE a TO b, c TO d): each barrier
        applies what concerns its own table."""
        if isinstance(change, ddl.RenameTable):
            return ctx.table in (ctx.resolve(change.old), ctx.resolve(change.new)) or ctx.routed
        ref = getattr(change, "table", None)
        if ref is None or ctx.routed:
            return True
        return ctx.resolve(ref)[2] == ctx.table[2]

    @staticmethod
    def _dead(applier: TableApplier, event: dict[str, Any], message: str) -> None:
        coordinates = event.get("coordinates") or {}
        database, _schema, table = applier.work.table
        applier.result.dead.append(DeadRow(dict(coordinates), message, database, table))

    def move(
        self, ctx: Context, old: TableId, new: TableId, state: TableState, keep: bool = True
    ) -> TableState:
        """Move the old name's mirror (and tombstones) to the new name; returns the moved state."""
        registry = ctx.applier.state
        writer = registry.writer
        source = writer(state.mirror or mirror_path(self.config, old))
        target_path = mirror_path(self.config, new)
        if source.exists():
            # Only this job's mirror of the old name moves, and only to the new name's folder under
            # target.path (a forged name maps inside it: replicator.paths).
            registry.check_mirror(old, source.path, "move")
            registry.check_mirror(new, target_path, "move a mirror to")
            target = writer(target_path)
            if target.exists():  # a table kept under that name (lenient drop): set it aside, never lose it
                self._refuse_live(ctx, old, new)
                target.move_to(paths.beside(target_path, f".replaced-{ctx.seq_text or 'unknown'}"))
            source.move_to(target_path)
            writer(target_path).describe(paths.description(new))
            tombstones, tombstones_to = registry.tombstones(old), registry.tombstones(new)
            if location(tombstones.path).exists():
                registry.check_state_path(tombstones.path, "move")
                registry.check_state_path(tombstones_to.path, "move tombstones to")
                tombstones.move_to(tombstones_to.path)
        moved = replace(
            state, database=new[0], schema=new[1], table=new[2], mirror=target_path, dropped=False
        )
        if keep:
            with self._lock:
                self._moved[(ctx.seq_text, new)] = moved
        return moved

    def _refuse_live(self, ctx: Context, old: TableId, new: TableId) -> None:
        """A rename onto a name whose mirror is live (not dropped) is refused, as the source databases
        refuse it (MySQL: "Table ... already exists"): such a message is forged or out of order, and moving
        the live mirror aside would make the name hold another table's rows."""
        kept = ctx.applier.state.tables().get(new)
        if kept is not None and kept.dropped:
            return
        with self._lock:
            self._refused.add((ctx.seq_text, new))
        raise SchemaApplyError(
            f"RENAME TABLE {table_label(old)} TO {table_label(new)} refused: {table_label(new)} exists and "
            "is not dropped (a source database refuses a rename onto an existing table)"
        )

    def refused(self, seq_text: str, new: TableId) -> bool:
        """Whether this rename was refused already (the old name's barrier wrote its dead letter)."""
        with self._lock:
            return (seq_text, new) in self._refused

    def take_moved(self, seq_text: str, new: TableId) -> TableState | None:
        with self._lock:
            return self._moved.pop((seq_text, new), None)


def barrier_handler(config: JobConfig) -> Callable[[TableApplier, dict[str, Any]], None]:
    """The ``on_barrier`` hook for :class:`replicator.apply.table.TableApplier` (engine.py installs it)."""
    return BarrierHandler(config)


# ---- tables.types for columns a mirror already has ------------------------------------------------------
def reconcile_declared_types(config: JobConfig, state: Any) -> list[str]:
    """Apply the job file's ``tables.types`` to columns the mirrors already have (run at a job's start):
    a column typed string only for lack of a type, whose every stored value parses, takes the declared type;
    a safe widening (an integer width, a decimal's precision: :func:`lossless`) rewrites the column; any
    other difference is kept, with a warning that says why. Returns one line per column acted on or kept."""
    if not config.tables.types:
        return []
    notes = []
    for table in state.tables().values():
        declared = config.tables.types_for(f"{table.database}.{table.table}")
        if not declared or table.dropped:
            continue
        mirror = state.writer(table.mirror)
        if not mirror.exists():
            continue
        fields = data_fields(mirror.schema())
        name = table_label(table.id)
        for column, source_type in declared.items():
            if column not in fields:
                continue  # typed when it first arrives (with_declared_types)
            current, target = fields[column], column_type(source_type).arrow
            if current.type == target:
                continue
            note = _retype(mirror, current, target, source_type, config, column in table.primary_key)
            line = f"tables.types {name}.{column} ({source_type}): {note}"
            notes.append(line)
            (log.info if note.startswith("applied") else log.warning)("declared type", detail=line)
    return notes


def _retype(
    mirror: Any, current: pa.Field, target: pa.DataType, source_type: str, config: JobConfig, key: bool
) -> str:
    name = current.name
    if is_untyped(current):
        data = mirror.read()
        index = data.schema.get_field_index(name)
        typed, errors = parse_values(
            data.column(index).combine_chunks(),
            target,
            timezone=config.source.timezone,
            zero_dates=config.source.zero_dates,
        )
        if errors:
            return (
                f"kept as text: {len(errors)} stored values do not parse as {source_type} "
                f"(e.g. {errors[0]!r}); fix them or the declared type"
            )
        field = with_source(pa.field(name, target, nullable=current.nullable), source_name(current))
        mirror.overwrite(data.set_column(index, field, typed))
        return f"applied: the text column now holds {target}"
    if lossless(current.type, target):
        data = mirror.read()
        index = data.schema.get_field_index(name)
        column = data.column(index).cast(target, safe=True)
        mirror.overwrite(data.set_column(index, current.with_type(target), column))
        return f"applied: widened from {current.type} to {target}"
    why = (
        "a key column is never retyped" if key else f"{current.type} -> {target} could lose or change values"
    )
    return (
        f"not applied: the mirror's column is {current.type}; {why}. Declared types only fill in what "
        "messages leave untyped and widen safely (docs/configuration.md)"
    )
