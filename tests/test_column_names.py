"""Source column names -> mirror column names (replicator.columns) through the real engine.

Delta compares column names without case, and the engine's own columns start with ``_cdc_``: a row with ``v``
and ``V``, a ``V`` arriving at a table with ``v``, a case-only RENAME COLUMN, or a source column named like
an engine column used to stop every table with delta-rs's "Duplicate field name (case-insensitive)" and stop
again at every restart. Each case here checks the mirror (by source names, read back through the recorded
mapping), the mapping itself, and that a restart (a new engine over the same folders) goes on.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from replicator.columns import ColumnMap, renamed_columns, source_name
from tests.helpers import WRITERS, Runner, canal, ddl, job

ES = 1_700_000_000_000
_es = itertools.count(ES, 10)


def dml(type_: str, rows: list[dict[str, Any]], types: dict[str, str], **kw: Any) -> dict[str, Any]:
    return canal(type_, rows, es=next(_es), types=types, **kw)


def stmt(kind: str, sql: str) -> dict[str, Any]:
    return ddl(kind, sql, es=next(_es))


def make(spark, tmp_path: Path, writer: str = "delta-rs", **overrides: Any) -> Runner:
    return Runner(spark, job(tmp_path, target={"writer": writer}, **overrides))


def restart(runner: Runner) -> Runner:
    """A new engine over the same job and folders (a restart of the job)."""
    fresh = Runner(runner.spark, runner.config)
    fresh.batch_id = runner.batch_id
    return fresh


def schema(runner: Runner, table: str = "orders") -> pa.Schema:
    path = Path(runner.config.target.path) / "shop" / table
    return pa.schema(DeltaTable(str(path)).schema().to_arrow())


def by_source(runner: Runner, table: str = "orders") -> list[dict[str, Any]]:
    """The mirror's rows keyed by source column names (the mapping read back from the mirror)."""
    names = {f.name: source_name(f) for f in pa.schema(schema(runner, table))}
    return [
        {names[k]: v for k, v in row.items() if not k.startswith("_cdc_")}
        for row in runner.mirror(table=table, cdc=True)
    ]


def test_the_mapping_keeps_names_and_names_collisions_apart():
    names = ColumnMap(
        [pa.field("id", pa.int32()), pa.field("v", pa.string()), pa.field("_cdc_op", pa.string())]
    )
    assert [names.assign(n) for n in ("id", "v", "V", "_cdc_op", "_CDC_SEQ", "V~1", "_cdc_source_table")] == [
        "id",
        "v",
        "V~1",
        "~_cdc_op",
        "~_CDC_SEQ",
        "V~1~1",
        "_cdc_source_table",  # (the engine's own entry of a routed row)
    ]
    assert (
        ColumnMap([pa.field("V~1", pa.string(), metadata={"replicator.source_name": "V"})]).get("V") == "V~1"
    )
    # a source's _cdc_ column a mirror took as it was before the mapping keeps its name
    assert ColumnMap([pa.field("_cdc_note", pa.string())]).get("_cdc_note") == "_cdc_note"


def test_the_engine_names_the_mapping_knows_are_the_engine_s():
    from replicator.apply import documents
    from replicator.apply.history.versions import HISTORY_COLUMNS
    from replicator.apply.table import TOMBSTONE_DELETED_AT
    from replicator.columns import ENGINE_COLUMNS, ENGINE_ENTRIES
    from replicator.model import CDC_COLUMNS
    from replicator.routing import SOURCE_COLUMNS

    assert ENGINE_COLUMNS == {*CDC_COLUMNS, *HISTORY_COLUMNS, TOMBSTONE_DELETED_AT}
    assert ENGINE_ENTRIES == {*SOURCE_COLUMNS, documents.FIELDS, documents.PARTIAL}


@pytest.mark.parametrize("writer", WRITERS)
def test_v_and_V_in_one_row(spark, tmp_path, writer, capsys):
    runner = make(spark, tmp_path, writer)
    types = {"id": "int", "v": "varchar(5)", "V": "varchar(5)"}
    runner.messages(tmp_path, [dml("INSERT", [{"id": "1", "v": "a", "V": "B"}], types)])
    assert [f.name for f in schema(runner)][:3] == ["id", "v", "V~1"]
    assert renamed_columns(schema(runner)) == ["V -> V~1"]
    assert by_source(runner) == [{"id": 1, "v": "a", "V": "B"}]
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            dml("UPDATE", [{"id": "1", "v": "a2", "V": "B2"}], types, old=[{"v": "a", "V": "B"}]),
            dml("INSERT", [{"id": "2", "v": "c", "V": None}], types),
        ],
    )
    assert by_source(runner) == [{"id": 1, "v": "a2", "V": "B2"}, {"id": 2, "v": "c", "V": None}]
    assert runner.dead_letters() == []
    if writer == "delta-rs":  # (status and show read the mirrors through delta-rs either way)
        from replicator.commands.status import collect_status, print_tables

        [status] = collect_status(runner.config)["tables"]
        assert status["columns"] == ["V -> V~1"]
        assert print_tables(runner.config) == 0
        assert "columns: V -> V~1" in capsys.readouterr().out


@pytest.mark.parametrize("writer", WRITERS)
def test_V_arriving_later_and_by_add_column(spark, tmp_path, writer):
    runner = make(spark, tmp_path, writer)
    small = {"id": "int", "v": "varchar(5)"}
    runner.messages(tmp_path, [dml("INSERT", [{"id": "1", "v": "a"}], small)])
    runner.messages(
        tmp_path, [dml("INSERT", [{"id": "2", "v": "b", "V": "x"}], {**small, "V": "varchar(5)"})]
    )
    assert renamed_columns(schema(runner)) == ["V -> V~1"]
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            stmt("ALTER", "ALTER TABLE orders ADD COLUMN `Id` int"),
            dml(
                "INSERT",
                [{"id": "3", "v": "c", "V": "y", "Id": "30"}],
                {**small, "V": "varchar(5)", "Id": "int"},
            ),
        ],
    )
    assert renamed_columns(schema(runner)) == ["V -> V~1", "Id -> Id~1"]
    assert by_source(runner) == [
        {"id": 1, "v": "a", "V": None, "Id": None},
        {"id": 2, "v": "b", "V": "x", "Id": None},
        {"id": 3, "v": "c", "V": "y", "Id": 30},
    ]
    assert runner.dead_letters() == []


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_case_only_rename_incl_the_key(spark, tmp_path, policy):
    runner = make(spark, tmp_path, schema_evolution=policy)
    types = {"id": "int", "v": "varchar(5)"}
    runner.messages(
        tmp_path,
        [
            dml("INSERT", [{"id": "1", "v": "a"}, {"id": "2", "v": "b"}, {"id": "4", "v": "d"}], types),
            dml("DELETE", [{"id": "4", "v": "d"}], types),  # (a tombstone of the key's old name)
        ],
    )
    runner.messages(
        tmp_path,
        [
            stmt("ALTER", "ALTER TABLE shop.orders RENAME COLUMN v TO V"),
            stmt("ALTER", "ALTER TABLE shop.orders RENAME COLUMN id TO ID"),
            dml("INSERT", [{"ID": "3", "V": "c"}], {"ID": "int", "V": "varchar(5)"}, pk=["ID"]),
            dml("DELETE", [{"ID": "1", "V": "a"}], {"ID": "int", "V": "varchar(5)"}, pk=["ID"]),
        ],
    )
    assert [f.name for f in schema(runner)][:2] == ["ID", "V"]
    assert renamed_columns(schema(runner)) == []
    assert by_source(runner) == [{"ID": 2, "V": "b"}, {"ID": 3, "V": "c"}]
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            dml(
                "UPDATE",
                [{"ID": "2", "V": "b2"}],
                {"ID": "int", "V": "varchar(5)"},
                pk=["ID"],
                old=[{"V": "b"}],
            )
        ],
    )
    assert by_source(runner) == [{"ID": 2, "V": "b2"}, {"ID": 3, "V": "c"}]
    assert runner.dead_letters() == []


@pytest.mark.parametrize("history", [False, True])
def test_engine_names_as_source_columns(spark, tmp_path, history):
    runner = make(spark, tmp_path, **({"tables": {"history": ["shop.*"]}} if history else {}))
    types = {"id": "int", "_cdc_op": "varchar(5)", "_CDC_Seq": "int", "_cdc_current": "varchar(5)"}
    runner.messages(
        tmp_path,
        [
            dml("INSERT", [{"id": "1", "_cdc_op": "mine", "_CDC_Seq": "7", "_cdc_current": "no"}], types),
            dml("UPDATE", [{"id": "1", "_cdc_op": "mine2", "_CDC_Seq": "8", "_cdc_current": "no"}], types),
        ],
    )
    assert renamed_columns(schema(runner)) == [
        "_cdc_op -> ~_cdc_op",
        "_CDC_Seq -> ~_CDC_Seq",
        "_cdc_current -> ~_cdc_current",
    ]
    assert by_source(runner) == [{"id": 1, "_cdc_op": "mine2", "_CDC_Seq": 8, "_cdc_current": "no"}]
    assert runner.mirror(cdc=True)[0]["_cdc_op"] == "update"
    if history:
        versions = Runner(spark, runner.config).mirror(table="orders__history", cdc=True)
        assert sorted((v["~_cdc_op"], v["_cdc_current"]) for v in versions) == [
            ("mine", False),
            ("mine2", True),
        ]
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            stmt("ALTER", "ALTER TABLE orders DROP COLUMN _cdc_current"),
            stmt("ALTER", "ALTER TABLE orders RENAME COLUMN _cdc_op TO _cdc_mode"),
            dml(
                "INSERT",
                [{"id": "2", "_cdc_mode": "m", "_CDC_Seq": "9"}],
                {**types, "_cdc_mode": "varchar(5)"},
            ),
        ],
    )
    assert by_source(runner) == [
        {"id": 1, "_cdc_op": "mine2", "_CDC_Seq": 8, "_cdc_current": "no", "_cdc_mode": None},
        {"id": 2, "_cdc_op": None, "_CDC_Seq": 9, "_cdc_current": None, "_cdc_mode": "m"},
    ]
    assert runner.dead_letters() == []


def test_bootstrap_files_then_events(spark, tmp_path):
    import json

    from replicator.commands.bootstrap import bootstrap

    config = job(tmp_path)
    folder = tmp_path / "snap" / "files"
    folder.mkdir(parents=True)
    (folder / "a.csv").write_text("id,v,V,_cdc_op\n1,a,B,x\n2,c,D,y\n", encoding="utf-8")
    manifest = tmp_path / "snap" / "manifest.json"
    types = {"id": "int", "v": "varchar(5)", "V": "varchar(5)", "_cdc_op": "varchar(5)"}
    table = {"database": "shop", "table": "orders", "files": ["files/*.csv"], "key": ["id"], "types": types}
    manifest.write_text(json.dumps({"position": "mysql-bin.000001:4", "tables": [table]}), encoding="utf-8")
    bootstrap(config, manifest, progress=False)
    runner = Runner(spark, config)
    assert renamed_columns(schema(runner)) == ["V -> V~1", "_cdc_op -> ~_cdc_op"]
    runner.messages(
        tmp_path,
        [
            canal(
                "UPDATE",
                [{"id": "2", "v": "c2", "V": "D2", "_cdc_op": "z"}],
                es=ES,
                types=types,
                old=[{"v": "c"}],
            )
        ],
    )
    assert by_source(runner) == [
        {"id": 1, "v": "a", "V": "B", "_cdc_op": "x"},
        {"id": 2, "v": "c2", "V": "D2", "_cdc_op": "z"},
    ]


def test_ddl_on_engine_named_source_columns_under_evolve(spark, tmp_path):
    runner = make(spark, tmp_path, schema_evolution="evolve")
    types = {"id": "int", "_cdc_op": "varchar(5)", "_cdc_seq": "varchar(5)"}
    runner.messages(tmp_path, [dml("INSERT", [{"id": "1", "_cdc_op": "a", "_cdc_seq": "s"}], types)])
    runner.messages(
        tmp_path,
        [
            stmt("ALTER", "ALTER TABLE orders DROP COLUMN _cdc_seq"),
            stmt("ALTER", "ALTER TABLE orders RENAME COLUMN _cdc_op TO _CDC_OP"),
            stmt("ALTER", "ALTER TABLE orders MODIFY COLUMN _CDC_OP varchar(9)"),
            dml("INSERT", [{"id": "2", "_CDC_OP": "b"}], {"id": "int", "_CDC_OP": "varchar(9)"}),
        ],
    )
    assert renamed_columns(schema(runner)) == ["_CDC_OP -> ~_CDC_OP"]
    assert by_source(runner) == [{"id": 1, "_CDC_OP": "a"}, {"id": 2, "_CDC_OP": "b"}]
    assert [r["_cdc_op"] for r in runner.mirror(cdc=True)] == ["insert", "insert"]  # (the engine's own)
    runner = restart(runner)
    runner.messages(
        tmp_path, [dml("DELETE", [{"id": "1", "_CDC_OP": "a"}], {"id": "int", "_CDC_OP": "varchar(9)"})]
    )
    assert by_source(runner) == [{"id": 2, "_CDC_OP": "b"}]
    assert runner.dead_letters() == []


def test_typed_by_the_fold_tasks(spark, tmp_path, monkeypatch):
    """Tables the fold tasks type (and, when new, write) against the mirror's schema read at planning."""
    from replicator import engine

    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 1)
    runner = make(spark, tmp_path)
    types = {"id": "int", "v": "varchar(5)", "V": "int"}
    runner.messages(
        tmp_path, [dml("INSERT", [{"id": str(i), "v": "a", "V": str(i)} for i in (1, 2, 3)], types)]
    )
    assert renamed_columns(schema(runner)) == ["V -> V~1"]
    more = {**types, "_cdc_op": "varchar(5)"}
    runner.messages(
        tmp_path,
        [
            dml("UPDATE", [{"id": "1", "v": "b", "V": "10", "_cdc_op": "o"}], more, old=[{"v": "a"}]),
            dml("INSERT", [{"id": "4", "v": "c", "V": "x", "_cdc_op": "p"}], more),  # (V does not fit int)
        ],
    )
    assert by_source(runner) == [
        {"id": 1, "v": "b", "V": 10, "_cdc_op": "o"},
        {"id": 2, "v": "a", "V": 2, "_cdc_op": None},
        {"id": 3, "v": "a", "V": 3, "_cdc_op": None},
    ]
    [dead] = runner.dead_letters()
    assert "column 'V'" in dead["error"]


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_a_rename_onto_a_taken_name(spark, tmp_path, policy):
    runner = make(spark, tmp_path, schema_evolution=policy)
    types = {"id": "int", "v": "varchar(5)", "w": "varchar(5)"}
    runner.messages(tmp_path, [dml("INSERT", [{"id": "1", "v": "a", "w": "b"}], types)])
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            stmt("ALTER", "ALTER TABLE orders RENAME COLUMN w TO V"),
            dml(
                "INSERT",
                [{"id": "2", "v": "c", "V": "d"}],
                {"id": "int", "v": "varchar(5)", "V": "varchar(5)"},
            ),
        ],
    )
    assert renamed_columns(schema(runner)) == ["V -> V~1"]
    if policy == "evolve":  # the column renamed, with its values
        assert by_source(runner) == [{"id": 1, "v": "a", "V": "b"}, {"id": 2, "v": "c", "V": "d"}]
    else:  # lenient: the old column kept, the new name added beside it
        assert by_source(runner) == [
            {"id": 1, "v": "a", "w": "b", "V": None},
            {"id": 2, "v": "c", "w": None, "V": "d"},
        ]
    assert runner.dead_letters() == []


def test_a_create_table_that_declares_v_V_and_an_engine_name(spark, tmp_path):
    runner = make(spark, tmp_path)
    sql = (
        "CREATE TABLE orders (`id` int NOT NULL, `v` varchar(5), `V` int, `_cdc_op` varchar(5), "
        "PRIMARY KEY (`id`))"
    )
    types = {"id": "int", "v": "varchar(5)", "V": "int", "_cdc_op": "varchar(5)"}
    runner.messages(
        tmp_path,
        [stmt("CREATE", sql), dml("INSERT", [{"id": "1", "v": "a", "V": "2", "_cdc_op": "o"}], types)],
    )
    assert [(f.name, str(f.type)) for f in schema(runner)][:4] == [
        ("id", "int32"),
        ("v", "string"),
        ("V~1", "int32"),
        ("~_cdc_op", "string"),
    ]
    assert by_source(runner) == [{"id": 1, "v": "a", "V": 2, "_cdc_op": "o"}]


def test_replay_gives_the_same_names(spark, tmp_path):
    from replicator.commands.replay import replay

    runner = make(spark, tmp_path)
    small = {"id": "int", "v": "varchar(5)"}
    wide = {**small, "V": "varchar(5)", "_cdc_op": "varchar(5)"}
    runner.messages(tmp_path, [dml("INSERT", [{"id": "1", "v": "a"}], small)])
    runner.messages(
        tmp_path,
        [
            dml("INSERT", [{"id": "2", "v": "b", "V": "B"}], {**small, "V": "varchar(5)"}),
            stmt("ALTER", "ALTER TABLE orders ADD COLUMN `_cdc_op` varchar(5)"),
            dml("UPDATE", [{"id": "1", "v": "a", "V": "A", "_cdc_op": "o"}], wide, old=[{"V": None}]),
        ],
    )
    replay(runner.config, tmp_path / "out", as_of=str(ES + 10**9))
    live = schema(runner)
    replayed = pa.schema(DeltaTable(str(tmp_path / "out" / "shop" / "orders")).schema().to_arrow())
    # (in its order: the replay applies the events in one batch, where the live mirror added V in a second)
    assert {f.name: source_name(f) for f in replayed} == {f.name: source_name(f) for f in live}
    assert renamed_columns(live) == ["V -> V~1", "_cdc_op -> ~_cdc_op"]
    rows = DeltaTable(str(tmp_path / "out" / "shop" / "orders")).to_pyarrow_table().sort_by("id")
    assert rows.select(["id", "v", "V~1", "~_cdc_op"]).to_pylist() == [
        {"id": 1, "v": "a", "V~1": "A", "~_cdc_op": "o"},
        {"id": 2, "v": "b", "V~1": "B", "~_cdc_op": None},
    ]


def drs_pg(
    op: str, data: list[dict[str, Any]] | None, old: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Huawei DRS message of a PostgreSQL source (the form of tests/fixtures/drs-json/constructed-pg-oracle
    .jsonl, from DRS «Kafka消息格式»'s field tables): a table with the columns ``"Name"`` and ``name``,
    which PostgreSQL keeps apart when quoted."""
    es = next(_es)
    return {
        "columnType": {"id": "integer", "Name": "text", "name": "text"},
        "dbType": "PostgreSQL",
        "schema": "public",
        "opType": op,
        "id": es,
        "es": es,
        "ts": es + 5,
        "database": "shop",
        "table": "people",
        "type": op,
        "isDdl": False,
        "sql": "",
        "sqlType": {"id": 4, "Name": 25, "name": 25},
        "data": data,
        "old": old,
        "pkNames": ["id"],
    }


def test_drs_for_postgresql_columns_that_differ_only_by_case(spark, tmp_path):
    """Debezium refuses a PostgreSQL table whose columns differ only by case; DRS for PostgreSQL sends it:
    ``"Name"`` and ``name`` are both kept in the mirror (the second as ``name~1``, its source name recorded)
    with their own values through inserts, an update of each and a delete (issue 51 item 5)."""
    source = {"type": "files", "path": "landing", "dialect": "drs-json"}
    runner = make(spark, tmp_path, source=source)
    runner.messages(
        tmp_path,
        [
            drs_pg("INSERT", [{"id": "1", "Name": "Upper", "name": "lower"}]),
            drs_pg("INSERT", [{"id": "2", "Name": None, "name": "only lower"}]),
            drs_pg("INSERT", [{"id": "3", "Name": "gone", "name": "gone"}]),
        ],
    )
    runner = restart(runner)
    runner.messages(
        tmp_path,
        [
            drs_pg(
                "UPDATE",
                [{"id": "1", "Name": "Upper2", "name": "lower"}],
                [{"id": "1", "Name": "Upper", "name": "lower"}],
            ),
            drs_pg(
                "UPDATE",
                [{"id": "2", "Name": None, "name": "lower2"}],
                [{"id": "2", "Name": None, "name": "only lower"}],
            ),
            drs_pg("DELETE", None, [{"id": "3", "Name": "gone", "name": "gone"}]),
        ],
    )
    path = Path(runner.config.target.path) / "shop" / "public" / "people"
    mirror = pa.schema(DeltaTable(str(path)).schema().to_arrow())
    assert [f.name for f in mirror][:3] == ["id", "Name", "name~1"]
    assert renamed_columns(mirror) == ["name -> name~1"]
    names = {f.name: source_name(f) for f in mirror}
    rows = sorted(
        ({names[k]: v for k, v in r.items() if not k.startswith("_cdc_")} for r in delta_rows(path)),
        key=lambda r: r["id"],
    )
    assert rows == [{"id": 1, "Name": "Upper2", "name": "lower"}, {"id": 2, "Name": None, "name": "lower2"}]
    assert runner.dead_letters() == []


def delta_rows(path: Path) -> list[dict[str, Any]]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()
