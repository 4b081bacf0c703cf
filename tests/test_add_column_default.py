"""ALTER TABLE ... ADD COLUMN ... DEFAULT through the real engine (canal-json, canal «Data Type» shapes): the
rows the
mirror held at the DDL take the default, as the database's rows do without a row event; rows written after
the DDL keep their own values; a redelivered batch changes nothing; history's current versions follow.

One job (both writers) runs three micro-batches: rows; the DDLs with DML before and after them; the second
batch delivered again. The tests below read its results.
"""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Runner, canal, ddl, delta_table, job

ES = 1_700_000_000_123  # 2023-11-14 22:13:20.123 UTC
ZONE = "Asia/Kolkata"  # source.timezone: DATETIME defaults and wall clocks are read in it
T = {"id": "int(11)", "name": "varchar(64)"}
_es = itertools.count(ES, 1000)

EXPLICIT = (
    "ALTER TABLE explicit ADD COLUMN d decimal(38,10) NOT NULL"
    " DEFAULT '-1234567890123456789012345678.0123456789'"
    ", ADD COLUMN s varchar(20) DEFAULT 'it''s \\\\ \"q\" 小春'"
    ", ADD COLUMN dd date DEFAULT '2024-02-29'"
    ", ADD COLUMN dtm datetime(3) DEFAULT '2024-01-02 03:04:05.678'"
    ", ADD COLUMN ts timestamp NULL DEFAULT '2024-01-02 03:04:05'"
    ", ADD COLUMN b8 bit(8) NOT NULL DEFAULT b'101'"
    ", ADD COLUMN b1 bit(1) DEFAULT b'1'"
    ", ADD COLUMN bn binary(4) DEFAULT 'ab'"
    ", ADD COLUMN vb varbinary(8) DEFAULT x'00ff'"
    ", ADD COLUMN flag boolean NOT NULL DEFAULT TRUE"
    ", ADD COLUMN big bigint unsigned DEFAULT 18446744073709551615"
    ", ADD COLUMN neg int DEFAULT -7"
)
EXPLICIT_TYPES = {
    "d": "decimal(38,10)",
    "s": "varchar(20)",
    "dd": "date",
    "dtm": "datetime(3)",
    "ts": "timestamp",
    "b8": "bit(8)",
    "b1": "bit(1)",
    "bn": "binary(4)",
    "vb": "varbinary(8)",
    "flag": "boolean",
    "big": "bigint unsigned",
    "neg": "int",
}
EXPLICIT_VALUES = {
    "d": Decimal("-1234567890123456789012345678.0123456789"),
    "s": 'it\'s \\ "q" 小春',
    "dd": dt.date(2024, 2, 29),
    "dtm": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
    "ts": dt.datetime(2024, 1, 1, 21, 34, 5, tzinfo=dt.UTC),  # 03:04:05 in Kolkata (+05:30)
    "b8": 5,
    "b1": True,
    "bn": b"ab\0\0",
    "vb": b"\x00\xff",
    "flag": True,
    "big": Decimal(18446744073709551615),
    "neg": -7,
}
IMPLICIT = (
    "ALTER TABLE implicit ADD COLUMN n int NOT NULL, ADD COLUMN v varchar(5) NOT NULL"
    ", ADD COLUMN e enum('red','gr''een') NOT NULL, ADD COLUMN m decimal(5,2) NOT NULL"
    ", ADD COLUMN bn binary(3) NOT NULL, ADD COLUMN b1 bit(1) NOT NULL, ADD COLUMN dd date NOT NULL"
    ", ADD COLUMN f double NOT NULL, ADD COLUMN tm time NOT NULL"
)
NOW = (
    "ALTER TABLE now ADD COLUMN at datetime DEFAULT CURRENT_TIMESTAMP"
    ", ADD COLUMN ts timestamp NOT NULL DEFAULT NOW()"
    ", ADD COLUMN at3 timestamp(3) NULL DEFAULT CURRENT_TIMESTAMP(3)"
    ", ADD COLUMN u varchar(36) DEFAULT (uuid())"
)
IMPLICIT_VALUES = {
    "n": 0,
    "v": "",
    "e": "red",
    "m": Decimal("0.00"),
    "bn": b"\0\0\0",
    "b1": False,
    "dd": None,  # the zero date, stored NULL (source.zero_dates: null), as DML zero dates are
    "f": 0.0,
    "tm": "00:00:00",
}


def dml(type_: str, table: str, rows: list[dict[str, Any]], types: dict[str, str] | None = None, **kw: Any):
    return canal(type_, rows, es=next(_es), table=table, types=types or T, **kw)


def stmt(sql: str, table: str) -> tuple[dict[str, Any], int]:
    es = next(_es)
    return ddl("ALTER", sql, es=es, table=table), es


def rows(*ids: int) -> list[dict[str, Any]]:
    return [{"id": str(i), "name": f"n{i}"} for i in ids]


def explicit_row(type_: str, i: int, d: str, b8: str, **kw: Any) -> dict[str, Any]:
    """A row of ``explicit`` written after its ALTER with its own values: NULL where nullable."""
    row = {"id": str(i), "name": f"n{i}", **dict.fromkeys(EXPLICIT_TYPES), "d": d, "b8": b8, "flag": "0"}
    return dml(type_, "explicit", [row], {**T, **EXPLICIT_TYPES}, **kw)


def hist_row5() -> dict[str, Any]:
    """An insert into ``hist`` after its ALTER, with its own ``k``."""
    return dml("INSERT", "hist", [{"id": "5", "name": "n5", "k": "7"}], {**T, "k": "int"})


# delta-rs here; delta-spark runs the explicit and history cases below (the whole run took 5 minutes of
# delta-spark on 2 busy cores: a Spark MERGE per fill and per table's batch)
@pytest.fixture(scope="module", params=["delta-rs"])
def run(request, spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"defaults-{request.param}")
    config = job(
        tmp,
        source={"timezone": ZONE},
        target={"writer": request.param},
        tables={"history": ["shop.hist"]},
    )
    runner = Runner(spark, config)
    tables = ("explicit", "implicit", "nodefault", "now", "hist")
    first = [dml("INSERT", t, rows(1, 2, 3)) for t in tables]
    runner.messages(tmp, first)
    second = [
        # before the DDLs, in their batch: row 3 changes, row 4 is new (both exist at the DDL)
        *[dml("UPDATE", t, [{"id": "3", "name": "m3"}], old=[{"name": "n3"}]) for t in tables],
        *[dml("INSERT", t, rows(4)) for t in tables],
        stmt(EXPLICIT, "explicit")[0],
        stmt(IMPLICIT, "implicit")[0],
        stmt("ALTER TABLE nodefault ADD COLUMN x int, ADD COLUMN y varchar(3) DEFAULT NULL", "nodefault")[0],
        (now := stmt(NOW, "now"))[0],
        stmt("ALTER TABLE hist ADD COLUMN k int NOT NULL DEFAULT 42", "hist")[0],
        # after them: an insert carrying its own values (NULL where nullable), an update of an older row
        explicit_row("INSERT", 5, "1.5", "1"),
        explicit_row("UPDATE", 2, "2.5", "2", old=[{"d": "-1234567890123456789012345678.0123456789"}]),
        hist_row5(),
        dml(
            "UPDATE", "hist", [{"id": "1", "name": "h1", "k": "42"}], {**T, "k": "int"}, old=[{"name": "n1"}]
        ),
    ]
    summary = runner.messages(tmp, second)
    before_redelivery = {t: runner.mirror(table=t) for t in tables}
    again = runner.messages(tmp, second)  # at-least-once: the DDLs and their DML delivered again
    return runner, config, summary, again, before_redelivery, now[1]


def by_id(data: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in data}


def test_explicit_defaults_fill_the_rows_that_existed(run):
    runner, *_ = run
    mirror = by_id(runner.mirror(table="explicit"))
    for i in (1, 3, 4):  # inserted before, updated before, inserted in the DDL's batch before it
        assert {c: mirror[i][c] for c in EXPLICIT_VALUES} == EXPLICIT_VALUES, i
        assert {type(mirror[i][c]) for c in ("d", "big")} == {Decimal}


def test_rows_written_after_the_ddl_keep_their_own_values(run):
    runner, *_ = run
    mirror = by_id(runner.mirror(table="explicit"))
    for i, d, b8 in ((5, "1.5", 1), (2, "2.5", 2)):
        assert mirror[i]["d"] == Decimal(d) and mirror[i]["b8"] == b8 and mirror[i]["flag"] is False
        assert all(mirror[i][c] is None for c in EXPLICIT_TYPES if c not in ("d", "b8", "flag"))


def test_not_null_without_default_takes_the_implicit_default(run):
    runner, *_ = run
    mirror = by_id(runner.mirror(table="implicit"))
    for i in (1, 2, 3, 4):
        assert {c: mirror[i][c] for c in IMPLICIT_VALUES} == IMPLICIT_VALUES


def test_nullable_without_default_stays_null(run):
    runner, *_ = run
    assert [(r["x"], r["y"]) for r in runner.mirror(table="nodefault")] == [(None, None)] * 4


def test_current_timestamp_is_the_ddl_time_and_an_expression_is_noted(run):
    runner, _config, summary, _again, _before, now_es = run
    at = dt.datetime.fromtimestamp(now_es / 1000, dt.UTC)
    wall = at.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).replace(tzinfo=None)
    for row in runner.mirror(table="now"):
        assert row["at"] == wall.replace(microsecond=0)  # DATETIME: the wall clock, whole seconds
        assert row["ts"] == at.replace(microsecond=0)  # TIMESTAMP: the instant
        assert row["at3"] is None and row["u"] is None  # not known: left NULL, noted
    notes = {n["column"]: n for n in summary.tables["shop.now"]["defaults"]}
    assert notes["u"]["rows_left_null"] == 4 and "uuid" in notes["u"]["reason"].lower()
    assert notes["at3"]["rows_left_null"] == 4 and "fractional seconds" in notes["at3"]["reason"]
    assert notes["at"]["rows_filled"] == notes["ts"]["rows_filled"] == 4
    assert {n["column"]: n["rows_filled"] for n in summary.tables["shop.explicit"]["defaults"]}["d"] == 4


def test_a_redelivered_batch_changes_nothing(run):
    """The DDLs and their DML again (a connector's restart): the rows that existed at the DDL hold the
    default again, the rows written after it their own values; no mirror row differs."""
    runner, _config, _summary, again, before, _now_es = run
    for table, data in before.items():
        assert runner.mirror(table=table) == data, table
    assert again.tables["shop.explicit"]["dead_letters"] == 0


def test_history_current_versions_take_the_default(run):
    _runner, config, *_ = run
    history = delta_table(Path(config.target.path) / "shop" / "hist__history", cdc=True).to_pylist()
    current = {r["id"]: r["k"] for r in history if r["_cdc_current"]}
    assert current == {1: 42, 2: 42, 3: 42, 4: 42, 5: 7}
    closed = [r["k"] for r in history if not r["_cdc_current"]]
    assert closed and all(k is None for k in closed)  # versions that ended keep NULL: not a row change


@pytest.mark.delta_spark
@pytest.mark.slow
def test_delta_spark_fills_the_rows_that_existed_and_current_history_versions(spark, tmp_path):
    """The same rule with the delta-spark writer: the rows existing at the DDL take the defaults, a row
    inserted after it keeps its own values, a history table's current versions take the default."""
    config = job(
        tmp_path,
        source={"timezone": ZONE},
        target={"writer": "delta-spark"},
        tables={"history": ["shop.hist"]},
    )
    runner = Runner(spark, config)
    runner.messages(tmp_path, [dml("INSERT", t, rows(1, 2)) for t in ("explicit", "hist")])
    runner.messages(
        tmp_path,
        [
            stmt(EXPLICIT, "explicit")[0],
            stmt("ALTER TABLE hist ADD COLUMN k int NOT NULL DEFAULT 42", "hist")[0],
            explicit_row("INSERT", 5, "1.5", "1"),
            hist_row5(),
        ],
    )
    mirror = by_id(runner.mirror(table="explicit"))
    for i in (1, 2):
        assert {c: mirror[i][c] for c in EXPLICIT_VALUES} == EXPLICIT_VALUES, i
    assert mirror[5]["d"] == Decimal("1.5") and mirror[5]["b8"] == 1 and mirror[5]["flag"] is False
    assert all(mirror[5][c] is None for c in EXPLICIT_TYPES if c not in ("d", "b8", "flag"))
    history = delta_table(Path(config.target.path) / "shop" / "hist__history", cdc=True).to_pylist()
    assert {r["id"]: r["k"] for r in history if r["_cdc_current"]} == {1: 42, 2: 42, 5: 7}
