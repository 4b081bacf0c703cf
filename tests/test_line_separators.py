"""Text values holding a Unicode line separator (issue 48, item 6).

``str.splitlines`` ends a line at U+2028, U+2029, U+0085, \\x1c-\\x1e, \\x0b and \\x0c too. delta-rs writes
U+2028 unescaped in a commit's column statistics (legal JSON), so the restart check once read a valid
commit as damaged and refused every later run. Every JSON-lines reader now splits at LF alone
(replicator.jsonl): each dialect's values come through exact, the mirror holds them, a second run starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replicator.commands.inspect import FIELDS, decode_path, event_records
from replicator.jsonl import json_lines, split_lines
from tests import helpers
from tests.dialects.golden import FIXTURES, cases
from tests.helpers import canal, order, write_jsonl

# Every character str.splitlines ends a line at, besides \n and \r.
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]
ALL = "".join(SEPARATORS)
ES = 1_700_000_000_000


def test_split_lines_ends_lines_at_lf_alone_and_keeps_crlf_working():
    text = f"a{ALL}b\r\nc\n\n \t\r\n{ALL}\n"
    assert split_lines(text) == [f"a{ALL}b", "c", "", " \t", ALL]
    assert json_lines(text) == [(1, f"a{ALL}b"), (2, "c"), (5, ALL)]  # not JSON, but not blank either
    assert json_lines(text.encode()) == [(1, f"a{ALL}b".encode()), (2, b"c"), (5, ALL.encode())]


# ---- every dialect's values ---------------------------------------------------------------------------


def _replace(value: Any, old: str, new: str) -> Any:
    """``value`` with every string equal to ``old`` replaced; a string holding a JSON document (DRS's
    MongoDB ``value``) rewritten inside."""
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    if value == old:
        return new
    if isinstance(value, str) and value.startswith("{") and json.dumps(old)[1:-1] in value:
        try:
            return json.dumps(_replace(json.loads(value), old, new), ensure_ascii=False)
        except ValueError:
            return value
    return value


def _messages(case: Path) -> list[Any]:
    text = case.read_text(encoding="utf-8")
    if case.suffix == ".json":
        return [json.loads(text)]
    return [json.loads(line) for _n, line in json_lines(text)]


def _strings(rows: list[dict]) -> list[str]:
    """Text values of the decoded rows' images worth replacing (a word, not a number or a date)."""
    found = []
    for row in rows:
        for image in (row.get("after"), row.get("before")):
            for value in (image or {}).values():
                if (
                    isinstance(value, str)
                    and len(value) >= 3
                    and value[0].isalpha()
                    and value.replace(" ", "").isalnum()
                ):
                    found.append(value)
    return found


def _decoded(folder: Path, dialect: str) -> list[dict]:
    return event_records(decode_path(folder, dialect), FIELDS)


def _a_case(dialect: str, tmp_path: Path) -> tuple[list[dict], list[dict], str, str]:
    """The first fixture of the dialect with a text value in a row: its events with that value, and with
    the value holding every separator (the messages written as JSON lines with the separators unescaped
    where JSON allows it)."""
    for case in cases(dialect):
        if case.suffix not in (".json", ".jsonl") or "bad" in case.name:
            continue
        try:
            messages = _messages(case)
        except ValueError:
            continue
        before = tmp_path / f"{case.stem}-before"
        write_jsonl(before / "m.jsonl", messages)
        rows = _decoded(before, dialect)
        for old in _strings(rows):
            new = f"{old[:2]}{ALL}{old[2:]}{ALL}"
            after = tmp_path / f"{case.stem}-{old}"
            write_jsonl(after / "m.jsonl", _replace(messages, old, new))
            if any(s in (after / "m.jsonl").read_text(encoding="utf-8") for s in "\u2028\u2029\u0085"):
                return rows, _decoded(after, dialect), old, new
    raise AssertionError(f"no fixture of {dialect} has a text value in a row")


# DTS's Avro is binary: no lines to split. DRS's MongoDB rows hold a document's text: the next test.
JSON_DIALECTS = sorted(
    p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name not in ("ddl", "dts-avro", "drs-mongo")
)


@pytest.mark.parametrize("dialect", JSON_DIALECTS)
def test_every_dialect_decodes_values_with_line_separators_exactly(dialect, tmp_path):
    rows, changed, old, new = _a_case(dialect, tmp_path)
    assert len(changed) == len(rows)
    assert [r.get("error") for r in changed] == [r.get("error") for r in rows]
    expected = _replace(rows, old, new)
    for row, want in zip(changed, expected, strict=True):
        assert row.get("after") == want.get("after") and row.get("before") == want.get("before")


def test_a_mongodb_document_keeps_line_separators_exactly(tmp_path):
    """DRS's MongoDB message (seed 003 shape): the document is shell text inside a JSON string."""
    new = f"ba{ALL}z{ALL}"
    document = json.dumps({"_id": 1, "c1": new}, ensure_ascii=False)
    message = {
        "id": 256,
        "op": "INSERT",
        "dbType": "MongoDB",
        "db": "ljx",
        "coll": "ljx",
        "value": document.replace('"_id": 1', '"_id": ObjectId("64650cf67dc36a464e76e583")'),
        "where": None,
        "recordType": "insert",
        "extra": "insert",
        "es": 1684315111439,
        "ts": 1684315111576,
        "clusterTime": "1684344064:1",
    }
    write_jsonl(tmp_path / "in" / "m.jsonl", [message])
    assert "\u2028" in (tmp_path / "in" / "m.jsonl").read_text(encoding="utf-8")
    [row] = _decoded(tmp_path / "in", "drs-mongo")
    assert row.get("error") is None, row
    assert json.loads(row["after"]["document"])["c1"] == new


# ---- mirrored, restarted ----------------------------------------------------------------------------------


def debezium(i: int, name: str, op: str = "c") -> dict:
    return {
        "before": None,
        "after": {"id": i, "name": name},
        "source": {"connector": "mysql", "db": "inventory", "table": "products", "file": "f", "pos": i},
        "op": op,
        "ts_ms": ES + i,
    }


# One value per separator, the separator first (a column's statistics keep a value's first characters),
# alone, in the middle and all of them together.
VALUES = [*SEPARATORS, *(f"a{s}b" for s in SEPARATORS), ALL, f"x{ALL}y"]


@pytest.mark.parametrize("writer", helpers.WRITERS)
def test_values_with_line_separators_are_mirrored_and_the_job_restarts(in_process, tmp_path, capsys, writer):
    keys = "tables: {keys: {inventory.products: [id]}}\n"  # Debezium from files carries no key
    config = helpers.job_file(tmp_path, keys, name="separators", trigger=None)
    text = config.read_text().replace("dialect: canal-json", "dialect: auto")
    config.write_text(text.replace("target: {path: lake}", f"target: {{path: lake, writer: {writer}}}"))
    orders = [canal("INSERT", [order(i, name=v)], es=ES + i) for i, v in enumerate(VALUES, start=1)]
    products = [debezium(i, v) for i, v in enumerate(VALUES, start=1)]
    # \r\n line ends (JSON Lines allows them) in one file
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.jsonl").write_bytes(
        b"".join(json.dumps(m, ensure_ascii=False).encode() + b"\r\n" for m in orders)
    )
    write_jsonl(tmp_path / "landing" / "b.jsonl", products)
    argv = ["mirror", "--config", str(config), "--available-now"]

    def mirrored() -> dict[str, list[tuple]]:
        return {
            table: [
                (int(r["id"]), r["name"]) for r in helpers.delta_table(tmp_path / "lake" / table).to_pylist()
            ]
            for table in ("shop/orders", "inventory/products")
        }

    want = sorted(enumerate(VALUES, start=1))
    assert in_process(argv) == 0, capsys.readouterr()
    assert "0 dead letters" in capsys.readouterr().out
    assert {t: sorted(rows) for t, rows in mirrored().items()} == {
        "shop/orders": want,
        "inventory/products": want,
    }
    # The restart check reads the commit whose statistics start with a separator; the run goes on.
    updates = [debezium(i, f"{v}{v}", op="u") for i, v in enumerate(VALUES, start=1)]
    write_jsonl(tmp_path / "landing" / "c.jsonl", updates)
    assert in_process(argv) == 0, capsys.readouterr()
    assert "0 dead letters" in capsys.readouterr().out
    now = mirrored()
    assert sorted(now["shop/orders"]) == want
    assert sorted(now["inventory/products"]) == [(i, v + v) for i, v in want]
    # status and dead-letters read the same state (in this process: their commands end it with os._exit)
    from replicator.commands.deadletters import print_summary
    from replicator.commands.status import print_status
    from replicator.config import load_config

    assert print_status(load_config(config)) == 0
    assert "job separators: 2 tables" in capsys.readouterr().out
    assert print_summary(load_config(config)) == 0
    assert "0 dead letters pending" in capsys.readouterr().out
