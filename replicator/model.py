"""The change-event contract every dialect produces, and sequence helpers.

Schemas are DDL strings so that ``import replicator`` stays free of Spark.
"""

from __future__ import annotations

from typing import Literal

Op = Literal["insert", "update", "delete", "snapshot", "truncate", "ddl"]
DML_OPS: tuple[str, ...] = ("insert", "update", "delete", "snapshot")
BARRIER_OPS: tuple[str, ...] = ("truncate", "ddl")
DdlKind = Literal["CREATE", "ALTER", "ERASE", "RENAME", "TRUNCATE", "CINDEX", "DINDEX", "QUERY", "INIT_DDL"]

# Where a raw record came from: topic/partition/offset for Kafka, file path / modification time (ms) /
# line number for files. `index` is the message index inside the record (a JSON array document holds
# several messages) and `row` the row index inside the message (canal multi-row messages).
COORDINATES_DDL = "source STRING, partition BIGINT, offset BIGINT, `index` INT, `row` INT"

# The raw records a source yields to the decoder, one row per record.
RAW_DDL = f"raw BINARY, batch_id BIGINT, coordinates STRUCT<{COORDINATES_DDL}>"

# One change event. `after`/`before` hold each column's value as canonical text (see docs/dialects.md),
# SQL NULL as a null map value, and an absent column as an absent key. `seq` is compared
# lexicographically: the dialect's ordering key followed by the record coordinates.
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("dialect", "STRING"),
    ("database", "STRING"),
    ("schema", "STRING"),
    ("table", "STRING"),
    ("op", "STRING"),
    ("ddl_kind", "STRING"),
    ("ddl_sql", "STRING"),
    ("table_changes", "STRING"),
    ("primary_key", "ARRAY<STRING>"),
    ("after", "MAP<STRING, STRING>"),
    ("before", "MAP<STRING, STRING>"),
    ("source_types", "MAP<STRING, STRING>"),
    ("seq", "ARRAY<BIGINT>"),
    ("event_time", "TIMESTAMP"),
    ("position", "STRING"),
    ("meta", "MAP<STRING, STRING>"),
    ("coordinates", f"STRUCT<{COORDINATES_DDL}>"),
)
EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in EVENT_FIELDS)
EVENT_DDL = ", ".join(f"`{name}` {ddl}" for name, ddl in EVENT_FIELDS)

# Decoders return events plus, on failed rows, `error` (and the raw record kept for the dead letter).
DECODED_DDL = f"{EVENT_DDL}, error STRING, raw BINARY"

# Engine metadata columns of every mirror table.
CDC_OP = "_cdc_op"
CDC_SEQ = "_cdc_seq"
CDC_EVENT_TIME = "_cdc_event_time"
CDC_POSITION = "_cdc_position"
CDC_COLUMNS: tuple[str, ...] = (CDC_OP, CDC_SEQ, CDC_EVENT_TIME, CDC_POSITION)

SEQ_WIDTH = 19  # digits of the largest BIGINT


def seq_text(seq: list[int] | tuple[int, ...]) -> str:
    """Render a sequence tuple as fixed-width text whose string order is the tuple order.

    Example:
        >>> seq_text([1554044748000, 6, 0])
        '0000001554044748000.0000000000000000006.0000000000000000000'
    """
    return ".".join(str(max(int(part), 0)).zfill(SEQ_WIDTH) for part in seq)


def seq_text_sql(column: str = "seq") -> str:
    """The Spark SQL expression equal to :func:`seq_text` of an ``ARRAY<BIGINT>`` column."""
    return f"concat_ws('.', transform({column}, x -> lpad(cast(greatest(x, 0) AS STRING), {SEQ_WIDTH}, '0')))"


def parse_seq_text(text: str) -> tuple[int, ...]:
    """Inverse of :func:`seq_text`."""
    return tuple(int(part) for part in text.split(".")) if text else ()
