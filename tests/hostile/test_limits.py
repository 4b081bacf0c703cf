"""What one message may cost (issue 48): a DDL text the parser cannot hold, a row wider than any table,
a batch of many new tables. Each is that message's dead letter with its raw record, naming the limit; the
other tables' rows of the batch are applied."""

from __future__ import annotations

import json

from tests.helpers import Runner, canal, ddl, job, order

ES = 1_700_000_000_000
NESTED = "ALTER TABLE orders ADD COLUMN c int DEFAULT " + "(" * 40 + "1" + ")" * 40
DEEP = "ALTER TABLE orders ADD COLUMN c int DEFAULT " + "(" * 300 + "1" + ")" * 300
CLAUSES = "ALTER TABLE orders " + ", ".join(f"ADD COLUMN c{i} int" for i in range(20_000))


def _dead(runner: Runner) -> dict[str, dict]:
    return {row["error"]: row for row in runner.dead_letters()}


def test_a_ddl_text_past_a_limit_is_its_dead_letter(spark, tmp_path):
    runner = Runner(spark, job(tmp_path))
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES)])
    messages = [
        canal("INSERT", [order(2)], es=ES + 1),
        ddl("ALTER", NESTED, es=ES + 2),
        ddl("ALTER", CLAUSES, es=ES + 3),
        canal("INSERT", [order(3)], es=ES + 4),
        canal("INSERT", [order(7)], es=ES + 5, table="items"),
    ]
    runner.messages(tmp_path, messages)
    assert [r["id"] for r in runner.mirror()] == [1, 2, 3]
    assert [r["id"] for r in runner.mirror(table="items")] == [7]
    assert "c" not in runner.mirror()[0]
    dead = _dead(runner)
    nested = dead["the DDL text nests parentheses 40 deep, more than limits.ddl_nesting (32)"]
    assert json.loads(nested["raw"])["sql"] == NESTED
    assert (nested["database"], nested["table"]) == ("shop", "orders")
    clauses = dead["the DDL text has 20000 clauses, more than limits.ddl_clauses (10000)"]
    assert json.loads(clauses["raw"])["sql"] == CLAUSES


def test_a_parser_error_of_any_kind_is_the_messages_dead_letter(spark, tmp_path):
    """With the nesting allowed, sqlglot's RecursionError is the message's, not the batch's."""
    runner = Runner(spark, job(tmp_path, limits={"ddl_nesting": 1000}))
    messages = [
        canal("INSERT", [order(1)], es=ES),
        ddl("ALTER", DEEP, es=ES + 1),
        canal("INSERT", [order(2)], es=ES + 2),
        canal("INSERT", [order(7)], es=ES + 3, table="items"),
        ddl("RENAME", '{"renameCollection": "shop.orders"}', es=ES + 4),  # no "to" (found by fuzz/ddl)
    ]
    runner.messages(tmp_path, messages)
    assert [r["id"] for r in runner.mirror()] == [1, 2]
    assert [r["id"] for r in runner.mirror(table="items")] == [7]
    dead = sorted(runner.dead_letters(), key=lambda r: "IndexError" in r["error"])
    assert [json.loads(r["raw"])["sql"] for r in dead] == [DEEP, '{"renameCollection": "shop.orders"}']
    assert "RecursionError" in dead[0]["error"] and "DDL not applied" in dead[0]["error"]
    assert "IndexError" in dead[1]["error"] and "DDL not applied" in dead[1]["error"]


def test_a_row_wider_than_limits_columns_is_its_dead_letter(spark, tmp_path):
    runner = Runner(spark, job(tmp_path, limits={"columns": 50}))
    types = {"id": "int(11)", **{f"c{i}": "int(11)" for i in range(60)}}
    wide = canal("INSERT", [{"id": "9", **{f"c{i}": str(i) for i in range(60)}}], es=ES + 1, types=types)
    runner.messages(
        tmp_path, [canal("INSERT", [order(1)], es=ES), wide, canal("INSERT", [order(2)], es=ES + 2)]
    )
    assert [r["id"] for r in runner.mirror()] == [1, 2]
    (dead,) = runner.dead_letters()
    assert dead["error"] == "the row image has 61 columns, more than limits.columns (50)"
    assert (dead["database"], dead["table"]) == ("shop", "orders")
    assert json.loads(dead["raw"])["data"][0]["c59"] == "59"


def test_new_tables_past_the_limit_are_dead_letters_with_a_warning(spark, tmp_path):
    from structlog.testing import capture_logs

    runner = Runner(spark, job(tmp_path, limits={"new_tables_per_batch": 3}))
    runner.messages(tmp_path, [canal("INSERT", [order(1)], es=ES)])  # shop.orders exists: not new
    messages = [canal("INSERT", [order(2)], es=ES + 1)]
    messages += [canal("INSERT", [order(i)], es=ES + 10 + i, table=f"t{i}") for i in range(5)]
    with capture_logs() as logs:
        runner.messages(tmp_path, messages)
    lake = tmp_path / "lake" / "shop"
    assert sorted(p.name for p in lake.iterdir()) == ["orders", "t0", "t1", "t2"]
    assert [r["id"] for r in runner.mirror()] == [1, 2]
    dead = sorted(runner.dead_letters(), key=lambda r: r["table"])
    assert [r["table"] for r in dead] == ["t3", "t4"]
    assert "more than limits.new_tables_per_batch (3)" in dead[0]["error"]
    assert json.loads(dead[0]["raw"])["table"] == "t3"
    (warning,) = [e for e in logs if "new_tables_per_batch" in e["event"]]
    assert warning["log_level"] == "warning" and warning["refused"] == 2
    # the next batch creates them (from new records, or a retry of the dead letters)
    runner.messages(tmp_path, [canal("INSERT", [order(9)], es=ES + 30, table="t3")])
    assert [r["id"] for r in runner.mirror(table="t3")] == [9]


def test_a_tablechanges_document_is_bounded_by_its_length_only():
    """tableChanges is JSON (commas everywhere, no parentheses): the DDL clause count does not apply."""
    import pyarrow as pa

    from replicator.dialects.base import DecodeOptions, decode

    columns = [{"name": f"c{i}", "typeName": "INT", "position": i, "optional": True} for i in range(4096)]
    document = json.dumps(
        [{"type": "CREATE", "table": {"columns": columns, "primaryKeyColumnNames": ["c0"]}}]
    )
    message = {**ddl("CREATE", "CREATE TABLE t (c0 int)", es=ES, table="t"), "tableChanges": document}
    raw = json.dumps(message).encode()
    records = pa.table({"raw": [raw], "source": ["m.jsonl"], "partition": [0], "offset": [1]})
    kept = decode(records, "canal-json", DecodeOptions())
    assert kept["error"].to_pylist() == [None] and kept["table_changes"].to_pylist() == [document]
    small = DecodeOptions(table_changes_bytes=len(document) - 1)
    refused = decode(records, "canal-json", small)
    assert refused["error"].to_pylist() == [
        f"the tableChanges document is {len(document)} bytes, more than limits.table_changes_bytes "
        f"({len(document) - 1})"
    ]
    assert refused["raw"].to_pylist() == [raw]
