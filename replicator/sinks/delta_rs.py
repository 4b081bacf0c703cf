"""MirrorWriter on the ``deltalake`` (delta-rs) package: the default writer and the one CI tests."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import pyarrow as pa

from replicator.sinks.base import (
    COLUMN_MAPPING,
    FILL_BEFORE,
    MergeResult,
    MirrorWriter,
    Txn,
    fill_source,
    folder_key,
    forget,
    key_range,
    quote,
    replaced,
    rows_with,
)

# Loaded table states kept per thread for reuse, the least recently used dropped past this many: ~60 KB
# each for a small table; the engine's 8 apply threads keep a table's mirror and tombstones on one thread
# (engine.LANES), so 2,000 tables' stay loaded from batch to batch.
HANDLES = 256
_threads = threading.local()


def handle(path: str):  # type: ignore[no-untyped-def]
    """The Delta table at a local ``path`` at its newest version: this thread's loaded state of it, brought
    up to date with the commits since (``update_incremental``), rather than loaded again from its
    checkpoint and every commit after it. A mirror's micro-batch opened its table ~10 times (its own, the
    registry's, its state tables'), each load reading the log since the last checkpoint: ~20 ms each on a
    table of a few dozen commits, against ~4 ms to bring a kept one up to date (benchmarks/LOG.md).

    Kept per thread: a handle is never used by two threads at once. Read again, not brought up to date,
    when the folder was removed, moved or replaced in this process (base.forget): the update reads only
    the commits after the kept version, and a table made again in the folder has its own. A log that went
    back (its newest commits deleted by hand, an older copy restored) the update follows
    (tests/test_writers.py). On an object store the same: a load there is a LIST of the log and a GET of
    its checkpoint and of every commit since, an update a LIST from the kept version (benchmarks/LOG.md
    counts them per batch)."""
    from deltalake import DeltaTable

    key = folder_key(path)
    kept: OrderedDict[str, tuple[int, DeltaTable]] | None = getattr(_threads, "handles", None)
    if kept is None:
        kept = _threads.handles = OrderedDict()
    entry = kept.pop(key, None)
    generation = replaced(key)
    if entry is not None and entry[0] == generation:
        table = entry[1]
        try:
            table.update_incremental()
        except Exception:  # read again below (an error there is the caller's)
            table = None
        if table is not None:
            kept[key] = (generation, table)
            return table
    table = DeltaTable(path)
    kept[key] = (generation, table)
    while len(kept) > HANDLES:
        kept.popitem(last=False)
    return table


def table_exists(path: str) -> bool:
    """Whether a Delta table is at ``path``. On an object store the probe reads the log as a load does, so
    this thread's kept handle answers, or the load is kept for the read or write that follows."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    if "://" not in path:
        return DeltaTable.is_deltatable(path)
    kept = getattr(_threads, "handles", None)
    entry = kept.get(folder_key(path)) if kept else None
    if entry is not None and entry[0] == replaced(path):
        return True
    try:
        handle(path)
    except TableNotFoundError:
        return False
    return True


# The app transactions read per table (transaction_version): {folder: (stamp, {app id: applied version},
# ours)}. deltalake 1.6 answers transaction_version by reading every commit since the last checkpoint
# again (on S3 a GET of each, every call: measured), so each batch's "is it in already?" cost up to ~100
# GETs a table. An answer is kept for the exact version it was read at and carried to the next version
# across a commit of this process's own (``ours``: that commit's txn, when the handle it was made through
# has not seen it yet: create_write_transaction does not advance its handle).
_Stamp = tuple[int, str, int]  # (base.replaced generation, table id, version)
_applied: dict[str, tuple[_Stamp, dict[str, int | None], tuple[Txn | None] | None]] = {}
_applied_lock = threading.Lock()
_NOT_KEPT = object()


def version_stamp(table, path: str) -> _Stamp:  # type: ignore[no-untyped-def]
    return (replaced(path), table.metadata().id, table.version())


def _follows(before: _Stamp, after: _Stamp) -> bool:
    return after[:2] == before[:2] and after[2] == before[2] + 1


def _kept(key: str, stamp: _Stamp, app_id: str):  # type: ignore[no-untyped-def]
    """The kept answer for ``app_id`` at ``stamp`` (an own commit seen now taken in), else _NOT_KEPT."""
    entry = _applied.get(key)
    if entry is None:
        return _NOT_KEPT
    at, apps, ours = entry
    if ours is not None and _follows(at, stamp):
        # The commit seen now directly after the kept version is ours: it succeeded after that version,
        # and a handle brought up to date sees every commit up to the newest.
        apps = {**apps, **({ours[0].app_id: ours[0].version} if ours[0] is not None else {})}
        at, ours = stamp, None
        _applied[key] = (at, apps, None)
    if at != stamp or ours is not None:
        return _NOT_KEPT
    return apps.get(app_id, _NOT_KEPT)


def applied_version(table, path: str, app_id: str) -> int | None:  # type: ignore[no-untyped-def]
    """``table.transaction_version(app_id)`` (``table`` a handle of ``path`` at its newest version), read
    from the log once per version of the table (:data:`_applied`)."""
    stamp = version_stamp(table, path)
    key = folder_key(path)
    with _applied_lock:
        value = _kept(key, stamp, app_id)
    if value is not _NOT_KEPT:
        return value  # type: ignore[return-value]
    value = table.transaction_version(app_id)
    with _applied_lock:
        entry = _applied.get(key)
        apps = dict(entry[1]) if entry is not None and entry[0] == stamp and entry[2] is None else {}
        apps[app_id] = value
        _applied[key] = (stamp, apps, None)
    return value


def committed(path: str, before: _Stamp, table, txn: Txn | None, advanced: bool = True) -> None:  # type: ignore[no-untyped-def]
    """After this process committed through ``table`` from the version of ``before`` (:func:`version_stamp`
    taken just before). ``advanced``: the write moved ``table`` to its commit (delta-rs's write, MERGE and
    DELETE; a DELETE or MERGE that changed nothing made no commit). The next version is ours when it
    directly follows (another writer's commit between would have moved ours further), so the app
    transactions known at ``before`` hold there too and ``txn``'s app is at ``txn.version`` (an app's
    newest ``txn`` is its answer: Delta's protocol, "Transaction Identifiers"). Anything else is read
    again. Not ``advanced`` (create_write_transaction): the commit is taken in when a handle sees the
    version after ``before``."""
    key = folder_key(path)
    with _applied_lock:
        entry = _applied.get(key)
        apps = dict(entry[1]) if entry is not None and entry[0] == before and entry[2] is None else {}
        if not advanced:
            _applied[key] = (before, apps, (txn,))
            return
        after = version_stamp(table, path)
        if after == before:
            return  # no commit
        if not _follows(before, after):
            _applied.pop(key, None)
            return
        if txn is not None:
            apps[txn.app_id] = txn.version
        _applied[key] = (after, apps, None)


@contextmanager
def writing(path: str) -> Iterator[None]:
    """Around a write with this thread's handle of ``path``: a failed write drops the handle (its state is
    read again next time)."""
    try:
        yield
    except BaseException:
        kept = getattr(_threads, "handles", None)
        if kept is not None:
            kept.pop(folder_key(path), None)
        raise


def _commit(txn: Txn | None):  # type: ignore[no-untyped-def]
    from deltalake import CommitProperties, Transaction

    if txn is None:
        return None
    return CommitProperties(app_transactions=[Transaction(txn.app_id, txn.version)])


def has_deletion_vectors(table) -> bool:  # type: ignore[no-untyped-def]
    """Whether a table (a deltalake.DeltaTable) may hold deletion vectors (a mirror delta-spark wrote with
    ``target.deletion_vectors``)."""
    return "deletionVectors" in (table.protocol().reader_features or [])


def column_mapped(table) -> bool:  # type: ignore[no-untyped-def]
    """Whether a table (a deltalake.DeltaTable) maps its columns to physical names (a mirror delta-spark
    made for column names with blanks or ``,;{}()=``: sinks.base.needs_column_mapping)."""
    return table.metadata().configuration.get(COLUMN_MAPPING, "none") != "none"


def read_table(table, columns: Sequence[str] | None = None, where: str | None = None) -> pa.Table:  # type: ignore[no-untyped-def]
    """A Delta table's rows (a deltalake.DeltaTable at its loaded version), deletion vectors applied.

    deltalake 1.6's pyarrow dataset refuses a table whose protocol has the ``deletionVectors`` reader
    feature ("not yet supported by the deltalake reader"), and reads every column of a column-mapped table
    as NULL (it looks the logical names up in files that hold the physical ones: measured); its DataFusion
    query engine reads both right and skips the rows deletion vectors mark (tests/test_deletion_vectors.py,
    tests/hostile/test_values.py). ``where`` (a SQL predicate) prunes files on the first path and filters
    rows on the second."""
    if not has_deletion_vectors(table) and not column_mapped(table):
        dataset = (
            table.to_pyarrow_dataset(file_pruning_predicate=where) if where else table.to_pyarrow_dataset()
        )
        return dataset.to_table(columns=list(columns) if columns else None)
    from deltalake import QueryBuilder

    names = ", ".join(quote(c) for c in columns) if columns else "*"
    query = f"SELECT {names} FROM t" + (f" WHERE {where}" if where else "")
    result = pa.table(QueryBuilder().register("t", table).execute(query).read_all())
    schema = pa.schema(table.schema().to_arrow())
    wanted = pa.schema([schema.field(c) for c in columns]) if columns else schema
    return result.cast(pa.schema([f.with_type(wanted.field(f.name).type) for f in result.schema]))


def _unmapped(field: pa.Field) -> pa.Field:
    """A column without Delta's column mapping metadata, in the fields of its struct, list and map types
    too (delta-rs gives a nested field its own physical name and id)."""
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_unmapped(kind.field(i)) for i in range(kind.num_fields)])
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _unmapped(kind.value_field)
        kind = pa.list_(item) if pa.types.is_list(kind) else pa.large_list(item)
    elif pa.types.is_map(kind):
        kind = pa.map_(_unmapped(kind.key_field), _unmapped(kind.item_field), kind.keys_sorted)
    kept = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(b"delta.columnMapping.")}
    field = field.with_type(kind)
    return field.with_metadata(kept) if kept else field.remove_metadata()


def count_rows(table) -> int:  # type: ignore[no-untyped-def]
    """A Delta table's live rows (a deltalake.DeltaTable), deletion vectors applied (read_table's reasons)."""
    if not has_deletion_vectors(table) and not column_mapped(table):
        return table.to_pyarrow_dataset().count_rows()
    from deltalake import QueryBuilder

    return (
        QueryBuilder().register("t", table).execute("SELECT COUNT(*) AS n FROM t").read_all()["n"][0].as_py()
    )


class DeltaRsWriter(MirrorWriter):
    # A guarded MERGE of at most this many rows, into files of at most this many bytes in its key range, is
    # done by vectors.merge's copy-on-write rewrite (merge_guarded); 0 rows: always delta-rs's MERGE.
    small_rows = 2_000
    small_bytes = 8 << 20
    # A guarded MERGE of at least large_rows rows and at least rewrite_share of the rows of the files in its
    # key range is done by the same rewrite, each file read whole once; 0: delta-rs's MERGE.
    large_rows = 10_000
    rewrite_share = 0.25

    def _table(self):  # type: ignore[no-untyped-def]
        held = self.__dict__.get("_held")
        if held is None:
            return handle(self.path)
        stamp = (replaced(self.path), threading.get_ident())
        kept = held.get("table")
        if kept is not None and kept[0] == stamp:
            return kept[1]
        table = handle(self.path)
        held["table"] = (stamp, table)
        return table

    @contextmanager
    def held(self) -> Iterator[None]:
        """Within: the table brought up to date at its first use and read as it is until a write (which
        starts over). A table's apply reads its app transaction and its schema four times before its
        MERGE, each an update of the handle otherwise (on an object store a LIST and a GET; on a local
        disk ~0.4 ms of driver CPU each, ~3 ms a table of a batch over 1,000 small tables: measured).
        Its commits stay conditional: a writer that committed in between fails the MERGE or is merged
        after (delta-rs's conflict check), as one that commits during the MERGE does."""
        self._held: dict[str, object] | None = {}
        try:
            yield
        finally:
            self._held = None

    def _written(self, stamp: _Stamp, table, txn: Txn | None) -> None:  # type: ignore[no-untyped-def]
        """After vectors.merge committed through ``table`` from ``stamp`` (it writes the commit itself: the
        handle does not advance): the app transactions known then, and ``txn``'s, hold at the next version
        (:func:`committed`), so the next batch's "is it in already?" reads no commit again (~2 ms a table
        of a batch over 1,000 small tables: measured). Without ``txn`` it may have written no commit: the
        answers are read again at the next version."""
        if txn is not None:
            committed(self.path, stamp, table, txn, advanced=False)

    def _checkpoint_when_due(self, version: int) -> None:
        """A checkpoint at every ``delta.checkpointInterval``-th version (100 unless set), as delta-rs's own
        commits write one: a commit vectors.merge wrote (``version``) has none, and without checkpoints
        every load of the table would read its whole log."""
        interval = int(self._table().metadata().configuration.get("delta.checkpointInterval") or 100)
        if version % max(1, interval) == 0:
            # (a handle brought up to date: the commit was not made through the held one)
            table = handle(self.path)
            if table.version() == version:
                table.create_checkpoint()

    def exists(self) -> bool:
        held = self.__dict__.get("_held")
        kept = held.get("table") if held else None
        if kept is not None and kept[0] == (replaced(self.path), threading.get_ident()):
            return True  # (held since its first use in this apply; a drop through forget() ends that)
        return table_exists(self.path)

    def schema(self) -> pa.Schema:
        """The mirror's columns, with their metadata (replicator's own) but not a column-mapped table's
        physical names and ids (the table's, not its columns' meaning: never copied into another)."""
        table = self._table()
        version = table.version()
        # One conversion per loaded version: a table's apply asks several times (~0.6 ms each).
        kept = self.__dict__.get("_schema_read")
        if kept is not None and kept[0] is table and kept[1] == version:
            return kept[2]
        schema = pa.schema(table.schema().to_arrow())
        if any(f.metadata and b"delta.columnMapping.id" in f.metadata for f in schema):
            schema = pa.schema([_unmapped(f) for f in schema], metadata=schema.metadata)
        self._schema_read = (table, version, schema)
        return schema

    def create(self, schema: pa.Schema, partition_by: Sequence[str] = ()) -> None:
        from deltalake import DeltaTable

        forget(self.path)  # (a table of this folder that was removed by another process)
        if self.properties.get("delta.enableChangeDataFeed") == "true":
            # deltalake 1.6: a MERGE into a CDF table checks NOT NULL on its change-feed projection, where
            # unmatched rows are NULL ("rows failed validation check"; like delta-rs issue #4527): the
            # key columns are nullable there (the engine never writes a NULL key).
            schema = pa.schema([f.with_nullable(True) for f in schema])
        DeltaTable.create(
            self.path,
            schema,
            mode="ignore",
            partition_by=list(partition_by) or None,
            configuration=self.properties or None,
            description=self.description,
        )
        self._readable_by_spark()

    def _readable_by_spark(self) -> None:
        """List ``invariants`` in a writer version 7 protocol whose schema has NOT NULL columns (a key): Delta
        Lake for Spark reads such columns as invariants and refuses a table whose protocol does not list the
        feature (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH), while deltalake 1.6 moves a table with a
        timestamp without time zone to version 7 with ``timestampNtz`` alone (delta-rs issue #2882)."""
        from deltalake import TableFeatures

        table = self._table()
        protocol = table.protocol()
        if protocol.min_writer_version < 7 or "invariants" in (protocol.writer_features or []):
            return
        if all(field.nullable for field in table.schema().fields):
            return
        with self._writing():
            table.alter.add_feature(TableFeatures.Invariants)

    def add_columns(self, fields: Sequence[pa.Field]) -> None:
        from deltalake import Schema

        if not fields:
            return
        converted = Schema.from_arrow(pa.schema([f.with_nullable(True) for f in fields])).fields
        with self._writing():
            self._table().alter.add_columns(list(converted))
        self._readable_by_spark()  # (a timestamp column moves the table to writer version 7)

    def applied_version(self, app_id: str) -> int | None:
        if not self.exists():
            return None
        return applied_version(self._table(), self.path, app_id)

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
        if batch.num_rows == 0:
            return MergeResult()
        from replicator.sinks import vectors

        # A job with target.deletion_vectors (its mirrors' properties); a mirror made without them MERGEs.
        if self.properties.get("delta.enableDeletionVectors") == "true":
            with self._writing():
                table = self._table()
                schema = pa.schema(table.schema().to_arrow())
                if vectors.usable(table, self.path, batch, schema):
                    stamp = version_stamp(table, self.path)
                    try:
                        result = vectors.merge(
                            table, self.path, batch, schema, key, seq_column, op_column, txn, ties=ties
                        )
                    except vectors.Unsupported:
                        pass  # (a vector or checkpoint kind this writer does not read: MERGE below)
                    else:
                        self._written(stamp, table, txn)
                        return result
        elif (
            batch.num_columns >= vectors.WIDE_COLUMNS
            or batch.num_rows <= self.small_rows
            or (self.rewrite_share and batch.num_rows >= self.large_rows)
        ):
            # Wide: delta-rs's MERGE costs the square of the columns. Small (a batch of a few rows into a
            # mirror whose files in its key range are small): its planning costs ~25 ms of driver CPU a
            # table, the rewrite in Arrow a few (benchmarks/LOG.md, "A thousand tables"). Large (a batch of
            # at least rewrite_share of the rows in its key range: uniform changes touch every file): both
            # rewrite the files, the rewrite in Arrow with ~half the CPU (benchmarks/LOG.md, "Uniform
            # updates into a full mirror").
            wide = batch.num_columns >= vectors.WIDE_COLUMNS
            small = not wide and batch.num_rows <= self.small_rows
            with self._writing():
                table = self._table()
                schema = pa.schema(table.schema().to_arrow())
                if vectors.usable(table, self.path, batch, schema, rewrite=True):
                    stamp = version_stamp(table, self.path)
                    try:
                        result = vectors.merge(
                            table,
                            self.path,
                            batch,
                            schema,
                            key,
                            seq_column,
                            op_column,
                            txn,
                            ties=ties,
                            rewrite=True,
                            max_bytes=self.small_bytes if small else None,
                            min_share=None if wide or small else self.rewrite_share,
                        )
                    except vectors.Unsupported:
                        pass
                    else:
                        self._written(stamp, table, txn)
                        self._checkpoint_when_due(stamp[2] + 1)
                        return result
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        bounds = key_range(batch, key)
        if bounds:
            on = f"{on} AND {bounds}"
        # Sorted by key, inserted rows land in data files of narrow key ranges (file pruning, above).
        batch = batch.sort_by([(k, "ascending") for k in key])
        newer = f"s.{quote(seq_column)} {'>=' if ties else '>'} t.{quote(seq_column)}"
        is_delete = f"s.{quote(op_column)} = 'delete'"
        # Every column named and quoted: delta-rs's update_all/insert_all write the names into expressions
        # unquoted, and a column name with a backtick (from a message) failed the MERGE on every rerun.
        columns = {quote(c): f"s.{quote(c)}" for c in batch.column_names}
        with self._writing():
            table = self._table()
            before = table.version()
            stamp = version_stamp(table, self.path)
            metrics = (
                table.merge(
                    batch, predicate=on, source_alias="s", target_alias="t", commit_properties=_commit(txn)
                )
                .when_matched_delete(predicate=f"{is_delete} AND {newer}")
                .when_matched_update(updates=columns, predicate=f"NOT ({is_delete}) AND {newer}")
                .when_not_matched_insert(updates=columns, predicate=f"NOT ({is_delete})")
                .execute()
            )
            committed(self.path, stamp, table, txn)
        if txn is not None and table.version() == before:  # execute() advances the handle it ran on
            # delta-rs writes no commit for a MERGE that changes nothing (every row older than the mirror's):
            # the batch's app transaction must still be recorded, or a replay would not know it was applied.
            self.mark(txn)
        return MergeResult(
            metrics.get("num_target_rows_inserted", 0),
            metrics.get("num_target_rows_updated", 0),
            metrics.get("num_target_rows_deleted", 0),
            metrics.get("num_target_files_scanned", 0),
            metrics.get("num_target_files_skipped_during_scan", 0),
            metrics.get("num_target_rows_copied", 0),
        )

    def append(self, batch: pa.Table, txn: Txn | None) -> None:
        from deltalake import write_deltalake

        if not self.exists():
            self.create(batch.schema)
        with self._writing():
            table = self._table()
            stamp = version_stamp(table, self.path)
            write_deltalake(table, batch, mode="append", commit_properties=_commit(txn), schema_mode="merge")
            committed(self.path, stamp, table, txn)

    def delete_where(self, predicate: str | None, txn: Txn | None) -> int:
        with self._writing():
            table = self._table()
            stamp = version_stamp(table, self.path)
            metrics = table.delete(predicate, commit_properties=_commit(txn))
            committed(self.path, stamp, table, txn)
        return int(metrics.get("num_deleted_rows", 0) or 0)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            with writing(self.path):
                yield
        finally:
            held = self.__dict__.get("_held")
            if held is not None:
                held.pop("table", None)  # (the write may not have advanced it: read up to date again)

    writes_files = True

    def add_files(self, files: pa.Table, txn: Txn | None) -> MergeResult:
        from urllib.parse import quote as url_quote

        import pyarrow.compute as pc
        from deltalake.transaction import AddAction

        adds = [
            AddAction(
                path=url_quote(f["path"], safe="/="),
                size=f["size"],
                partition_values={},
                modification_time=f["mtime"],
                data_change=True,
                stats=f["stats"],
            )
            for f in files.select(["path", "size", "mtime", "stats"]).to_pylist()
        ]
        with self._writing():
            table = self._table()
            stamp = version_stamp(table, self.path)
            table.create_write_transaction(
                adds, mode="append", schema=table.schema(), commit_properties=_commit(txn)
            )
            committed(self.path, stamp, table, txn, advanced=False)
        return MergeResult(inserted=int(pc.sum(files["rows"]).as_py() or 0))

    def mark(self, txn: Txn) -> None:
        with self._writing():
            table = self._table()
            stamp = version_stamp(table, self.path)
            table.create_write_transaction(
                [], mode="append", schema=table.schema(), commit_properties=_commit(txn)
            )
            committed(self.path, stamp, table, txn, advanced=False)

    def describe(self, description: str) -> None:
        with self._writing():
            self._table().alter.set_table_description(description)

    def overwrite(self, data: pa.Table, txn: Txn | None = None) -> None:
        from deltalake import write_deltalake

        with self._writing():  # (a table held through its apply is read again after it)
            write_deltalake(
                self.path, data, mode="overwrite", schema_mode="overwrite", commit_properties=_commit(txn)
            )

    def fill(
        self,
        values: pa.Table,
        seq_column: str,
        before: str,
        match: Mapping[str, str] | None = None,
        flag: str | None = None,
    ) -> int:
        on = [f"t.{quote(seq_column)} < s.{quote(FILL_BEFORE)}"]
        on += [f"t.{quote(c)} = s.{quote(f'__fill_match_{i}')}" for i, c in enumerate(match or {})]
        if flag is not None:
            on.append(f"t.{quote(flag)}")
        pairs = [(quote(c), f"s.{quote(f'__fill_{i}')}") for i, c in enumerate(values.column_names)]
        differs = " OR ".join(f"(t.{c} IS DISTINCT FROM {v})" for c, v in pairs)
        with self._writing():
            metrics = (
                self._table()
                .merge(
                    fill_source(values, before, match),
                    predicate=" AND ".join(on),
                    source_alias="s",
                    target_alias="t",
                )
                .when_matched_update(updates=dict(pairs), predicate=differs)
                .execute()
            )
        return int(metrics.get("num_target_rows_updated", 0) or 0)

    def read_keys(self, column: str, values: pa.Array, columns: Sequence[str]) -> pa.Table:
        """Files chosen by their Delta statistics (the key range of ``values``), rows filtered in memory.

        Not a pyarrow dataset filter: delta-rs writes strings as ``string_view`` in the Parquet files of
        a MERGE, and pyarrow then fails to compare the statistics of such a file with a ``string``
        literal ("no kernel matching input types (string, string_view)")."""
        if not self.exists():
            raise FileNotFoundError(self.path)
        values = pa.chunked_array([values]).combine_chunks() if isinstance(values, pa.Array) else values
        bounds = key_range(pa.table({column: values}), [column], alias=None)
        return rows_with(read_table(self._table(), columns, bounds), column, values)

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        if not self.exists():
            raise FileNotFoundError(self.path)
        return read_table(self._table(), columns)
