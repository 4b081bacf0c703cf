"""Debezium's defaults that lose data unless told (issue 53 items 7-9), through the real engine: messages
hand-built in the shape Debezium 3.5's MariaDB connector sends them with Kafka Connect's JsonConverter
(tests/fixtures/debezium/real-mariadb-3.5.jsonl holds real ones)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.helpers import Runner, job

_pos = itertools.count(1000, 100)


def source(table: str, database: str = "inv") -> dict[str, Any]:
    return {
        "version": "3.5.0.Final",
        "connector": "mariadb",
        "name": "e2e",
        "ts_ms": 1_795_687_013_000,
        "snapshot": "false",
        "db": database,
        "table": table,
        "server_id": 1,
        "file": "mysql-bin.000001",
        "pos": next(_pos),
        "row": 0,
    }


def column(name: str, type_name: str, position: int, length: int | None = None, **extra: Any) -> dict:
    return {
        "name": name,
        "jdbcType": 4,
        "typeName": type_name,
        "typeExpression": type_name,
        "length": length,
        "scale": extra.pop("scale", None),
        "position": position,
        "optional": extra.pop("optional", True),
        **extra,
    }


LEDGER = [column("id", "INT", 1, 11, optional=False), column("v", "VARCHAR", 2, 20)]


def schema_change(table: str, ddl: str, kind: str, columns: list[dict], database: str = "inv") -> dict:
    """A schema-change topic record (JsonConverter without the schema part, as the fixture's)."""
    return {
        "source": source(table, database),
        "ts_ms": 1_795_687_013_632,
        "databaseName": database,
        "schemaName": None,
        "ddl": ddl,
        "tableChanges": [
            {
                "type": kind,
                "id": f'"{database}"."{table}"',
                "table": {
                    "defaultCharsetName": "utf8mb4",
                    "primaryKeyColumnNames": ["id"],
                    "columns": columns,
                },
            }
        ],
    }


def row(
    table: str, op: str, after: dict | None, before: dict | None = None, fields: list | None = None
) -> dict:
    """A row change; ``fields``: the after/before field schemas (JsonConverter ``schemas.enable=true``),
    ``None``: the bare payload (``schemas.enable=false``)."""
    payload = {
        "before": before,
        "after": after,
        "source": source(table),
        "op": op,
        "ts_ms": 1_795_687_014_000,
    }
    if fields is None:
        return payload
    image = {"type": "struct", "fields": fields, "optional": True, "name": f"e2e.inv.{table}.Value"}
    return {
        "schema": {
            "type": "struct",
            "fields": [{**image, "field": "before"}, {**image, "field": "after"}],
            "optional": False,
            "name": f"e2e.inv.{table}.Envelope",
        },
        "payload": payload,
    }


@pytest.fixture
def runner(spark, tmp_path):
    return Runner(spark, job(tmp_path, source={"dialect": "debezium"}, tables={"keys": {"inv.*": ["id"]}}))


def lake(runner: Runner) -> Path:
    return Path(runner.config.target.path) / "inv"


def test_rename_does_not_create_the_old_name_again(runner, tmp_path):
    """``RENAME TABLE ledger TO ledger_v2``: Debezium 3.5 sends the statement with the new name's
    ``tableChanges`` (type ALTER). The old name must not come back as an empty mirror from it (a reader of
    the old name would see every row vanish), and a later declared schema of the old name creates nothing."""
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "v"},
    ]
    runner.messages(
        tmp_path,
        [
            schema_change(
                "ledger", "CREATE TABLE ledger (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE", LEDGER
            ),
            row("ledger", "c", {"id": 1, "v": "a"}, fields=fields),
            row("ledger", "c", {"id": 2, "v": "b"}, fields=fields),
        ],
    )
    runner.messages(
        tmp_path,
        [
            row("ledger", "c", {"id": 3, "v": "c"}, fields=fields),
            schema_change("ledger_v2", "RENAME TABLE ledger TO ledger_v2", "ALTER", LEDGER),
            row("ledger_v2", "c", {"id": 4, "v": "d"}, fields=fields),
        ],
    )
    assert not (lake(runner) / "ledger").exists()
    assert [r["v"] for r in runner.mirror("inv", "ledger_v2")] == ["a", "b", "c", "d"]
    # the old name's declared schema alone (a statement that changes nothing, its tableChanges)
    runner.messages(
        tmp_path, [schema_change("ledger", "ALTER TABLE ledger COMMENT = 'old'", "ALTER", LEDGER)]
    )
    assert not (lake(runner) / "ledger").exists()


def test_bigint_unsigned_wrapped_by_long_mode_is_stored_exactly(runner, tmp_path):
    """``bigint.unsigned.handling.mode=long`` (the default) publishes 18446744073709551615 as -1 in an int64
    field; the schema-change topic declared the column BIGINT UNSIGNED, so the mirror knows: the exact value
    is stored, never -1."""
    from decimal import Decimal

    columns = [column("id", "INT", 1, 11, optional=False), column("big", "BIGINT UNSIGNED", 2, 20)]
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "big"},
    ]
    runner.messages(
        tmp_path,
        [
            schema_change(
                "counters",
                "CREATE TABLE counters (id INT PRIMARY KEY, big BIGINT UNSIGNED)",
                "CREATE",
                columns,
            ),
            row("counters", "c", {"id": 1, "big": -1}, fields=fields),
            row("counters", "c", {"id": 2, "big": 5}, fields=fields),
            row("counters", "c", {"id": 3, "big": -(2**63)}, fields=fields),
            row("counters", "c", {"id": 4, "big": None}, fields=fields),
        ],
    )
    assert [r["big"] for r in runner.mirror("inv", "counters")] == [
        Decimal(2**64 - 1),
        Decimal(5),
        Decimal(2**63),
        None,
    ]


def _warnings(logs: list[dict]) -> str:
    """The warnings logged, as text: the event with its table (structlog's captured entries)."""
    return "\n".join(f"{e['event']} {e.get('table', '')}" for e in logs if e.get("log_level") == "warning")


def test_null_replaced_by_default_is_warned_once_per_table(runner, tmp_path):
    """JsonConverter's ``replace.null.with.default=true`` (Kafka's default) writes a NULL of a column with a
    DEFAULT as that default: nothing in the value tells them apart, but the field schema shows the default.
    One warning per table names the setting to change, however many batches."""
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int32", "optional": True, "default": 0, "field": "qty"},
    ]
    with capture_logs() as logs:
        for i in (1, 2):
            runner.messages(tmp_path, [row("stock", "c", {"id": i, "qty": 0}, fields=fields)])
    out = _warnings(logs)
    assert out.count("value.converter.replace.null.with.default=false") == 1, out
    assert '["qty"]' in out and "inv.stock" in out
    assert [r["qty"] for r in runner.mirror("inv", "stock")] == [0, 0]


def test_messages_without_schemas_are_warned_once_per_table(runner, tmp_path):
    """``schemas.enable=false``: the values are bare JSON, every column a string: said once per table, with
    the way out (``tables.types``)."""
    with capture_logs() as logs:
        for i in (1, 2):
            runner.messages(tmp_path, [row("notes", "c", {"id": i, "v": "x"})])
    out = _warnings(logs)
    assert out.count("Debezium messages without schemas") == 1, out
    assert "declare the types in tables.types" in out
    assert "value.converter.schemas.enable=false" in out and "inv.notes" in out


def test_show_orders_keys_of_unknown_type_by_value(runner, tmp_path, capsys):
    """Without schemas the key column is text: ``show`` still lists keys 2, 10, 100 in that order (and a
    history by key then time), not as text (10, 100, 2)."""
    from replicator.commands.status import print_tables

    runner.messages(tmp_path, [row("notes", "c", {"id": i, "v": f"n{i}"}) for i in (100, 2, 10, -3)])
    capsys.readouterr()
    assert print_tables(runner.config, "inv.notes") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:6]] == ["-3", "2", "10", "100"], lines


def test_truncate_recorded_only_on_the_schema_change_topic_empties_the_mirror(runner, tmp_path):
    """``skipped.operations=t`` publishes no ``op: t``; where the schema-change topic records the TRUNCATE
    statement, that empties the mirror (no stale rows)."""
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "v"},
    ]
    runner.messages(tmp_path, [row("wiped", "c", {"id": i, "v": "x"}, fields=fields) for i in (1, 2)])
    truncate = schema_change("wiped", "TRUNCATE TABLE wiped", "ALTER", LEDGER)
    truncate["tableChanges"] = []
    runner.messages(tmp_path, [truncate, row("wiped", "c", {"id": 3, "v": "y"}, fields=fields)])
    assert [r["id"] for r in runner.mirror("inv", "wiped")] == [3]
