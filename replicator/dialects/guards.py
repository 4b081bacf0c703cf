"""What one message may cost (job file ``limits``): decoded events past a limit become dead letters.

Checked where the events are decoded, on every dialect's rows at once, so that nothing downstream (the
driver's planning of barriers, the apply) ever reads such a message: a row image wider than
``limits.columns`` (its apply's cost grows with its columns), a DDL text longer, with more clauses or nested
deeper than ``limits.ddl_*`` (sqlglot's time grows with the clauses and its recursion with the nesting), a
tableChanges document longer than ``limits.table_changes_bytes``.
Every event of the message becomes an error row with the raw record, as a decoder's own ``Events.fail``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from replicator.dialects.base import DecodeOptions, RecordRows


def _widths(column: pa.ChunkedArray) -> pa.Array:
    """Entries per map (0 for NULL), from the offsets: Arrow's list_value_length takes no map."""
    import numpy as np
    import pyarrow as pa

    parts = [np.diff(chunk.offsets.to_numpy()) for chunk in column.chunks]
    return pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int32))


def _refusals(events: pa.Table, options: DecodeOptions) -> dict[int, str]:
    """Row number -> why, for the rows past a limit (most batches: none, at the cost of a few Arrow
    kernels)."""
    import pyarrow.compute as pc

    from replicator.ddl import oversized

    ok = pc.is_null(events["error"])
    widest = pc.max_element_wise(_widths(events["after"]), _widths(events["before"]))
    wide = pc.and_(ok, pc.greater(widest, options.max_columns))
    reasons: dict[int, str] = {}
    if pc.any(wide).as_py():
        for i in pc.indices_nonzero(wide).to_pylist():
            reasons[i] = (
                f"the row image has {widest[i].as_py()} columns, more than limits.columns "
                f"({options.max_columns})"
            )
    texts = events["ddl_sql"]
    if texts.null_count < len(texts):
        for i in pc.indices_nonzero(pc.and_(ok, pc.is_valid(texts))).to_pylist():
            why = oversized(texts[i].as_py(), options.ddl_bytes, options.ddl_clauses, options.ddl_nesting)
            if why is not None:
                reasons.setdefault(i, why)
    # A tableChanges document is JSON, read in one linear pass: only its length is bounded.
    documents = events["table_changes"]
    if documents.null_count < len(documents):
        limit = options.table_changes_bytes
        sizes = pc.fill_null(pc.binary_length(documents), 0)
        for i in pc.indices_nonzero(pc.and_(ok, pc.greater(sizes, limit))).to_pylist():
            reasons.setdefault(
                i, f"the tableChanges document is {sizes[i].as_py()} bytes, more than "
                f"limits.table_changes_bytes ({limit})",
            )  # fmt: skip
    return reasons


def guard(events: pa.Table, records: pa.Table | RecordRows, options: DecodeOptions) -> pa.Table:
    """``events`` (dialects.events.decoded_schema) with each message past a limit turned into error rows
    carrying its raw record."""
    import pyarrow as pa

    from replicator.dialects.base import record_tuples

    if events.num_rows == 0:
        return events
    reasons = _refusals(events, options)
    if not reasons:
        return events
    coordinates = events["coordinates"].to_pylist()

    def message(i: int) -> tuple[Any, ...]:
        c = coordinates[i]
        return (c["source"], c["partition"], c["offset"], c["index"])

    why = {message(i): reason for i, reason in sorted(reasons.items())}
    wanted = {key[:3] for key in why}
    raws = {
        (source, partition, offset): raw
        for raw, source, partition, offset, _key in record_tuples(records)
        if (source, partition, offset) in wanted
    }
    errors, raw = events["error"].to_pylist(), events["raw"].to_pylist()
    for i in range(events.num_rows):
        key = message(i)
        if key in why and errors[i] is None:
            errors[i] = why[key]
            value = raws.get(key[:3])
            raw[i] = None if value is None else bytes(value)
    schema = events.schema
    events = events.set_column(
        schema.get_field_index("error"), schema.field("error"), pa.array(errors, pa.string())
    )
    return events.set_column(schema.get_field_index("raw"), schema.field("raw"), pa.array(raw, pa.binary()))
