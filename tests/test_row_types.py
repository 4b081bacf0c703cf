"""Types that change without a DDL event (issue 51): Debezium's PostgreSQL connector publishes no schema
changes, only rows whose schemas declare the new type. After ``ALTER COLUMN c TYPE bigint`` and
``ALTER COLUMN n TYPE numeric(12,4)`` (as that connector published them in tests/test_e2e_postgres.py) the
mirror's columns widen, so a value past the old type is applied, not a dead letter; ``fail`` stops;
``ignore`` keeps the column (the value is then a dead letter naming it)."""

from __future__ import annotations

import base64
import itertools

import pyarrow as pa
import pytest

from tests.helpers import Runner, job

LSN = itertools.count(30_000_000, 1000)


def decimal_field(name: str, precision: int, scale: int) -> dict:
    return {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        "field": name,
    }


def fields(c_type: str, precision: int, scale: int) -> list[dict]:
    return [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": c_type, "optional": True, "field": "c"},
        decimal_field("n", precision, scale),
    ]


def decimal(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(16, "big", signed=True).lstrip(b"\x00") or b"\x00").decode()


def message(op: str, after: dict, columns: list[dict]) -> dict:
    lsn = next(LSN)
    envelope = [
        {"type": "struct", "fields": columns, "optional": True, "field": "before"},
        {"type": "struct", "fields": columns, "optional": True, "field": "after"},
        {"type": "struct", "fields": [], "optional": False, "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
    ]
    return {
        "schema": {"type": "struct", "fields": envelope, "name": "pg.public.evolving.Envelope"},
        "payload": {
            "before": None,
            "after": after,
            "source": {
                "connector": "postgresql",
                "db": "shop",
                "schema": "public",
                "table": "evolving",
                "lsn": lsn,
                "ts_ms": 1_796_600_000_000 + lsn // 1000,
                "snapshot": "false",
            },
            "op": op,
            "ts_ms": 1_796_600_000_000 + lsn // 1000,
        },
    }


def run(spark, tmp_path, policy: str):
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        tables={"keys": {"shop.evolving": ["id"]}},
        schema_evolution=policy,
    )
    runner = Runner(spark, config)
    before = fields("int32", 10, 2)
    runner.messages(tmp_path, [message("r", {"id": 1, "c": 7, "n": decimal(125)}, before)])
    after = fields("int64", 12, 4)
    wide = {"id": 2, "c": 2**40, "n": decimal(123456781234)}
    return runner, runner.messages, wide, after


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_row_schemas_widen_the_mirror(spark, tmp_path, policy):
    runner, send, wide, after = run(spark, tmp_path, policy)
    send(tmp_path, [message("c", wide, after)])
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "lake" / "shop" / "public" / "evolving")).to_pyarrow_table()
    assert table.schema.field("c").type == pa.int64()
    assert table.schema.field("n").type == pa.decimal128(12, 4)
    rows = {r["id"]: r for r in table.to_pylist()}
    assert rows[1]["c"] == 7 and str(rows[1]["n"]) == "1.2500"
    assert rows[2]["c"] == 2**40 and str(rows[2]["n"]) == "12345678.1234"
    assert not runner.dead_letters()


def test_ignore_keeps_the_column(spark, tmp_path):
    runner, send, wide, after = run(spark, tmp_path, "ignore")
    send(tmp_path, [message("c", wide, after)])
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "lake" / "shop" / "public" / "evolving")).to_pyarrow_table()
    assert table.schema.field("c").type == pa.int32()
    assert [d["table"] for d in runner.dead_letters()] == ["evolving"]


def test_a_new_column_with_a_default_fills_the_rows_already_there(spark, tmp_path):
    """``ADD COLUMN e text DEFAULT 'dflt'`` arrives as a field with ``"default": "dflt"`` in the next row's
    schema (Debezium 3.5's PostgreSQL connector, tests/test_e2e_postgres.py): the rows the mirror holds take
    the default, as the database's rows did; rows with their own value keep it."""
    _runner, send, _wide, _after = run(spark, tmp_path, "lenient")
    send(tmp_path, [message("r", {"id": 2, "c": 8, "n": decimal(1)}, fields("int32", 10, 2))])
    with_e = [*fields("int32", 10, 2), {"type": "string", "optional": True, "default": "dflt", "field": "e"}]
    summary = send(
        tmp_path,
        [
            message("u", {"id": 1, "c": 70, "n": decimal(125), "e": "dflt"}, with_e),
            message("c", {"id": 3, "c": 9, "n": decimal(1), "e": "own"}, with_e),
        ],
    )
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "lake" / "shop" / "public" / "evolving")).to_pyarrow_table()
    assert {r["id"]: r["e"] for r in table.to_pylist()} == {1: "dflt", 2: "dflt", 3: "own"}
    assert summary.tables["shop.public.evolving"]["defaults"][0]["rows_filled"] >= 1


def with_default(name: str, default: str | None) -> list[dict]:
    column = {"type": "string", "optional": True, "field": name}
    return [*fields("int32", 10, 2), column if default is None else {**column, "default": default}]


def mirror(tmp_path, history: bool = False) -> dict:
    from deltalake import DeltaTable

    name = "evolving__history" if history else "evolving"
    table = DeltaTable(str(tmp_path / "lake" / "shop" / "public" / name)).to_pyarrow_table()
    return {(r["id"], r.get("_cdc_current")): r for r in table.to_pylist()}


def test_a_late_start_gives_the_default_to_the_older_rows_of_its_batch(spark, tmp_path):
    """A mirror started late reads the row written before ``ADD COLUMN e DEFAULT 'dflt'`` (its image without
    ``e``) and the first rows with the column in one batch (tests/test_e2e_postgres.py's late start): the
    older row takes the default, in the mirror and as the history's current version; later batches' rows
    older than the first with the column take it too (the recorded fill)."""
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        tables={"keys": {"shop.evolving": ["id"]}, "history": ["shop.evolving"]},
        schema_evolution="evolve",
    )
    runner = Runner(spark, config)
    older = message("r", {"id": 2, "c": 8, "n": decimal(1)}, fields("int32", 10, 2))
    late = message("r", {"id": 4, "c": 8, "n": decimal(1)}, fields("int32", 10, 2))  # older, delivered later
    with_e = with_default("e", "dflt")
    summary = runner.messages(
        tmp_path,
        [
            older,
            message("c", {"id": 1, "c": 70, "n": decimal(125), "e": "dflt"}, with_e),
            message("c", {"id": 3, "c": 9, "n": decimal(1), "e": "own"}, with_e),
        ],
    )
    assert {k[0]: r["e"] for k, r in mirror(tmp_path).items()} == {1: "dflt", 2: "dflt", 3: "own"}
    assert {k[0]: r["e"] for k, r in mirror(tmp_path, history=True).items() if k[1]}[2] == "dflt"
    [note] = summary.tables["shop.public.evolving"]["defaults"]
    assert (note["column"], note["default"], note["rows_filled"]) == ("e", "dflt", 1)
    runner.messages(tmp_path, [late])
    assert mirror(tmp_path)[(4, None)]["e"] == "dflt"
    assert not runner.dead_letters()


def test_the_older_rows_of_a_batch_take_the_default_of_a_column_new_to_the_mirror(spark, tmp_path):
    """The mirror has rows; one batch brings a row written before the ADD COLUMN and the first rows with
    the column: the stored row and the batch's older row take the default."""
    _runner, send, _wide, _after = run(spark, tmp_path, "lenient")
    with_e = with_default("e", "dflt")
    send(
        tmp_path,
        [
            message("c", {"id": 2, "c": 8, "n": decimal(1)}, fields("int32", 10, 2)),
            message("c", {"id": 3, "c": 9, "n": decimal(1), "e": None}, with_e),
        ],
    )
    assert {k[0]: r["e"] for k, r in mirror(tmp_path).items()} == {1: "dflt", 2: "dflt", 3: None}


def test_a_default_set_after_the_column_was_added_fills_no_row(spark, tmp_path):
    """``ADD COLUMN plain text`` (no default), a row with ``plain`` NULL, then ``ALTER COLUMN plain SET
    DEFAULT 'x'``, all in one batch of a new mirror: SET DEFAULT changes no row, the NULL stays."""
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        tables={"keys": {"shop.evolving": ["id"]}},
    )
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            message("c", {"id": 1, "c": 1, "n": decimal(1), "plain": None}, with_default("plain", None)),
            message("c", {"id": 2, "c": 2, "n": decimal(1), "plain": "y"}, with_default("plain", "x")),
        ],
    )
    assert {k[0]: r["plain"] for k, r in mirror(tmp_path).items()} == {1: None, 2: "y"}


def test_fail_stops_at_a_widened_type_and_at_a_new_column(spark, tmp_path):
    """``schema_evolution: fail``: a row schema that widens a column, or brings a column (with a default),
    stops the job naming the table and the columns, before anything of it is written."""
    from replicator.errors import SchemaChangeFailed

    _runner, send, wide, after = run(spark, tmp_path, "fail")
    with pytest.raises(SchemaChangeFailed, match=r"\['c', 'n'\].*shop\.public\.evolving"):
        send(tmp_path, [message("c", wide, after)])
    assert [r["c"] for r in mirror(tmp_path).values()] == [7]
    other = tmp_path / "new-column"  # (a job stopped by fail stays stopped: another one)
    _runner, send, _wide, _after = run(spark, other, "fail")
    with pytest.raises(SchemaChangeFailed, match=r"new columns \['e'\] in rows of shop\.public\.evolving"):
        send(other, [message("c", {"id": 3, "c": 9, "n": decimal(1), "e": "x"}, with_default("e", "dflt"))])
    assert list(mirror(other)) == [(1, None)] and "e" not in mirror(other)[(1, None)]


# A batch with this many DML events of a table is typed by the fold tasks (replicator.engine
# TYPED_ON_EXECUTORS, not patched: the real threshold, ~10 s a test).
LARGE = 10_000


def large_batch(first: int) -> list[dict]:
    """LARGE events: rows written before ``ADD COLUMN e text DEFAULT 'dflt'`` (images without ``e``), then
    two rows with the column, one carrying the default, one its own value."""
    older = [
        message("r", {"id": i, "c": i, "n": decimal(i)}, fields("int32", 10, 2))
        for i in range(first, first + LARGE - 2)
    ]
    with_e = with_default("e", "dflt")
    return [
        *older,
        message("c", {"id": first + LARGE - 2, "c": 1, "n": decimal(1), "e": "dflt"}, with_e),
        message("c", {"id": first + LARGE - 1, "c": 2, "n": decimal(2), "e": "own"}, with_e),
    ]


def defaults_job(spark, tmp_path, monkeypatch) -> tuple[Runner, list]:
    """A runner, and the tables each batch planned typed by the fold tasks and written by them."""
    config = job(
        tmp_path,
        source={"type": "files", "path": "landing", "dialect": "debezium"},
        tables={"keys": {"shop.evolving": ["id"]}},
    )
    runner = Runner(spark, config)
    planned: list = []
    real = runner.engine._typing

    def typing(*args):
        typed, writes, stages = real(*args)
        planned.append(([t[2] for t, _schema in typed], [t[2] for t, _uri in writes]))
        return typed, writes, stages

    monkeypatch.setattr(runner.engine, "_typing", typing)
    return runner, planned


def test_a_new_mirrors_large_first_batch_gives_the_default_to_its_older_rows(spark, tmp_path, monkeypatch):
    """A table first seen in a batch the fold tasks would type and write (>= TYPED_ON_EXECUTORS events),
    whose rows bring a column with a default mid-batch: its rows older than the first with the column take
    the default, as in a small batch (the driver applies such a table: Engine._typing)."""
    runner, planned = defaults_job(spark, tmp_path, monkeypatch)
    summary = runner.messages(tmp_path, large_batch(1))
    assert planned == [([], [])]  # (one schema's snapshot of as many rows: [(["evolving"], ["evolving"])])
    values = {k[0]: r["e"] for k, r in mirror(tmp_path).items()}
    assert len(values) == LARGE and summary.applied == LARGE
    assert values[LARGE] == "own" and values[LARGE - 1] == "dflt"
    assert {e for i, e in values.items() if i < LARGE - 1} == {"dflt"}
    [note] = summary.tables["shop.public.evolving"]["defaults"]
    assert (note["column"], note["default"], note["rows_filled"]) == ("e", "dflt", LARGE - 2)
    assert not runner.dead_letters()


def test_an_existing_mirrors_large_batch_gives_the_default_to_its_older_rows(spark, tmp_path, monkeypatch):
    """The same batch for a table with a mirror (typed by the fold tasks against its schema): the stored
    row and the batch's older rows take the default."""
    runner, planned = defaults_job(spark, tmp_path, monkeypatch)
    runner.messages(tmp_path, [message("r", {"id": 0, "c": 0, "n": decimal(0)}, fields("int32", 10, 2))])
    summary = runner.messages(tmp_path, large_batch(1))
    assert planned[-1] == (["evolving"], [])  # typed by the fold tasks against the mirror's schema
    values = {k[0]: r["e"] for k, r in mirror(tmp_path).items()}
    assert len(values) == LARGE + 1 and summary.applied == LARGE
    assert values[LARGE] == "own"
    assert {e for i, e in values.items() if i < LARGE} == {"dflt"}
    assert not runner.dead_letters()


@pytest.mark.parametrize("added", [False, True])
def test_a_new_table_is_written_by_the_fold_tasks_only_with_one_column_set(
    spark, tmp_path, monkeypatch, added
):
    """The plan itself (threshold patched to 1 event): a new table whose rows share one column set is
    written by the fold tasks; one whose rows bring a column mid-batch is applied by the driver."""
    from replicator import engine

    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 1)
    runner, planned = defaults_job(spark, tmp_path, monkeypatch)
    first = message("r", {"id": 1, "c": 1, "n": decimal(1)}, fields("int32", 10, 2))
    if added:
        second = message("c", {"id": 2, "c": 2, "n": decimal(2), "e": "own"}, with_default("e", "dflt"))
    else:
        second = message("c", {"id": 2, "c": 2, "n": decimal(2)}, fields("int32", 10, 2))
    runner.messages(tmp_path, [first, second])
    assert planned == ([([], [])] if added else [(["evolving"], ["evolving"])])
    assert mirror(tmp_path)[(1, None)].get("e") == ("dflt" if added else None)
