"""The bad-input catalogue: every kind of bad record has one defined outcome, tested through the engine.

One micro-batch carries a good record and one record of each defect (canal-json, one record per line), so
the whole catalogue costs one batch. Outcomes (docs/operations.md, "Accounting and dead letters"):

| input | outcome |
|---|---|
| not JSON, truncated JSON, invalid UTF-8 | dead letter (decode) |
| wrong type of an ordering field (``"es": "abc"``) | dead letter naming the field |
| unknown op type | dead letter ``unknown op type`` |
| no primary key in the message (canal `pkNames: []`) nor in tables.keys | ``no primary key known`` |
| NULL primary key value | dead letter ``NULL or absent primary key column`` |
| key change (update of the key) | applied: the row moves |
| huge row (a 5 MB value) | applied |
| unknown column type | applied, the column kept as string, a warning logged |
| a DDL the parser cannot read | dead letter ``DDL not applied`` (the mirror keeps its schema) |
| a future timestamp | applied as is (the engine orders by position, never by the wall clock) |
| a decimal wider than its column | dead letter naming the column |

Accounting: per batch, the decoded items (events, filtered messages, undecodable records) equal
``applied + filtered + dead_letters``; ``records_in`` counts raw records; both are in ``status``.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from structlog.testing import capture_logs

from replicator.commands.status import collect_status
from tests.helpers import ORDER_TYPES, Runner, canal, ddl, job, order

ES = 1_700_000_000_000
NOT_JSON = "not JSON: the record does not parse as a JSON document"
HUGE = "x" * (5 * 1024 * 1024)


def catalogue() -> list[tuple[str, bytes, str | None]]:
    """(case, raw record, expected dead-letter error fragment or None when applied).

    Each fragment names the cause and the field or value at fault: a fragment as loose as ``"es"`` would
    match an unrelated error ("does not parse") and prove only that some dead letter was written."""

    def line(message: dict) -> bytes:
        return json.dumps(message, ensure_ascii=False).encode()

    wrong_es = canal("INSERT", [order(20)], es=ES)
    wrong_es["es"] = "abc"
    no_key = canal("INSERT", [order(1)], es=ES + 3, table="nokey")
    no_key["pkNames"] = []
    odd_types = {**ORDER_TYPES, "shape": "weird_type(3)"}
    return [
        ("good", line(canal("INSERT", [order(1, "a"), order(2, "b")], es=ES)), None),
        ("not json", b"this is not JSON", NOT_JSON),
        ("truncated json", line(canal("INSERT", [order(21)], es=ES + 1))[:40], NOT_JSON),
        ("invalid utf-8", b'{"data": [{"id": "22", "name": "\xff\xfe"}]}', "not valid UTF-8"),
        ("wrong type", line(wrong_es), 'malformed ordering field ["es"]'),
        ("unknown op", line(canal("MERGE", [order(23)], es=ES + 2)), 'unknown op type ["MERGE"]'),
        ("no key known", line(no_key), "no primary key known for shop.nokey"),
        (
            "null key",
            line(canal("INSERT", [{**order(24), "id": None}], es=ES + 4)),
            'NULL or absent primary key column in ["id"]',
        ),
        ("key change", line(canal("UPDATE", [order(7, "a")], old=[{"id": "1"}], es=ES + 5)), None),
        ("huge row", line(canal("INSERT", [order(3, HUGE)], es=ES + 6)), None),
        (
            "unknown column type",
            line(
                canal(
                    "INSERT",
                    [{**order(1, "s"), "shape": "POINT(1 2)"}],
                    es=ES + 7,
                    table="odd",
                    types=odd_types,
                )
            ),
            None,
        ),
        (
            "unreadable ddl",
            line(ddl("ALTER", "ALTER TABLE orders FROBNICATE the widgets", es=ES + 8)),
            "DDL not applied: sqlglot (mysql) cannot read the statement",
        ),
        (
            "future timestamp",
            line(canal("INSERT", [order(4, ts="2999-12-31 23:59:59.999")], es=4_102_444_800_000)),
            None,
        ),
        (
            "decimal too wide",
            line(canal("INSERT", [order(5, amount="123456789012.00")], es=ES + 9)),
            "column 'amount': value '123456789012.00' does not fit decimal128(10, 2)",
        ),
    ]


# decoded items per case: the good message has two rows; every other record one
ITEMS = {"good": 2}


@pytest.fixture(scope="module")
def outcome(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    folder = root / "in"
    folder.mkdir()
    cases = catalogue()
    (folder / "m.jsonl").write_bytes(b"\n".join(raw for _case, raw, _err in cases) + b"\n")
    runner = Runner(spark, job(root))
    with capture_logs() as logs:
        summary = runner.batch(folder)
    return runner, summary, cases, logs


def dead_by_line(runner: Runner) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for d in runner.dead_letters():
        found.setdefault(d["offset"], []).append(d["error"])
    return found


def test_each_defect_has_its_outcome(outcome):
    runner, _summary, cases, _logs = outcome
    dead = dead_by_line(runner)
    wrong = []
    for line, (case, _raw, expected) in enumerate(cases, start=1):
        errors = dead.get(line, [])
        if (expected is None and errors) or (expected and not (len(errors) == 1 and expected in errors[0])):
            wrong.append((case, expected, errors))
    assert wrong == []


def test_applied_cases_reach_the_mirror(outcome):
    runner, _summary, _cases, _logs = outcome
    rows = {r["id"]: r for r in runner.mirror()}
    assert sorted(rows) == [2, 3, 4, 7]  # 1 moved to 7; 5 (too wide), 20..24 dead
    assert rows[3]["name"] == HUGE
    assert rows[4]["ts"].year == 2999
    assert rows[7]["amount"] == Decimal("1.00")
    odd = runner.mirror(table="odd")
    # datetime(3) "2024-01-01 00:00:00.000": a DATETIME is a wall clock, stored without a zone
    assert odd == [
        {
            "id": 1,
            "name": "s",
            "amount": Decimal("1.00"),
            "ts": dt.datetime(2024, 1, 1),
            "shape": "POINT(1 2)",
        }
    ]
    assert [str(r["amount"]) for r in (rows[7], odd[0])] == ["1.00", "1.00"]  # the column's scale, 2


def test_unknown_column_type_logs_its_warning(outcome):
    """The catalogue promises a warning for a column of an unknown type, naming table, column and type."""
    _runner, _summary, _cases, logs = outcome
    warnings = [e for e in logs if e["log_level"] == "warning" and "unknown column type" in e["event"]]
    assert [(e["table"], e["column"], e["source_type"]) for e in warnings] == [
        ("shop.odd", "shape", "weird_type(3)")
    ]


def test_unreadable_ddl_leaves_the_schema(outcome):
    runner, _summary, _cases, _logs = outcome
    assert set(runner.mirror(cdc=False)[0]) == {"id", "name", "amount", "ts"}


def test_accounting_adds_up_in_summary_and_status(outcome):
    runner, summary, cases, _logs = outcome
    items = sum(ITEMS.get(case, 1) for case, _raw, _err in cases)
    dead = sum(1 for _c, _r, err in cases if err is not None)
    assert summary.records_in == len(cases)
    assert summary.dead_letters == dead == len(runner.dead_letters())
    assert summary.applied + summary.filtered + summary.dead_letters == items
    status = collect_status(runner.config)
    batch = status["batches"][-1]
    assert (batch["records_in"], batch["applied"], batch["filtered"], batch["dead_letters"]) == (
        summary.records_in,
        summary.applied,
        summary.filtered,
        summary.dead_letters,
    )
    assert status["dead_letters"] == dead


def test_every_dead_letter_keeps_its_raw_record(outcome):
    """Decode-stage and apply-stage dead letters alike carry the record's bytes as received."""
    runner, _summary, cases, _logs = outcome
    by_line = {line: raw for line, (_case, raw, _err) in enumerate(cases, start=1)}
    letters = runner.dead_letters()
    # the engine's (apply-stage) dead letters are among them: their dialect is not known
    assert any(d["dialect"] is None for d in letters)
    assert any(d["dialect"] is not None for d in letters)
    assert all(d["raw"] == by_line[d["offset"]] for d in letters)
