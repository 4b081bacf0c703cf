"""Barrier planning for a micro-batch: which table's applier sees which barrier event, and which tables a
RENAME links into one sequential unit (DML under the old name, the move, DML under the new name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replicator import ddl

if TYPE_CHECKING:
    from replicator.apply.table import TableBatch
    from replicator.model import TableId


def resolve_ref(event: dict[str, Any], ref: ddl.TableRef | None) -> TableId:
    """A table named in a statement -> its id; missing qualifiers come from the event (the qualifier is the
    database for MySQL-family sources, the schema where the source has schemas)."""
    database, schema, name = str(event.get("database")), event.get("schema"), str(event.get("table"))
    if ref is None:
        return (database, schema, name)
    if ref.namespace is None:
        return (database, schema, ref.name)
    return (database, ref.namespace, ref.name) if schema else (ref.namespace, None, ref.name)


def rename_links(event: dict[str, Any]) -> list[tuple[TableId, TableId]]:
    """(old, new) table ids of the renames a barrier event carries (empty when it cannot be read)."""
    if event.get("ddl_kind") not in ("RENAME", "ALTER") or not event.get("ddl_sql"):
        return []
    try:
        changes = ddl.parse_event(event)
    except ddl.DdlError:
        return []
    links = [
        (resolve_ref(event, c.old), resolve_ref(event, c.new))
        for c in changes
        if isinstance(c, ddl.RenameTable)
    ]
    return [link for link in links if event.get("table") in (link[0][2], link[1][2])]


def declared_keys(event: dict[str, Any]) -> tuple[str, ...]:
    """The primary key a CREATE (or tableChanges) declares, to key a table before any of its DML."""
    try:
        changes = ddl.parse_event(event)
    except ddl.DdlError:
        return ()
    for change in changes:
        if isinstance(change, ddl.CreateTable | ddl.DeclareSchema) and change.primary_key:
            return change.primary_key
    return ()


def inherited_key(
    table: TableId, rows: list[dict[str, Any]], keys: dict[TableId, tuple[str, ...] | list[str]]
) -> tuple[str, ...]:
    """The key a table renamed from another in these barrier rows takes over from it (``keys``: the known
    keys), for DML that carries none (CKafka format one) under the new name in the rename's batch."""
    for row in rows:
        for old, new in rename_links(row):
            if new == table and keys.get(old):
                return tuple(keys[old])
    return ()


def plan_barriers(
    rows: list[dict[str, Any]], renames: bool = True
) -> tuple[dict[TableId, list[dict[str, Any]]], list[tuple[TableId, TableId, str]]]:
    """Barrier rows (in seq order) -> rows per table, and the renames as (old, new, seq_text).

    A RENAME belongs to the table its event names (canal: the new name; DRS ``ALTER ... RENAME TO``: the
    old one) and is also given to the other name, so that both split their DML at it."""
    by_table: dict[TableId, list[dict[str, Any]]] = {}
    links: list[tuple[TableId, TableId, str]] = []
    for row in rows:
        own: TableId = (row["database"], row["schema"], row["table"])
        by_table.setdefault(own, []).append(row)
        if not renames:
            continue
        for old, new in rename_links(row):
            links.append((old, new, str(row.get("seq_text") or "")))
            other = old if own == new else new
            if other != own:
                by_table.setdefault(other, []).append(row)
    return by_table, links


def rename_units(work: list[TableBatch], links: list[tuple[TableId, TableId, str]]) -> list[list[TableBatch]]:
    """Group the tables of a batch linked by renames; in a group, a table renamed away runs before the
    table it becomes (ordered by the rename's seq). Unlinked tables are units of one."""
    parent = {w.table: w.table for w in work}

    def find(t: TableId) -> TableId:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for old, new, _seq in links:
        if old in parent and new in parent:
            parent[find(old)] = find(new)
    first_as_old: dict[TableId, str] = {}
    for old, _new, seq in links:
        first_as_old.setdefault(old, seq)
    groups: dict[TableId, list[TableBatch]] = {}
    for w in work:
        groups.setdefault(find(w.table), []).append(w)
    last = "\uffff"
    return [sorted(g, key=lambda w: first_as_old.get(w.table, last)) for g in groups.values()]
