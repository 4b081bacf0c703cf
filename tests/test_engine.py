"""The spine through the real engine: decode, fold, guarded MERGE into real Delta tables."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from tests.helpers import WRITERS, Runner, canal, delta_table, job, order, write_jsonl

ES = 1_700_000_000_000


@pytest.fixture
def runner(spark, tmp_path, request):
    """A runner on the default writer, or on the one a test names (``parametrize("runner", WRITERS,
    indirect=True)``)."""
    return Runner(spark, job(tmp_path, target={"writer": getattr(request, "param", "delta-rs")}))


def ids(rows):
    return [r["id"] for r in rows]


def test_decoded_schema_is_the_contract():
    from replicator.dialects.events import decoded_schema
    from replicator.model import EVENT_COLUMNS

    assert decoded_schema().names == [*EVENT_COLUMNS, "error", "raw"]


@pytest.mark.parametrize("runner", WRITERS, indirect=True)
def test_insert_update_delete_typed(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a", "10.50", "2024-01-02 03:04:05.678"), order(2, "b")], es=ES),
            canal(
                "UPDATE",
                [order(1, "A", "-0.01", "2024-01-02 03:04:05.678")],
                old=[{"name": "a", "amount": "10.50"}],
                es=ES + 1,
            ),
            canal("DELETE", [order(2, "b")], es=ES + 2),
        ],
    )
    assert runner.mirror() == [
        {"id": 1, "name": "A", "amount": Decimal("-0.01"), "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 678000)}
    ]


def test_out_of_order_across_batches_newest_wins(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1, "new")], es=ES + 10)])
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "old")], old=[{"name": "x"}], es=ES + 5)])
    assert [r["name"] for r in runner.mirror()] == ["new"]


def test_same_file_delivered_twice_is_idempotent(runner, tmp_path):
    messages = [canal("INSERT", [order(1), order(2)], es=ES), canal("DELETE", [order(2)], es=ES + 1)]
    runner.messages(tmp_path, messages)
    first = runner.mirror(cdc=True)
    runner.messages(tmp_path, messages)  # the same messages again, as a new file in a new batch
    assert ids(runner.mirror()) == [1]
    assert [r["_cdc_op"] for r in runner.mirror(cdc=True)] == [r["_cdc_op"] for r in first]


@pytest.mark.parametrize("runner", WRITERS, indirect=True)
def test_delete_then_late_older_update_stays_deleted(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), canal("DELETE", [order(1)], es=ES + 10)])
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "late")], old=[{"name": "x"}], es=ES + 5)])
    assert runner.mirror() == []


def test_delete_then_newer_reinsert_comes_back(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), canal("DELETE", [order(1)], es=ES + 10)])
    runner.messages(tmp_path, [canal("INSERT", [order(1, "again")], es=ES + 20)])
    assert [r["name"] for r in runner.mirror()] == ["again"]
    # and an event older than the re-insert still cannot overwrite it
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "stale")], old=[{"name": "x"}], es=ES + 15)])
    assert [r["name"] for r in runner.mirror()] == ["again"]


def test_update_of_the_primary_key_moves_the_row(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a")], es=ES)])
    runner.messages(tmp_path, [canal("UPDATE", [order(7, "a")], old=[{"id": "1"}], es=ES + 1)])
    assert ids(runner.mirror()) == [7]
    # a late event of the old key (older than the move) must not resurrect it
    runner.messages(tmp_path, [canal("UPDATE", [order(1, "b")], old=[{"name": "a"}], es=ES)])
    assert ids(runner.mirror()) == [7]


@pytest.mark.parametrize("runner", WRITERS, indirect=True)
def test_key_change_and_reuse_of_old_key_in_one_batch(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a")], es=ES),
            canal("UPDATE", [order(2, "a")], old=[{"id": "1"}], es=ES + 1),
            canal("INSERT", [order(1, "new one")], es=ES + 2),
        ],
    )
    assert [(r["id"], r["name"]) for r in runner.mirror()] == [(1, "new one"), (2, "a")]


def test_multi_row_message_rows_keep_their_order(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal(
                "UPDATE",
                [order(1, "first"), order(1, "second")],
                old=[{"name": "x"}, {"name": "first"}],
                es=ES,
                id_=5,
            )
        ],
    )
    assert [r["name"] for r in runner.mirror()] == ["second"]


def test_same_es_ordered_by_id(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "later")], old=[{"name": "x"}], es=ES, id_=9),
            canal("INSERT", [order(1, "earlier")], es=ES, id_=8),
        ],
    )
    assert [r["name"] for r in runner.mirror()] == ["later"]


@pytest.mark.parametrize("runner", WRITERS, indirect=True)
def test_replayed_batch_is_a_no_op(runner, tmp_path):
    folder = tmp_path / "b0"
    from tests.helpers import write_jsonl

    write_jsonl(folder / "m.jsonl", [canal("INSERT", [order(1), order(2)], es=ES)])
    runner.batch(folder, 0)
    from deltalake import DeltaTable

    path = str(runner.config.target.path / "shop" / "orders")
    version = DeltaTable(path).version()
    summary = runner.batch(folder, 0)  # Spark replays batch 0 after a crash
    assert DeltaTable(path).version() == version
    assert summary.tables == {}
    assert DeltaTable(path).transaction_version("test-job") == 0


def test_values_that_do_not_fit_are_dead_letters_naming_the_column(runner, tmp_path):
    runner.messages(
        tmp_path,
        [
            canal(
                "INSERT",
                [
                    order(1, amount="1.234"),
                    order(2, amount="123456789.00"),
                    order(3, ts="not a time"),
                    order(4),
                ],
                es=ES,
            ),
        ],
    )
    assert ids(runner.mirror()) == [4]
    dead = sorted(runner.dead_letters(), key=lambda d: d["row"])
    assert [d["row"] for d in dead] == [0, 1, 2]
    assert "column 'amount'" in dead[0]["error"] and "1.234" in dead[0]["error"]
    assert "column 'amount'" in dead[1]["error"]
    assert "column 'ts'" in dead[2]["error"]
    assert all(d["raw"] and b'"shop"' in d["raw"] for d in dead)
    assert {d["table"] for d in dead} == {"orders"}


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        ('{"database": "shop", "table": "orders", "isDdl": false, "es": 1}', "no 'type'"),
        (
            '{"data": [{"id": "1"}], "database": "shop", "table": "orders", "isDdl": false, "type": "UPSERT",'
            ' "es": 1, "pkNames": ["id"]}',
            "unknown op type",
        ),
        (
            '{"data": [{"id": "1"}], "database": "shop", "table": "", "isDdl": false, "type": "INSERT",'
            ' "es": 1, "pkNames": ["id"]}',
            "missing table",
        ),
        (
            '{"data": [{"id": "1"}], "database": "shop", "table": "t", "isDdl": false, "type": "INSERT",'
            ' "es": 1, "pkNames": []}',
            "no primary key known for shop.t",
        ),
        (
            '{"data": [{"id": null}], "database": "shop", "table": "t", "isDdl": false, "type": "INSERT",'
            ' "es": 1, "pkNames": ["id"]}',
            "NULL or absent primary key",
        ),
    ],
    ids=["not-json", "invalid-utf8", "wrong-shape", "unknown-op", "missing-table", "missing-key", "null-key"],
)
def test_dead_letter_kinds(runner, tmp_path, line, error):
    folder = tmp_path / "bad"
    folder.mkdir()
    raw = line if isinstance(line, bytes) else line.encode()
    (folder / "m.jsonl").write_bytes(
        raw + b"\n" + b'{"data":[{"id":"9"}],"database":"shop","table":"orders",'
        b'"isDdl":false,"type":"INSERT","es":1,"pkNames":["id"],'
        b'"mysqlType":{"id":"int(11)"}}\n'
    )
    summary = runner.batch(folder)
    dead = runner.dead_letters()
    assert len(dead) == 1 and error in dead[0]["error"]
    assert dead[0]["raw"] == raw
    assert dead[0]["source"].endswith("m.jsonl") and dead[0]["offset"] == 1 and dead[0]["batch_id"] == 0
    assert summary.dead_letters == 1 and summary.records_in == 2
    assert ids(runner.mirror()) == [9]  # the batch goes on


def test_on_error_fail_stops_naming_the_record(spark, tmp_path):
    from replicator.errors import RecordFailed

    runner = Runner(spark, job(tmp_path, on_error="fail"))
    with pytest.raises(RecordFailed, match=r"m\.jsonl:2 .*not JSON"):
        runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), "{oops"])


def test_timestamp_uses_source_timezone_and_unsigned_widens(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, source={"timezone": "Asia/Shanghai"}))
    types = {
        "id": "bigint(20) unsigned",
        "t": "timestamp",
        "d": "datetime",
        "b": "varbinary(4)",
        "u": "int(10) unsigned",
    }
    runner.messages(
        tmp_path,
        [
            canal(
                "INSERT",
                [
                    {
                        "id": "18446744073709551615",
                        "t": "2024-01-01 08:00:00",
                        "d": "2024-01-01 08:00:00",
                        "b": "\u00ff\u0000",
                        "u": "4294967295",
                    }
                ],
                es=ES,
                types=types,
            )
        ],
    )
    (row,) = runner.mirror()
    assert row["id"] == Decimal("18446744073709551615")
    assert row["t"] == dt.datetime(2024, 1, 1, 0, 0, tzinfo=dt.UTC)
    assert row["d"] == dt.datetime(2024, 1, 1, 8, 0)
    assert row["b"] == b"\xff\x00"
    assert row["u"] == 4294967295


def test_tables_include_exclude_and_keys(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, tables={"exclude": ["shop.audit*"]}))
    summary = runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1)], es=ES),
            canal("INSERT", [order(1)], es=ES, table="audit_log"),
        ],
    )
    assert summary.filtered == 1
    assert ids(runner.mirror()) == [1]
    assert not (runner.config.target.path / "shop" / "audit_log").exists()


def test_changelog_records_every_event_once(runner, tmp_path):
    from deltalake import DeltaTable

    from tests.helpers import ddl, write_jsonl

    folder = tmp_path / "b"
    write_jsonl(
        folder / "m.jsonl",
        [canal("INSERT", [order(1)], es=ES), ddl("ALTER", "ALTER TABLE orders ADD COLUMN c int", es=ES + 1)],
    )
    runner.batch(folder, 0)
    runner.batch(folder, 0)  # replay
    log = DeltaTable(str(runner.config.state.path / "changelog")).to_pyarrow_table().to_pylist()
    assert sorted(r["op"] for r in log) == ["ddl", "insert"]
    assert {r["table"] for r in log} == {"orders"}


def test_a_tombstoned_key_in_a_batch_does_not_hold_back_the_other_keys(runner, tmp_path):
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), canal("DELETE", [order(1)], es=ES + 1)])
    runner.messages(
        tmp_path,
        [
            canal("UPDATE", [order(1, "late")], old=[{"name": "x"}], es=ES),  # stale: stays deleted
            canal("INSERT", [order(2), order(3)], es=ES + 5),  # new keys: must be applied
        ],
    )
    assert ids(runner.mirror()) == [2, 3]


def test_a_batch_of_several_decode_tasks(spark, tmp_path):
    """25,000 keys in three files: three Spark decode tasks (one per file), each decoding slice by
    slice (decode.SLICE_ROWS); keys spread over all of them fold to one net change each (one fold task:
    a batch this small is not shuffled, fold.SMALL_BATCH; the shuffled fold is tests/test_fold_stages.py);
    one bad record among them is a dead letter, read by the driver from its task's file."""
    from replicator.decode import SLICE_ROWS

    runner = Runner(spark, job(tmp_path))

    count = 25_000
    assert count > SLICE_ROWS
    messages = [canal("INSERT", [order(i, f"n{i}")], es=ES + i) for i in range(count)]
    messages += [
        canal("UPDATE", [order(i, "u")], old=[{"name": f"n{i}"}], es=ES + count + i)
        for i in range(0, count, 2)
    ]
    messages += [canal("DELETE", [order(i, "u")], es=ES + 3 * count + i) for i in range(0, count, 4)]
    folder = tmp_path / "big"
    third = len(messages) // 3
    write_jsonl(folder / "a.jsonl", messages[:third])
    write_jsonl(folder / "b.jsonl", [*messages[third : 2 * third], "not json"])
    write_jsonl(folder / "c.jsonl", messages[2 * third :])
    summary = runner.batch(folder)
    assert summary.records_in == len(messages) + 1
    assert summary.dead_letters == 1 and summary.applied == len(messages)
    rows = {r["id"]: r["name"] for r in runner.mirror()}
    expected = {i: ("u" if i % 2 == 0 else f"n{i}") for i in range(count) if i % 4 != 0}
    assert rows == expected


def test_a_batch_leaves_no_payload_files_and_stale_folders_go(spark, tmp_path):
    """Net changes and dead letters reach the driver as files in the engine's own folder under
    ``<state>/tmp``: gone once the batch is done; a dead engine's folder older than a day goes when an
    engine starts, a recent one (another engine's running batch) stays."""
    import os
    import time

    config = job(tmp_path)
    stale = tmp_path / "state" / "tmp" / "batch-dead"
    recent = tmp_path / "state" / "tmp" / "batch-running"
    for folder in (stale, recent):
        folder.mkdir(parents=True)
        (folder / "x.arrow").write_bytes(b"")
    day_ago = time.time() - 25 * 3600
    os.utime(stale, (day_ago, day_ago))
    runner = Runner(spark, config)
    assert not stale.exists() and recent.exists()
    summary = runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES), "not json"])
    assert summary.applied == 1 and summary.dead_letters == 1
    assert [r["raw"] for r in runner.dead_letters()] == [b"not json"]
    assert sorted(p.name for p in (tmp_path / "state" / "tmp").iterdir()) == ["batch-running"]


def _ckafka(values: dict, table: str, pos: int) -> dict:
    """A CKafka format-one INSERT (Tencent CKafka «MySQL 订阅消息官方格式说明» shape): no key in the
    message."""
    return {
        "BINLOG_NAME": "mysql-bin.000003",
        "BINLOG_POS": pos,
        "DATABASE": "inventory",
        "TABLE": table,
        "TIME": "20160611020502",
        "TYPE": "I",
        "NEW_VALUES": values,
        "OLD_VALUES": None,
    }


@pytest.mark.parametrize("writer", WRITERS)
def test_a_key_column_an_event_lacks_makes_dead_letters_not_a_failed_merge(spark, tmp_path, writer):
    """`tables.keys` naming a column the table lacks, or a key column NULL in an event: those events are
    dead letters naming the table and the column, with their raw record; the other tables' events apply."""
    keys = {"inventory.customers": ["nope"], "inventory.*": ["id"]}
    tables = {"keys": keys, "history": ["inventory.orders"]}  # its history leaves the dead event out too
    config = job(tmp_path, source={"dialect": "ckafka"}, tables=tables, target={"writer": writer})
    runner = Runner(spark, config)
    summary = runner.messages(
        tmp_path,
        [
            _ckafka({"id": "1", "name": "a"}, "customers", 1),
            _ckafka({"id": "2", "name": "b"}, "customers", 2),
            _ckafka({"id": "3", "name": "c"}, "orders", 3),
            _ckafka({"id": None, "name": "d"}, "orders", 4),
        ],
    )
    assert runner.mirror("inventory", "orders") == [{"id": "3", "name": "c"}]
    assert not (runner.config.target.path / "inventory" / "customers").exists()
    dead = sorted(runner.dead_letters(), key=lambda d: d["offset"])
    assert [(d["table"], d["offset"]) for d in dead] == [("customers", 1), ("customers", 2), ("orders", 4)]
    assert all("table inventory.customers: key column 'nope'" in d["error"] for d in dead[:2])
    assert "table inventory.orders: key column 'id' is absent or NULL" in dead[2]["error"]
    assert [json.loads(d["raw"])["BINLOG_POS"] for d in dead] == [1, 2, 4]
    assert summary.dead_letters == 3 and summary.applied == 1
    history = delta_table(runner.config.target.path / "inventory" / "orders__history")
    assert history.column("id").to_pylist() == ["3"]
    # preflight (every run's start): a keys entry naming a column an existing mirror lacks is warned of
    from replicator.commands.preflight import key_warnings

    assert key_warnings(config) == []  # customers has no mirror: its columns are not known yet
    keys = {"inventory.orders": ["order_no"]}
    renamed = job(tmp_path, source={"dialect": "ckafka"}, tables={"keys": keys}, target={"writer": writer})
    (warning,) = key_warnings(renamed)
    assert "tables.keys gives inventory.orders the key ['order_no']" in warning
    assert "no column 'order_no'" in warning
