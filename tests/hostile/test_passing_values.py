"""Values that passed but must not (issue 48, item 9), through the real engine: a year-0 DATETIME (Delta
readers then fail on the whole mirror), hexadecimal text in an INT column, an ordering field below 0, NULL
or past 2^63, a Debezium decimal of 200 KB. Each is a dead letter naming what is wrong and where."""

from __future__ import annotations

import base64
import json

from tests.helpers import Runner, canal, job, order

ES = 1_700_000_000_000


def _errors(runner: Runner) -> dict[str, dict]:
    return {json.loads(r["raw"]).get("data", [{}])[0].get("id"): r for r in runner.dead_letters()}


def test_dates_outside_years_1_to_9999_and_hex_integers_are_dead_letters(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, ts="2024-01-01 00:00:00.000")], es=ES),
            canal("INSERT", [order(2, ts="0000-01-01 00:00:00.000")], es=ES + 1),
            canal("INSERT", [order(3, ts="0000-00-00 00:00:00")], es=ES + 2),  # zero_dates: null
            canal("INSERT", [{**order(5), "id": "0x10"}], es=ES + 3),
            canal("INSERT", [order(4, ts="0001-01-01 00:00:00.000")], es=ES + 4),
        ],
    )
    rows = runner.mirror()  # deltalake's to_pylist: fails on a year-0 value
    assert [(r["id"], r["ts"] is None) for r in rows] == [(1, False), (3, True), (4, False)]
    dead = _errors(runner)
    assert set(dead) == {"2", "0x10"}
    assert "'0000-01-01 00:00:00.000' is outside the years 1 to 9999" in dead["2"]["error"]
    assert "ts" in dead["2"]["error"]
    assert "'0x10' does not fit int32" in dead["0x10"]["error"]


def test_an_ordering_field_must_be_a_whole_number_from_0_to_2_63(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    bad = []
    for i, es in ((2, -1), (3, None), (4, 2**63), (5, "abc")):
        message = canal("INSERT", [order(i)], es=ES + i)
        message["es"] = es
        bad.append(message)
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), *bad])
    assert [r["id"] for r in runner.mirror()] == [1]
    dead = _errors(runner)
    assert set(dead) == {"2", "3", "4", "5"}
    for row in dead.values():
        assert row["error"].startswith('malformed ordering field ["es"]: not a whole number from 0 to 2^63-1')
        assert (row["database"], row["table"]) == ("shop", "orders")
    assert "(got [-1])" in dead["2"]["error"] and "(got [null])" in dead["3"]["error"]


def _debezium(i: int, amount: bytes) -> dict:
    decimal = {
        "field": "amount",
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
    }
    row = {"type": "struct", "optional": True, "fields": [{"field": "id", "type": "int32"}, decimal]}
    return {
        "schema": {
            "type": "struct",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {"field": "source", "type": "struct", "fields": []},
                {"field": "op", "type": "string"},
            ],
        },
        "payload": {
            "before": None,
            "after": {"id": i, "amount": base64.b64encode(amount).decode()},
            "source": {
                "connector": "mysql",
                "db": "shop",
                "table": "items",
                "file": "mysql-bin.000003",
                "pos": 1000 + i,
                "row": 0,
                "ts_ms": ES + i,
            },
            "op": "c",
            "ts_ms": ES + i,
        },
    }


def test_a_huge_debezium_decimal_is_a_dead_letter_naming_table_and_column(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, source={"dialect": "debezium"}, tables={"keys": {"shop.*": ["id"]}}))
    runner.messages(tmp_path, [_debezium(1, (1234).to_bytes(2, "big")), _debezium(2, b"\x01" * 200_000)])
    assert [(r["id"], str(r["amount"])) for r in runner.mirror(table="items")] == [(1, "12.34")]
    (dead,) = runner.dead_letters()
    assert (dead["database"], dead["table"]) == ("shop", "items")
    assert 'columns ["amount"]' in dead["error"] and "4300" not in dead["error"]
