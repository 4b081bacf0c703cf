"""debezium: the Debezium change-event envelope written by Kafka Connect's JsonConverter (seed 004 "Debezium
Envelope"; debezium.io connector docs; notes/ENCODINGS.md §3).

A message is either ``{"schema": ..., "payload": ...}`` (``schemas.enable=true``) or the bare payload. A
payload is a row change (``op`` c/u/d/r/t, ``before``/``after``, ``source``), a PostgreSQL logical-decoding
message (``op`` m), or a schema-change event (``ddl``, ``databaseName``, ``tableChanges``). Heartbeats,
transaction metadata and tombstones (``payload: null``) carry no change and are counted as ``filtered``.

Values: without a schema they are JSON scalars and keep their JSON text. With a schema, each column's
Connect type and logical name (``org.apache.kafka.connect.data.Decimal``, ``io.debezium.time.*`` ...) drive
the conversion to canonical text, all in Spark SQL: base64 two's-complement decimals of any length are
decoded exactly with base-10^9 limb arithmetic (no 38-digit limit), epoch days/ms/us/ns become date and
wall-clock text with integer arithmetic (no session time zone involved).

Keys: a Debezium *value* names no key columns (the key travels as the Kafka message key, and files carry
values only), so row events have ``primary_key = []``; the engine takes keys from the mirror or from
``tables.keys``. Schema-change events carry ``tableChanges[].table.primaryKeyColumnNames``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from replicator.dialects.base import Dialect, epoch_to_timestamp, finish, first_error, seq_tail

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Numbers are read as STRING: lsn, ts_ns and BIGINT UNSIGNED exceed 2^53, and Debezium's docs also quote them
# ("ts_ms":"1620393591654" in the incremental-snapshot example). Casts happen later with try_cast.
SOURCE_FIELDS = (
    "version",
    "connector",
    "name",
    "ts_ms",
    "ts_sec",
    "snapshot",
    "db",
    "schema",
    "table",
    "sequence",
    "server_id",
    "gtid",
    "file",
    "pos",
    "row",
    "thread",
    "query",
    "txId",
    "lsn",
    "xmin",
    "change_lsn",
    "commit_lsn",
    "event_serial_no",
    "scn",
    "commit_scn",
)
PAYLOAD_SCHEMA = (
    "op STRING, before STRING, after STRING, "
    f"source STRUCT<{', '.join(f'`{f}` STRING' for f in SOURCE_FIELDS)}>, "
    "ts_ms STRING, databaseName STRING, schemaName STRING, ddl STRING, tableChanges STRING, "
    "transaction STRUCT<id STRING>, status STRING, message STRING"
)
FIELD_SCHEMA = "field STRING, type STRING, name STRING, parameters MAP<STRING, STRING>"
SCHEMA_SCHEMA = (
    f"name STRING, fields ARRAY<STRUCT<field STRING, name STRING, fields ARRAY<STRUCT<{FIELD_SCHEMA}>>>>"
)
TABLE_CHANGE_SCHEMA = (
    "type STRING, id STRING, table STRUCT<primaryKeyColumnNames ARRAY<STRING>, columns ARRAY<STRUCT<"
    "name STRING, typeName STRING, typeExpression STRING, length BIGINT, scale BIGINT>>>"
)

OPS = {
    "c": "insert",
    "i": "insert",
    "u": "update",
    "d": "delete",
    "r": "snapshot",
    "t": "truncate",
    "m": "filtered",
    "a": "ddl",
}  # "i" and "a" as written in seed 004; "m" = PG logical message

# Logical type name -> source type text for types.column_type (Debezium MySQL/PostgreSQL data type docs).
LOGICAL_TYPES = {
    "io.debezium.data.VariableScaleDecimal": "decimal",
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.IsoDate": "date",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.NanoTime": "time",
    "org.apache.kafka.connect.data.Time": "time",
    "io.debezium.time.IsoTime": "time",
    "io.debezium.time.ZonedTime": "timetz",
    "io.debezium.time.Timestamp": "datetime",
    "io.debezium.time.MicroTimestamp": "datetime",
    "io.debezium.time.NanoTimestamp": "datetime",
    "org.apache.kafka.connect.data.Timestamp": "datetime",
    # ISO text with a zone designator: an instant (isostring mode renders wall-clock values "...Z").
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.IsoTimestamp": "timestamp",
    "io.debezium.time.Year": "year",
    "io.debezium.time.MicroDuration": "interval",
    "io.debezium.time.NanoDuration": "interval",
    "io.debezium.time.Interval": "interval",
    "io.debezium.data.Json": "json",
    "io.debezium.data.Enum": "enum",
    "io.debezium.data.EnumSet": "set",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Xml": "xml",
    "io.debezium.data.Ltree": "varchar",
    "io.debezium.data.geometry.Geometry": "geometry",
    "io.debezium.data.geometry.Geography": "geography",
    "io.debezium.data.geometry.Point": "point",
}
CONNECT_TYPES = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "varchar",
    "bytes": "varbinary",
    "array": "array",
    "map": "json",
    "struct": "json",
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"
BITS = "io.debezium.data.Bits"
# epoch unit per logical type: value -> (kind, units per second)
EPOCH_UNITS = {
    "io.debezium.time.Timestamp": ("ts", 1000),
    "org.apache.kafka.connect.data.Timestamp": ("ts", 1000),
    "io.debezium.time.MicroTimestamp": ("ts", 1_000_000),
    "io.debezium.time.NanoTimestamp": ("ts", 1_000_000_000),
    "io.debezium.time.Time": ("time", 1000),
    "org.apache.kafka.connect.data.Time": ("time", 1000),
    "io.debezium.time.MicroTime": ("time", 1_000_000),
    "io.debezium.time.NanoTime": ("time", 1_000_000_000),
}
VS_BYTES = "try_to_binary(vs.value, 'base64')"
DAY_TYPES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")


# ---- Spark SQL text builders (used inside transform_values lambdas, hence SQL strings) ------------------


def _let(value: str, var: str, body: str) -> str:
    """Bind ``value`` to the lambda variable ``var`` once (Spark SQL has no LET)."""
    return f"transform(array({value}), {var} -> {body})[0]"


def _limbs_times_add(limbs: str, factor: str, addend: str, var: str) -> str:
    """``limbs * factor + addend`` on little-endian base-10^9 limbs (ARRAY<BIGINT>); exact for any length."""
    return (
        f"aggregate({limbs}, named_struct('c', CAST({addend} AS BIGINT), "
        f"'o', CAST(array() AS ARRAY<BIGINT>)), "
        f"({var}s, {var}l) -> named_struct('c', ({var}l * {factor} + {var}s.c) div 1000000000, "
        f"'o', concat({var}s.o, array(({var}l * {factor} + {var}s.c) % 1000000000))), "
        f"{var}s -> IF({var}s.c > 0, concat({var}s.o, array({var}s.c)), {var}s.o))"
    )


def _limbs_text(limbs: str, var: str) -> str:
    body = (
        f"concat(CAST({var}[0] AS STRING), array_join(transform(slice({var}, 2, size({var}) - 1), "
        f"{var}x -> lpad(CAST({var}x AS STRING), 9, '0')), ''))"
    )
    return _let(f"reverse({limbs})", var, body)


def unsigned_text_sql(byte_values: str, var: str = "u") -> str:
    """Decimal text of an unsigned big-endian integer given as ARRAY<INT> of byte values."""
    limbs = (
        f"aggregate({byte_values}, array(CAST(0 AS BIGINT)), ({var}a, {var}b) -> "
        + _limbs_times_add(f"{var}a", "256", f"{var}b", var + "m")
        + ")"
    )
    return _limbs_text(limbs, var + "t")


def byte_values_sql(binary: str, var: str = "h") -> str:
    """BINARY -> ARRAY<INT> of byte values 0..255 (empty for empty bytes: sequence(1, 0) counts down)."""
    return _let(
        f"hex({binary})",
        var,
        f"IF(length({var}) = 0, CAST(array() AS ARRAY<INT>), transform(sequence(1, length({var}) div 2), "
        f"{var}i -> CAST(conv(substr({var}, 2 * {var}i - 1, 2), 16, 10) AS INT)))",
    )


def decimal_text_sql(binary: str, scale: str) -> str:
    """Kafka Connect Decimal bytes (big-endian two's complement unscaled value) + scale -> plain decimal text.

    Negative values: magnitude = (bitwise NOT of the bytes) + 1, computed exactly on base-10^9 limbs."""
    bytes_sql = byte_values_sql(binary, "h")
    magnitude = (
        "IF(size(b) = 0, '0', IF(get(b, 0) >= 128, "
        + _limbs_text(
            _limbs_times_add(
                "aggregate(transform(b, x -> 255 - x), array(CAST(0 AS BIGINT)), (na, nb) -> "
                + _limbs_times_add("na", "256", "nb", "nm")
                + ")",
                "1",
                "1",
                "np",
            ),
            "nt",
        )
        + ", "
        + unsigned_text_sql("b", "p")
        + "))"
    )
    negative = "(size(b) > 0 AND get(b, 0) >= 128)"
    scaled = (
        "IF(s <= 0, IF(d = '0', d, concat(d, repeat('0', -s))), "
        + _let(
            "lpad(d, greatest(length(d), s + 1), '0')",
            "q",
            "concat(substr(q, 1, length(q) - s), '.', substr(q, length(q) - s + 1))",
        )
        + ")"
    )
    signed = f"concat(IF({negative}, '-', ''), {scaled})"
    return _let(
        bytes_sql,
        "b",
        _let(
            f"named_struct('d', {magnitude}, 's', CAST({scale} AS INT))",
            "ds",
            _let("ds.d", "d", _let("ds.s", "s", signed)),
        ),
    )


def bits_text_sql(binary: str) -> str:
    """io.debezium.data.Bits: little-endian bytes -> unsigned integer text (types maps bit(n>1) to ints)."""
    return _let(f"reverse({byte_values_sql(binary, 'bh')})", "bb", unsigned_text_sql("bb", "bu"))


def _hms(sign: str, total: str, unit: int, digits: int) -> str:
    """[-]HH:MM:SS[.f] from a non-negative count of 1/unit seconds (hours are not wrapped: MySQL TIME)."""
    frac = (
        f"IF({total} % {unit} = 0, '', concat('.', regexp_replace(lpad(CAST({total} % {unit} AS STRING), "
        f"{digits}, '0'), '0+$', '')))"
    )
    return (
        f"concat({sign}, format_string('%02d:%02d:%02d', {total} div {unit * 3600}L, "
        f"({total} div {unit * 60}L) % 60, ({total} div {unit}L) % 60), {frac})"
    )


def epoch_text_sql(value: str, kind: str, unit: int) -> str:
    """Epoch count (ms/us/ns) -> wall-clock 'YYYY-MM-DD HH:MM:SS[.f]' (kind ts) or time of day (kind time),
    with integer arithmetic: Debezium renders DATETIME "by using UTC", so no zone applies."""
    digits = len(str(unit)) - 1
    if kind == "time":
        clock = _hms("IF(tv < 0, '-', '')", "abs(tv)", unit, digits)
        return _let(f"try_cast({value} AS BIGINT)", "tv", f"IF(tv IS NULL, NULL, {clock})")
    day = unit * 86400
    clock = _hms("''", f"pmod(tv, {day})", unit, digits)
    body = (
        f"IF(tv IS NULL OR abs(tv div {day}) > 3000000, NULL, concat(CAST(date_add(DATE'1970-01-01', "
        f"CAST((tv - pmod(tv, {day})) div {day} AS INT)) AS STRING), ' ', {clock}))"
    )
    return _let(f"try_cast({value} AS BIGINT)", "tv", body)


def date_text_sql(value: str) -> str:
    return _let(
        f"try_cast({value} AS BIGINT)",
        "dv",
        "IF(dv IS NULL OR abs(dv) > 3000000, NULL, "
        "CAST(date_add(DATE'1970-01-01', CAST(dv AS INT)) AS STRING))",
    )


def value_text_sql(v: str, f: str, is_string: str) -> str:
    """Canonical text of JSON value text ``v`` of a column with field schema ``f`` (type, name, parameters).
    ``is_string``: the JSON token was a string (Decimal may be base64 text or, with decimal.format=NUMERIC,
    a JSON number)."""
    b64 = f"try_to_binary({v}, 'base64')"
    cases = [
        f"WHEN {v} IS NULL OR {f} IS NULL THEN {v}",
        f"WHEN {f}.name = '{DECIMAL}' AND {is_string} THEN {decimal_text_sql(b64, f'{f}.parameters.scale')}",
        f"WHEN {f}.name = '{DECIMAL}' THEN {v}",
        f"WHEN {f}.name = 'io.debezium.data.VariableScaleDecimal' THEN "
        + _let(
            f"from_json({v}, 'scale INT, value STRING')",
            "vs",
            f"IF(vs.value IS NULL, NULL, {decimal_text_sql(VS_BYTES, 'vs.scale')})",
        ),
        f"WHEN {f}.name IN ({', '.join(repr(n) for n in DAY_TYPES)}) THEN {date_text_sql(v)}",
    ]
    for name, (kind, unit) in EPOCH_UNITS.items():
        cases.append(f"WHEN {f}.name = '{name}' THEN {epoch_text_sql(v, kind, unit)}")
    cases += [
        f"WHEN {f}.name = '{BITS}' AND {is_string} THEN {bits_text_sql(b64)}",
        f"WHEN {f}.type = 'bytes' AND {is_string} THEN lower(hex({b64}))",
    ]
    return f"CASE {' '.join(cases)} ELSE {v} END"


def source_type_sql(f: str) -> str:
    """Field schema -> source type text that replicator.types.column_type maps."""
    logical = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in LOGICAL_TYPES.items())
    connect = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in CONNECT_TYPES.items())
    return (
        f"CASE WHEN {f}.name = '{DECIMAL}' THEN IF({f}.parameters['connect.decimal.precision'] IS NOT NULL, "
        f"format_string('decimal(%s,%s)', {f}.parameters['connect.decimal.precision'], "
        f"coalesce({f}.parameters.scale, '0')), 'decimal') "
        f"WHEN {f}.name = '{BITS}' THEN format_string('bit(%s)', coalesce({f}.parameters.length, '64')) "
        f"ELSE coalesce(CASE {f}.name {logical} END, CASE {f}.type {connect} END, {f}.type) END"
    )


def _ddl_kind_from_text(ddl: Column) -> Column:
    from pyspark.sql import functions as F

    text = F.upper(F.regexp_replace(F.coalesce(ddl, F.lit("")), r"(?s)^\s*(/\*.*?\*/\s*)*", ""))
    return (
        F.when(text.rlike(r"^RENAME\s+TABLE"), F.lit("RENAME"))
        .when(text.rlike(r"^TRUNCATE"), F.lit("TRUNCATE"))
        .when(text.rlike(r"^CREATE\s+(UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX"), F.lit("CINDEX"))
        .when(text.rlike(r"^DROP\s+INDEX"), F.lit("DINDEX"))
        .when(text.rlike(r"^CREATE\s+(TEMPORARY\s+)?TABLE"), F.lit("CREATE"))
        .when(text.rlike(r"^ALTER\s+TABLE"), F.lit("ALTER"))
        .when(text.rlike(r"^DROP\s+TABLE"), F.lit("ERASE"))
        .otherwise(F.lit("QUERY"))
    )


class Debezium(Dialect):
    name = "debezium"
    # Detection is overridden in `matches` (two shapes); these document the keys it looks at.
    required_keys: ClassVar[frozenset[str]] = frozenset()
    any_keys: ClassVar[frozenset[str]] = frozenset({"payload", "op", "ddl"})

    def matches(self, keys: Column) -> Column:
        """``{"schema", "payload"}`` (JsonConverter with schemas), or a bare payload: ``op`` + ``source`` +
        ``before``/``after``, or a schema-change event ``source`` + ``ddl`` +
        ``databaseName``/``tableChanges``."""
        from pyspark.sql import functions as F

        def has(k: str) -> Column:
            return F.array_contains(keys, k)

        enveloped = has("schema") & has("payload")
        row = has("op") & has("source") & (has("before") | has("after"))
        ddl = has("source") & has("ddl") & (has("databaseName") | has("tableChanges"))
        return enveloped | row | ddl

    # ---- decoding ----------------------------------------------------------------------------------------
    def decode_messages(self, messages: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        keys = F.expr("json_object_keys(message)")
        head = F.from_json("message", "schema STRING, payload STRING")
        enveloped = F.coalesce(F.array_contains(keys, "payload"), F.lit(False))
        staged = messages.select(
            "raw",
            "batch_id",
            "coordinates",
            keys.isNull().alias("not_object"),
            enveloped.alias("enveloped"),
            F.when(enveloped, head["payload"]).otherwise(F.col("message")).alias("payload_text"),
            F.from_json(F.when(enveloped, head["schema"]), SCHEMA_SCHEMA).alias("s"),
        ).withColumn("p", F.from_json("payload_text", PAYLOAD_SCHEMA))
        p, src, s = F.col("p"), F.col("p.source"), F.col("s")

        # Field schemas of the row columns (the `after` struct, or `before` for deletes).
        def image_fields(field: str) -> Column:
            return F.get(F.filter(s["fields"], lambda x: x["field"] == field), 0)["fields"]

        fields = F.coalesce(image_fields("after"), image_fields("before"))
        staged = staged.withColumn(
            "ft",
            F.map_from_entries(
                F.transform(fields, lambda x: F.struct(x["field"].alias("key"), x.alias("value")))
            ),
        )
        for image in ("after", "before"):
            raw_map = F.from_json(p[image], "MAP<STRING, STRING>")
            kinds = F.when(
                F.size(F.col("ft")) > 0,
                F.expr(
                    f"transform_values(CAST(parse_json(p.{image}) AS MAP<STRING, VARIANT>), "
                    "(k, v) -> schema_of_variant(v) = 'STRING')"
                ),
            )
            staged = staged.withColumn(f"{image}_raw", F.when(F.size(raw_map) > 0, raw_map)).withColumn(
                f"{image}_str", kinds
            )
        convert = value_text_sql("v", "ft[k]", "coalesce({img}_str[k], false)")
        for image in ("after", "before"):
            staged = staged.withColumn(
                f"{image}_img",
                F.expr(f"transform_values({image}_raw, (k, v) -> {convert.format(img=image)})"),
            )
        staged = staged.withColumn(
            "source_types",
            F.coalesce(
                F.expr(f"transform_values(ft, (k, f) -> {source_type_sql('f')})"), F.create_map()
            ).cast("map<string,string>"),
        )

        # Schema-change events: tableChanges is an array (Debezium) or one object (seed 004).
        tc_text = F.trim(p["tableChanges"])
        tc_list = F.when(tc_text.startswith("["), F.from_json(tc_text, "ARRAY<STRING>")).otherwise(
            F.when(tc_text.isNotNull(), F.array(tc_text))
        )
        first_tc = F.from_json(F.get(tc_list, 0), TABLE_CHANGE_SCHEMA)
        op_code = p["op"]
        is_ddl = (
            p["ddl"].isNotNull() | p["tableChanges"].isNotNull() | F.coalesce(op_code == "a", F.lit(False))
        )
        heartbeat = F.coalesce(s["name"].contains("Heartbeat"), F.lit(False)) | (
            op_code.isNull()
            & ~is_ddl
            & src.isNull()
            & p["ts_ms"].isNotNull()
            & p["before"].isNull()
            & p["after"].isNull()
        )
        tx_marker = F.coalesce(p["status"].isin("BEGIN", "END"), F.lit(False)) & op_code.isNull()
        key_message = F.coalesce(s["name"].endswith("Key"), F.lit(False)) & op_code.isNull() & ~is_ddl
        bad_payload = F.col("enveloped") & ~F.coalesce(F.ltrim("payload_text").startswith("{"), F.lit(True))
        op_map = F.create_map(*[x for k, v in OPS.items() for x in (F.lit(k), F.lit(v))])
        op = (
            F.when(F.col("not_object") | bad_payload, F.lit(None))
            .when(p.isNull() | heartbeat | tx_marker, F.lit("filtered"))
            .when(is_ddl, F.lit("ddl"))
            .otherwise(op_map[op_code])
        )
        staged = staged.withColumn("op", op)
        op_c = F.col("op")
        dml = op_c.isin("insert", "update", "delete", "snapshot")

        # Identity: MySQL db.table; PostgreSQL / SQL Server / Oracle db.schema.table.
        table_from_id = F.regexp_extract(F.coalesce(first_tc["id"], F.lit("")), r'"([^"]*)"\s*$', 1)
        database = F.when(op_c == "ddl", F.coalesce(p["databaseName"], src["db"])).otherwise(src["db"])
        schema = F.when(op_c == "ddl", F.coalesce(p["schemaName"], src["schema"])).otherwise(src["schema"])
        table = F.coalesce(
            F.when(src["table"] != "", src["table"]),
            F.when((op_c == "ddl") & (table_from_id != ""), table_from_id),
        )

        after = F.when(op_c.isin("insert", "update", "snapshot"), F.col("after_img"))
        before = F.when(op_c.isin("update", "delete"), F.col("before_img"))

        def lost(image: str) -> Column:
            """Columns whose JSON value was not NULL but did not convert (bad base64, bad number)."""
            raw = F.col(f"{image}_raw")
            failed = F.map_filter(F.col(f"{image}_img"), lambda k, v: v.isNull() & raw[k].isNotNull())
            return F.coalesce(F.map_keys(failed), F.array().cast("array<string>"))

        bad_values = F.array_sort(F.array_union(lost("after"), lost("before")))
        ddl_kind = F.coalesce(
            F.when(_ddl_kind_from_text(p["ddl"]) == "RENAME", F.lit("RENAME")),
            F.upper(first_tc["type"]),
            F.when(p["ddl"].isNotNull(), _ddl_kind_from_text(p["ddl"])),
        )
        ddl_kind = F.when(ddl_kind == "DROP", F.lit("ERASE")).otherwise(ddl_kind)
        columns = first_tc["table"]["columns"]
        ddl_types = F.map_from_entries(
            F.transform(
                columns,
                lambda c: F.struct(
                    c["name"].alias("key"),
                    F.lower(
                        F.when(F.coalesce(c["typeExpression"], F.lit("")).contains("("), c["typeExpression"])
                        .when(
                            c["length"].isNotNull(),
                            F.concat(
                                F.coalesce(c["typeExpression"], c["typeName"]),
                                F.lit("("),
                                c["length"].cast("string"),
                                F.when(
                                    c["scale"].isNotNull(), F.concat(F.lit(","), c["scale"].cast("string"))
                                ).otherwise(""),
                                F.lit(")"),
                            ),
                        )
                        .otherwise(F.coalesce(c["typeExpression"], c["typeName"]))
                    ).alias("value"),
                ),
            )
        )
        pk = F.when(op_c == "ddl", first_tc["table"]["primaryKeyColumnNames"])
        pk = F.coalesce(pk, F.array().cast("array<string>"))

        error = first_error(
            (F.col("not_object"), "not a JSON object: a message must be an object"),
            (bad_payload, "wrong shape: 'payload' is not a JSON object"),
            (
                key_message,
                "a Debezium message key (schema name ends with 'Key'), not a value: "
                "decode the topic's values",
            ),
            (op_c == "filtered", F.lit(None).cast("string")),
            (op_code.isNull() & ~is_ddl, "wrong shape: the Debezium payload has no 'op' (nor 'ddl')"),
            (op_c.isNull(), F.concat(F.lit("unknown op "), F.to_json(F.array(op_code)))),
            (F.coalesce(database, F.lit("")) == "", "missing database (source.db)"),
            ((dml | (op_c == "truncate")) & table.isNull(), "missing table (source.table)"),
            (
                op_c.isin("insert", "update", "snapshot") & F.col("after_img").isNull(),
                F.concat(F.lit("no 'after' image for op "), F.to_json(F.array(op_code))),
            ),
            (
                (op_c == "delete") & F.col("before_img").isNull(),
                "delete without a 'before' image: the row cannot be identified (PostgreSQL: the table "
                "needs a "
                "primary key with REPLICA IDENTITY DEFAULT, or REPLICA IDENTITY FULL)",
            ),
            (
                dml & (F.size(bad_values) > 0),
                F.concat(
                    F.lit("values do not decode as their schema types: columns "), F.to_json(bad_values)
                ),
            ),
        )
        order, position = self.order_key(src), self.position(src)
        ts = F.coalesce(
            F.nullif(F.expr("try_cast(p.source.ts_ms AS BIGINT)"), F.lit(0)),
            F.nullif(F.expr("try_cast(p.source.ts_sec AS BIGINT)"), F.lit(0)),
            F.expr("try_cast(p.ts_ms AS BIGINT)"),
        )
        seq_key = F.when(F.size(order) > 0, order).otherwise(
            F.array(F.coalesce(ts, F.lit(0)), F.lit(0), F.lit(0))
        )
        return finish(
            staged.select(
                F.lit(self.name).alias("dialect"),
                database.alias("database"),
                F.when(schema != "", schema).alias("schema"),
                table.alias("table"),
                op_c.alias("op"),
                F.when(op_c == "ddl", ddl_kind).alias("ddl_kind"),
                F.when(op_c == "ddl", p["ddl"]).alias("ddl_sql"),
                F.when(
                    op_c == "ddl", F.when(F.size(tc_list) > 1, tc_text).otherwise(F.get(tc_list, 0))
                ).alias("table_changes"),
                pk.alias("primary_key"),
                after.alias("after"),
                before.alias("before"),
                F.when(op_c == "ddl", F.coalesce(ddl_types, F.create_map().cast("map<string,string>")))
                .otherwise(F.col("source_types"))
                .alias("source_types"),
                F.concat(seq_key, F.array(*seq_tail())).alias("seq"),
                epoch_to_timestamp(ts).alias("event_time"),
                F.coalesce(position, F.concat(F.lit("ts_ms:"), ts.cast("string"))).alias("position"),
                self.meta(F.col("p")).alias("meta"),
                F.col("coordinates"),
                error.alias("error"),
                F.when(error.isNotNull(), F.col("raw")).alias("raw"),
            )
        )

    def order_key(self, src: Column) -> Column:
        """The dialect's part of ``seq`` (ARRAY<BIGINT>; empty when the source has no position):
        MySQL [binlog file number, pos, row]; PostgreSQL [lsn, 0, 0]; SQL Server [commit_lsn, change_lsn,
        event_serial_no] with each LSN split into (VLF, block * 2^16 + slot); Oracle [commit_scn, scn, 0]."""
        from pyspark.sql import functions as F

        def num(field: str) -> Column:
            return F.expr(f"try_cast(p.source.{field} AS BIGINT)")

        def lsn_parts(field: str) -> list[Column]:
            part = [
                F.expr(f"try_cast(conv(get(split(p.source.{field}, ':'), {i}), 16, 10) AS BIGINT)")
                for i in range(3)
            ]
            return [part[0], part[1] * 65536 + part[2]]

        file_no = F.expr(r"try_cast(regexp_extract(p.source.file, '(\\d+)$', 1) AS BIGINT)")
        empty = F.array().cast("array<bigint>")
        return (
            F.when(
                F.coalesce(src["file"], F.lit("")) != "",
                F.array(
                    F.coalesce(file_no, F.lit(0)),
                    F.coalesce(num("pos"), F.lit(0)),
                    F.coalesce(num("row"), F.lit(0)),
                ),
            )
            .when(num("lsn").isNotNull(), F.array(num("lsn"), F.lit(0), F.lit(0)))
            .when(
                src["commit_lsn"].isNotNull() | src["change_lsn"].isNotNull(),
                F.array(
                    *[
                        F.coalesce(x, F.lit(0))
                        for x in (*lsn_parts("commit_lsn"), *lsn_parts("change_lsn"), num("event_serial_no"))
                    ]
                ),
            )
            .when(
                num("scn").isNotNull(),
                F.array(F.coalesce(num("commit_scn"), num("scn")), num("scn"), F.lit(0)),
            )
            .otherwise(empty)
            .cast("array<bigint>")
        )

    def position(self, src: Column) -> Column:
        from pyspark.sql import functions as F

        gtid = F.when(
            F.coalesce(src["gtid"], F.lit("")) != "", F.concat(F.lit(" gtid="), src["gtid"])
        ).otherwise("")
        return (
            F.when(
                F.coalesce(src["file"], F.lit("")) != "", F.concat(src["file"], F.lit(":"), src["pos"], gtid)
            )
            .when(src["lsn"].isNotNull(), F.concat(F.lit("lsn:"), src["lsn"]))
            .when(
                src["commit_lsn"].isNotNull() | src["change_lsn"].isNotNull(),
                F.concat_ws(
                    " ",
                    F.concat(F.lit("commit_lsn:"), src["commit_lsn"]),
                    F.concat(F.lit("change_lsn:"), src["change_lsn"]),
                ),
            )
            .when(
                src["scn"].isNotNull(),
                F.concat_ws(
                    " ",
                    F.concat(F.lit("scn:"), src["scn"]),
                    F.concat(F.lit("commit_scn:"), src["commit_scn"]),
                ),
            )
        )

    def meta(self, p: Column) -> Column:
        from pyspark.sql import functions as F

        src = p["source"]
        pairs = {
            "connector": src["connector"],
            "snapshot": src["snapshot"],
            "ts_ms": p["ts_ms"],
            "transaction_id": F.coalesce(p["transaction"]["id"], src["txId"]),
            "query": src["query"],
            "server_id": src["server_id"],
        }
        return F.map_filter(
            F.create_map(*[x for k, v in pairs.items() for x in (F.lit(k), v.cast("string"))]),
            lambda k, v: v.isNotNull(),
        )
