"""MirrorWriter on Delta Lake for Spark (``io.delta:delta-spark`` jars on the cluster, e.g.
``spark-submit --packages io.delta:delta-spark_2.13:<version>`` with the Delta SQL extension and catalog).

Writes are Spark SQL and DataFrame options; reads (rows, key lookups, the app transaction's version) go
through delta-rs, which reads a table with deletion vectors through its query engine. Engine state
(tombstones, registry, dead letters, change log) stays on delta-rs whichever writer the mirrors use.
Idempotent commits use Delta's ``txnAppId`` / ``txnVersion`` (session settings for MERGE and DELETE).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import contextmanager

import pyarrow as pa

from replicator.sinks.base import (
    COLUMN_MAPPING,
    FILL_BEFORE,
    MergeResult,
    MirrorWriter,
    Txn,
    fill_source,
    key_range,
    needs_column_mapping,
    sql_string,
)

_TXN_LOCK = threading.Lock()

JARS_MISSING = (
    "the delta-spark writer needs Delta Lake's Spark jars (io.delta:delta-spark) and the settings "
    "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension, "
    "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"
)


def delta_spark_available(spark) -> bool:  # type: ignore[no-untyped-def]
    try:
        # Through the thread's context class loader, which holds spark.jars (java.lang.Class.forName would
        # look in the JVM's own class path only).
        loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", False, loader)
        return True
    except Exception:
        return False


def _spark():  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    # The active session is the calling thread's: the engine applies tables in threads of its own.
    spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if spark is None:
        # A command that writes a mirror starts the job's session first (replicator.spark.writer_session).
        raise RuntimeError("the delta-spark writer writes through a Spark session, and none was started")
    if not delta_spark_available(spark):
        raise RuntimeError(JARS_MISSING)
    return spark


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _recorded(field: pa.Field) -> dict[str, str]:
    """The field's source name (replicator.columns.SOURCE_NAME), which Delta keeps as column metadata."""
    from replicator.columns import SOURCE_NAME

    value = (field.metadata or {}).get(SOURCE_NAME.encode())
    return {SOURCE_NAME: value.decode()} if value is not None else {}


def _spark_fields(fields: Sequence[pa.Field]):  # type: ignore[no-untyped-def]
    """Arrow fields as Spark's, with their recorded source names as column metadata (SQL DDL cannot set
    it; a DataFrame's schema written with ``mergeSchema`` can)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    return StructType(
        [
            StructField(
                f.name, from_arrow_type(f.type, prefer_timestamp_ntz=True), f.nullable, _recorded(f) or None
            )
            for f in fields
        ]
    )


class DeltaSparkWriter(MirrorWriter):
    merges_staged = True
    writes_with_spark = True
    # Reads go through delta-rs (replicator.sinks.delta_rs.read_table, deletion vectors applied): `show`,
    # `status` and the engine's key lookups need no Spark session, and a lookup runs no Spark job.

    @property
    def spark(self):  # type: ignore[no-untyped-def]
        return _spark()

    @property
    def _table_ref(self) -> str:
        return f"delta.{_ident(self.path)}"

    @contextmanager
    def _txn(self, txn: Txn | None):  # type: ignore[no-untyped-def]
        # The app transaction is a setting of the session, which the engine's apply threads share: one write
        # at a time, or a table's write without one unset another's before its commit (seen: a mirror's log
        # without its batch, then StateDamaged at the next batch).
        with _TXN_LOCK:
            conf = self.spark.conf
            if txn is not None:
                conf.set("spark.databricks.delta.write.txnAppId", txn.app_id)
                conf.set("spark.databricks.delta.write.txnVersion", str(txn.version))
            try:
                yield
            finally:
                conf.unset("spark.databricks.delta.write.txnAppId")
                conf.unset("spark.databricks.delta.write.txnVersion")

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.path)

    def schema(self) -> pa.Schema:
        # From the log through delta-rs, as the rows are read: commands that only read a mirror (the
        # pre-flight checks, status, show) start no Spark session, and a batch runs no Spark job for it.
        # The same Arrow types as Spark's reading (to_arrow_schema) gave, column-mapped and deletion-vector
        # tables included (tests/test_writers.py).
        from replicator.sinks.delta_rs import DeltaRsWriter

        return DeltaRsWriter(self.path).schema()

    def _frame(self, batch: pa.Table):  # type: ignore[no-untyped-def]
        """Arrow rows as a DataFrame whose types are the mirror's: a timestamp without a zone stays
        TIMESTAMP_NTZ (Spark's own inference makes it a TIMESTAMP, which MERGE would then cast)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.createDataFrame(
            batch, schema=from_arrow_schema(batch.schema, prefer_timestamp_ntz=True)
        )

    def create(self, schema: pa.Schema, partition_by: Sequence[str] = ()) -> None:
        from pyspark.sql.pandas.types import from_arrow_type

        # The columns from the first one with a recorded source name on are added after (add_columns keeps
        # it), in their order.
        first = next((i for i, f in enumerate(schema) if _recorded(f)), len(schema))
        later = list(schema)[first:]
        if later and first:
            schema = pa.schema(list(schema)[:first], metadata=schema.metadata)
        else:
            later = []
        columns = ", ".join(
            f"{_ident(f.name)} {from_arrow_type(f.type, prefer_timestamp_ntz=True).simpleString()}"
            + ("" if f.nullable else " NOT NULL")
            for f in schema
        )
        sql = f"CREATE TABLE IF NOT EXISTS {self._table_ref} ({columns}) USING delta"
        if partition_by:
            sql += f" PARTITIONED BY ({', '.join(_ident(c) for c in partition_by)})"
        # The description holds names from messages: a SQL literal (quotes and backslashes escaped), never
        # SQL text of its own; Delta keeps it as the table's 'comment'. Properties are literals too.
        if self.description:
            sql += f" COMMENT {sql_string(self.description)}"
        properties = dict(self.properties)
        if needs_column_mapping([*schema.names, *(f.name for f in later)]):  # blanks, ',;{}()=': mapped
            properties.setdefault(COLUMN_MAPPING, "name")
        if properties:  # (with the table's first commit)
            sql += " TBLPROPERTIES ({})".format(
                ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in sorted(properties.items()))
            )
        self.spark.sql(sql)
        self.add_columns(later)
        if first == 0 and len(schema):  # (the first column mapped: the new table's schema written again)
            frame = self.spark.createDataFrame([], _spark_fields(schema))
            writer = frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            writer.partitionBy(*partition_by).save(self.path)

    def describe(self, description: str) -> None:
        self.spark.sql(
            f"ALTER TABLE {self._table_ref} SET TBLPROPERTIES ('comment' = {sql_string(description)})"
        )

    def add_columns(self, fields: Sequence[pa.Field]) -> None:
        from pyspark.sql.pandas.types import from_arrow_type

        if fields:
            if needs_column_mapping(f.name for f in fields) and self._mapping() == "none":
                # A column such as `order note` added to a table made without column mapping: Delta
                # turns it on in place (the protocol upgraded, the data files kept).
                self.spark.sql(
                    f"ALTER TABLE {self._table_ref} SET TBLPROPERTIES ({sql_string(COLUMN_MAPPING)} = 'name')"
                )
            cols = ", ".join(
                f"{_ident(f.name)} {from_arrow_type(f.type, prefer_timestamp_ntz=True).simpleString()}"
                for f in fields
            )
            if any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in fields):
                # A DATETIME column added to a table without one: Delta asks for the feature first
                # (DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT: timestampNtz); delta-rs enables it itself.
                feature = "'delta.feature.timestampNtz' = 'supported'"
                self.spark.sql(f"ALTER TABLE {self._table_ref} SET TBLPROPERTIES ({feature})")
            if any(_recorded(f) for f in fields):
                # ADD COLUMNS drops column metadata; a schema merge of no rows keeps it.
                from pyspark.sql.types import StructType

                current = self.spark.read.format("delta").load(self.path).schema
                whole = StructType([*current.fields, *_spark_fields(fields).fields])  # (its NOT NULL ones)
                frame = self.spark.createDataFrame([], whole)
                frame.write.format("delta").mode("append").option("mergeSchema", "true").save(self.path)
                return
            self.spark.sql(f"ALTER TABLE {self._table_ref} ADD COLUMNS ({cols})")

    def _mapping(self) -> str:
        """The table's column mapping mode (none, name or id), from its log through delta-rs."""
        from deltalake import DeltaTable

        return DeltaTable(self.path).metadata().configuration.get(COLUMN_MAPPING, "none")

    def applied_version(self, app_id: str) -> int | None:
        # From the log through delta-rs (its checkpoints included, no Spark job): reading the log's JSON
        # with Spark cost two jobs (schema inference, then the query) at every table's batch. delta-rs
        # reads the log of a table with deletion vectors (only its data files' reader refuses them).
        from deltalake import DeltaTable

        if not self.exists():
            return None
        return DeltaTable(self.path).transaction_version(app_id)

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
        bounds = key_range(batch, key, ident=_ident)
        return self.merge_frame(self._frame(batch), bounds, key, seq_column, op_column, txn, ties=ties)

    def merge_frame(  # type: ignore[no-untyped-def]
        self,
        source,
        bounds: str | None,
        key: Sequence[str],
        seq_column: str,
        op_column: str,
        txn: Txn | None,
        *,
        ties: bool = False,
    ) -> MergeResult:
        """The guarded MERGE of a DataFrame of mirror rows (the executors read it: only the metrics come
        back); ``bounds``: the first key column's range in the target (base.key_range), or None."""
        view = f"replicator_merge_{abs(hash(self.path))}"
        source.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{_ident(k)} = s.{_ident(k)}" for k in key)
        if bounds:  # file skipping on the key range (base.key_range)
            on = f"{on} AND {bounds}"
        newer = f"s.{_ident(seq_column)} {'>=' if ties else '>'} t.{_ident(seq_column)}"
        is_delete = f"s.{_ident(op_column)} = 'delete'"
        # Every column named and quoted: Delta's SET * / INSERT * resolve the names unquoted, and a column
        # name with a backtick (from a message) failed the MERGE on every rerun.
        names = [_ident(c) for c in source.columns]
        update = ", ".join(f"t.{n} = s.{n}" for n in names)
        insert = f"({', '.join(names)}) VALUES ({', '.join(f's.{n}' for n in names)})"
        with self._txn(txn):
            metrics = self.spark.sql(
                f"MERGE INTO {self._table_ref} t USING {view} s ON {on} "
                f"WHEN MATCHED AND {is_delete} AND {newer} THEN DELETE "
                f"WHEN MATCHED AND NOT ({is_delete}) AND {newer} THEN UPDATE SET {update} "
                f"WHEN NOT MATCHED AND NOT ({is_delete}) THEN INSERT {insert}"
            ).collect()
        self.spark.catalog.dropTempView(view)
        row = metrics[0].asDict() if metrics else {}
        return MergeResult(
            int(row.get("num_inserted_rows", 0)),
            int(row.get("num_updated_rows", 0)),
            int(row.get("num_deleted_rows", 0)),
        )

    def staged_frame(self, paths: Sequence[str], horizon: str | None, seq_column: str):  # type: ignore[no-untyped-def]
        """The Parquet files of mirror rows the fold tasks staged (replicator.fold.mirror_files) as a
        DataFrame in the mirror's columns: a column added since they were typed is NULL (as the driver's
        typing leaves a column the row's image lacks); rows at or before the table's ``horizon`` (a
        TRUNCATE) are dropped."""
        from pyspark.sql import functions as F

        target = self.spark.read.format("delta").load(self.path).schema
        frame = self.spark.read.parquet(*paths)
        have = set(frame.columns)
        frame = frame.select(
            *[
                (F.col(_ident(f.name)) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in target
            ]
        )
        if horizon:
            frame = frame.where(F.col(seq_column) > F.lit(horizon))
        return frame

    def fill(
        self,
        values: pa.Table,
        seq_column: str,
        before: str,
        match: Mapping[str, str] | None = None,
        flag: str | None = None,
    ) -> int:
        view = f"replicator_fill_{abs(hash(self.path))}"
        self._frame(fill_source(values, before, match)).createOrReplaceTempView(view)
        on = [f"t.{_ident(seq_column)} < s.{_ident(FILL_BEFORE)}"]
        on += [f"t.{_ident(c)} = s.{_ident(f'__fill_match_{i}')}" for i, c in enumerate(match or {})]
        if flag is not None:
            on.append(f"t.{_ident(flag)}")
        pairs = [(f"t.{_ident(c)}", f"s.{_ident(f'__fill_{i}')}") for i, c in enumerate(values.column_names)]
        differs = " OR ".join(f"NOT ({c} <=> {v})" for c, v in pairs)
        update = ", ".join(f"{c} = {v}" for c, v in pairs)
        try:
            # Under the app-transaction lock, with none: another table's write in another apply thread sets
            # one in the shared session, and a MERGE that took it would make Delta skip this table's commit
            # of that batch as a duplicate (seen: rows after the DDL missing with delta-spark).
            with self._txn(None):
                metrics = self.spark.sql(
                    f"MERGE INTO {self._table_ref} t USING {view} s ON {' AND '.join(on)} "
                    f"WHEN MATCHED AND ({differs}) THEN UPDATE SET {update}"
                ).collect()
        finally:
            self.spark.catalog.dropTempView(view)
        row = metrics[0].asDict() if metrics else {}
        return int(row.get("num_updated_rows", 0))

    def append(self, batch: pa.Table, txn: Txn | None) -> None:
        writer = self._frame(batch).write.format("delta").mode("append")
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", str(txn.version))
        writer.option("mergeSchema", "true").save(self.path)

    def overwrite(self, data: pa.Table, txn: Txn | None = None) -> None:
        writer = self._frame(data).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", str(txn.version))
        writer.save(self.path)

    def delete_where(self, predicate: str | None, txn: Txn | None) -> int:
        where = f" WHERE {predicate}" if predicate else ""
        with self._txn(txn):
            rows = self.spark.sql(f"DELETE FROM {self._table_ref}{where}").collect()
        return int(rows[0][0]) if rows else 0

    def mark(self, txn: Txn) -> None:
        self.append(self.schema().empty_table(), txn)

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        from replicator.sinks.delta_rs import DeltaRsWriter

        return DeltaRsWriter(self.path).read(columns)

    def read_keys(self, column: str, values: pa.Array, columns: Sequence[str]) -> pa.Table:
        from replicator.sinks.delta_rs import DeltaRsWriter

        return DeltaRsWriter(self.path).read_keys(column, values, columns)


def guard_tombstones(frame, tombstones: str | None, key: Sequence[str], seq_column: str, event_time: str):  # type: ignore[no-untyped-def]
    """A DataFrame of upserts against a table's tombstones (a Delta table at ``tombstones``, read by Spark
    on the executors) -> (the upserts newer than their key's tombstone, the Arrow rows of those that had
    one: key, seq and event time, whose tombstones the applier removes). Only the second, the resurrected
    keys, reaches the driver."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    if tombstones is None or not DeltaTable.is_deltatable(tombstones):
        return frame, None
    spark = frame.sparkSession
    tombs = (
        spark.read.format("delta")
        .load(tombstones)
        .select(*[F.col(_ident(k)).alias(k) for k in key], F.col(seq_column).alias("_tomb_seq"))
    )
    joined = frame.join(tombs, list(key), "left")  # (Spark broadcasts it when small)
    kept = joined.where(F.col("_tomb_seq").isNull() | (F.col(seq_column) > F.col("_tomb_seq")))
    back = (
        kept.where(F.col("_tomb_seq").isNotNull())
        .select(*[F.col(_ident(k)) for k in key], F.col(seq_column), F.col(event_time))
        .toArrow()
    )
    return kept.drop("_tomb_seq"), back
