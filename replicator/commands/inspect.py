"""Decoded events as plain records: what ``replicator decode`` prints and what golden tests compare."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicator.dialects.base import DecodeOptions, decode

if TYPE_CHECKING:
    import pyarrow as pa

SEQ_TAIL = 5  # batch id, partition, offset, message index, row index (events.Events.row appends them)
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


def event_records(decoded: pa.Table, fields: tuple[str, ...] = FIELDS) -> list[dict[str, Any]]:
    """Decoded rows -> dicts in input order; ``seq`` keeps only the dialect's own ordering key."""
    coordinates = decoded["coordinates"].to_pylist()
    order = sorted(
        range(decoded.num_rows),
        key=lambda i: tuple(
            (v is None, v if v is not None else 0)
            for v in (coordinates[i][k] for k in ("source", "offset", "index", "row"))
        ),
    )
    columns = {name: decoded[name].to_pylist() for name in fields}
    rows = []
    for i in order:
        record = {name: _plain(columns[name][i]) for name in fields}
        if "seq" in record and record["seq"] is not None:
            record["seq"] = list(record["seq"][:-SEQ_TAIL])
        for key in ("before", "after", "source_types"):
            if key in record and record[key] is not None:
                record[key] = dict(sorted(dict(record[key]).items()))
        rows.append({k: v for k, v in record.items() if v is not None})
    return rows


def decode_path(path: str | Path, dialect: str = "auto", options: DecodeOptions | None = None) -> pa.Table:
    """Decode a file or folder of messages (*.json, *.jsonl, *.avro, Avro *.b64) as one batch."""
    from replicator.sources import read_path

    return decode(read_path(str(path)), dialect, options)
