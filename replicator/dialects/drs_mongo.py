"""drs-mongo: Huawei DRS messages of DDS/MongoDB sources (seed 003).

One message is one oplog change of one document: ``op`` INSERT/UPDATE/DELETE with ``recordType`` insert,
replace, update (``$set``/``$unset``) or doc (a document delete); ``value``/``where`` are mongo shell text
(``ObjectId("...")`` is not JSON) and are rewritten to relaxed Extended JSON. The mirror has two columns,
``_id`` (ObjectId as its 24 hex digits, any other id as its JSON text) and ``document`` (JSON text); an
update carries only ``_id`` plus the update spec in ``meta['mongo_update']``, which the engine applies to
the stored document in order. Order: clusterTime seconds, increment, then ``id``.
See docs/dialects.md (drs-mongo).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import Dialect, epoch_to_timestamp, finish, first_error, seq_tail

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MESSAGE_SCHEMA = (
    "id BIGINT, op STRING, dbType STRING, db STRING, coll STRING, value STRING, `where` STRING, "
    "recordType STRING, extra STRING, es BIGINT, ts BIGINT, clusterTime STRING"
)
PATCH_META = "mongo_update"  # replicator.changelog reads it
PATCH_OPERATORS = ("$set", "$unset")  # what DRS emits (seed 003) and replicator.documents applies

# A JSON string literal, matched possessively (no deep backtracking on long strings).
_STRING = r'("[^"\\]*+(?:\\.[^"\\]*+)*+")'
# Shell helpers whose argument is quoted: an unescaped `"` never occurs inside a JSON string, so these
# cannot match inside one. (pattern, Java replacement)
_QUOTED_HELPERS: tuple[tuple[str, str], ...] = (
    (r'ObjectId\(\s*"([0-9a-fA-F]*)"\s*\)', r'{"\$oid":"$1"}'),
    (r'ISODate\(\s*"([^"\\]*)"\s*\)', r'{"\$date":"$1"}'),
    (r'NumberDecimal\(\s*"([^"\\]*)"\s*\)', r'{"\$numberDecimal":"$1"}'),
    (r'UUID\(\s*"([0-9a-fA-F-]*)"\s*\)', r'{"\$uuid":"$1"}'),
    (r'BinData\(\s*([0-9])\s*,\s*"([A-Za-z0-9+/=]*)"\s*\)', r'{"\$binary":{"base64":"$2","subType":"0$1"}}'),
)
# NumberLong(5) / NumberInt(5) may occur as text inside a string: string literals are matched first and
# written back unchanged ($1), a helper becomes its bare number ($2).
_NUMBER_HELPERS = _STRING + r'|Number(?:Long|Int)\(\s*"?(-?\d+)"?\s*\)'
# Compact form (what replicator.documents writes back): whitespace outside strings removed.
_BLANKS = _STRING + r"|\s+"


def shell_to_json(text: Column) -> Column:
    """Mongo shell text -> compact relaxed Extended JSON text (key order kept)."""
    from pyspark.sql import functions as F

    out = text
    for pattern, replacement in _QUOTED_HELPERS:
        out = F.regexp_replace(out, pattern, replacement)
    out = F.regexp_replace(out, _NUMBER_HELPERS, "$1$2")
    return F.regexp_replace(out, _BLANKS, "$1")


def document_id(json_text: Column) -> Column:
    """``_id`` as canonical text: an ObjectId's hex digits, else the JSON text of the value."""
    from pyspark.sql import functions as F

    doc = F.try_parse_json(json_text)
    id_json = F.to_json(F.try_variant_get(doc, "$._id", "variant"))
    oid = F.try_variant_get(doc, '$._id["$oid"]', "string")
    only_oid = F.coalesce(F.size(F.json_object_keys(id_json)) == 1, F.lit(False))
    return F.when(oid.isNotNull() & only_oid, oid).otherwise(id_json)


class DrsMongo(Dialect):
    name = "drs-mongo"
    required_keys: ClassVar[frozenset[str]] = frozenset({"op", "db", "coll", "recordType"})
    message_schema: ClassVar[str] = MESSAGE_SCHEMA
    # (op, recordType) -> (contract op, how the row is built); seed 003's table of recordType values.
    record_ops: ClassVar[dict[str, str]] = {
        "INSERT:insert": "insert",
        "UPDATE:replace": "replace",
        "UPDATE:update": "patch",
        "DELETE:doc": "delete",
    }

    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        parsed = messages.select(
            "raw", "batch_id", "coordinates", F.from_json("message", self.message_schema).alias("m")
        )
        m = F.col("m")
        record_type = F.lower(F.coalesce(m["recordType"], m["extra"]))
        pairs = [x for k, v in self.record_ops.items() for x in (F.lit(k), F.lit(v))]
        action = F.when(F.upper(m["op"]) == "DDL", F.lit("ddl")).otherwise(
            F.create_map(*pairs)[F.concat_ws(":", F.upper(m["op"]), record_type)]
        )
        staged = parsed.select(
            "raw",
            "batch_id",
            "coordinates",
            "m",
            action.alias("action"),
            shell_to_json(m["value"]).alias("value"),
            shell_to_json(m["where"]).alias("where"),
        )
        action_c, value, where = F.col("action"), F.col("value"), F.col("where")
        doc_id = F.coalesce(F.when(action_c != "patch", document_id(value)), document_id(where))
        op = (
            F.when(action_c == "replace", F.lit("update"))
            .when(action_c == "patch", F.lit("update"))
            .otherwise(action_c)
        )
        is_dml = action_c.isin("insert", "replace", "patch", "delete")
        after = F.when(
            action_c.isin("insert", "replace"), F.create_map(F.lit("_id"), doc_id, F.lit("document"), value)
        ).when(action_c == "patch", F.create_map(F.lit("_id"), doc_id))
        before = F.when(action_c == "delete", F.create_map(F.lit("_id"), doc_id))
        keys = F.json_object_keys(value)
        cluster = F.regexp_extract(F.coalesce(m["clusterTime"], F.lit("")), r"^\s*(\d+):(\d+)\s*$", 0)
        seconds = F.regexp_extract(m["clusterTime"], r"^\s*(\d+):", 1).try_cast("bigint")
        increment = F.regexp_extract(m["clusterTime"], r":(\d+)\s*$", 1).try_cast("bigint")
        helpers = "ObjectId, ISODate, NumberLong, NumberInt, NumberDecimal, UUID, BinData"
        error = first_error(
            (m.isNull() | m["op"].isNull(), "wrong shape: no 'op' in the message"),
            (
                action_c.isNull(),
                F.concat(F.lit("unknown op/recordType "), F.to_json(F.array(m["op"], m["recordType"]))),
            ),
            (F.coalesce(m["db"], F.lit("")) == "", "missing db"),
            (is_dml & (F.coalesce(m["coll"], F.lit("")) == ""), "missing coll"),
            (cluster == "", "missing or malformed clusterTime (expected 'seconds:increment')"),
            (
                is_dml & (action_c != "delete") & F.try_parse_json(value).isNull(),
                f"'value' is not JSON (after rewriting the shell helpers {helpers})",
            ),
            (
                is_dml & (action_c == "patch") & where.isNotNull() & F.try_parse_json(where).isNull(),
                f"'where' is not JSON (after rewriting the shell helpers {helpers})",
            ),
            (is_dml & action_c.isin("insert", "replace") & keys.isNull(), "'value' is not a JSON object"),
            (
                (action_c == "patch")
                & ~F.coalesce(
                    (F.size(keys) > 0) & F.forall(keys, lambda k: k.isin(*PATCH_OPERATORS)), F.lit(False)
                ),
                F.concat(
                    F.lit("unsupported update spec keys "),
                    F.to_json(F.coalesce(keys, F.array().cast("array<string>"))),
                    F.lit(" (only $set and $unset)"),
                ),
            ),
            (is_dml & doc_id.isNull(), "missing _id (in 'value', or 'where' for updates)"),
        )
        meta = F.map_filter(
            F.create_map(
                F.lit("ts"),
                m["ts"].cast("string"),
                F.lit(PATCH_META),
                F.when(action_c == "patch", value),
            ),
            lambda k, v: v.isNotNull(),
        )
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                F.nullif(m["db"], F.lit("")).alias("database"),
                F.nullif(m["coll"], F.lit("")).alias("table"),
                op.alias("op"),
                # DDL on a collection changes no mirror column: recorded, nothing to alter.
                F.when(action_c == "ddl", F.lit("QUERY")).alias("ddl_kind"),
                F.when(action_c == "ddl", F.coalesce(m["value"], m["where"])).alias("ddl_sql"),
                F.when(is_dml, F.array(F.lit("_id"))).alias("primary_key"),
                after.alias("after"),
                before.alias("before"),
                F.when(
                    is_dml, F.create_map(F.lit("_id"), F.lit("string"), F.lit("document"), F.lit("json"))
                ).alias("source_types"),
                F.array(
                    F.coalesce(seconds, F.lit(0)),
                    F.coalesce(increment, F.lit(0)),
                    F.coalesce(m["id"], F.lit(0)),
                    *seq_tail(F.lit(0)),
                ).alias("seq"),
                epoch_to_timestamp(m["es"]).alias("event_time"),
                m["clusterTime"].alias("position"),
                meta.alias("meta"),
                F.col("coordinates").withField("row", F.lit(0)).alias("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )
