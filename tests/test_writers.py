"""One behaviour file for every MirrorWriter (pyiceberg-style contract tests)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from replicator.sinks import writer_factory
from replicator.sinks.base import Txn
from tests.helpers import WRITERS

SCHEMA = pa.schema(
    [("id", pa.int32()), ("v", pa.string()), ("_cdc_op", pa.string()), ("_cdc_seq", pa.string())]
)


VECTORS = {"delta.enableDeletionVectors": "true"}


@pytest.fixture(params=[*WRITERS, "delta-rs+vectors", pytest.param("delta-rs@s3", marks=pytest.mark.s3)])
def writer(request, tmp_path):
    """Each writer; ``delta-rs+vectors``: delta-rs with deletion vectors, its MERGEs the engine's own
    commits (replicator.sinks.vectors); ``@s3``: the table on the session's S3 server (``make test-s3``).
    The server before the session: Spark's Python workers inherit the environment its JVM started in, and
    the tests of `make test-s3` after these run the engine's decode tasks against the server."""
    name, _, where = request.param.partition("@")
    name, _, vectors = name.partition("+")
    if where == "s3":
        import uuid

        server = request.getfixturevalue("s3")
        request.getfixturevalue("spark")
        return writer_factory(name)(f"s3://{server.bucket}/writers/{uuid.uuid4().hex[:12]}/t")
    request.getfixturevalue("spark")
    return writer_factory(name)(tmp_path / "t", VECTORS if vectors else None)


def rows(data: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], SCHEMA)


def content(writer) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in writer.read().to_pylist())


def test_guarded_merge_and_app_transactions(writer):
    assert not writer.exists()
    writer.create(SCHEMA)
    assert writer.exists() and writer.schema().names == SCHEMA.names
    writer.merge_guarded(
        rows([(1, "a", "insert", "02"), (2, "b", "insert", "02")]),
        ["id"],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 0),
    )
    result = writer.merge_guarded(
        rows(
            [
                (1, "old", "update", "01"),
                (2, None, "delete", "03"),
                (3, "c", "insert", "03"),
                (4, None, "delete", "01"),
            ]
        ),
        ["id"],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 1),
    )
    assert content(writer) == [(1, "a"), (3, "c")]
    assert (result.inserted, result.updated, result.deleted) == (1, 0, 1)
    assert writer.applied_version("job") == 1
    assert writer.applied_version("other") is None
    writer.mark(Txn("job", 2))
    assert writer.applied_version("job") == 2


def test_add_columns_append_and_delete(writer):
    writer.create(SCHEMA)
    writer.add_columns([pa.field("extra", pa.int64())])
    assert "extra" in writer.schema().names
    batch = rows([(5, "e", "insert", "01")]).append_column("extra", pa.array([7], pa.int64()))
    writer.append(batch, Txn("job", 3))
    assert writer.applied_version("job") == 3
    assert writer.delete_where(None, None) == 1
    assert content(writer) == []


def test_merge_with_the_batch_key_range(writer):
    """The key-range predicate (sinks.base.key_range) leaves rows outside the batch's keys as they are, and
    text keys with quotes are literals, not SQL. delta-rs reports the data files it skipped (2 of 3); the
    delta-spark writer's MERGE result carries no file counts, so for it only the rows are checked."""
    text_schema = pa.schema([(n, pa.string()) for n in ("k", "v", "_cdc_op", "_cdc_seq")])

    def text_rows(data: list[tuple]) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(text_schema.names, r, strict=True)) for r in data], text_schema)

    writer.create(text_schema)
    for i, prefix in enumerate(("a", "m", "z")):  # three data files with disjoint key ranges
        writer.merge_guarded(
            text_rows([(f"{prefix}{n}", "x", "insert", "01") for n in range(3)]),
            ["k"],
            "_cdc_seq",
            "_cdc_op",
            Txn("job", i),
        )
    result = writer.merge_guarded(
        text_rows([("m1", "y", "update", "02"), ("m'9", "q", "insert", "02")]),
        ["k"],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 3),
    )
    stored = {r["k"]: r["v"] for r in writer.read().to_pylist()}
    assert stored == {**{f"{p}{n}": "x" for p in "amz" for n in range(3)}, "m1": "y", "m'9": "q"}
    assert (result.inserted, result.updated) == (1, 1)
    if type(writer).__name__ == "DeltaRsWriter":
        assert (result.files_scanned, result.files_skipped) == (1, 2)


def test_read_keys_after_a_merge_of_text_keys(writer):
    """A MERGE's files hold strings as Parquet ``string_view`` (delta-rs): key lookups still work (a pyarrow
    dataset filter failed on them: no kernel for (string, string_view))."""
    text_schema = pa.schema([(n, pa.string()) for n in ("k", "v", "_cdc_op", "_cdc_seq")])
    data = [("a", "1", "insert", "01"), ("b", "2", "insert", "01"), ("c", "3", "insert", "01")]
    writer.create(text_schema)
    table = pa.Table.from_pylist([dict(zip(text_schema.names, r, strict=True)) for r in data], text_schema)
    writer.merge_guarded(table, ["k"], "_cdc_seq", "_cdc_op", None)
    writer.merge_guarded(table.slice(1, 1), ["k"], "_cdc_seq", "_cdc_op", None)  # a rewrite by MERGE
    found = writer.read_keys("k", pa.array(["b", "c", "zz"]), ["k", "v"])
    assert sorted(found.to_pylist(), key=lambda r: r["k"]) == [{"k": "b", "v": "2"}, {"k": "c", "v": "3"}]
    assert found.schema.field("k").type == pa.string()


def test_description_holds_any_name(writer):
    """A mirror's Delta description keeps its real names (replicator.paths.description), whatever they hold:
    quotes, backslashes, a newline, a NUL (the delta-spark writer passes it as a literal, never SQL text)."""
    from deltalake import DeltaTable

    from replicator.paths import description

    named = type(writer)(writer.path, None, description(("sh'op\\", None, "a\nb\x00'); DROP TABLE x; --")))
    named.create(SCHEMA)
    names = DeltaTable(writer.path).metadata().description
    assert names == description(("sh'op\\", None, "a\nb\x00'); DROP TABLE x; --"))
    named.describe(description(("shop", "s", "renamed")))
    assert DeltaTable(writer.path).metadata().description == description(("shop", "s", "renamed"))


@pytest.mark.parametrize(
    ("arrow_type", "value"),
    [
        (pa.decimal128(38, 10), __import__("decimal").Decimal("-1234567890123456789012345678.0123456789")),
        (pa.binary(), b"\x00\xff it's"),
        (pa.timestamp("us"), __import__("datetime").datetime(2024, 2, 29, 23, 59, 59, 123456)),
        (pa.bool_(), False),
        (pa.string(), 'it\'s \\ "q" 小春'),
    ],
)
def test_fill_sets_a_typed_value_in_rows_older_than_the_bound(writer, arrow_type, value):
    """An ADD COLUMN's default for the rows already there: only rows older than the bound (and of the
    matched shard) take it, typed exactly, passed as data (quotes and backslashes are values); a second
    fill changes nothing."""
    schema = pa.schema([("id", pa.int32()), ("shard", pa.string()), ("_cdc_seq", pa.string())])
    writer.create(schema)
    writer.append(
        pa.Table.from_pylist(
            [
                {"id": 1, "shard": "a", "_cdc_seq": "1"},
                {"id": 2, "shard": "b", "_cdc_seq": "1"},
                {"id": 3, "shard": "a", "_cdc_seq": "3"},
            ],
            schema,
        ),
        None,
    )
    writer.add_columns([pa.field("c", arrow_type)])
    writer.add_columns([pa.field("n", pa.int64())])
    values = pa.table({"c": pa.array([value], arrow_type), "n": pa.array([7], pa.int64())})
    assert writer.fill(values, "_cdc_seq", "2", match={"shard": "a"}) == 1
    got = {r["id"]: (r["c"], r["n"]) for r in writer.read().to_pylist()}
    assert got == {1: (value, 7), 2: (None, None), 3: (None, None)}
    assert writer.fill(values, "_cdc_seq", "2", match={"shard": "a"}) == 0


def test_overwrite_replaces_rows_and_schema_with_its_transaction(writer):
    """A rewrite (a dropped column; `repair`'s rebuilt rows): the new rows and columns in one commit that
    carries the app transaction."""
    writer.create(SCHEMA)
    writer.merge_guarded(
        rows([(1, "a", "insert", "01"), (2, "b", "insert", "01")]),
        ["id"],
        "_cdc_seq",
        "_cdc_op",
        Txn("job", 0),
    )
    rewritten = (
        rows([(2, "b2", "update", "02")]).drop_columns(["v"]).append_column("w", pa.array([9], pa.int64()))
    )
    writer.overwrite(rewritten, Txn("job", 4))
    assert writer.schema().names == ["id", "_cdc_op", "_cdc_seq", "w"]
    assert writer.read().to_pylist() == [{"id": 2, "_cdc_op": "update", "_cdc_seq": "02", "w": 9}]
    assert writer.applied_version("job") == 4


# The columns of a mirror as the engine types its batches: every type a dialect maps to (replicator.types).
TYPED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        *[pa.field(f"i{n}", t) for n, t in enumerate([pa.int8(), pa.int16(), pa.int32()])],
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("big", pa.decimal128(38, 0)),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tz", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.date32()),
        pa.field("bin", pa.binary()),
        pa.field("flag", pa.bool_()),
        pa.field("f", pa.float32()),
        pa.field("g", pa.float64()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("ints", pa.list_(pa.int64())),
        pa.field("m", pa.map_(pa.string(), pa.string())),
        pa.field("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        pa.field("_cdc_seq", pa.string(), nullable=False),
    ]
)


@pytest.mark.delta_spark
@pytest.mark.parametrize(
    ("columns", "properties"),
    [
        (TYPED, None),
        (TYPED.append(pa.field("order note", pa.string())), None),  # column mapping by name
        (TYPED, {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}),
    ],
    ids=["plain", "column-mapped", "deletion-vectors"],
)
def test_delta_spark_schema_is_what_spark_reads(spark, tmp_path, columns, properties):
    """delta-spark's schema() reads the log through delta-rs (no Spark session needed: the checks before a
    run, status): the same Arrow schema as Spark's own reading of the table gave, nullability and
    column-mapped names included."""
    from pyspark.sql.pandas.types import to_arrow_schema

    mirror = writer_factory("delta-spark")(tmp_path / "t", properties)
    mirror.create(columns)
    read = to_arrow_schema(spark.read.format("delta").load(mirror.path).schema, timezone="UTC")
    assert mirror.schema().equals(read, check_metadata=True), (mirror.schema(), read)


# ---- delta-rs: a thread's loaded tables kept between calls (sinks.delta_rs.handle) ----------------------


def test_a_kept_table_is_brought_up_to_date_and_read_again_when_its_log_went_back(tmp_path):
    """The table each call gets is the newest: commits made elsewhere are seen; a log that went back
    (its newest commit deleted by hand, an older copy restored) and a folder dropped and made again are
    read anew, not updated from the kept state (which would keep the lost commits or mix two tables)."""
    import shutil

    from deltalake import DeltaTable, write_deltalake

    from replicator.sinks.delta_rs import DeltaRsWriter, handle

    path = str(tmp_path / "t")
    writer = DeltaRsWriter(path)
    writer.create(SCHEMA)
    writer.append(rows([(1, "a", "insert", "01")]), Txn("job", 0))
    kept = handle(path)
    assert handle(path) is kept and kept.version() == 1
    # a commit by another writer (another process): the kept table is brought up to date
    write_deltalake(path, rows([(2, "b", "insert", "02")]), mode="append")
    assert handle(path) is kept and kept.version() == 2
    assert content(writer) == [(1, "a"), (2, "b")]
    # the newest commit deleted by hand: the log went back; the kept state would still hold row 2
    (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").unlink()
    assert handle(path).version() == 1
    assert content(writer) == [(1, "a")]
    assert writer.applied_version("job") == 0
    # an older copy restored over the folder
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    writer.append(rows([(3, "c", "insert", "03")]), Txn("job", 1))
    assert writer.applied_version("job") == 1
    shutil.rmtree(path)
    shutil.copytree(copy, path)
    assert writer.applied_version("job") == 0 and content(writer) == [(1, "a")]
    # dropped and made again in this process, up to the same version: another table
    writer.drop()
    writer.create(pa.schema([("id", pa.int32()), ("w", pa.string())]))
    write_deltalake(path, pa.table({"id": pa.array([9], pa.int32()), "w": ["x"]}), mode="append")
    assert writer.schema().names == ["id", "w"]
    assert DeltaTable(path).version() == handle(path).version() == 1


def test_applied_versions_are_kept_per_version_and_commits_by_others_are_read(tmp_path):
    """Whether a batch is in (a table's app transaction) is read from the log once per version and
    carried across this process's own commits; a commit another writer made between is read, whichever
    app it carries, and so is one made through a handle this process did not commit with."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from replicator.sinks.delta_rs import DeltaRsWriter

    path = str(tmp_path / "t")
    writer = DeltaRsWriter(path)
    writer.create(SCHEMA)
    assert writer.applied_version("job") is None and writer.applied_version("other") is None
    for batch in range(3):
        writer.append(rows([(batch, "a", "insert", f"0{batch}")]), Txn("job", batch))
        assert writer.applied_version("job") == batch and writer.applied_version("other") is None

    def by_another(app: str, version: int) -> None:
        props = CommitProperties(app_transactions=[Transaction(app, version)])
        write_deltalake(path, rows([(9, "x", "insert", "09")]), mode="append", commit_properties=props)

    by_another("job", 7)  # (a second job of the same name would be refused: its lease; a copy of its state)
    assert writer.applied_version("job") == 7
    by_another("other", 4)
    assert writer.applied_version("other") == 4 and writer.applied_version("job") == 7
    writer.merge_guarded(rows([(1, "b", "update", "10")]), ["id"], "_cdc_seq", "_cdc_op", Txn("job", 8))
    assert writer.applied_version("job") == 8 and writer.applied_version("other") == 4
    writer.mark(Txn("other", 5))
    writer.delete_where("id = 9", Txn("job", 9))
    assert writer.applied_version("other") == 5 and writer.applied_version("job") == 9
    by_another("job", 3)  # an older version written later: the newest txn of an app is the answer
    assert writer.applied_version("job") == 3


def test_a_failed_write_leaves_no_kept_table(tmp_path):
    from replicator.sinks import delta_rs
    from replicator.sinks.delta_rs import DeltaRsWriter, handle

    path = str(tmp_path / "t")
    writer = DeltaRsWriter(path)
    writer.create(SCHEMA)
    kept = handle(path)
    batch = pa.table({"nope": ["x"], "_cdc_op": ["insert"], "_cdc_seq": ["1"]})
    with pytest.raises(Exception, match="nope"):  # a key the table lacks: delta-rs refuses the MERGE
        writer.merge_guarded(batch, ["nope"], "_cdc_seq", "_cdc_op", None)
    assert delta_rs.folder_key(path) not in delta_rs._threads.handles
    assert handle(path) is not kept
