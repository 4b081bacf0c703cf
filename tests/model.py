"""The reference model: what a mirror must hold after a sequence of logical operations.

Plain Python, deliberately naive: a table is a dict from primary key to row dict, and each operation is
applied exactly as its name says. The engine is correct when its mirror equals this model, whatever the
encoding, batching, redelivery and (allowed) reordering of the messages that carried the operations.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

Row = dict[str, Any]
Kind = Literal["insert", "update", "delete", "truncate"]

# The fixed typed schema of the generated workloads: column -> logical type.
COLUMNS: dict[str, str] = {
    "id": "int",
    "name": "varchar",
    "amount": "decimal",
    "ts": "datetime",
    "flag": "tinyint",
}
KEY = "id"


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
    writes one), or a TRUNCATE (``ops`` empty). ``time`` is the commit time in ms."""

    kind: Kind
    ops: tuple[Op, ...]
    time: int


@dataclass
class Table:
    rows: dict[Any, Row] = field(default_factory=dict)

    def apply(self, op: Op) -> None:
        if op.kind == "insert":
            assert op.after is not None and op.after[KEY] not in self.rows, op
            self.rows[op.after[KEY]] = dict(op.after)
        elif op.kind == "update":
            assert op.before is not None and op.after is not None and op.before[KEY] in self.rows, op
            del self.rows[op.before[KEY]]
            assert op.after[KEY] not in self.rows, op
            self.rows[op.after[KEY]] = dict(op.after)
        elif op.kind == "delete":
            assert op.before is not None and op.before[KEY] in self.rows, op
            del self.rows[op.before[KEY]]
        else:
            raise ValueError(op.kind)

    def apply_statement(self, statement: Statement) -> None:
        if statement.kind == "truncate":
            self.rows.clear()
        for op in statement.ops:
            self.apply(op)

    def sorted_rows(self) -> list[Row]:
        return [self.rows[k] for k in sorted(self.rows)]


def replay(statements: list[Statement], until: int | None = None) -> Table:
    """The table after every statement (or those with ``time <= until``)."""
    table = Table()
    for statement in statements:
        if until is None or statement.time <= until:
            table.apply_statement(statement)
    return table


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a == b
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    return bool(a == b) and type(a) is type(b)
