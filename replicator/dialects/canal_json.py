"""canal-json: Alibaba canal's FlatMessage (seed 002; seed 004 "Canal Json").

One message holds 1..n rows of one table: ``data`` (after images; for DELETE the deleted rows) and, for
UPDATE, ``old`` holding only the changed columns' previous values (canal MQMessageUtils). All values are
JSON strings, NULL is JSON null. Binary columns carry their bytes as ISO-8859-1 text (canal
LogEventConvert; notes/ENCODINGS.md §1). Order: ``es`` (binlog execute time, ms) then ``id``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import Dialect, epoch_to_timestamp, finish, first_error, seq_tail

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MESSAGE_SCHEMA = (
    "data ARRAY<MAP<STRING, STRING>>, old ARRAY<MAP<STRING, STRING>>, database STRING, `table` STRING, "
    "pkNames ARRAY<STRING>, isDdl BOOLEAN, type STRING, es BIGINT, ts BIGINT, id BIGINT, `sql` STRING, "
    "sqlType MAP<STRING, INT>, mysqlType MAP<STRING, STRING>, gtid STRING, tableChanges STRING"
)

DDL_KINDS = ("CREATE", "ALTER", "ERASE", "RENAME", "TRUNCATE", "CINDEX", "DINDEX", "QUERY", "INIT_DDL")
# Binary MySQL types; a regex for dialects that test one type per message, see is_binary_type per value.
BINARY_TYPE = r"(?i)^\s*(binary|varbinary|tinyblob|blob|mediumblob|longblob)\b"


def is_binary_type(type_text: Column) -> Column:
    """binary, varbinary, *blob (MySQL) -- plain substring tests, cheaper than a regex per value."""
    from pyspark.sql import functions as F

    lowered = F.lower(type_text)
    return F.coalesce(lowered.contains("binary") | lowered.contains("blob"), F.lit(False))


def binary_as_hex(image: Column, types: Column) -> Column:
    """Canal's ISO-8859-1 byte text -> canonical hex, for columns whose mysqlType is binary.

    ``types`` must be a column reference, not an expression: Spark evaluates a lambda's free expressions
    once per map entry (measured: an inline type map made decoding 5x slower)."""
    from pyspark.sql import functions as F

    return F.transform_values(
        image,
        lambda k, v: F.when(
            v.isNotNull() & is_binary_type(types[k]), F.lower(F.hex(F.encode(v, "ISO-8859-1")))
        ).otherwise(v),
    )


def overlay(base: Column, changed: Column) -> Column:
    """``base`` with the keys of ``changed`` replacing its values (NULL values included).

    ``map_concat`` under the engine's required ``spark.sql.mapKeyDedupPolicy=LAST_WIN`` (replicator.spark):
    one pass, where filtering ``base`` by ``map_contains_key(changed, ...)`` re-evaluated ``changed`` for
    every entry."""
    from pyspark.sql import functions as F

    return F.when(changed.isNull(), base).otherwise(F.map_concat(base, changed))


class CanalJson(Dialect):
    name = "canal-json"
    required_keys: ClassVar[frozenset[str]] = frozenset({"database", "table", "type", "isDdl"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"data", "sql", "es", "pkNames"})
    # DRS JSON reuses canal's keys with other meanings (delete image in `old`, epoch timestamps).
    forbidden_keys: ClassVar[frozenset[str]] = frozenset(
        {"jobId", "shardId", "eventId", "columnType", "opType", "dbType"}
    )
    ambiguous_with: ClassVar[frozenset[str]] = frozenset({"drs-json", "drs-json-c"})
    message_schema: ClassVar[str] = MESSAGE_SCHEMA
    # Values of `type` that are rows, mapped to contract ops.
    row_ops: ClassVar[dict[str, str]] = {
        "INSERT": "insert",
        "UPDATE": "update",
        "DELETE": "delete",
        "INIT": "snapshot",
    }
    # Messages that carry no change (TiCDC watermarks): counted as filtered.
    ignored_types: ClassVar[tuple[str, ...]] = ("TIDB_WATERMARK",)
    delete_image: ClassVar[str] = "data"  # DRS JSON puts the deleted row in `old`
    ddl_types: ClassVar[tuple[str, ...]] = ()  # more `type` values that are DDL (DRS: DDL, INIT_DDL)

    def disambiguate(self, message: Column, keys: Column) -> Column:
        """Canal, never DRS: a parameterised mysqlType (``int(11)``; DRS writes bare names, seed 003), a
        canal DDL type (CREATE, ALTER, ...; DRS writes ``DDL``), or a ``gtid``/``_tidb`` key."""
        from pyspark.sql import functions as F

        head = F.from_json(message, "mysqlType MAP<STRING, STRING>, type STRING")
        parameterised = F.exists(F.map_values(head["mysqlType"]), lambda t: t.contains("("))
        canal_ddl = F.upper(head["type"]).isin(*[k for k in DDL_KINDS if k != "INIT_DDL"])
        return (
            F.coalesce(parameterised, F.lit(False))
            | F.coalesce(canal_ddl, F.lit(False))
            | F.array_contains(keys, "gtid")
            | F.array_contains(keys, "_tidb")
        )

    # ---- hooks for look-alike formats (DRS JSON, CKafka DDL) ---------------------------------------------
    def source_types(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        jdbc = F.transform_values(m["sqlType"], lambda k, v: F.concat(F.lit("jdbc:"), v.cast("string")))
        return F.map_concat(F.coalesce(jdbc, F.create_map()), F.coalesce(m["mysqlType"], F.create_map()))

    def normalize(self, image: Column, types: Column) -> Column:
        return binary_as_hex(image, types)

    def position(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        return F.coalesce(m["gtid"], F.format_string("es=%d id=%d", m["es"], m["id"]))

    def order_key(self, m: Column) -> list[Column]:
        """The dialect's part of ``seq`` (ARCHITECTURE.md: es then id)."""
        from pyspark.sql import functions as F

        es = m["es"]
        es_ms = F.when(F.abs(es) < F.lit(100_000_000_000), es * 1000).otherwise(es)
        return [F.coalesce(es_ms, F.lit(0)), F.coalesce(m["id"], F.lit(0))]

    def meta(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        return F.create_map(F.lit("ts"), m["ts"].cast("string"))

    def kind(self, m: Column) -> Column:
        """The message's upper-case type (DRS falls back to ``opType``)."""
        from pyspark.sql import functions as F

        return F.upper(m["type"])

    def ddl_kind(self, m: Column, kind: Column) -> Column:
        """The contract's ddl_kind of a DDL message (DRS reads it from the SQL text of type ``DDL``)."""
        return kind

    def database(self, m: Column) -> Column:
        return m["database"]

    def schema(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        return F.lit(None).cast("string")

    # ---- decoding ----------------------------------------------------------------------------------------
    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        # The ordering fields are read as text in the one parse, then cast: a field that is present but not
        # a number would otherwise order as 0 (the oldest) silently; it is refused instead.
        ordering = [f for f in ("es", "id") if re.search(rf"\b{f} BIGINT\b", self.message_schema)]
        schema = self.message_schema
        for f in ordering:
            schema = re.sub(rf"\b{f} BIGINT\b", f"{f} STRING", schema)
        staged_text = messages.select(
            "raw", "batch_id", "coordinates", F.from_json("message", schema).alias("t")
        )
        typed = F.col("t")
        for f in ordering:
            typed = typed.withField(f, F.col("t")[f].try_cast("bigint"))
        parsed = staged_text.select("raw", "batch_id", "coordinates", "t", typed.alias("m"))
        m = F.col("m")
        malformed = F.filter(
            F.array(*[F.when(F.col("t")[f].isNotNull() & m[f].isNull(), F.lit(f)) for f in ordering]),
            lambda f: f.isNotNull(),
        )
        parsed = parsed.withColumn("malformed", malformed).drop("t")
        kind = self.kind(m)
        is_ddl = F.coalesce(m["isDdl"], F.lit(False)) | kind.isin(*DDL_KINDS, *self.ddl_types)
        ddl_kind = F.when(is_ddl, self.ddl_kind(m, kind))
        op_map = F.create_map(*[x for k, v in self.row_ops.items() for x in (F.lit(k), F.lit(v))])
        op = (
            F.when(kind.isin(*self.ignored_types), F.lit("filtered"))
            .when(is_ddl & (ddl_kind == "TRUNCATE"), F.lit("truncate"))
            .when(is_ddl, F.lit("ddl"))
            .otherwise(op_map[kind])
        )
        is_dml = ~is_ddl & ~kind.isin(*self.ignored_types)
        # DRS JSON sends the deleted rows in `old` (delete_image).
        source = F.when(kind == "DELETE", m[self.delete_image]).otherwise(m["data"])
        rows = F.when(is_dml & (F.size(source) > 0), source).otherwise(F.array(F.lit(None)))
        staged = parsed.select(
            "raw",
            "batch_id",
            "coordinates",
            "m",
            "malformed",
            op.alias("op"),
            kind.alias("kind"),
            ddl_kind.alias("ddl_kind"),
            is_dml.alias("is_dml"),
            self.source_types(m).alias("types"),
            F.posexplode(rows).alias("row_index", "image"),
        )
        # Each map is a column of its own stage: an expression used inside a map lambda (normalize, the
        # key checks) would be evaluated again for every entry.
        types = F.col("types")
        staged = staged.select(
            "*",
            self.normalize(F.col("image"), types).alias("image_n"),
            # get(): a short or empty `old` (inserts, deletes, a producer's missing entry) is NULL, not an
            # ANSI index error that would fail the whole batch.
            self.normalize(F.get(F.col("m.old"), F.col("row_index")), types).alias("old_n"),
        )
        op_c = F.col("op")
        image = F.col("image_n")
        delete_row = image  # the rows of a DELETE come from `delete_image`
        staged = staged.select(
            "*",
            F.when(op_c.isin("insert", "update", "snapshot"), image).alias("after"),
            F.when(op_c == "update", overlay(image, F.col("old_n")))
            .when(op_c == "delete", delete_row)
            .alias("before"),
        )
        after, before = F.col("after"), F.col("before")
        pk = F.array_distinct(F.coalesce(m["pkNames"], F.array().cast("array<string>")))
        key_image = F.coalesce(after, before)
        database = self.database(m)
        error = first_error(
            (F.col("m").isNull() | F.col("kind").isNull(), "wrong shape: no 'type' in the message"),
            (op_c.isNull(), F.concat(F.lit("unknown op type "), F.to_json(F.array(F.col("kind"))))),
            (
                F.size("malformed") > 0,
                F.concat(F.lit("malformed ordering field "), F.to_json("malformed"), F.lit(": not a number")),
            ),
            (op_c == "filtered", F.lit(None).cast("string")),
            (F.coalesce(database, F.lit("")) == "", "missing database"),
            (
                (F.coalesce(m["table"], F.lit("")) == "") & (F.col("is_dml") | (op_c == "truncate")),
                "missing table",
            ),
            (
                F.col("is_dml") & F.col("image").isNull(),
                F.concat(
                    F.lit("no rows in '"),
                    F.when(F.col("kind") == "DELETE", F.lit(self.delete_image)).otherwise(F.lit("data")),
                    F.lit("'"),
                ),
            ),
            (F.col("is_dml") & (F.size(pk) == 0), "missing primary key (pkNames is empty)"),
            (
                F.col("is_dml") & F.exists(pk, lambda k: key_image[k].isNull()),
                F.concat(F.lit("NULL or absent primary key column in "), F.to_json(pk)),
            ),
        )
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                database.alias("database"),
                self.schema(m).alias("schema"),
                F.when(F.col("m.table") != "", m["table"]).alias("table"),
                op_c.alias("op"),
                F.col("ddl_kind"),
                F.when(is_ddl, m["sql"]).alias("ddl_sql"),
                F.when(is_ddl, m["tableChanges"]).alias("table_changes"),
                pk.alias("primary_key"),
                after.alias("after"),
                before.alias("before"),
                types.alias("source_types"),
                F.array(*self.order_key(m), *seq_tail(F.col("row_index"))).alias("seq"),
                epoch_to_timestamp(m["es"]).alias("event_time"),
                self.position(m).alias("position"),
                self.meta(m).alias("meta"),
                F.col("coordinates").withField("row", F.col("row_index").cast("int")).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )
