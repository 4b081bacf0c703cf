"""Huawei DRS JSON message builders (Huawei DRS «Kafka消息格式» shapes, tests/fixtures/drs-json/) and a
reference model that
applies a list of events by sequence, for the phase, bootstrap and replay tests."""

from __future__ import annotations

from typing import Any

TYPES = {"id": "int", "name": "varchar", "qty": "int"}
ES = 1_700_000_000_000


def init_ddl(*, id_: int = 0, es: int = ES, table: str = "items", database: str = "shop") -> dict[str, Any]:
    """seed003-mysql-init-ddl: full sync's table structure (DRS writes id 0 and pkNames null)."""
    return {
        "jobId": "job-1",
        "shardId": None,
        "identifier": None,
        "eventId": "",
        "mysqlType": None,
        "id": id_,
        "es": es,
        "ts": es,
        "database": database,
        "table": table,
        "type": "INIT_DDL",
        "isDdl": True,
        "sql": f"CREATE TABLE `{table}` ( `id` int(11) NOT NULL, `name` varchar(64) DEFAULT NULL, "
        "`qty` int(11) DEFAULT NULL, PRIMARY KEY (`id`)) ENGINE InnoDB DEFAULT CHARSET utf8",
        "sqlType": None,
        "data": None,
        "old": None,
        "pkNames": None,
    }


def dml(
    type_: str,
    rows: list[dict[str, Any]],
    *,
    id_: int,
    es: int | None = None,
    old: list[dict[str, Any]] | None = None,
    table: str = "items",
    database: str = "shop",
) -> dict[str, Any]:
    """INIT (full-sync row, seed003-mysql-init) or INSERT / UPDATE / DELETE (seed003-mysql-update)."""
    es = ES + id_ if es is None else es
    message: dict[str, Any] = {
        "mysqlType": TYPES,
        "id": id_,
        "es": es,
        "ts": es + 5,
        "database": database,
        "table": table,
        "type": type_,
        "isDdl": False,
        "sql": "",
        "sqlType": {"id": 4, "name": 12, "qty": 4},
        "data": None if type_ == "DELETE" else rows,
        "old": rows if type_ == "DELETE" else old,
        "pkNames": ["id"],
    }
    if type_ == "INIT":
        message.update(jobId="job-1", shardId="shard-1", identifier="1", eventId=f"mysql-bin.000065:{id_}")
    return message


def item(i: int, name: str = "x", qty: int = 1) -> dict[str, Any]:
    return {"id": str(i), "name": name, "qty": str(qty)}


def reference(messages: list[dict[str, Any]], *, upto_id: int | None = None) -> dict[int, dict[str, Any]]:
    """The source table after the messages whose DRS id is at most ``upto_id``, applied in id order (the
    DRS sequence), a snapshot row being the row as of its id."""
    state: dict[int, dict[str, Any]] = {}
    for m in sorted(messages, key=lambda m: m["id"]):
        if m["isDdl"] or (upto_id is not None and m["id"] > upto_id):
            continue
        for row in m["data"] if m["data"] is not None else m["old"]:
            key = int(row["id"])
            if m["type"] == "DELETE":
                state.pop(key, None)
            else:
                state[key] = {"id": key, "name": row["name"], "qty": int(row["qty"])}
    return state
