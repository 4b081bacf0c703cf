"""The reference model of a history table (SCD type 2): the versions of every key after a workload.

Plain Python over the statements of tests/model.py, applied in source order: an insert opens a version, an
update closes the open one and opens the next (in place when ``track`` names the columns that matter and
none changed), a delete closes it, a TRUNCATE closes every open version; a key change closes the old key's
version and opens one of the new key (op ``update``, as the mirror writes it). Schema changes follow the
mirror under ``schema_evolution: evolve``: an added column is NULL in older versions, a dropped one leaves
every version, a rename moves the whole history.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tests.model import KEY, Row, Statement, Table


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


@dataclass
class Version:
    row: Row
    valid_from: dt.datetime
    op: str
    order: tuple[int, int]  # (statement, row in it): the source order
    valid_to: dt.datetime | None = None

    @property
    def current(self) -> bool:
        return self.valid_to is None

    def logical(self) -> dict[str, Any]:
        return {
            **self.row,
            "_cdc_valid_from": self.valid_from,
            "_cdc_valid_to": self.valid_to,
            "_cdc_current": self.current,
            "_cdc_op": self.op,
        }


@dataclass
class History:
    name: str
    columns: list[str]
    versions: list[Version] = field(default_factory=list)

    def sorted(self) -> list[dict[str, Any]]:
        ordered = sorted(self.versions, key=lambda v: (v.row[KEY], v.order))
        return [v.logical() for v in ordered]


def history(statements: list[Statement], track: list[str] | None = None) -> History:
    table = Table(policy="evolve")
    versions: list[Version] = []
    open_: dict[Any, Version] = {}

    def close(key: Any, time: dt.datetime) -> None:
        version = open_.pop(key, None)
        if version is not None:
            version.valid_to = time

    for i, s in enumerate(statements):
        time = at(s.time)
        if s.kind == "truncate":
            for key in list(open_):
                close(key, time)
        table.apply_statement(s)  # checks the statement; schema changes below follow it
        if s.kind == "add_column":
            for v in versions:
                v.row[s.column] = None
        elif s.kind == "drop_column":
            for v in versions:
                v.row.pop(s.column, None)
        for j, op in enumerate(s.ops):
            if op.kind == "delete":
                assert op.before is not None
                close(op.before[KEY], time)
                continue
            assert op.after is not None
            row = {c: op.after.get(c) for c in table.columns}
            if op.key_change:
                assert op.before is not None
                close(op.before[KEY], time)
            key = row[KEY]
            current = open_.get(key)
            if current is not None and track is not None and all(current.row[c] == row[c] for c in track):
                current.row = row
                continue
            close(key, time)
            open_[key] = Version(row, time, op.kind, (i, j))
            versions.append(open_[key])
    return History(table.name, list(table.columns), versions)
