"""Column defaults from a Debezium row schema (issue 51): Debezium's PostgreSQL connector publishes no DDL,
so ``ALTER TABLE t ADD COLUMN e text DEFAULT 'dflt'`` is seen only as a new field in the next row's schema,
with the column's constant default (``"default": "dflt"``, in the field's Connect representation). The
database gave that default to every row already there without a row event; the applier gives it to the
rows the mirror holds when it adds the column (replicator.apply.table ``TableApplier.fill_row_defaults``).

Carried in the event's ``meta`` under :data:`META` (JSON: column -> canonical text), for PostgreSQL's
connector only: the MySQL/MariaDB connectors publish the DDL, whose default the schema step applies."""

from __future__ import annotations

from typing import Any

from replicator.dialects.debezium_values import converter, structs
from replicator.dialects.jsontext import string, to_json

META = "row_defaults"
CONNECTORS = frozenset({"postgresql"})  # capture tools whose schema changes reach us only as row schemas


def row_defaults(schema: dict[str, Any] | None, meta: dict[str, Any], connector: str | None) -> None:
    """Put the ``after`` image's column defaults (canonical text) into ``meta``, when there are any."""
    if schema is None or connector not in CONNECTORS:
        return
    entry = next((f for f in structs(schema.get("fields")) or () if string(f.get("field")) == "after"), None)
    defaults = {}
    for field in (structs(entry.get("fields")) or ()) if entry is not None else ():
        name, default = string(field.get("field")), field.get("default")
        if name is None or default is None:
            continue
        text = converter(field)(default)
        if text is not None:
            defaults[name] = text
    if defaults:
        meta[META] = to_json(defaults)
