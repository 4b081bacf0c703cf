"""Events of one table whose seqs are in different coordinate systems are ordered by delivery (issue 14,
item 1): CKafka's canal-shaped DDL (es seconds, id 0) and its format-one DML (BINLOG_NAME/BINLOG_POS)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from tests.helpers import Runner, delta_table, job, write_jsonl

# seconds, as Tencent CKafka «MySQL 订阅消息官方格式说明»'s DDL examples write it: larger than any binlog
# position
ES = 1_655_812_326


def create(table: str) -> dict:
    sql = (
        f"CREATE TABLE `{table}` (\n`id` bigint(20) NOT NULL,\n`amount` decimal(12,2) DEFAULT NULL,\n"
        "`created` datetime DEFAULT NULL,\n`note` varchar(20) DEFAULT NULL,\nPRIMARY KEY (`id`)\n)"
    )
    message = {"data": None, "database": "shop", "es": ES, "id": 0, "isDdl": True, "mysqlType": None}
    return (
        message
        | {"old": None, "pkNames": None, "sql": sql, "sqlType": None, "table": table, "ts": ES}
        | {"type": "CREATE"}
    )


def row(i: int, amount: str, note: str) -> dict:
    return {"id": str(i), "amount": amount, "created": f"2024-01-0{i} 03:04:05", "note": note}


def format_one(table: str, type_: str, pos: int, new: dict | None, old: dict | None = None) -> dict:
    return {
        "BINLOG_NAME": "mysql-bin.000003",
        "BINLOG_POS": pos,
        "DATABASE": "shop",
        "EVENT_SERVER_ID": None,
        "GLOBAL_ID": None,
        "GROUP_ID": None,
        "NEW_VALUES": new,
        "OLD_VALUES": old,
        "TABLE": table,
        "TIME": "20240101000000",
        "TYPE": type_,
    }


def messages(table: str) -> list[dict]:
    return [
        create(table),
        format_one(table, "I", 100, row(1, "10.50", "a")),
        format_one(table, "I", 200, row(2, "-3.25", "b")),
        format_one(table, "U", 300, row(1, "11.75", "a2"), row(1, "10.50", "a")),
        format_one(table, "D", 400, None, row(2, "-3.25", "b")),
        format_one(table, "I", 500, row(3, "0.01", None)),  # type: ignore[arg-type]
    ]


EXPECTED = [
    {"id": 1, "amount": Decimal("11.75"), "created": dt.datetime(2024, 1, 1, 3, 4, 5), "note": "a2"},
    {"id": 3, "amount": Decimal("0.01"), "created": dt.datetime(2024, 1, 3, 3, 4, 5), "note": None},
]
TYPED = {"id": pa.int64(), "amount": pa.decimal128(12, 2), "created": pa.timestamp("us"), "note": pa.string()}


def test_create_then_format_one_dml_gives_a_typed_mirror(spark, tmp_path):
    """One file: CREATE, then DML. In the same batch, another file holds another table's CREATE and DML
    interleaved with a third table's."""
    folder = tmp_path / "in"
    write_jsonl(folder / "a.jsonl", messages("orders"))
    mixed = [m for pair in zip(messages("items"), messages("parts"), strict=True) for m in pair]
    write_jsonl(folder / "b.jsonl", mixed)
    runner = Runner(spark, job(tmp_path, source={"dialect": "ckafka"}))
    summary = runner.batch(folder)
    assert runner.dead_letters() == []
    assert summary.dead_letters == 0
    for table in ("orders", "items", "parts"):
        mirror = delta_table(tmp_path / "lake" / "shop" / table)
        assert {f.name: f.type for f in mirror.schema} == TYPED, table
        assert runner.mirror(table=table) == EXPECTED, table


def test_fold_orders_a_barrier_and_dml_of_other_systems_by_delivery():
    """fold.arrow.fold, no engine: DML delivered after a barrier of another coordinate system falls in the
    segment after it although its seq's order part is smaller; DML of the barrier's own system is still
    compared by seq."""
    from replicator.dialects.base import decode
    from replicator.dialects.events import seq_texts
    from replicator.fold.arrow import Barrier, fold
    from tests.dialects.golden import raw_records

    lines = [create("orders"), *messages("orders")[1:3]]
    events = decode(raw_records(lines), "ckafka")
    events = events.append_column("seq_text", seq_texts(events["seq"]))
    ddl, dml = events.slice(0, 1).to_pylist()[0], events.slice(1)
    assert ddl["seq"][:2] > dml["seq"][0].as_py()[:2]  # by its own numbers the DDL is the newest
    table = ("shop", None, "orders")
    [(_, folded)] = fold(dml, {table: ["id"]}, [Barrier(table, tuple(ddl["seq"]))])
    assert folded["segment"].to_pylist() == [1, 1]  # delivered after the CREATE
    [(_, same_system)] = fold(dml, {table: ["id"]}, [Barrier(table, tuple(ddl["seq"]), "binlog-file-pos")])
    assert same_system["segment"].to_pylist() == [0, 0]  # compared by seq: before it


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_a_mirror_untyped_for_lack_of_types_takes_the_types_a_later_create_declares(spark, tmp_path, policy):
    """Format-one DML before any DDL makes string columns (no message typed them); the CREATE delivered in
    a later batch retypes them, values cast; a value that does not fit becomes NULL and a dead letter
    naming the column."""
    config = job(
        tmp_path,
        source={"dialect": "ckafka"},
        tables={"keys": {"shop.orders": ["id"]}},
        schema_evolution=policy,
    )
    runner = Runner(spark, config)
    first = messages("orders")[1:]
    first.append(format_one("orders", "I", 600, row(9, "not-a-number", "z")))
    runner.messages(tmp_path, first)
    assert {
        f.name: f.type for f in delta_table(tmp_path / "lake" / "shop" / "orders").schema
    } == dict.fromkeys(TYPED, pa.string())
    runner.messages(tmp_path, [create("orders"), format_one("orders", "I", 700, row(4, "4.00", "d"))])
    mirror = delta_table(tmp_path / "lake" / "shop" / "orders")
    assert {f.name: f.type for f in mirror.schema} == TYPED
    four = {"id": 4, "amount": Decimal("4.00"), "created": dt.datetime(2024, 1, 4, 3, 4, 5), "note": "d"}
    nine = {"id": 9, "amount": None, "created": dt.datetime(2024, 1, 9, 3, 4, 5), "note": "z"}
    assert runner.mirror() == [EXPECTED[0], EXPECTED[1], four, nine]
    [dead] = runner.dead_letters()
    assert "'amount'" in dead["error"] and "not-a-number" in dead["error"]


# ---- every barrier kind between format-one DML, in a file and at a file boundary (issue 35, item 5) -------


def canal_ddl(table: str, kind: str, sql: str, es: int = ES) -> dict:
    """A canal-shaped DDL message as CKafka sends it (Tencent CKafka «MySQL 订阅消息官方格式说明»: es/ts in
    seconds, id 0)."""
    message = {"data": None, "database": "shop", "es": es, "id": 0, "isDdl": True, "mysqlType": None}
    return (
        message
        | {"old": None, "pkNames": None, "sql": sql, "sqlType": None, "table": table, "ts": es}
        | {"type": kind}
    )


def insert(table: str, pos: int, i: int) -> dict:
    return format_one(table, "I", pos, row(i, f"{i}.00", f"n{i}"))


# kind -> (messages before the barrier, the barrier's messages, messages after it, expected mirrors)
BARRIERS = {
    "TRUNCATE": (
        [insert("orders", 100, 1), insert("orders", 200, 2)],
        [canal_ddl("orders", "TRUNCATE", "TRUNCATE TABLE `orders`")],
        [
            insert("orders", 300, 3),
            format_one("orders", "U", 400, row(3, "3.50", "n3b"), row(3, "3.00", "n3")),
        ],
        {"orders": [(3, "3.50")]},
    ),
    "DROP": (
        [insert("orders", 100, 1), insert("orders", 200, 2)],
        [canal_ddl("orders", "ERASE", "DROP TABLE `orders`"), create("orders")],
        [insert("orders", 300, 3), insert("orders", 400, 4)],
        {"orders": [(3, "3.00"), (4, "4.00")]},
    ),
    "RENAME": (
        [insert("orders", 100, 1), insert("orders", 200, 2)],
        [canal_ddl("archive", "RENAME", "RENAME TABLE `orders` TO `archive`"), create("orders")],
        [insert("archive", 300, 3), insert("orders", 400, 4)],
        {"orders": [(4, "4.00")], "archive": [(1, "1.00"), (2, "2.00"), (3, "3.00")]},
    ),
    "ALTER": (
        [insert("orders", 100, 1), insert("orders", 200, 2)],
        [canal_ddl("orders", "ALTER", "ALTER TABLE `orders` ADD COLUMN `extra` varchar(10) DEFAULT NULL")],
        [format_one("orders", "I", 300, {**row(3, "3.00", "n3"), "extra": "x"})],
        {"orders": [(1, "1.00"), (2, "2.00"), (3, "3.00")]},
    ),
}


@pytest.mark.parametrize("split", ["one-file", "barrier-ends-a-batch", "barrier-starts-a-batch"])
@pytest.mark.parametrize("kind", list(BARRIERS))
def test_a_barrier_between_format_one_dml_lands_where_it_was_delivered(spark, tmp_path, kind, split):
    """CKafka: DML (format one, binlog file/pos), then a canal-shaped barrier (es seconds, id 0), then DML:
    the barrier applies between them, in one file and across two micro-batches, whichever side of the
    file boundary it is on. (A TRUNCATE in one file emptied the mirror: its seq was compared with the DML's
    binlog positions.)"""
    before, barrier, after, expected = BARRIERS[kind]
    runner = Runner(spark, job(tmp_path, source={"dialect": "ckafka"}))
    runner.messages(tmp_path, [create("orders")])
    batches = {
        "one-file": [before + barrier + after],
        "barrier-ends-a-batch": [before + barrier, after],
        "barrier-starts-a-batch": [before, barrier + after],
    }[split]
    for messages in batches:
        runner.messages(tmp_path, messages)
    assert runner.dead_letters() == []
    for table, rows in expected.items():
        got = [(r["id"], str(r["amount"])) for r in runner.mirror(table=table)]
        assert got == [(i, a) for i, a in rows], table
    if kind == "ALTER":
        assert [r["extra"] for r in runner.mirror()] == [None, None, "x"]
