"""ckafka: Tencent CKafka connector's MySQL subscription messages (seed 001; docs/dialects.md (ckafka)).

A topic of this connector carries three shapes, routed per message by its keys:

* "official format one" (官方格式一) DML: BINLOG_NAME, BINLOG_POS, DATABASE, TABLE, TYPE (I/U/D; the doc's
  field table writes insert as ``l``), TIME ``yyyyMMddHHmmss``, GLOBAL_ID (GTID), NEW_VALUES / OLD_VALUES
  (JSON objects: full after / before rows). No column types, no primary key.
* canal-shaped DDL ("DDL 消息格式与 canal 格式一致", seed 001; ``es``/``ts`` in seconds, in ms for RENAME):
  decoded by the canal-json dialect's code (:class:`CanalJson`).
* Tencent's "Canal 格式" DML (tencent-ckafka-canal-json vectors): values as JSON numbers, ``old`` is the full
  before row, a DELETE has its row in ``old`` and ``data: null``, ``pkNames``/``mysqlType`` null, ``es`` may
  be 0. Alibaba canal DML read by these rules decodes the same, so any canal-shaped DML is accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import epoch_to_timestamp, failed, finish, first_error, seq_tail
from replicator.dialects.canal_json import DDL_KINDS, MESSAGE_SCHEMA, CanalJson, overlay

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Every value is read as VARIANT and rendered as text: Tencent's canal DML writes numbers, and a decimal
# read through STRING would pass through a double (12345678901234567890.12 -> 1.2345678901234567E19).
# Scalars are text and cast with try_cast so that one odd field does not null the whole message.
FORMAT_ONE_SCHEMA = (
    "BINLOG_NAME STRING, BINLOG_POS STRING, DATABASE STRING, `TABLE` STRING, TYPE STRING, TIME STRING, "
    "GLOBAL_ID STRING, EVENT_SERVER_ID STRING, GROUP_ID STRING, "
    "NEW_VALUES MAP<STRING, VARIANT>, OLD_VALUES MAP<STRING, VARIANT>"
)
CANAL_SCHEMA = MESSAGE_SCHEMA.replace("ARRAY<MAP<STRING, STRING>>", "ARRAY<MAP<STRING, VARIANT>>")
assert CANAL_SCHEMA.count("VARIANT") == 2, "canal_json.MESSAGE_SCHEMA changed: update ckafka.CANAL_SCHEMA"

FORMAT_ONE_KEYS = ("BINLOG_NAME", "BINLOG_POS", "NEW_VALUES", "OLD_VALUES", "GLOBAL_ID")
CANAL_KEYS = ("type", "isDdl", "data", "old", "es")
BINLOG_NUMBER_RE = r"\.(\d+)\s*$"  # mysql-bin.000003 -> 3
TIME_RE = r"^\d{14}$"  # yyyyMMddHHmmss


def as_text(image: Column) -> Column:
    """A map of VARIANT values -> canonical text: strings as they are, numbers exactly as written,
    JSON null -> SQL NULL."""
    from pyspark.sql import functions as F

    return F.transform_values(image, lambda k, v: v.cast("string"))


class CKafka(CanalJson):
    """Subclasses CanalJson to reuse its DDL decoding (and hooks) for the canal-shaped messages."""

    name = "ckafka"
    # Detection (`auto`) covers format one only: canal-shaped messages are detected as canal-json.
    required_keys: ClassVar[frozenset[str]] = frozenset(
        {"BINLOG_NAME", "BINLOG_POS", "TYPE", "TABLE", "DATABASE"}
    )
    any_keys: ClassVar[frozenset[str]] = frozenset()
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset()
    # TYPE of format one; the doc's field table writes insert as `l` (lower-case L; seed 001), its examples
    # write `I`. Matched case-insensitively.
    format_one_ops: ClassVar[dict[str, str]] = {"I": "insert", "L": "insert", "U": "update", "D": "delete"}

    # ---- routing ---------------------------------------------------------------------------------------
    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        keyed = messages.withColumn("keys", F.expr("json_object_keys(message)"))
        is_one = F.exists("keys", lambda k: k.isin(*FORMAT_ONE_KEYS))
        is_canal = ~is_one & F.exists("keys", lambda k: k.isin(*CANAL_KEYS))
        head = F.from_json("message", "type STRING, isDdl BOOLEAN")
        # DDL (and the kinds canal-json filters) go to the canal-json code; canal-shaped DML to ours.
        to_canal = F.coalesce(head["isDdl"], F.lit(False)) | F.upper(head["type"]).isin(
            *DDL_KINDS, *self.ignored_types
        )
        route = (
            F.when(F.col("keys").isNull(), "bad")
            .when(is_one, "one")
            .when(is_canal & to_canal, "canal-ddl")
            .when(is_canal, "canal-dml")
            .otherwise("bad")
        )
        keyed = keyed.withColumn("route", route)
        part = lambda name: keyed.where(F.col("route") == name).drop("keys", "route")  # noqa: E731
        bad = keyed.where(F.col("route") == "bad")
        error = F.when(
            F.col("keys").isNull(), F.lit("not a JSON object: a message must be an object")
        ).otherwise(
            F.lit(
                "wrong shape: neither CKafka official format one (BINLOG_NAME, BINLOG_POS, TYPE, ...) "
                "nor canal-shaped (type, isDdl, data, ...)"
            )
        )
        return (
            self._format_one(part("one"))
            .unionByName(super().decode_messages(part("canal-ddl")))
            .unionByName(self._canal_dml(part("canal-dml")))
            .unionByName(failed(bad, error, self.name))
        )

    # ---- official format one -----------------------------------------------------------------------------
    def _format_one(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        m = F.col("m")
        kind = F.upper(F.trim(m["TYPE"]))
        op_map = F.create_map(*[x for k, v in self.format_one_ops.items() for x in (F.lit(k), F.lit(v))])
        op = op_map[kind]
        new_values = as_text(m["NEW_VALUES"])
        old_values = as_text(m["OLD_VALUES"])
        file_no = F.regexp_extract(m["BINLOG_NAME"], BINLOG_NUMBER_RE, 1).try_cast("bigint")
        pos = F.trim(m["BINLOG_POS"]).try_cast("bigint")
        time_ok = m["TIME"].rlike(TIME_RE)
        staged = messages.select(
            "raw", "batch_id", "coordinates", F.from_json("message", FORMAT_ONE_SCHEMA).alias("m")
        ).select(
            "*",
            op.alias("op"),
            F.when(op.isin("insert", "update"), new_values).alias("after"),
            F.when(op.isin("update", "delete"), old_values).alias("before"),
            file_no.alias("file_no"),
            pos.alias("pos"),
        )
        op_c = F.col("op")
        error = first_error(
            (m["TYPE"].isNull(), "wrong shape: no 'TYPE' in the message"),
            (
                op_c.isNull(),
                F.concat(
                    F.lit("unknown TYPE "), F.to_json(F.array(m["TYPE"])), F.lit(" (expected I, U or D)")
                ),
            ),
            (F.coalesce(m["DATABASE"], F.lit("")) == "", "missing DATABASE"),
            (F.coalesce(m["TABLE"], F.lit("")) == "", "missing TABLE"),
            (
                F.col("file_no").isNull(),
                F.concat(
                    F.lit("malformed BINLOG_NAME "),
                    F.to_json(F.array(m["BINLOG_NAME"])),
                    F.lit(": expected a binlog file name ending in its number (mysql-bin.000003)"),
                ),
            ),
            (
                F.col("pos").isNull(),
                F.concat(
                    F.lit("malformed BINLOG_POS "),
                    F.to_json(F.array(m["BINLOG_POS"])),
                    F.lit(": expected an integer"),
                ),
            ),
            (
                m["TIME"].isNotNull() & ~time_ok,
                F.concat(
                    F.lit("malformed TIME "),
                    F.to_json(F.array(m["TIME"])),
                    F.lit(": expected yyyyMMddHHmmss"),
                ),
            ),
            (
                op_c.isin("insert", "update") & F.col("after").isNull(),
                "no NEW_VALUES (absent, null or not a JSON object)",
            ),
            (
                op_c.isin("update", "delete") & F.col("before").isNull(),
                "no OLD_VALUES (absent, null or not a JSON object)",
            ),
        )
        meta = F.map_filter(
            F.create_map(
                F.lit("gtid"),
                m["GLOBAL_ID"],
                F.lit("time"),
                m["TIME"],
                F.lit("event_server_id"),
                m["EVENT_SERVER_ID"],
                F.lit("group_id"),
                m["GROUP_ID"],
            ),
            lambda k, v: v.isNotNull(),
        )
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                m["DATABASE"].alias("database"),
                F.when(m["TABLE"] != "", m["TABLE"]).alias("table"),
                op_c.alias("op"),
                # Format one carries no key: the engine resolves it per table (changelog.with_keys).
                F.array().cast("array<string>").alias("primary_key"),
                "after",
                "before",
                # No types either: the engine types columns from the mirror table, else as string.
                F.create_map().cast("map<string,string>").alias("source_types"),
                F.array(
                    F.coalesce(F.col("file_no"), F.lit(0)),
                    F.coalesce(F.col("pos"), F.lit(0)),
                    *seq_tail(F.lit(0)),
                ).alias("seq"),
                F.when(time_ok, self._wall_clock(m["TIME"])).alias("event_time"),
                F.when(
                    m["BINLOG_NAME"].isNotNull() & F.col("pos").isNotNull(),
                    F.concat_ws(":", F.trim(m["BINLOG_NAME"]), F.col("pos").cast("string")),
                ).alias("position"),
                meta.alias("meta"),
                F.col("coordinates").withField("row", F.lit(0)).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )

    def _wall_clock(self, text: Column) -> Column:
        """TIME ``yyyyMMddHHmmss`` is the MySQL server's wall clock (seed 001 writes epoch 0 as
        "19700101080000", a UTC+8 server): read it in ``source.timezone``."""
        from pyspark.sql import functions as F

        part = lambda start, length: F.substring(text, start, length).try_cast("int")  # noqa: E731
        return F.try_make_timestamp(
            part(1, 4),
            part(5, 2),
            part(7, 2),
            part(9, 2),
            part(11, 2),
            part(13, 2).cast("decimal(16,6)"),
            F.lit(self.options.timezone),
        )

    # ---- Tencent canal-shaped DML ------------------------------------------------------------------------
    def _canal_dml(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        m = F.col("m")
        kind = F.upper(m["type"])
        op_map = F.create_map(*[x for k, v in self.row_ops.items() for x in (F.lit(k), F.lit(v))])
        op = op_map[kind]
        # Tencent puts a deleted row in `old` with `data: null`; canal puts it in `data`.
        has_old = F.coalesce(F.size(m["old"]), F.lit(0)) > 0
        rows = F.when((op == "delete") & has_old, m["old"]).otherwise(m["data"])
        rows = F.when(F.coalesce(F.size(rows), F.lit(0)) > 0, rows).otherwise(F.array(F.lit(None)))
        staged = messages.select(
            "raw", "batch_id", "coordinates", F.from_json("message", CANAL_SCHEMA).alias("m")
        ).select("*", op.alias("op"), kind.alias("kind"), F.posexplode(rows).alias("row_index", "row"))
        types = self.source_types(m)
        image = self.normalize(as_text(F.col("row")), types)
        old_row = self.normalize(as_text(F.col("m.old")[F.col("row_index")]), types)
        op_c = F.col("op")
        after = F.when(op_c.isin("insert", "update", "snapshot"), image)
        # Tencent's `old` is the full before row, canal's the changed columns: overlay serves both.
        before = F.when(op_c == "update", overlay(image, old_row)).when(op_c == "delete", image)
        pk = F.array_distinct(F.coalesce(m["pkNames"], F.array().cast("array<string>")))
        key_image = F.coalesce(after, before)
        error = first_error(
            (kind.isNull(), "wrong shape: no 'type' in the message"),
            (op_c.isNull(), F.concat(F.lit("unknown op type "), F.to_json(F.array(F.col("kind"))))),
            (F.coalesce(m["database"], F.lit("")) == "", "missing database"),
            (F.coalesce(m["table"], F.lit("")) == "", "missing table"),
            (F.col("row").isNull(), "no rows in 'data' (nor in 'old' for a DELETE)"),
            (
                F.exists(pk, lambda k: key_image[k].isNull()),
                F.concat(F.lit("NULL or absent primary key column in "), F.to_json(pk)),
            ),
        )
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                m["database"].alias("database"),
                F.when(m["table"] != "", m["table"]).alias("table"),
                op_c.alias("op"),
                pk.alias("primary_key"),
                after.alias("after"),
                before.alias("before"),
                types.alias("source_types"),
                F.array(*self.order_key(m), *seq_tail(F.col("row_index"))).alias("seq"),
                epoch_to_timestamp(self._execute_time(m)).alias("event_time"),
                self.position(m).alias("position"),
                self.meta(m).alias("meta"),
                F.col("coordinates").withField("row", F.col("row_index").cast("int")).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )

    @staticmethod
    def _execute_time(m: Column) -> Column:
        """``es``, or ``ts`` (processing time) when ``es`` is 0 or absent: the Tencent INSERT example writes
        ``"es": 0`` next to a real ``ts``."""
        from pyspark.sql import functions as F

        return F.when(F.coalesce(m["es"], F.lit(0)) != 0, m["es"]).otherwise(m["ts"])

    def order_key(self, m: Column) -> list[Column]:
        """canal's (es, id), with es falling back to ts like the event time (see :meth:`_execute_time`).
        Also used by the inherited DDL decoding, whose es is never 0 in seed 001."""
        from pyspark.sql import functions as F

        es = self._execute_time(m)
        es_ms = F.when(F.abs(es) < F.lit(100_000_000_000), es * 1000).otherwise(es)
        return [F.coalesce(es_ms, F.lit(0)), F.coalesce(m["id"], F.lit(0))]
