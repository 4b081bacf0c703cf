"""The MirrorWriter contract: one Delta table, written with sequence-guarded, idempotent commits."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path

import pyarrow as pa


@dataclass(frozen=True)
class Txn:
    """A Delta app transaction: ``app_id`` (the job name) and ``version`` (the micro-batch id)."""

    app_id: str
    version: int


@dataclass(frozen=True)
class MergeResult:
    """Rows changed by a write, and what it cost: data files read and rows copied into rewritten files
    (where the writer reports them)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    files_scanned: int = 0
    files_skipped: int = 0
    rows_copied: int = 0

    def __add__(self, other: MergeResult) -> MergeResult:
        return MergeResult(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def _literal(value: object) -> str | None:
    """A SQL literal of a key value, or None for types a range predicate is not written for."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


def key_range(
    batch: pa.Table, key: Sequence[str], alias: str | None = "t", ident: Callable[[str], str] | None = None
) -> str | None:
    """``t.k >= lo AND t.k <= hi`` for the first key column's range in ``batch`` (integers and text).

    Joined to a MERGE's key predicate it lets the writer skip every data file whose statistics lie outside
    the range: with files clustered by key (compaction with z-order, ``replicator optimize``) a batch that
    touches a narrow key range reads and rewrites only the files that hold it."""
    import pyarrow.compute as pc

    if not key or batch.num_rows == 0:
        return None
    column = batch[key[0]]
    if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
        return None
    bounds = pc.min_max(column).as_py()
    lo, hi = _literal(bounds["min"]), _literal(bounds["max"])
    if lo is None or hi is None:
        return None
    name = (ident or quote)(key[0])
    prefix = f"{alias}." if alias else ""
    return f"{prefix}{name} >= {lo} AND {prefix}{name} <= {hi}"


class MirrorWriter(ABC):
    """One Delta table at ``path``. Every write may carry a :class:`Txn`; :meth:`applied_version` tells the
    newest version committed for an app id, so a replayed micro-batch can be skipped. ``properties`` are
    the Delta table properties a table created by this writer gets (``delta.enableChangeDataFeed``);
    ``description``, its Delta description (a mirror's real names: replicator.paths.description)."""

    def __init__(
        self, path: str | Path, properties: Mapping[str, str] | None = None, description: str | None = None
    ) -> None:
        self.path = str(path)
        self.properties = dict(properties or {})
        self.description = description

    @contextmanager
    def held(self) -> Iterator[None]:
        """Within: reads may use the table as first read here, until a write (sinks.delta_rs). Here: as
        every read."""
        yield

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def schema(self) -> pa.Schema: ...

    @abstractmethod
    def create(self, schema: pa.Schema, partition_by: Sequence[str] = ()) -> None: ...

    @abstractmethod
    def add_columns(self, fields: Sequence[pa.Field]) -> None: ...

    @abstractmethod
    def applied_version(self, app_id: str) -> int | None: ...

    @abstractmethod
    def merge_guarded(
        self,
        batch: pa.Table,
        key: Sequence[str],
        seq_column: str,
        op_column: str,
        txn: Txn | None,
        *,
        ties: bool = False,
    ) -> MergeResult:
        """Upsert rows whose op is not ``delete`` and delete rows whose op is ``delete``, each only where the
        incoming ``seq_column`` is newer than the stored one (a missing row counts as older); ``ties``: or
        as new (rows that carry a merged state, replicator.apply.documents)."""

    @abstractmethod
    def append(self, batch: pa.Table, txn: Txn | None) -> None: ...

    @abstractmethod
    def delete_where(self, predicate: str | None, txn: Txn | None) -> int:
        """Delete rows matching a SQL predicate (all rows when None); returns the count."""

    @abstractmethod
    def mark(self, txn: Txn) -> None:
        """Commit the app transaction alone (a table's batch that ended without a data commit)."""

    @abstractmethod
    def read(self, columns: Sequence[str] | None = None) -> pa.Table: ...

    # Whether :meth:`add_files` commits Parquet files that others wrote into the table's folder (a new
    # table's upserts, written by the fold tasks: replicator.fold.mirror_files).
    writes_files = False
    # Whether the applier MERGEs the upserts the fold tasks staged as Parquet files (a folder of the batch)
    # through ``staged_frame`` / ``merge_frame`` on the executors, not collected rows (delta-spark).
    merges_staged = False
    # Whether writes go through a Spark session with the writer's jars (delta-spark): a command that writes
    # mirrors outside the mirror job starts it first (replicator.spark.writer_session). Reads never need it.
    writes_with_spark = False

    def add_files(self, files: pa.Table, txn: Txn | None) -> MergeResult:
        """Commit data files already in the table's folder (mirror_files.files_schema(): path, size,
        rows, mtime, stats) as one append."""
        raise NotImplementedError(f"{type(self).__name__} does not commit files written elsewhere")

    def read_keys(self, column: str, values: pa.Array, columns: Sequence[str]) -> pa.Table:
        """The rows whose ``column`` (one of ``columns``) is one of ``values`` (the lookups of tombstones and
        stored rows). This default reads ``columns`` and filters in memory."""
        return rows_with(self.read(columns), column, values)

    # ---- schema changes (replicator.apply.schema) -------------------------------------------------------
    def fill(
        self,
        values: pa.Table,
        seq_column: str,
        before: str,
        match: Mapping[str, str] | None = None,
        flag: str | None = None,
    ) -> int:
        """Set the columns of ``values`` (one row, typed as the table's columns) in the rows whose
        ``seq_column`` is lower than ``before``, and (``match``) whose columns hold these texts, and
        (``flag``) where that boolean column is true; rows that hold them already are not rewritten.
        Returns the rows changed. The values and bounds travel as a one-row source table of a MERGE, never
        as query text (ADD COLUMN defaults for the rows already there: replicator.apply.schema)."""
        raise NotImplementedError(f"{type(self).__name__} cannot fill a column")

    def overwrite(self, data: pa.Table, txn: Txn | None = None) -> None:
        """Replace the table's rows *and schema* with ``data`` (a rewrite: drop / rename a column, change a
        type Delta cannot alter in place). Older versions stay in the Delta history until vacuumed."""
        raise NotImplementedError(f"{type(self).__name__} cannot rewrite a table")

    def describe(self, description: str) -> None:
        """Set the table's Delta description (a renamed mirror's new names)."""
        raise NotImplementedError(f"{type(self).__name__} cannot set a description")

    def drop(self) -> None:
        """Delete the table (its whole directory)."""
        import shutil

        from replicator.storage import ObjectPath, location

        forget(self.path)
        where = location(self.path)
        if isinstance(where, ObjectPath):
            where.rmtree()
        else:
            shutil.rmtree(self.path, ignore_errors=True)

    def move_to(self, path: str | Path) -> None:
        """Move the table's directory to ``path`` (a renamed source table); the parent folder is created.
        On an object store (no rename) its objects are copied, then the originals deleted: a crash between
        the two leaves both, and the registry still names the original (the move is redone)."""
        import shutil

        from replicator.storage import ObjectPath, location

        target, source = location(path), location(self.path)
        forget(self.path)
        forget(str(target))
        if isinstance(source, ObjectPath) and isinstance(target, ObjectPath):
            source.copy_tree_to(target)
            source.rmtree()
            return
        target.parent.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        shutil.move(self.path, target)  # type: ignore[arg-type]


# Tables whose folder was removed, moved or replaced in this process, so that a loaded state of the table
# kept for reuse (replicator.sinks.delta_rs.handle) is read again: the count of such changes per folder.
_replaced: dict[str, int] = {}


def folder_key(path: str | Path) -> str:
    """A table folder as the handles are kept by (a local path normalized, a URI as it is)."""
    import os

    text = str(path)
    return text if "://" in text else os.path.normpath(os.path.abspath(text))


def forget(path: str | Path) -> None:
    """The table at ``path`` is about to be removed, moved or replaced by another: states of it loaded
    before are not to be brought up to date but read again."""
    key = folder_key(path)
    _replaced[key] = _replaced.get(key, 0) + 1


def replaced(path: str | Path) -> int:
    return _replaced.get(folder_key(path), 0)


WriterFactory = Callable[..., MirrorWriter]  # (path, properties=None)


def sql_string(text: str) -> str:
    """A Spark SQL string literal of any text (backslash escapes are on by default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Characters Delta Lake for Spark refuses in a column name unless the table maps its columns by name (Delta's
# column mapping, ``delta.columnMapping.mode = name``); delta-rs accepts them in a plain table. A source may
# have them (MySQL allows any character in a backquoted name).
DELTA_SPECIAL = frozenset(" ,;{}()\n\t=")
COLUMN_MAPPING = "delta.columnMapping.mode"


def needs_column_mapping(names: Iterable[str]) -> bool:
    """Whether delta-spark can hold these column names only in a table with column mapping."""
    return any(not DELTA_SPECIAL.isdisjoint(name) for name in names)


FILL_BEFORE = "__fill_before"


def fill_source(values: pa.Table, before: str, match: Mapping[str, str] | None) -> pa.Table:
    """The one-row source of :meth:`MirrorWriter.fill`: the values (``__fill_<i>``), the bound, the texts
    to match (``__fill_match_<i>``)."""
    columns = {f"__fill_{i}": values.column(i) for i in range(values.num_columns)}
    columns[FILL_BEFORE] = pa.chunked_array([pa.array([before], pa.string())])
    for i, text in enumerate((match or {}).values()):
        columns[f"__fill_match_{i}"] = pa.chunked_array([pa.array([text], pa.string())])
    return pa.table(columns)


def quote(name: str) -> str:
    """Quote a column name for a delta-rs / Spark SQL predicate."""
    return '"' + name.replace('"', '""') + '"'


def rows_with(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    """The rows of ``table`` whose ``column`` is one of ``values``."""
    import pyarrow.compute as pc

    return table.filter(pc.is_in(table[column], value_set=values.cast(table.schema.field(column).type)))
