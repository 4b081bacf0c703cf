"""river-canal: KafkaRiverCanal's message (seed 000, "Kafka消息 Specification", GSON-encoded).

One message is one row change of one table: ``binlog`` "offset@binlog-file", ``time`` (binlog event time,
ms), ``canalTime`` (arrival at KafkaRiverCanal, ms), ``db``, ``table``, ``event`` 'i'/'u'/'d', ``keys`` and
``columns`` [{n, t, v, null, updated, origin_val}]. ``v`` is the new value (insert, update) or the deleted
value (delete); ``origin_val`` is the value before an update, only on columns with ``updated`` true.
Order: binlog file number, then offset (ARCHITECTURE.md). See docs/dialects.md (river-canal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import Dialect, epoch_to_timestamp, finish, first_error, seq_tail
from replicator.dialects.canal_json import binary_as_hex

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Scalars are read as text and cast with try_cast, so that one odd field (a quoted number) does not
# null the whole message; `null` is a JSON key of the column objects (seed 000, table 2).
MESSAGE_SCHEMA = (
    "binlog STRING, time STRING, canalTime STRING, db STRING, `table` STRING, event STRING, "
    "columns ARRAY<STRUCT<n: STRING, t: STRING, v: STRING, `null`: BOOLEAN, updated: BOOLEAN, "
    "origin_val: STRING>>, keys ARRAY<STRING>"
)

# "6816@mysql-bin.000070" (seed 000): offset, then the binlog file whose name ends in its number.
BINLOG_RE = r"^\s*(\d+)@(.*\.(\d+))\s*$"
EPOCH_LIMIT = 10**14  # larger |ms| values are not times (and would overflow under ANSI mode)


def _bounded(value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(value.between(-EPOCH_LIMIT, EPOCH_LIMIT), value)


class RiverCanal(Dialect):
    name = "river-canal"
    required_keys: ClassVar[frozenset[str]] = frozenset({"binlog", "db", "table", "event", "columns"})
    ops: ClassVar[dict[str, str]] = {"i": "insert", "u": "update", "d": "delete"}

    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        parsed = messages.select(
            "raw",
            "batch_id",
            "coordinates",
            F.from_json("message", MESSAGE_SCHEMA).alias("m"),
            F.expr("json_object_keys(message)").alias("keys"),
        )
        m = F.col("m")
        cols = m["columns"]
        names = F.transform(cols, lambda c: c["n"])
        good_columns = (
            (F.size(cols) > 0)
            & F.forall(names, lambda n: n.isNotNull() & (n != ""))
            & (F.size(F.array_distinct(names)) == F.size(names))
        )
        is_null = lambda c: F.coalesce(c["null"], F.lit(False))  # noqa: E731
        # After image: `v`, or SQL NULL when the column's `null` flag is set.
        new_values = F.transform(cols, lambda c: F.when(~is_null(c), c["v"]))
        # Before image of an update: `origin_val` on updated columns (absent = NULL: GSON omits null
        # fields), the unchanged value elsewhere. On delete, `v` is the deleted row (seed 000, table 2).
        old_values = F.transform(
            cols,
            lambda c: F.when(F.coalesce(c["updated"], F.lit(False)), c["origin_val"]).when(
                ~is_null(c), c["v"]
            ),
        )
        types = F.when(
            good_columns,
            F.map_filter(
                F.map_from_arrays(names, F.transform(cols, lambda c: c["t"])), lambda k, v: v.isNotNull()
            ),
        )
        image = F.when(good_columns, binary_as_hex(F.map_from_arrays(names, new_values), types))
        old_image = F.when(good_columns, binary_as_hex(F.map_from_arrays(names, old_values), types))

        event = F.lower(F.trim(m["event"]))
        op_map = F.create_map(*[x for k, v in self.ops.items() for x in (F.lit(k), F.lit(v))])
        op = op_map[event]
        binlog = m["binlog"]
        offset = F.regexp_extract(binlog, BINLOG_RE, 1).try_cast("bigint")
        file = F.regexp_extract(binlog, BINLOG_RE, 2)
        file_no = F.regexp_extract(binlog, BINLOG_RE, 3).try_cast("bigint")
        pk = F.array_distinct(F.coalesce(m["keys"], F.array().cast("array<string>")))
        staged = parsed.select(
            "raw",
            "batch_id",
            "coordinates",
            "keys",
            "m",
            op.alias("op"),
            F.when(op.isin("insert", "update"), image).alias("after"),
            F.when(op == "update", old_image).when(op == "delete", image).alias("before"),
            types.alias("types"),
            offset.alias("offset"),
            file.alias("file"),
            file_no.alias("file_no"),
            pk.alias("pk"),
        )
        op_c, pk_c = F.col("op"), F.col("pk")
        key_image = F.coalesce(F.col("after"), F.col("before"))
        error = first_error(
            (F.col("keys").isNull(), "not a JSON object: a message must be an object"),
            (m["event"].isNull(), "wrong shape: no 'event' in the message"),
            (
                op_c.isNull(),
                F.concat(
                    F.lit("unknown event "), F.to_json(F.array(m["event"])), F.lit(" (expected i, u or d)")
                ),
            ),
            (F.coalesce(m["db"], F.lit("")) == "", "missing db"),
            (F.coalesce(m["table"], F.lit("")) == "", "missing table"),
            (
                F.col("offset").isNull() | F.col("file_no").isNull(),
                F.concat(
                    F.lit("malformed binlog "),
                    F.to_json(F.array(binlog)),
                    F.lit(": expected offset@file.NNNNNN"),
                ),
            ),
            (F.coalesce(F.size(cols), F.lit(0)) <= 0, "no columns in 'columns'"),
            (~good_columns, "a column in 'columns' has no name or a duplicate name ('n')"),
            (F.size(pk_c) == 0, "missing primary key (keys is empty)"),
            (
                F.exists(pk_c, lambda k: key_image[k].isNull()),
                F.concat(F.lit("NULL or absent primary key column in "), F.to_json(pk_c)),
            ),
        )
        time_ms = _bounded(m["time"].try_cast("bigint"))
        canal_ms = m["canalTime"].try_cast("bigint")
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                m["db"].alias("database"),
                F.when(m["table"] != "", m["table"]).alias("table"),
                op_c.alias("op"),
                pk_c.alias("primary_key"),
                "after",
                "before",
                F.coalesce(F.col("types"), F.create_map().cast("map<string,string>")).alias("source_types"),
                F.array(
                    F.coalesce(F.col("file_no"), F.lit(0)),
                    F.coalesce(F.col("offset"), F.lit(0)),
                    *seq_tail(F.lit(0)),
                ).alias("seq"),
                epoch_to_timestamp(time_ms).alias("event_time"),
                F.when(
                    F.col("offset").isNotNull(),
                    F.concat_ws(":", F.col("file"), F.col("offset").cast("string")),
                ).alias("position"),
                F.map_filter(
                    F.create_map(F.lit("canalTime"), canal_ms.cast("string"), F.lit("binlog"), binlog),
                    lambda k, v: v.isNotNull(),
                ).alias("meta"),
                F.col("coordinates").withField("row", F.lit(0)).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )
