"""The one mapping from source column names to mirror column names (as replicator.paths is for tables).

Delta compares column names without case, so a source's ``v`` and ``V`` (legal in PostgreSQL, Oracle and
SQL Server) cannot both be mirror columns as they are, and a source column must not take the name of one of
the engine's own columns (``_cdc_op``, ``_cdc_seq``, ..., ``_cdc_current`` of a history table). The rule
(docs/schema-evolution.md, "Column names"):

- a source name keeps its name in the mirror, unless another mirror column of the table has it already
  (compared without case), or it starts with ``_cdc_`` (any case): the engine's namespace;
- such a name gets a distinct one: a reserved name first loses the namespace (``_cdc_op`` -> ``~_cdc_op``),
  then, while the name is taken, ``~N`` is added with the smallest N free (``V`` -> ``V~1``).

The mirror field of a mapped column records its source name in its metadata (:data:`SOURCE_NAME`), only
where the two differ; the mapping is read back from the mirror's schema, so it is recorded with the table,
and the names given depend only on the table's columns and the order new ones arrive in (a replay of the
change log gives the same names). Row images (``after``/``before``) stay keyed by source names: whatever
matches an image entry to a mirror column asks :func:`source_name` of the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SOURCE_NAME = "replicator.source_name"  # field metadata: the column's source name, where it differs
RESERVED_PREFIX = "_cdc_"
ESCAPE = "~"
# Image entries the engine itself writes, which name its own columns (not the source's): the shard of a
# routed row (replicator.routing SOURCE_COLUMNS) and a document's merge state (replicator.apply.documents).
ENGINE_ENTRIES = frozenset({"_cdc_source_database", "_cdc_source_table", "_cdc_fields", "_cdc_partial"})
# The engine's columns of mirrors and history tables (replicator.model CDC_COLUMNS, apply.history), never a
# source's. A ``_cdc_`` column of a mirror that is none of these and records no source name is a source
# column a mirror took as it was before this mapping: it keeps it.
ENGINE_COLUMNS = frozenset(
    {"_cdc_op", "_cdc_seq", "_cdc_event_time", "_cdc_position", "_cdc_valid_from", "_cdc_valid_to"}
    | {"_cdc_current", "_cdc_deleted_at"}
)


def reserved(name: str) -> bool:
    """Whether a name is in the engine's namespace (``_cdc_`` in any case)."""
    return name.casefold().startswith(RESERVED_PREFIX)


def source_name(field: Any) -> str:
    """A mirror field's source name (a ``pyarrow.Field``): its :data:`SOURCE_NAME` metadata, else its name."""
    metadata = field.metadata or {}
    value = metadata.get(SOURCE_NAME.encode())
    return value.decode() if value is not None else field.name


def with_source(field: Any, source: str) -> Any:
    """``field`` recording ``source`` as its source name (nothing where it is the field's own name)."""
    metadata = {k: v for k, v in (field.metadata or {}).items() if k != SOURCE_NAME.encode()}
    if source != field.name:
        metadata[SOURCE_NAME.encode()] = source.encode()
    return field.with_metadata(metadata) if metadata else field.remove_metadata()


class ColumnMap:
    """A table's source -> mirror names, read from its mirror's fields; :meth:`assign` names new ones.

    Example:
        >>> import pyarrow as pa
        >>> names = ColumnMap(pa.schema([pa.field("v", pa.string())]))
        >>> names.assign("V"), names.assign("_cdc_op"), names.assign("v")
        ('V~1', '~_cdc_op', 'v')
    """

    def __init__(self, fields: Iterable[Any] = ()) -> None:
        self._mirror: dict[str, str] = {}  # source -> mirror
        self._taken: set[str] = set()  # every mirror name, case-folded (the engine's columns too)
        for f in fields:
            self._taken.add(f.name.casefold())
            if f.name not in ENGINE_COLUMNS:
                self._mirror.setdefault(source_name(f), f.name)

    def __contains__(self, source: str) -> bool:
        return source in self._mirror

    def get(self, source: str) -> str | None:
        """The mirror name of a source column the mirror has, else None."""
        return self._mirror.get(source)

    def name(self, source: str) -> str:
        """The mirror name of a source column: its own, or the one it would be given now."""
        return self._mirror.get(source) or self._candidate(source)

    def assign(self, source: str) -> str:
        """The mirror name of a source column, given (and held) now where it has none yet."""
        if source not in self._mirror:
            name = self._candidate(source)
            self._mirror[source] = name
            self._taken.add(name.casefold())
        return self._mirror[source]

    def release(self, source: str) -> None:
        """Forget a column (dropped or renamed away): its mirror name is free again."""
        name = self._mirror.pop(source, None)
        if name is not None:
            self._taken.discard(name.casefold())

    def _candidate(self, source: str) -> str:
        if source in ENGINE_ENTRIES:
            return source
        base = ESCAPE + source if reserved(source) else source
        name, n = base, 0
        while name.casefold() in self._taken:
            n += 1
            name = f"{base}{ESCAPE}{n}"
        return name

    def items(self) -> list[tuple[str, str]]:
        """(source name, mirror name) of each column, the engine's entries (ENGINE_ENTRIES) included."""
        return list(self._mirror.items())


def renamed_columns(schema: Any) -> list[str]:
    """``source -> mirror`` of each column of a mirror's schema whose names differ (``show``/``status``)."""
    return [f"{source_name(f)} -> {f.name}" for f in schema if source_name(f) != f.name]


def by_source(schema: Any) -> dict[str, Any]:
    """A mirror's source columns (not the engine's): source name -> field."""
    names = ColumnMap(schema)
    fields = {f.name: f for f in schema}
    return {s: fields[m] for s, m in names.items() if m not in ENGINE_ENTRIES}
