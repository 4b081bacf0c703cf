"""Values a capture tool did not send: Debezium's PostgreSQL (and Oracle) placeholder for an unchanged TOASTed
column (issue 51).

PostgreSQL's logical decoding leaves a TOASTed value (one stored out of line, past ~2 KB) out of an UPDATE
that did not change it, unless the table has ``REPLICA IDENTITY FULL``. Debezium then writes the
connector's ``unavailable.value.placeholder`` in its place (Debezium PostgreSQL connector documentation,
"Replica identity" and "Considerations when using TOAST"): ``__debezium_unavailable_value`` for text and
JSON, the same text's UTF-8 bytes for ``bytea`` (base64 in the JSON), a one-element array of it for arrays.
Written into a mirror it replaces the column's real value: the classic silent corruption of such pipelines.

Such a column is left out of the event's image and named in its ``meta`` entry :data:`META` (a JSON
array): the fold takes the value from an earlier event of the same row in the batch, the apply from the
row the mirror stores (replicator.fold.unavailable), so the update is a partial one of that row.
"""

from __future__ import annotations

import base64
from typing import Any

from replicator.dialects.jsontext import to_json

PLACEHOLDER = "__debezium_unavailable_value"  # the connector's default unavailable.value.placeholder
PLACEHOLDER_BASE64 = base64.b64encode(PLACEHOLDER.encode()).decode()  # bytea columns
META = "unavailable"  # meta key: the columns an update's image leaves out (JSON array of names)


def is_placeholder(value: Any) -> bool:
    """A column's raw JSON value is the placeholder (text, base64 bytes, or an array holding only it)."""
    if type(value) is str:
        return value == PLACEHOLDER or value == PLACEHOLDER_BASE64
    if type(value) is list:
        return len(value) == 1 and type(value[0]) is str and value[0] in (PLACEHOLDER, PLACEHOLDER_BASE64)
    return False


def unavailable(raw: Any) -> list[str]:
    """The columns of a raw ``after`` image that carry the placeholder."""
    if type(raw) is not dict:
        return []
    return [name for name, value in raw.items() if is_placeholder(value)]


def leave_out(
    image: dict[str, Any] | None, columns: list[str], meta: dict[str, Any]
) -> dict[str, Any] | None:
    """The image without ``columns``, which ``meta`` names under :data:`META`."""
    if image is None or not columns:
        return image
    meta[META] = to_json(columns)
    return {k: v for k, v in image.items() if k not in columns}
