"""Golden-file harness: ``tests/fixtures/<dialect>/<case>.(json|jsonl|b64)`` with ``<case>.expected.json``.

Each expected file holds the list of decoded events (replicator.commands.inspect.event_records) of its
input. A fixture folder is decoded once per (folder, dialect) and split by file, to keep the suite fast.
Error rows hold only what a dead letter carries (ERROR_FIELDS).
``REPLICATOR_REGOLD=1`` writes missing expected files from the current output: review them by hand
against the vendor document before committing; a golden file is a claim about the format.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest

from replicator.commands.inspect import FIELDS, decode_path, event_records
from replicator.dialects import DecodeOptions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
INPUT_SUFFIXES = (".json", ".jsonl", ".b64", ".avro")


def cases(folder: str) -> list[Path]:
    root = FIXTURES / folder
    if not root.exists():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.suffix in INPUT_SUFFIXES and not p.name.endswith(".expected.json") and not p.name.startswith("_")
    )


def params(folder: str) -> list:
    return [pytest.param(p, id=p.stem) for p in cases(folder)]


# An error row becomes a dead letter carrying these (and the raw record); its other fields are not part of
# any contract, so golden files hold these alone for error rows.
ERROR_FIELDS = ("dialect", "database", "schema", "table", "error")


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k in ERROR_FIELDS} if "error" in r else r for r in rows]


@cache
def _decoded_folder(folder: Path, dialect: str, options: DecodeOptions | None) -> dict[str, list[dict]]:
    records = event_records(decode_path(folder, dialect, options), (*FIELDS, "coordinates"))
    by_file: dict[str, list[dict]] = {}
    for record in records:
        source = record.pop("coordinates")["source"]
        by_file.setdefault(Path(source.removeprefix("file:")).name, []).append(record)
    return by_file


def check_golden(case: Path, dialect: str, options: DecodeOptions | None = None) -> list[dict]:
    expected_file = case.with_name(case.name.rsplit(".", 1)[0] + ".expected.json")
    actual = _decoded_folder(case.parent, dialect, options).get(case.name, [])
    if not expected_file.exists():
        if os.environ.get("REPLICATOR_REGOLD") == "1":
            expected_file.write_text(
                json.dumps(comparable(actual), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
        pytest.fail(f"no expected file {expected_file.name} for {case.name}")
    expected = json.loads(expected_file.read_text(encoding="utf-8"))
    assert comparable(actual) == expected
    return actual


def raw_records(lines: list, source: str = "test.jsonl", partition: int = 0):  # type: ignore[no-untyped-def]
    """Raw records (sources.raw_schema) of messages: dicts (as JSON), str or bytes; offsets 1, 2, ..."""
    import pyarrow as pa

    from replicator.sources import raw_schema

    raws = [
        line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
        for line in lines
    ]
    n = len(raws)
    return pa.table(
        [raws, [None] * n, [source] * n, [partition] * n, list(range(1, n + 1))], schema=raw_schema()
    )
