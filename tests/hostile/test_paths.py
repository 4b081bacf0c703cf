"""Names from messages never choose a path (issue 34, items 1, 3 and the names of item 5).

Each test sends forged names through the real engine (canal-json files, one micro-batch per call) and checks
that nothing outside the job's target.path and state.path changed, that each table has a folder of its own
under target.path, and that the registry keeps the real names. The mapping itself (replicator.paths) has
its properties at the end.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator import paths
from replicator.state import State
from tests.helpers import Runner, canal, ddl, job, order

ES = 1_700_000_000_000
LONG = "t" * 300


def make_job(tmp_path: Path, folder: str = "job", **overrides):
    (tmp_path / folder).mkdir(exist_ok=True)
    return job(tmp_path / folder, **overrides)


def tree(root: Path, skip: tuple[Path, ...]) -> dict[str, float | None]:
    """Every file (with its modification time) and folder under ``root`` outside ``skip``."""
    found: dict[str, float | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        found.update({str(here / d): None for d in dirnames})
        found.update({str(here / f): (here / f).lstat().st_mtime for f in filenames})
    return found


def owned(config) -> tuple[Path, ...]:
    return (Path(config.target.path), Path(config.state.path))


def rows(path: str | Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table()["id"].to_pylist())


def registry(config) -> dict:
    return State.of(config).tables()


def assert_each_table_inside(config) -> None:
    """Every mirror of the registry: inside target.path, one folder per name, its own names recorded."""
    target = Path(config.target.path)
    folders = set()
    for table, state in registry(config).items():
        mirror = Path(state.mirror)
        assert paths.inside(target, mirror), (table, mirror)
        assert mirror.relative_to(target).parts == tuple(paths.table_parts(table))
        assert all(len(p.encode()) <= 255 for p in mirror.relative_to(target).parts)
        assert str(mirror) not in folders
        folders.add(str(mirror))
        if DeltaTable.is_deltatable(str(mirror)):
            names = json.loads(DeltaTable(str(mirror)).metadata().description)
            assert (names["database"], names["schema"], names["table"]) == table


# ---- names that pointed outside ----------------------------------------------------------------------------
def test_dot_and_absolute_names_stay_inside_the_target(spark, tmp_path):
    config = make_job(tmp_path)
    absolute = str(tmp_path / "abs")
    Path(absolute).mkdir()
    runner = Runner(spark, config)
    before = tree(tmp_path, (*owned(config), tmp_path / "in"))
    names = [
        ("../../x", "orders"),
        ("shop", "../../../x"),
        (absolute, "orders"),
        (".", "."),
        ("..", ".."),
        ("shop", ".hidden"),
        ("shop", "orders"),
    ]
    runner.messages(
        tmp_path / "in",
        [canal("INSERT", [order(i)], es=ES + i, database=d, table=t) for i, (d, t) in enumerate(names)],
    )
    assert tree(tmp_path, (*owned(config), tmp_path / "in")) == before  # nothing else was touched
    known = registry(config)
    assert {(d, t) for d, _s, t in known} == set(names)  # the real names, in the registry
    for i, (d, t) in enumerate(names):
        assert rows(known[(d, None, t)].mirror) == [i]
    assert_each_table_inside(config)
    assert not (tmp_path / "x").exists() and not any(Path(absolute).iterdir())


def test_nul_newline_and_long_names_are_mirrored_and_logged(spark, tmp_path):
    config = make_job(tmp_path)
    runner = Runner(spark, config)
    names = [("shop", "a\x00b"), ("shop", "a\nb"), ("shop", LONG), ("shop\n", "orders"), ("shop", "orders")]
    summary = runner.messages(
        tmp_path / "in",
        [canal("INSERT", [order(i)], es=ES + i, database=d, table=t) for i, (d, t) in enumerate(names)],
    )
    assert summary.dead_letters == 0 and summary.applied == len(names)
    known = registry(config)
    for i, (d, t) in enumerate(names):
        assert rows(known[(d, None, t)].mirror) == [i]
    assert_each_table_inside(config)
    # The change log keeps every event under its real names (its partition folders are encoded).
    log = DeltaTable(str(Path(config.state.path) / "changelog")).to_pyarrow_table()
    assert sorted(zip(log["database"].to_pylist(), log["table"].to_pylist(), strict=True)) == sorted(names)


# ---- names that shared a folder ----------------------------------------------------------------------------
def test_tables_that_shared_a_folder_stay_apart(spark, tmp_path):
    config = make_job(tmp_path)
    runner = Runner(spark, config)
    names = [("shop", "x/y"), ("shop/x", "y"), ("shop", "orders"), ("shop/orders", "_delta_log")]
    runner.messages(
        tmp_path / "in",
        [canal("INSERT", [order(i)], es=ES + i, database=d, table=t) for i, (d, t) in enumerate(names)],
    )
    known = registry(config)
    for i, (d, t) in enumerate(names):
        assert rows(known[(d, None, t)].mirror) == [i]
    assert_each_table_inside(config)
    log = Path(config.target.path) / "shop" / "orders" / "_delta_log"
    assert all(p.is_file() for p in log.iterdir())  # no folder made inside another table's log


def test_a_new_table_nested_in_another_tables_folder_is_refused(spark, tmp_path):
    config = make_job(tmp_path)
    runner = Runner(spark, config)
    runner.messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    engine = runner.engine
    # shop.orders.x (a schema "orders") would live inside the mirror of shop.orders: a vacuum of one deletes
    # the other's files. canal names carry no schema; the engine's check is called as a batch calls it.
    # An empty name (the dialects make those dead letters already) maps to no folder either.
    batch = {("shop", "orders", "x"): ["id"], ("shop", None, "ok"): ["id"], ("shop", None, ""): ["id"]}
    refused = engine._refused(batch, registry(config))
    assert set(refused) == {("shop", None, ""), ("shop", "orders", "x")}
    assert "nest with the mirror of shop.orders" in refused[("shop", "orders", "x")]
    assert "cannot name a folder" in refused[("shop", None, "")]


# ---- forged DDL --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_forged_drop_deletes_nothing_outside_its_mirror(spark, tmp_path, policy):
    config = make_job(tmp_path, schema_evolution=policy)
    victim = tmp_path / "job" / "victim"  # beside the target
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("mine")
    runner = Runner(spark, config)
    runner.messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    before = tree(tmp_path, (*owned(config), tmp_path / "in"))
    runner.messages(
        tmp_path / "in",
        [
            ddl("ERASE", "DROP TABLE `..`.`victim`", es=ES + 1, database="..", table="victim"),
            ddl("ERASE", "DROP TABLE `.`.`.`", es=ES + 2, database=".", table="."),
            canal("INSERT", [order(2)], es=ES + 3),
        ],
    )
    assert tree(tmp_path, (*owned(config), tmp_path / "in")) == before
    assert (victim / "keep.txt").read_text() == "mine"
    assert rows(Path(config.target.path) / "shop" / "orders") == [1, 2]
    # lenient keeps the dropped tables in the registry: their folders too lie inside the target (a later
    # CREATE, truncate or vacuum of that name works there)
    assert_each_table_inside(config)


@pytest.mark.parametrize("policy", ["lenient", "evolve"])
def test_forged_rename_moves_no_mirror_across_the_target(spark, tmp_path, policy):
    config = make_job(tmp_path, schema_evolution=policy)
    other = tmp_path / "otherjob" / "lake" / "hr" / "salaries"  # another job's mirror
    write_deltalake(str(other), pa.table({"id": [7]}))
    runner = Runner(spark, config)
    runner.messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    before = tree(tmp_path, (*owned(config), tmp_path / "in"))
    runner.messages(
        tmp_path / "in",
        [
            ddl(
                "RENAME", "RENAME TABLE shop.orders TO `..`.`moved`", es=ES + 1, database="..", table="moved"
            ),
            ddl(
                "RENAME",
                "RENAME TABLE `../../otherjob/lake/hr`.`salaries` TO shop.stolen",
                es=ES + 2,
                database="shop",
                table="stolen",
            ),
        ],
    )
    assert tree(tmp_path, (*owned(config), tmp_path / "in")) == before  # neither out nor in
    assert rows(other) == [7]
    assert not (tmp_path / "job" / "moved").exists()
    known = registry(config)
    assert rows(known[("..", None, "moved")].mirror) == [1]  # renamed, inside the target
    assert not DeltaTable.is_deltatable(str(Path(config.target.path) / "shop" / "stolen"))
    assert_each_table_inside(config)


# ---- destructive operations check their path ---------------------------------------------------------------
def test_drop_and_optimize_refuse_a_mirror_that_resolves_outside(spark, tmp_path):
    from replicator.commands.maintenance import optimize

    config = make_job(tmp_path, schema_evolution="evolve")
    runner = Runner(spark, config)
    runner.messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    # The mirror's folder replaced by a link to a table elsewhere (by hand, or a shared folder's trick).
    elsewhere = tmp_path / "elsewhere"
    mirror = Path(config.target.path) / "shop" / "orders"
    shutil.move(mirror, elsewhere)
    mirror.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(paths.UnsafePath, match="not inside"):
        optimize(config, vacuum_hours=0)
    summary = runner.messages(
        tmp_path / "in", [ddl("ERASE", "DROP TABLE orders", es=ES + 1, database="shop", table="orders")]
    )
    assert summary.dead_letters == 1
    assert "refused to drop" in runner.dead_letters()[0]["error"]
    assert rows(elsewhere) == [1]


# ---- a copied job folder -----------------------------------------------------------------------------------
def test_a_copied_job_folder_writes_its_own_mirrors(spark, tmp_path):
    original = make_job(tmp_path, "a")
    Runner(spark, original).messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = make_job(tmp_path, "b")
    Runner(spark, copy).messages(tmp_path / "in", [canal("INSERT", [order(2)], es=ES + 1)], batch_id=1)
    assert rows(tmp_path / "a" / "lake" / "shop" / "orders") == [1]
    assert rows(tmp_path / "b" / "lake" / "shop" / "orders") == [1, 2]
    stored = DeltaTable(str(tmp_path / "b" / "state" / "tables")).to_pyarrow_table()["mirror"].to_pylist()
    assert stored == ["shop/orders"]  # relative to target.path


def test_a_copied_job_folder_with_absolute_paths_in_its_state_refuses_to_run(spark, tmp_path):
    original = make_job(tmp_path, "a")
    Runner(spark, original).messages(tmp_path / "in", [canal("INSERT", [order(1)], es=ES)])
    # A registry written before paths became relative: absolute paths.
    tables = tmp_path / "a" / "state" / "tables"
    data = DeltaTable(str(tables)).to_pyarrow_table()
    absolute = [str(tmp_path / "a" / "lake" / m) for m in data["mirror"].to_pylist()]
    write_deltalake(str(tables), data.set_column(3, "mirror", pa.array(absolute)), mode="overwrite")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with pytest.raises(paths.StateMismatch, match=r"outside target\.path"):
        Runner(spark, make_job(tmp_path, "b"))
    assert rows(tmp_path / "a" / "lake" / "shop" / "orders") == [1]
    # In its own folder, the same state keeps working, and is written relative at the next commit.
    runner = Runner(spark, original)
    runner.messages(tmp_path / "in", [canal("INSERT", [order(2)], es=ES + 1)], batch_id=1)
    assert rows(tmp_path / "a" / "lake" / "shop" / "orders") == [1, 2]
    assert DeltaTable(str(tables)).to_pyarrow_table()["mirror"].to_pylist() == ["shop/orders"]


def test_tombstones_under_a_raw_name_move_to_the_encoded_folder(tmp_path):
    # A version before the mapping kept the tombstones of shop.`a.b` at tombstones/shop/a.b.
    config = make_job(tmp_path)
    legacy = Path(config.state.path) / "tombstones" / "shop" / "a.b"
    write_deltalake(str(legacy), pa.table({"id": [3]}))
    tombstones = State.of(config).tombstones(("shop", None, "a.b"))
    assert tombstones.path.endswith("/tombstones/shop/a~2Eb") and not legacy.exists()
    assert rows(tombstones.path) == [3]


# ---- the mapping -------------------------------------------------------------------------------------------
ORDINARY = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_$-]{0,63}", fullmatch=True)
ANY_NAME = st.text(min_size=1, max_size=400)


@settings(max_examples=500, deadline=None)
@given(ANY_NAME)
def test_any_name_is_one_component_inside_its_parent(name):
    part = paths.component(name)
    assert part and part not in (".", "..") and not part.startswith(".")
    assert "/" not in part and "\\" not in part and "\x00" not in part
    assert len(part.encode("utf-8")) <= paths.MAX_BYTES
    assert not part.startswith("_delta") and not part.endswith("__history")
    root = Path("/lake/db")
    assert (root / part).parent == root and paths.inside(root, root / part)


@settings(max_examples=500, deadline=None)
@given(ANY_NAME, ANY_NAME)
def test_distinct_names_never_share_a_component(a, b):
    if a != b:
        assert paths.component(a) != paths.component(b)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(ANY_NAME, st.sampled_from([".", "..", "a.b", "a~2Eb", "~", "_delta_log"])), max_size=30
    )
)
def test_the_mapping_is_injective_over_sets(names):
    assert len({paths.component(n) for n in names}) == len(set(names))


@given(ORDINARY)
def test_ordinary_names_keep_their_paths(name):
    if not name.startswith(("_delta", "_change")) and not name.endswith("__history"):
        assert paths.component(name) == name


def test_examples_of_the_mapping():
    assert [paths.component(n) for n in ["orders", "order_items-2", "表", "a$b"]] == [
        "orders",
        "order_items-2",
        "表",
        "a$b",
    ]
    assert paths.component("..") == "~2E~2E"
    assert paths.component("x/y") == "x~2Fy"
    assert paths.component("a~b") == "a~7Eb"
    assert paths.component("_delta_log") == "~5Fdelta_log"
    assert paths.component("orders__history") == "orders~5F_history"
    assert paths.component("a\x00b\n") == "a~00b~0A"
    long = paths.component(LONG)
    assert long.startswith("t" * 100) and "~~" in long and len(long) == paths.MAX_BYTES
    with pytest.raises(paths.UnmappableName):
        paths.component("")
