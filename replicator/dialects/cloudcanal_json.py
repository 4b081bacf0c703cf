"""cloudcanal-json: CloudCanal's default "CloudCanal Json" message (seed 004, section "CloudCanal Json").

One message holds 1..n rows of one table: ``data`` ("当前操作的数据", the rows of this operation) and, for
UPDATE, ``before`` (the previous rows, a parallel array; the seed's example holds the whole previous row).
``action`` names the operation (INSERT / UPDATE / DELETE, or the DDL kind with ``isDdl: true``);
``entryType`` says what the message is (only ROWDATA carries rows; TRANSACTIONEND etc. are filtered).
Column types: ``dbValType`` (type text) and ``jdbcType`` (java.sql.Types codes, seed 004's appendix).
Order: ``execTs`` (ms) then ``bid`` (ARCHITECTURE.md). CloudCanal's "Canal Json" output is plain canal-json.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import Dialect, epoch_to_timestamp, finish, first_error, seq_tail
from replicator.dialects.canal_json import BINARY_TYPE, overlay

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MESSAGE_SCHEMA = (
    "action STRING, `before` ARRAY<MAP<STRING, STRING>>, data ARRAY<MAP<STRING, STRING>>, bid BIGINT, "
    "db STRING, `schema` STRING, `table` STRING, dbValType MAP<STRING, STRING>, jdbcType MAP<STRING, INT>, "
    "entryType STRING, isDdl BOOLEAN, pks ARRAY<STRING>, execTs BIGINT, sendTs BIGINT, `sql` STRING, "
    "tableChanges STRING"
)
TABLE_CHANGES_PK = "`table` STRUCT<primaryKeyColumnNames: ARRAY<STRING>>"

ROW_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
# CloudCanal writes the DDL kind into `action` (seed 004: "ALTER"); DROP is named ERASE in the contract.
DDL_ALIASES = {"DROP": "ERASE"}
# java.sql.Types codes of byte columns (seed 004 appendix): BINARY, VARBINARY, LONGVARBINARY, BLOB.
BINARY_JDBC = (-2, -3, -4, 2004)


class CloudCanalJson(Dialect):
    name = "cloudcanal-json"
    # `execTs`, `action` and `entryType` are CloudCanal's own names (canal writes es/type, Debezium ts_ms/op).
    required_keys: ClassVar[frozenset[str]] = frozenset({"execTs"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"action", "entryType"})
    row_ops: ClassVar[dict[str, str]] = ROW_OPS

    def source_types(self, m: Column) -> Column:
        """``dbValType`` text, else ``jdbc:<code>`` from ``jdbcType``."""
        from pyspark.sql import functions as F

        jdbc = F.transform_values(m["jdbcType"], lambda k, v: F.concat(F.lit("jdbc:"), v.cast("string")))
        return F.map_concat(F.coalesce(jdbc, F.create_map()), F.coalesce(m["dbValType"], F.create_map()))

    def normalize(self, image: Column, m: Column) -> Column:
        """Byte columns -> hex. Assumption (the doc is silent): bytes travel as ISO-8859-1 text, as in
        canal-json (notes/ENCODINGS.md §1); the column is binary by ``dbValType``, else by ``jdbcType``."""
        from pyspark.sql import functions as F

        def is_binary(k: Column) -> Column:
            by_name = m["dbValType"][k].rlike(BINARY_TYPE)
            by_code = m["jdbcType"][k].isin(*BINARY_JDBC)
            return F.coalesce(F.when(m["dbValType"][k].isNotNull(), by_name).otherwise(by_code), F.lit(False))

        return F.transform_values(
            image,
            lambda k, v: F.when(
                is_binary(k) & v.isNotNull(), F.lower(F.hex(F.encode(v, "ISO-8859-1")))
            ).otherwise(v),
        )

    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        parsed = messages.select(
            "raw", "batch_id", "coordinates", F.from_json("message", MESSAGE_SCHEMA).alias("m")
        )
        m = F.col("m")
        action = F.upper(F.trim(m["action"]))
        entry = F.upper(F.coalesce(m["entryType"], F.lit("ROWDATA")))
        is_ddl = F.coalesce(m["isDdl"], F.lit(False))
        kind = F.coalesce(
            F.create_map(*[x for k, v in DDL_ALIASES.items() for x in (F.lit(k), F.lit(v))])[action], action
        )
        op_map = F.create_map(*[x for k, v in self.row_ops.items() for x in (F.lit(k), F.lit(v))])
        op = (
            F.when(entry != "ROWDATA", F.lit("filtered"))
            .when(is_ddl & (kind == "TRUNCATE"), F.lit("truncate"))
            .when(is_ddl, F.lit("ddl"))
            .otherwise(op_map[action])
        )
        is_dml = ~is_ddl & (entry == "ROWDATA")
        data, before_rows = m["data"], m["before"]
        # A DELETE's row is in `data` (the doc: "当前操作的数据"); `before` is read when `data` is empty.
        rows = (
            F.when(is_dml & (F.size(data) > 0), data)
            .when(is_dml & (op == "delete") & (F.size(before_rows) > 0), before_rows)
            .otherwise(F.array(F.lit(None)))
        )
        staged = parsed.select(
            "raw",
            "batch_id",
            "coordinates",
            "m",
            op.alias("op"),
            kind.alias("kind"),
            action.alias("action"),
            is_dml.alias("is_dml"),
            F.posexplode(rows).alias("row_index", "image"),
        )
        types = self.source_types(m)
        image = self.normalize(F.col("image"), m)
        old_row = self.normalize(before_rows[F.col("row_index")], m)
        op_c = F.col("op")
        after = F.when(op_c.isin("insert", "update"), image)
        # `before` of an UPDATE holds the whole previous row (seed 004); overlaying it on `data` also
        # gives the whole row if a producer sends changed columns only.
        before = F.when(op_c == "update", overlay(image, old_row)).when(op_c == "delete", image)
        pks = F.array_distinct(F.coalesce(m["pks"], F.array().cast("array<string>")))
        ddl_pk = F.from_json(m["tableChanges"], TABLE_CHANGES_PK)["table"]["primaryKeyColumnNames"]
        pk = F.when(is_ddl & (F.size(pks) == 0) & ddl_pk.isNotNull(), ddl_pk).otherwise(pks)
        key_image = F.coalesce(after, before)
        error = first_error(
            (F.col("m").isNull(), "wrong shape: not a CloudCanal Json object"),
            (op_c == "filtered", F.lit(None).cast("string")),
            (F.col("action").isNull(), "wrong shape: no 'action' in the message"),
            (op_c.isNull(), F.concat(F.lit("unknown op action "), F.to_json(F.array(F.col("action"))))),
            (F.coalesce(m["db"], F.lit("")) == "", "missing database (db)"),
            (
                (F.coalesce(m["table"], F.lit("")) == "") & (F.col("is_dml") | (op_c == "truncate")),
                "missing table",
            ),
            (F.col("is_dml") & F.col("image").isNull(), "no rows in 'data'"),
            (F.col("is_dml") & (F.size(pk) == 0), "missing primary key (pks is empty)"),
            (
                F.col("is_dml") & F.exists(pk, lambda k: key_image[k].isNull()),
                F.concat(F.lit("NULL or absent primary key column in "), F.to_json(pk)),
            ),
        )
        execs = m["execTs"]
        exec_ms = F.when(F.abs(execs) < F.lit(100_000_000_000), execs * 1000).otherwise(execs)
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                m["db"].alias("database"),
                # MySQL has no schema level; CloudCanal repeats the database name there (seed 004).
                F.when(
                    (m["schema"] != "") & (m["schema"] != F.coalesce(m["db"], F.lit(""))), m["schema"]
                ).alias("schema"),
                F.when(m["table"] != "", m["table"]).alias("table"),
                op_c.alias("op"),
                F.when(is_ddl, F.col("kind")).alias("ddl_kind"),
                F.when(is_ddl, m["sql"]).alias("ddl_sql"),
                F.when(is_ddl, m["tableChanges"]).alias("table_changes"),
                pk.alias("primary_key"),
                after.alias("after"),
                before.alias("before"),
                types.alias("source_types"),
                F.array(
                    F.coalesce(exec_ms, F.lit(0)),
                    F.coalesce(m["bid"], F.lit(0)),
                    *seq_tail(F.col("row_index")),
                ).alias("seq"),
                epoch_to_timestamp(execs).alias("event_time"),
                F.concat_ws(
                    " ",
                    F.when(execs.isNotNull(), F.format_string("execTs=%d", exec_ms)),
                    F.when(m["bid"].isNotNull(), F.format_string("bid=%d", m["bid"])),
                ).alias("position"),
                F.create_map(
                    F.lit("sendTs"), m["sendTs"].cast("string"), F.lit("entryType"), m["entryType"]
                ).alias("meta"),
                F.col("coordinates").withField("row", F.col("row_index").cast("int")).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )
