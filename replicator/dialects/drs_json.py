"""drs-json: Huawei DRS "JSON" messages to Kafka (seed 003), MySQL form and PostgreSQL/GaussDB/Oracle/SQL
Server form.

Canal's keys with other meanings (seed 003): ``id`` is DRS's monotonic event sequence (ordering: id, then
es); the deleted row of a DELETE is in ``old``; full sync sends ``INIT`` rows and ``INIT_DDL`` statements
with ``jobId``/``shardId``/``identifier``/``eventId``; incremental DDL has ``type`` ``DDL`` (the kind is read
from the SQL text). ``mysqlType`` holds bare type names; binary values are byte lists ``"[106, 103]"`` and
MySQL TIMESTAMP values epoch seconds ``"1624614713.201"``. The other sources write ``columnType``,
``dbType``, ``schema`` and ``opType``; there ``sqlType`` holds DRS codes that are not java.sql.Types
(seed 003: a ``timestamp without time zone`` column has 16, a boolean 8), so it is not used.
See docs/dialects.md (drs-json).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.canal_json import MESSAGE_SCHEMA, CanalJson

if TYPE_CHECKING:
    from pyspark.sql import Column

DRS_SCHEMA = (
    f"{MESSAGE_SCHEMA}, jobId STRING, shardId STRING, identifier STRING, eventId STRING, "
    "columnType MAP<STRING, STRING>, dbType STRING, `schema` STRING, opType STRING"
)
# Keys canal never writes (seed 003): their presence makes a message surely DRS.
DRS_ONLY_KEYS = ("jobId", "shardId", "identifier", "eventId", "columnType", "dbType", "opType")
DRS_TYPES = ("DDL", "INIT", "INIT_DDL")

BINARY_TYPE = r"(?i)^\s*(binary|varbinary|tinyblob|blob|mediumblob|longblob|bytea|raw|long raw|image)\b"
TIMESTAMP_TYPE = r"(?i)^\s*timestamp\s*(\(\s*\d+\s*\))?\s*$"
EPOCH_TEXT = r"^-?\d{1,12}(\.\d{1,9})?$"

# Incremental DDL arrives as type "DDL": its kind comes from the statement's leading words, first match wins.
# ALTER TABLE ... RENAME [TO|AS] renames the table; RENAME COLUMN/INDEX/KEY/CONSTRAINT is an ALTER.
DDL_RULES: tuple[tuple[str, str], ...] = (
    (r"^TRUNCATE\b", "TRUNCATE"),
    (r"^RENAME\s+TABLES?\b", "RENAME"),
    (r"^ALTER\s+TABLE\b.*\sRENAME\s+(?!(COLUMN|INDEX|KEY|CONSTRAINT)\b)", "RENAME"),
    (r"^ALTER\s+TABLE\b", "ALTER"),
    (r"^CREATE\s+((UNIQUE|FULLTEXT|SPATIAL|BITMAP)\s+)?INDEX\b", "CINDEX"),
    (r"^DROP\s+INDEX\b", "DINDEX"),
    (r"^(CREATE|DROP)\s+(DATABASE|SCHEMA)\b", "QUERY"),
    (r"^CREATE\s+((GLOBAL\s+|LOCAL\s+)?(TEMPORARY|TEMP)\s+|UNLOGGED\s+)?TABLE\b", "CREATE"),
    (r"^DROP\s+(TEMPORARY\s+)?TABLE\b", "ERASE"),
)


def ddl_kind_of(sql: Column) -> Column:
    """CREATE/ALTER/RENAME/ERASE/TRUNCATE/CINDEX/DINDEX from a statement's leading words, else QUERY."""
    from pyspark.sql import functions as F

    # Leading blanks and /* ... */ comments do not count; (?s) lets `.` cross newlines in the statement.
    head = F.upper(F.regexp_replace(F.coalesce(sql, F.lit("")), r"^(\s+|/\*.*?\*/)+", ""))
    out = F.lit("QUERY")
    for pattern, kind in reversed(DDL_RULES):
        out = F.when(head.rlike(f"(?s){pattern}"), F.lit(kind)).otherwise(out)
    return out


def byte_list_hex(value: Column) -> Column:
    """``"[106, 103]"`` (Java ``Arrays.toString(byte[])``, signed bytes) -> ``"6a67"``; hex stays hex.

    A malformed list is left as it is so that applying it fails with the column named.
    """
    from pyspark.sql import functions as F

    items = F.from_json(value, "array<int>")
    in_range = F.forall(items, lambda x: x.between(-128, 255))
    listed = F.array_join(F.transform(items, lambda x: F.lpad(F.hex(F.pmod(x, F.lit(256))), 2, "0")), "")
    is_list = F.ltrim(value).startswith("[")
    return (
        F.when(is_list & F.coalesce(in_range, F.lit(False)), F.lower(listed))
        .when(is_list, value)
        .otherwise(F.lower(F.regexp_replace(value, r"^\\x", "")))
    )


def epoch_iso(value: Column) -> Column:
    """Epoch seconds text ``"1624614713.201"`` -> ``"2021-06-25T09:51:53.201Z"`` exactly: integer seconds
    are formatted and the fraction digits are copied (for a negative value: complemented), never through a
    float. 0 is MySQL's zero TIMESTAMP (its range starts at 1 s), written as ``0000-00-00 00:00:00``."""
    from pyspark.sql import functions as F

    negative = value.startswith("-")
    whole = F.regexp_extract(value, r"^-?(\d+)", 1).try_cast("bigint")
    digits = F.regexp_extract(value, r"\.(\d+)$", 1)
    has_frac = F.coalesce(F.regexp_extract(digits, "[1-9]", 0) != "", F.lit(False))
    scale = F.concat(F.lit("1"), F.repeat(F.lit("0"), F.length(digits))).try_cast("bigint")
    borrow = negative & has_frac
    seconds = F.when(negative, -whole).otherwise(whole) - F.when(borrow, 1).otherwise(0)
    frac = F.when(
        borrow, F.lpad((scale - digits.try_cast("bigint")).cast("string"), F.length(digits), "0")
    ).otherwise(digits)
    instant = F.timestamp_seconds(seconds)
    iso = F.concat(
        F.date_format(instant, "yyyy-MM-dd'T'HH:mm:ss"),
        F.when(F.length(digits) > 0, F.concat(F.lit("."), frac)).otherwise(F.lit("")),
        # The session zone's offset (UTC in replicator's sessions): the text names the instant either way.
        F.date_format(instant, "XXX"),
    )
    return F.when((whole == 0) & ~has_frac, F.lit("0000-00-00 00:00:00")).otherwise(iso)


class DrsJson(CanalJson):
    name = "drs-json"
    required_keys: ClassVar[frozenset[str]] = frozenset({"database", "table", "type", "isDdl", "id", "es"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"mysqlType", "columnType"})
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset({"canal-json"})
    message_schema: ClassVar[str] = DRS_SCHEMA
    row_ops: ClassVar[dict[str, str]] = {
        "INSERT": "insert",
        "UPDATE": "update",
        "DELETE": "delete",
        "INIT": "snapshot",
    }
    ignored_types: ClassVar[tuple[str, ...]] = ()
    ddl_types: ClassVar[tuple[str, ...]] = ("DDL", "INIT_DDL")
    delete_image: ClassVar[str] = "old"  # seed 003: "如果是删除,则表示被删除的数据"
    epoch_timestamps: ClassVar[bool] = True  # JSON-C formats them instead

    def disambiguate(self, message: Column, keys: Column) -> Column:
        """Surely DRS: a DRS-only key, or a DRS-only ``type`` (DDL, INIT, INIT_DDL) without canal's signs
        (Flink's canal-json test data also writes INIT, with parameterised mysqlType)."""
        from pyspark.sql import functions as F

        head = F.from_json(message, "mysqlType MAP<STRING, STRING>, type STRING")
        drs_key = F.exists(keys, lambda k: k.isin(*DRS_ONLY_KEYS))
        parameterised = F.coalesce(
            F.exists(F.map_values(head["mysqlType"]), lambda t: t.contains("(")), F.lit(False)
        )
        canal_sign = parameterised | F.array_contains(keys, "gtid") | F.array_contains(keys, "_tidb")
        drs_type = F.coalesce(F.upper(head["type"]).isin(*DRS_TYPES), F.lit(False))
        return drs_key | (drs_type & ~canal_sign)

    # ---- hooks -------------------------------------------------------------------------------------------
    def kind(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        return F.upper(F.coalesce(m["type"], m["opType"]))

    def ddl_kind(self, m: Column, kind: Column) -> Column:
        from pyspark.sql import functions as F

        return F.when(kind == "INIT_DDL", kind).otherwise(ddl_kind_of(m["sql"]))

    def database(self, m: Column) -> Column:
        """Oracle sends an empty ``database`` (seed 003: "dbType为Oracle时暂时为空"); its schema names it, as
        JSON-C does ("Oracle数据库填写schema")."""
        from pyspark.sql import functions as F

        return F.coalesce(F.nullif(m["database"], F.lit("")), F.nullif(m["schema"], F.lit("")))

    def schema(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        return F.nullif(m["schema"], F.lit(""))

    def source_types(self, m: Column) -> Column:
        """``columnType`` as it is, else canal's (mysqlType over jdbc:sqlType)."""
        from pyspark.sql import functions as F

        return F.when(m["columnType"].isNotNull(), m["columnType"]).otherwise(super().source_types(m))

    def normalize(self, image: Column, types: Column) -> Column:
        from pyspark.sql import functions as F

        def value(k: Column, v: Column) -> Column:
            out = F.when(F.coalesce(types[k].rlike(BINARY_TYPE), F.lit(False)), byte_list_hex(v))
            if self.epoch_timestamps:
                is_epoch = F.coalesce(types[k].rlike(TIMESTAMP_TYPE), F.lit(False)) & v.rlike(EPOCH_TEXT)
                out = out.when(is_epoch, epoch_iso(v))
            return F.when(v.isNull(), v).otherwise(out.otherwise(v))

        return F.transform_values(image, value)

    def position(self, m: Column) -> Column:
        """Full-sync rows carry ``eventId`` (binlog file:pos;GTID set); otherwise the DRS sequence."""
        from pyspark.sql import functions as F

        return F.coalesce(F.nullif(m["eventId"], F.lit("")), F.format_string("id=%d es=%d", m["id"], m["es"]))

    def order_key(self, m: Column) -> list[Column]:
        """ARCHITECTURE.md: DRS ``id`` (monotonic sequence), then es (ms)."""
        from pyspark.sql import functions as F

        es = m["es"]
        es_ms = F.when(F.abs(es) < F.lit(100_000_000_000), es * 1000).otherwise(es)
        return [F.coalesce(m["id"], F.lit(0)), F.coalesce(es_ms, F.lit(0))]

    def meta(self, m: Column) -> Column:
        from pyspark.sql import functions as F

        names = ("ts", "jobId", "shardId", "identifier", "eventId", "dbType")
        pairs = [x for n in names for x in (F.lit(n), m[n].cast("string"))]
        return F.map_filter(F.create_map(*pairs), lambda k, v: v.isNotNull() & (v != ""))
