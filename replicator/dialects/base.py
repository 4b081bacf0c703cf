"""Dialect base class, the registry and per-message detection.

A dialect turns messages of one wire format into change events (model.EVENT_FIELDS) with Spark SQL
expressions. The shared pipeline here handles what every format has in common: UTF-8 and JSON checks,
JSON array documents holding several messages, detection for ``dialect: auto``, and the error column.
Spark is imported inside functions so that importing a dialect stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from replicator.model import EVENT_FIELDS

COORDINATE_NAMES = ("source", "partition", "offset", "index", "row")

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_REGISTRY: dict[str, type[Dialect]] = {}


@dataclass(frozen=True)
class DecodeOptions:
    """What decoding needs from the job file."""

    timezone: str = "UTC"
    zero_dates: str = "null"  # "null" | "dead_letter"
    avro_schema: Path | None = None


class Dialect:
    """One wire format. Subclasses set the class constants and implement :meth:`decode_messages`.

    Detection (``dialect: auto``) looks only at a message's top-level keys: a dialect matches when all
    ``required_keys`` and none of ``forbidden_keys`` are present, and ``any_keys`` (if set) has one
    present. ``ambiguous_with`` names dialects whose messages can carry the very same keys with different
    meaning: such a message is never guessed, it is a dead letter asking to pin the dialect.
    """

    name: ClassVar[str] = ""
    binary: ClassVar[bool] = False  # raw records are not JSON text (Avro)
    detectable: ClassVar[bool] = True  # False: only by name
    required_keys: ClassVar[frozenset[str]] = frozenset()
    any_keys: ClassVar[frozenset[str]] = frozenset()
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            _REGISTRY[cls.name] = cls

    def __init__(self, options: DecodeOptions | None = None) -> None:
        self.options = options or DecodeOptions()

    # -- detection -------------------------------------------------------------------------------------
    def matches(self, keys: Column) -> Column:
        """A boolean Spark column: does a message with these top-level keys look like this dialect?"""
        from pyspark.sql import functions as F

        cond = F.lit(True)
        for key in sorted(self.required_keys):
            cond = cond & F.array_contains(keys, key)
        for key in sorted(self.forbidden_keys):
            cond = cond & ~F.array_contains(keys, key)
        if self.any_keys:
            cond = cond & F.exists(keys, lambda k: k.isin(*sorted(self.any_keys)))
        return cond

    def disambiguate(self, message: Column, keys: Column) -> Column:
        """A boolean column: True when this message is surely this dialect although an ``ambiguous_with``
        dialect also matched it. The default trusts nothing."""
        from pyspark.sql import functions as F

        return F.lit(False)

    # -- decoding --------------------------------------------------------------------------------------
    def decode_messages(self, messages: DataFrame) -> DataFrame:
        """Messages (``message`` JSON text, ``raw``, ``batch_id``, ``coordinates``) -> decoded events
        (model.DECODED_DDL). One message may give 0..n rows; a failed row sets ``error``."""
        raise NotImplementedError

    def decode_records(self, records: DataFrame) -> DataFrame:
        """Binary dialects decode raw records (``raw``, ``batch_id``, ``coordinates``) directly."""
        raise NotImplementedError


def dialect_names() -> list[str]:
    import replicator.dialects  # noqa: F401  (registers the built-in dialects)

    return sorted(_REGISTRY)


def get_dialect(name: str, options: DecodeOptions | None = None) -> Dialect:
    dialect_names()
    try:
        return _REGISTRY[name](options)
    except KeyError:
        raise ValueError(
            f"unknown dialect {name!r}; expected one of {', '.join(sorted(_REGISTRY))}"
        ) from None


# ---- helpers shared by the dialect modules ---------------------------------------------------------------


def finish(frame: DataFrame) -> DataFrame:
    """Select the decoded columns in contract order and types; missing ones become NULL."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import _parse_datatype_string

    wanted = [*EVENT_FIELDS, ("error", "STRING"), ("raw", "BINARY")]
    present = set(frame.columns)
    cols = []
    for name, ddl in wanted:
        dtype = _parse_datatype_string(ddl)
        cols.append((F.col(name) if name in present else F.lit(None)).cast(dtype).alias(name))
    return frame.select(*cols)


def first_error(*checks: tuple[Column, str | Column]) -> Column:
    """The message of the first failing check (condition True means failure), else NULL."""
    from pyspark.sql import functions as F

    out: Column = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        msg = F.lit(message) if isinstance(message, str) else message
        out = F.when(condition, msg).otherwise(out)
    return out


def epoch_to_timestamp(value: Column) -> Column:
    """Epoch seconds or milliseconds (vendors use both; see seed 001's DDL examples) -> TIMESTAMP."""
    from pyspark.sql import functions as F

    millis = F.when(F.abs(value) < F.lit(100_000_000_000), value * 1000).otherwise(value)
    return F.timestamp_millis(millis.cast("bigint"))


def seq_tail(row_index: Column | None = None) -> list[Column]:
    """The coordinates part of every ``seq``: batch id, partition, offset, message index, row index."""
    from pyspark.sql import functions as F

    row = row_index if row_index is not None else F.col("coordinates.row")
    return [
        F.col("batch_id").cast("bigint"),
        F.col("coordinates.partition").cast("bigint"),
        F.col("coordinates.offset").cast("bigint"),
        F.col("coordinates.index").cast("bigint"),
        row.cast("bigint"),
    ]


def with_row(coordinates: Column, row_index: Column) -> Column:
    from pyspark.sql import functions as F

    return (
        coordinates.withField("row", row_index.cast("int")) if row_index is not None else F.col("coordinates")
    )


def failed(messages: DataFrame, error: Column, dialect: str | None = None) -> DataFrame:
    """Turn rows into decoded error rows (raw kept for the dead letter)."""
    from pyspark.sql import functions as F

    return finish(
        messages.select(F.lit(dialect).alias("dialect"), "coordinates", error.alias("error"), F.col("raw"))
    )


# ---- the shared pipeline ---------------------------------------------------------------------------------


def split_messages(records: DataFrame) -> DataFrame:
    """Raw records -> one row per message (``message`` text), or error rows for bad text.

    A record is UTF-8 JSON holding one object, or an array of objects (the canal seed examples are
    arrays); ``coordinates.index`` is the message's index in that array.
    """
    from pyspark.sql import functions as F

    # CAST keeps the bytes as they are; Spark's decode() would raise on the first bad sequence.
    text = F.col("raw").cast("string")
    checked = records.select(
        "raw",
        "batch_id",
        "coordinates",
        text.alias("text"),
        F.expr("is_valid_utf8(CAST(raw AS STRING))").alias("utf8_ok"),
    ).withColumn("json_ok", F.col("utf8_ok") & F.expr("try_parse_json(text) IS NOT NULL"))
    is_array = F.ltrim(F.col("text")).startswith("[")
    messages = F.when(is_array, F.from_json("text", "array<string>")).otherwise(F.array("text"))
    # Coordinates travel as top-level columns across the explode and are rebuilt after it: Spark 4's
    # nested-column aliasing through Generate loses a field otherwise (INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND
    # when a later plan reads only some of them).
    flat = [F.col(f"coordinates.{f}").alias(f"_c_{f}") for f in COORDINATE_NAMES]
    return (
        checked.select(
            "raw",
            "batch_id",
            *flat,
            F.when(F.col("utf8_ok") & F.col("json_ok"), messages)
            .otherwise(F.array(F.lit(None)))
            .alias("msgs"),
            first_error(
                (~F.col("utf8_ok"), "not valid UTF-8"),
                (~F.col("json_ok"), "not JSON: the record does not parse as a JSON document"),
            ).alias("record_error"),
        )
        .select(
            "raw",
            "batch_id",
            "record_error",
            F.posexplode_outer("msgs").alias("pos", "message"),
            *[f"_c_{f}" for f in COORDINATE_NAMES],
        )
        .select(
            "raw",
            "batch_id",
            "message",
            "record_error",
            F.struct(
                *[
                    (
                        F.coalesce(F.col("pos"), F.lit(0)).cast("int") if f == "index" else F.col(f"_c_{f}")
                    ).alias(f)
                    for f in COORDINATE_NAMES
                ]
            ).alias("coordinates"),
        )
    )


def decode(records: DataFrame, dialect: str = "auto", options: DecodeOptions | None = None) -> DataFrame:
    """Raw records (model.RAW_DDL) -> decoded events and error rows (model.DECODED_DDL).

    One pass over the records: a record that is not UTF-8 JSON, or a JSON array holding no message,
    reaches the dialect as a NULL message, which every dialect turns into one error row keeping the raw
    record; :func:`record_outcome` then restates such rows as what the record is (a union of a "bad"
    and a "good" branch would read and split the source once per branch). A record that holds no
    message at all (an empty JSON array) yields one row with op ``filtered``.
    """
    options = options or DecodeOptions()
    if dialect != "auto" and get_dialect(dialect, options).binary:
        return get_dialect(dialect, options).decode_records(records)

    split = split_messages(records).drop("record_error")
    if dialect != "auto":
        return record_outcome(get_dialect(dialect, options).decode_messages(split))
    outputs = _detect_and_decode(split, options)
    result = outputs[0]
    for frame in outputs[1:]:
        result = result.unionByName(frame)
    return record_outcome(result)


def record_outcome(decoded: DataFrame) -> DataFrame:
    """Error rows whose raw record is not UTF-8 JSON, or is an empty JSON array, say so (see decode)."""
    from pyspark.sql import functions as F

    text = F.col("raw").cast("string")
    failed_row = F.col("error").isNotNull() & F.col("raw").isNotNull()
    record_error = F.when(
        failed_row,
        first_error(
            (~F.expr("is_valid_utf8(CAST(raw AS STRING))"), "not valid UTF-8"),
            (
                F.expr("try_parse_json(CAST(raw AS STRING))").isNull(),
                "not JSON: the record does not parse as a JSON document",
            ),
        ),
    )
    empty = (
        failed_row
        & F.ltrim(text).startswith("[")
        & (F.expr("try_parse_json(CAST(raw AS STRING))").cast("string") == "[]")
    )
    staged = decoded.withColumn("_record_error", record_error).withColumn(
        "_empty", F.coalesce(empty, F.lit(False))
    )
    keep = F.col("_record_error").isNull() & ~F.col("_empty")
    columns = []
    for name in decoded.columns:
        if name == "coordinates":
            columns.append(F.col(name))
        elif name == "error":
            columns.append(
                F.when(F.col("_empty"), F.lit(None))
                .otherwise(F.coalesce("_record_error", "error"))
                .alias(name)
            )
        elif name == "raw":
            columns.append(F.when(~F.col("_empty"), F.col("raw")).alias(name))
        elif name == "op":
            columns.append(F.when(F.col("_empty"), F.lit("filtered")).when(keep, F.col("op")).alias(name))
        else:
            columns.append(F.when(keep, F.col(name)).alias(name))
    return staged.select(*columns)


def _detect_and_decode(messages: DataFrame, options: DecodeOptions) -> list[DataFrame]:
    from pyspark.sql import functions as F

    dialects = [get_dialect(name, options) for name in dialect_names()]
    dialects = [d for d in dialects if d.detectable and not d.binary]
    keyed = messages.withColumn("keys", F.expr("json_object_keys(message)"))
    candidates = F.filter(
        F.array(*[F.when(d.matches(F.col("keys")), F.lit(d.name)) for d in dialects]),
        lambda x: x.isNotNull(),
    )
    keyed = keyed.withColumn("candidates", candidates)
    # Resolve known ambiguities: a dialect that is sure of a message wins over its look-alikes.
    sure = (
        F.filter(
            F.array(
                *[
                    F.when(
                        F.array_contains("candidates", d.name)
                        & d.disambiguate(F.col("message"), F.col("keys")),
                        F.lit(d.name),
                    )
                    for d in dialects
                    if d.ambiguous_with
                ]
            ),
            lambda x: x.isNotNull(),
        )
        if any(d.ambiguous_with for d in dialects)
        else F.array().cast("array<string>")
    )
    chosen = F.when(F.size(sure) == 1, sure[0]).when(F.size("candidates") == 1, F.col("candidates")[0])
    keyed = keyed.withColumn("chosen", chosen)
    error = first_error(
        (F.col("keys").isNull(), "not a JSON object: a message must be an object"),
        (
            F.size("candidates") == 0,
            "unknown message format: no dialect recognises its keys; pin source.dialect",
        ),
        (
            F.col("chosen").isNull(),
            F.concat(
                F.lit("ambiguous message format: it reads as any of "),
                F.array_join("candidates", ", "),
                F.lit("; pin source.dialect in the job file"),
            ),
        ),
    )
    keyed = keyed.withColumn("detect_error", error)
    outputs = [failed(keyed.where(F.col("detect_error").isNotNull()), F.col("detect_error"))]
    ok = keyed.where(F.col("detect_error").isNull())
    for d in dialects:
        subset = ok.where(F.col("chosen") == d.name).drop("keys", "candidates", "chosen", "detect_error")
        outputs.append(d.decode_messages(subset))
    return outputs
