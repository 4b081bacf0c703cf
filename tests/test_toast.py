"""PostgreSQL's unchanged TOASTed values through Debezium (issue 51): an UPDATE that leaves a large value
alone carries ``__debezium_unavailable_value`` (text, JSON) or its UTF-8 bytes (bytea, base64 in the JSON)
in its place. The mirror keeps the stored value (a partial update of the row), whether the value is in the
mirror already or arrived earlier in the same batch, with either writer, and counts such updates.

The messages have the shape Debezium 3.5's PostgreSQL connector (pgoutput, JsonConverter with schemas)
published in tests/test_e2e_postgres.py: the ``before``/``after`` field schemas, ``source`` with ``lsn``."""

from __future__ import annotations

import base64

import pytest

from replicator.dialects.unavailable import PLACEHOLDER
from tests.helpers import WRITERS, Runner, job

FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "int32", "optional": True, "field": "n"},
    {"type": "string", "optional": True, "field": "big"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1, "field": "doc"},
    {"type": "bytes", "optional": True, "field": "blob"},
]
SCHEMA = {
    "type": "struct",
    "name": "pg.public.toasty.Envelope",
    "fields": [
        {
            "type": "struct",
            "fields": FIELDS,
            "optional": True,
            "name": "pg.public.toasty.Value",
            "field": "before",
        },
        {
            "type": "struct",
            "fields": FIELDS,
            "optional": True,
            "name": "pg.public.toasty.Value",
            "field": "after",
        },
        {
            "type": "struct",
            "fields": [],
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
        },
        {"type": "string", "optional": False, "field": "op"},
    ],
}
BIG = "长" * 12_000
BLOB = bytes(range(256)) * 40 + b"\x00"
BYTES_PLACEHOLDER = base64.b64encode(PLACEHOLDER.encode()).decode()
LSN = iter(range(10_000_000, 20_000_000, 1000))


def message(op: str, after: dict | None, before: dict | None = None) -> dict:
    lsn = next(LSN)
    return {
        "schema": SCHEMA,
        "payload": {
            "before": before,
            "after": after,
            "source": {
                "version": "3.5.0.Final",
                "connector": "postgresql",
                "name": "pg",
                "ts_ms": 1_796_600_000_000 + lsn // 1000,
                "snapshot": "false",
                "db": "shop",
                "sequence": f'[null,"{lsn}"]',
                "schema": "public",
                "table": "toasty",
                "txId": lsn // 1000,
                "lsn": lsn,
            },
            "op": op,
            "ts_ms": 1_796_600_000_000 + lsn // 1000,
        },
    }


def row(key: int, n: int, big: str = BIG, doc: str | None = None, blob: bytes | None = BLOB) -> dict:
    return {
        "id": key,
        "n": n,
        "big": big,
        "doc": doc if doc is not None else f'{{"k": "{big[:50]}"}}',
        "blob": None if blob is None else base64.b64encode(blob).decode(),
    }


def untouched(key: int, n: int) -> dict:
    """An update of ``n`` alone, as Debezium publishes it for a row whose large values are TOASTed."""
    return {"id": key, "n": n, "big": PLACEHOLDER, "doc": PLACEHOLDER, "blob": BYTES_PLACEHOLDER}


@pytest.mark.parametrize("writer", WRITERS)
def test_unchanged_toast_values_keep_the_stored_ones(spark, tmp_path, writer):
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        target={"writer": writer},
        tables={"keys": {"shop.toasty": ["id"]}, "history": ["shop.toasty"]},
    )
    runner = Runner(spark, config)
    runner.messages(tmp_path, [message("r", row(k, k)) for k in (1, 2, 3)])
    # The values in the mirror already; in the same batch: a new value, then an update that leaves it alone.
    summary = runner.messages(
        tmp_path,
        [
            message("u", untouched(1, 101)),
            message("u", row(2, 2, big="new " * 3000, blob=b"\x00new")),
            message("u", untouched(2, 102)),
            message("u", untouched(3, 103)),
            message("u", untouched(3, 203)),
        ],
    )
    mirror = {r["id"]: r for r in runner.mirror("shop", "public/toasty")}
    assert {k: r["n"] for k, r in mirror.items()} == {1: 101, 2: 102, 3: 203}
    assert mirror[1]["big"] == mirror[3]["big"] == BIG
    assert mirror[2]["big"] == "new " * 3000
    assert mirror[1]["blob"] == mirror[3]["blob"] == BLOB
    assert mirror[2]["blob"] == b"\x00new"
    assert mirror[1]["doc"] == f'{{"k": "{BIG[:50]}"}}'
    assert all(PLACEHOLDER not in str(r.values()) for r in mirror.values())
    assert summary.tables["shop.public.toasty"]["partial_updates"] == 3
    assert "unavailable_lost" not in summary.tables["shop.public.toasty"]
    assert not runner.dead_letters()
    # The history table: every version of a partial update has the values of the version before it.
    from deltalake import DeltaTable

    history = DeltaTable(str(tmp_path / "lake" / "shop" / "public" / "toasty__history")).to_pyarrow_table()
    versions = sorted(history.to_pylist(), key=lambda v: (v["id"], v["_cdc_seq"]))
    assert [(v["id"], v["n"]) for v in versions] == [
        (1, 1), (1, 101), (2, 2), (2, 2), (2, 102), (3, 3), (3, 103), (3, 203)
    ]  # fmt: skip
    for v in versions:
        new = v["id"] == 2 and v["_cdc_op"] != "snapshot"  # key 2's update wrote new values
        big, blob = ("new " * 3000, b"\x00new") if new else (BIG, BLOB)
        assert (v["big"], v["blob"], v["doc"]) == (big, blob, f'{{"k": "{big[:50]}"}}'), (v["id"], v["n"])


def test_unchanged_toast_value_of_a_row_the_mirror_lacks_is_counted(spark, tmp_path, capsys):
    """A mirror started after the row's last full image (no snapshot): the value is unknown, left NULL and
    counted (``unavailable_lost``), the placeholder never written."""
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        tables={"keys": {"shop.toasty": ["id"]}},
    )
    runner = Runner(spark, config)
    runner.messages(tmp_path, [message("r", row(1, 1))])
    summary = runner.messages(tmp_path, [message("u", untouched(7, 70))])
    mirror = {r["id"]: r for r in runner.mirror("shop", "public/toasty")}
    assert mirror[7] == {**mirror[7], "n": 70, "big": None, "doc": None, "blob": None}
    assert summary.tables["shop.public.toasty"]["unavailable_lost"] == 3
    from replicator.commands.status import print_status

    capsys.readouterr()
    print_status(config)
    assert "1 partial updates kept unsent values from the mirror, 3 unsent values" in capsys.readouterr().out


@pytest.mark.parametrize("writer", WRITERS)
def test_a_key_change_finds_the_values_of_its_old_key_in_the_same_batch(spark, tmp_path, writer):
    """A mirror started late: the old key's full image, an update that leaves the values alone and the key
    change (Debezium: a delete of the old key and a create of the new one at one LSN, the create with
    placeholders) in one batch: the new key's row has the old key's values, none NULL nor counted lost."""
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        target={"writer": writer},
        tables={"keys": {"shop.toasty": ["id"]}},
    )
    runner = Runner(spark, config)
    first = [message("r", row(3, 3)), message("u", untouched(3, 103))]  # (in LSN order)
    gone = message("d", None, before={"id": 3, "n": None, "big": None, "doc": None, "blob": None})
    moved = message("c", untouched(30, 103))
    moved["payload"]["source"] = {**gone["payload"]["source"]}  # the same LSN
    summary = runner.messages(tmp_path, [*first, gone, moved, message("r", row(4, 4))])
    mirror = {r["id"]: r for r in runner.mirror("shop", "public/toasty")}
    assert set(mirror) == {30, 4}
    assert (mirror[30]["n"], mirror[30]["big"], mirror[30]["blob"]) == (103, BIG, BLOB)
    assert mirror[30]["doc"] == f'{{"k": "{BIG[:50]}"}}'
    assert "unavailable_lost" not in summary.tables["shop.public.toasty"]
