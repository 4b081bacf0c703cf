"""The reference model: what a mirror must hold after a sequence of logical operations.

Plain Python, deliberately naive: a table is a name, a column list and a dict from primary key to row dict,
and each operation is applied exactly as its name says. The engine is correct when its mirror equals this
model, whatever the encoding, batching, redelivery and (allowed) reordering of the messages that carried the
operations.

Schema changes: ``add_column`` (a nullable column, NULL in every existing row), ``drop_column`` and
``rename_table``. What a mirror holds after a DROP COLUMN depends on the job's ``schema_evolution`` policy
(docs/schema-evolution.md), so a :class:`Table` follows one: ``evolve`` (the source's own semantics: the
column is gone) or ``lenient`` (the column stays; rows keep their values until written again, and rows
written from then on carry NULL in it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

Row = dict[str, Any]
Kind = Literal["insert", "update", "delete", "truncate", "add_column", "drop_column", "rename_table"]
Policy = Literal["evolve", "lenient"]
DDL_KINDS = ("add_column", "drop_column", "rename_table")

# The fixed typed schema of the generated workloads: column -> logical type.
COLUMNS: dict[str, str] = {
    "id": "int",
    "name": "varchar",
    "amount": "decimal",
    "ts": "datetime",
    "flag": "tinyint",
}
KEY = "id"
NAME = "orders"  # the table's name before any rename


@dataclass(frozen=True)
class Op:
    """One row change. ``before`` is the full row before it (update, delete), ``after`` the full row after
    it (insert, update). An update whose ``after[id]`` differs from ``before[id]`` is a key change."""

    kind: Kind
    before: Row | None = None
    after: Row | None = None

    @property
    def key_change(self) -> bool:
        return (
            self.kind == "update"
            and self.before is not None
            and self.after is not None
            and (self.before[KEY] != self.after[KEY])
        )


@dataclass(frozen=True)
class Statement:
    """One source statement: several row changes of the same kind (a multi-row message where the tool
    writes one), a TRUNCATE, or a schema change (``ops`` empty): ``column`` is the column added / dropped,
    ``table`` the new name of a rename. ``time`` is the commit time in ms."""

    kind: Kind
    ops: tuple[Op, ...]
    time: int
    column: str | None = None
    table: str | None = None

    @property
    def ddl(self) -> bool:
        return self.kind in DDL_KINDS


@dataclass
class Table:
    rows: dict[Any, Row] = field(default_factory=dict)
    columns: list[str] = field(default_factory=lambda: list(COLUMNS))
    name: str = NAME
    policy: Policy = "evolve"
    dropped: set[str] = field(default_factory=set)  # lenient: dropped at the source, kept in the mirror

    def _row(self, image: Row) -> Row:
        # A row image names exactly the source's columns; a column kept by lenient is NULL when written.
        assert set(image) == set(self.columns) - self.dropped, (image, self.columns, self.dropped)
        return {c: image.get(c) for c in self.columns}

    def apply(self, op: Op) -> None:
        if op.kind == "insert":
            assert op.after is not None and op.after[KEY] not in self.rows, op
            self.rows[op.after[KEY]] = self._row(op.after)
        elif op.kind == "update":
            assert op.before is not None and op.after is not None and op.before[KEY] in self.rows, op
            del self.rows[op.before[KEY]]
            assert op.after[KEY] not in self.rows, op
            self.rows[op.after[KEY]] = self._row(op.after)
        elif op.kind == "delete":
            assert op.before is not None and op.before[KEY] in self.rows, op
            del self.rows[op.before[KEY]]
        else:
            raise ValueError(op.kind)

    def apply_statement(self, statement: Statement) -> None:
        column = statement.column
        if statement.kind == "truncate":
            self.rows.clear()
        elif statement.kind == "add_column":
            assert column is not None and column not in self.columns, statement
            self.columns.append(column)
            for row in self.rows.values():
                row[column] = None
        elif statement.kind == "drop_column":
            assert column in self.columns and column != KEY and column not in self.dropped, statement
            if self.policy == "lenient":
                self.dropped.add(column)
            else:
                self.columns.remove(column)
                for row in self.rows.values():
                    del row[column]
        elif statement.kind == "rename_table":
            assert statement.table is not None and statement.table != self.name, statement
            self.name = statement.table
        for op in statement.ops:
            self.apply(op)

    def sorted_rows(self) -> list[Row]:
        return [self.rows[k] for k in sorted(self.rows)]


def replay(statements: list[Statement], until: int | None = None, policy: Policy = "evolve") -> Table:
    """The table (as a mirror under ``policy`` holds it) after every statement (or those with
    ``time <= until``)."""
    table = Table(policy=policy)
    for statement in statements:
        if until is None or statement.time <= until:
            table.apply_statement(statement)
    return table


def scaled(rows: list[Row]) -> list[Row]:
    """Rows to compare: each Decimal paired with its exponent. Python finds Decimal("1.0") equal to
    Decimal("1.00"), but a mirror column declared decimal(10,2) holds 1.00, and a text column must keep the
    scale the source wrote: a mirror that lost it is not equal to the model."""
    return [
        {c: (v, v.as_tuple().exponent) if isinstance(v, Decimal) else v for c, v in r.items()} for r in rows
    ]


def same_value(a: Any, b: Any) -> bool:
    """Equal values of one kind. Decimals of the same scale (1.0 is not 1.00: see :func:`scaled`).
    Zone-aware datetimes are the same instant (whatever zone each is written in); naive ones the same wall
    clock; an aware value never equals a naive one (which instant a wall clock means is the question a
    mirror must not get wrong)."""
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a == b and a.as_tuple().exponent == b.as_tuple().exponent
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        if (a.utcoffset() is None) != (b.utcoffset() is None):
            return False
        return a == b  # Python compares aware datetimes as instants, naive ones field by field
    return bool(a == b) and type(a) is type(b)
