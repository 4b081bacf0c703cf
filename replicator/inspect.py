"""Decoded events as plain records: what ``replicator decode`` prints and what golden tests compare."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicator.dialects.base import DecodeOptions, decode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEQ_TAIL = 5  # batch id, partition, offset, message index, row index (dialects.base.seq_tail)
FIELDS = (
    "dialect",
    "op",
    "database",
    "schema",
    "table",
    "ddl_kind",
    "ddl_sql",
    "primary_key",
    "before",
    "after",
    "source_types",
    "seq",
    "event_time",
    "position",
    "error",
)


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, list) and value and isinstance(value[0], tuple):  # Arrow map -> list of pairs
        return dict(value)
    return value


def event_records(decoded: DataFrame, fields: tuple[str, ...] = FIELDS) -> list[dict[str, Any]]:
    """Decoded rows -> dicts in input order; ``seq`` keeps only the dialect's own ordering key."""
    from pyspark.sql import functions as F

    ordered = decoded.orderBy(
        F.col("coordinates.source"),
        F.col("coordinates.offset"),
        F.col("coordinates.index"),
        F.col("coordinates.row"),
    )
    rows = []
    for row in ordered.select(*fields).collect():
        record = {name: _plain(row[name]) for name in fields}
        if "coordinates" in record and record["coordinates"] is not None:
            record["coordinates"] = record["coordinates"].asDict()
        if "seq" in record and record["seq"] is not None:
            record["seq"] = list(record["seq"][:-SEQ_TAIL])
        for key in ("before", "after", "source_types"):
            if key in record and record[key] is not None:
                record[key] = dict(sorted(record[key].items()))
        rows.append({k: v for k, v in record.items() if v is not None})
    return rows


def decode_path(
    spark: SparkSession, path: str | Path, dialect: str = "auto", options: DecodeOptions | None = None
) -> DataFrame:
    """Decode a file or folder of messages (*.json, *.jsonl, Avro *.b64) as one batch."""
    from pyspark.sql import functions as F

    from replicator.sources import read_files_batch

    records = read_files_batch(spark, str(path)).withColumn("batch_id", F.lit(0).cast("bigint"))
    return decode(records, dialect, options)
