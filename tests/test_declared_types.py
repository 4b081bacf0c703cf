"""``tables.types``: column types declared in the job file where messages declare none or only a bare one
(issue 14, item 3)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from replicator.config import ConfigError, parse_config
from tests.drs import dml
from tests.helpers import Runner, canal, delta_table, job, order


def drs_row(i: int, amount: str) -> dict:
    message = dml("INSERT", [{"id": str(i), "name": "x", "qty": "1", "amount": amount}], id_=i)
    # Huawei DRS «Kafka消息格式»: bare, no
    # precision
    message["mysqlType"] = {**message["mysqlType"], "amount": "decimal"}
    message["sqlType"] = {**message["sqlType"], "amount": 3}
    return message


def test_a_bare_drs_decimal_takes_the_declared_type(spark, tmp_path):
    config = job(
        tmp_path,
        source={"dialect": "drs-json"},
        tables={"types": {"shop.it*": {"amount": "decimal(12,2)"}, "shop.*": {"amount": "text"}}},
    )
    runner = Runner(spark, config)
    runner.messages(tmp_path, [drs_row(1, "12.50"), drs_row(2, "123456789012.00"), drs_row(3, "-0.01")])
    mirror = runner.mirror(table="items")
    assert [(r["id"], r["amount"]) for r in mirror] == [(1, Decimal("12.50")), (3, Decimal("-0.01"))]
    schema = delta_table(tmp_path / "lake" / "shop" / "items").schema
    assert schema.field("amount").type == pa.decimal128(12, 2)
    [dead] = runner.dead_letters()
    assert "'amount'" in dead["error"] and dead["offset"] == 2


def test_a_full_message_type_wins_over_the_declared_one(spark, tmp_path):
    config = job(tmp_path, tables={"types": {"shop.orders": {"amount": "decimal(20,4)", "extra": "bigint"}}})
    runner = Runner(spark, config)
    runner.messages(tmp_path, [canal("INSERT", [order(1, amount="2.50")], es=1_700_000_000_000)])
    schema = delta_table(tmp_path / "lake" / "shop" / "orders").schema
    assert schema.field("amount").type == pa.decimal128(10, 2)  # canal's mysqlType decimal(10,2)
    assert "extra" not in schema.names  # a declared column no message carries is not created


def test_an_unknown_declared_type_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"amount: unknown source type 'decimul\(12,2\)'"):
        parse_config(
            {
                "name": "j",
                "source": {"type": "files", "path": "in"},
                "target": {"path": "lake"},
                "state": {"path": "state"},
                "tables": {"types": {"shop.*": {"amount": "decimul(12,2)"}}},
            },
            "test",
            tmp_path,
        )
