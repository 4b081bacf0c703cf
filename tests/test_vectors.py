"""The engine's own deletion vectors on delta-rs mirrors (replicator.sinks.vectors): every batch gives the
mirror delta-rs's copy-on-write MERGE gives, read by delta-rs and by Delta for Spark; checkpoints and
vectors Spark wrote are read back; tables it must not write are left to the MERGE."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.sinks.base import Txn
from replicator.sinks.delta_rs import DeltaRsWriter
from replicator.sinks.vectors import read_vector, unz85, write_vector, z85

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("part", pa.string(), nullable=False),
        ("v", pa.string()),
        ("_cdc_op", pa.string()),
        ("_cdc_seq", pa.string()),
    ]
)
KEY = ["k", "part"]
VECTORS = {"delta.enableDeletionVectors": "true"}


def batch(changes: list[tuple[int, str, str, int]]) -> pa.Table:
    """Net changes (one per key): key, part, op, seq."""
    rows = [
        {
            "k": k,
            "part": p,
            "v": None if op == "delete" else f"{op}-{seq}",
            "_cdc_op": op,
            "_cdc_seq": f"{seq:04d}",
        }
        for k, p, op, seq in changes
    ]
    return pa.Table.from_pylist(rows, SCHEMA)


def content(writer: DeltaRsWriter) -> list[tuple]:
    return sorted((r["k"], r["part"], r["v"], r["_cdc_seq"]) for r in writer.read().to_pylist())


class Merging(DeltaRsWriter):
    """delta-rs's own MERGE whatever the batch's size: the reference the engine's own writes are held to."""

    small_rows = 0
    rewrite_share = 0.0


def own_merges(path: Path, kind: str = "deletion vectors") -> int:
    """Commits this module wrote (commitInfo's writer marker)."""
    found = 0
    for commit in (path / "_delta_log").glob("*.json"):
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo", {})
            found += info.get("operationParameters", {}).get("writer") == f"replicator {kind}"
    return found


changes = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["insert", "update", "delete"]),
        st.integers(0, 60),
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda c: (c[0], c[1]),
)


def merges_alike(merged, other, found, key, number: int, ties: bool) -> None:  # type: ignore[no-untyped-def]
    """Batch ``number`` (``found``) through delta-rs's MERGE and through ``other``: the same counts, the
    same mirror, and the batch recorded as the job's app transaction."""
    txn = Txn("job", number)
    expected = merged.merge_guarded(batch(found), key, "_cdc_seq", "_cdc_op", txn, ties=ties)
    result = other.merge_guarded(batch(found), key, "_cdc_seq", "_cdc_op", txn, ties=ties)
    counts = (result.inserted, result.updated, result.deleted)
    assert counts == (expected.inserted, expected.updated, expected.deleted)
    assert content(other) == content(merged)
    assert other.applied_version("job") == number


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(changes, min_size=1, max_size=5), ties=st.booleans(), checkpoint_at=st.integers(0, 5))
def test_every_batch_gives_the_mirror_the_merge_gives(tmp_path_factory, batches, ties, checkpoint_at):
    folder = tmp_path_factory.mktemp("vectors")
    merged, marked = Merging(folder / "merge"), DeltaRsWriter(folder / "vectors", VECTORS)
    for writer in (merged, marked):
        writer.create(SCHEMA)
    for number, found in enumerate(batches):
        if number == checkpoint_at:
            marked._table().create_checkpoint()  # the next batch reads the files from a checkpoint
        merges_alike(merged, marked, found, KEY, number, ties)
    assert own_merges(folder / "vectors") == len(batches)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(changes, min_size=1, max_size=6), ties=st.booleans(), held=st.booleans())
def test_a_small_batch_rewritten_in_arrow_gives_the_mirror_the_merge_gives(
    tmp_path_factory, batches, ties, held
):
    """A batch of at most DeltaRsWriter.small_rows rows is not planned by delta-rs's MERGE (~25 ms of driver
    CPU a table) but rewritten in Arrow: the same mirror, counts and app transactions, and a checkpoint at
    every delta.checkpointInterval-th version as delta-rs's own commits write. ``held``: each batch within
    the writer's ``held()``, as a table's apply runs (its handle read once, its app transaction asked
    first)."""
    folder = tmp_path_factory.mktemp("small")
    every = {"delta.checkpointInterval": "3"}
    merged, small = Merging(folder / "merge", every), DeltaRsWriter(folder / "small", every)
    for writer in (merged, small):
        writer.create(SCHEMA)
    for number, found in enumerate(batches):
        with small.held() if held else contextlib.nullcontext():
            assert small.applied_version("job") == (number - 1 if number else None)
            merges_alike(merged, small, found, KEY, number, ties)
    assert own_merges(folder / "small", "rewrite") == len(batches)
    checkpoints = {int(p.name[:20]) for p in (folder / "small" / "_delta_log").glob("*.checkpoint.parquet")}
    assert checkpoints == {v for v in range(1, len(batches) + 1) if v % 3 == 0}


by_key = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.just("a"),
        st.sampled_from(["insert", "update", "delete"]),
        st.integers(0, 60),
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda c: c[0],
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(by_key, min_size=1, max_size=6),
    ties=st.booleans(),
    share=st.sampled_from([0.01, 0.5, 1.0]),
    piece=st.sampled_from([1, 4, 100]),
    composite=st.booleans(),
)
def test_a_large_batch_rewritten_in_arrow_gives_the_mirror_the_merge_gives(
    tmp_path_factory, batches, ties, share, piece, composite
):
    """A batch of at least DeltaRsWriter.rewrite_share of the rows in its key range (uniform changes into a
    full mirror) is rewritten in Arrow, each file read whole, the rows left of files that kept few written
    with the new rows: the same mirror, counts and app transactions as delta-rs's MERGE; a smaller batch
    is MERGEd. One key column (a hash lookup) or two (a join)."""
    from replicator.sinks import vectors

    class Large(DeltaRsWriter):
        small_rows, large_rows, rewrite_share = 0, 1, share

    key = KEY if composite else ["k"]
    folder = tmp_path_factory.mktemp("large")
    merged, large = Merging(folder / "merge"), Large(folder / "large")
    for writer in (merged, large):
        writer.create(SCHEMA)
    kept, vectors.PIECE_ROWS = vectors.PIECE_ROWS, piece
    try:
        for number, found in enumerate(batches):
            merges_alike(merged, large, found, key, number, ties)
    finally:
        vectors.PIECE_ROWS = kept
    if share <= 0.01:
        assert own_merges(folder / "large", "rewrite") == len(batches)


def test_uniform_batches_keep_the_mirror_in_few_files(tmp_path, monkeypatch):
    """Uniform updates rewritten in Arrow leave a part of every file: the parts under PIECE_ROWS go with the
    batch's new rows into one file, so the mirror's files do not grow by one a batch (each rewritten file
    shrinking), and the large batch is not left to delta-rs's MERGE."""
    import random

    from deltalake import DeltaTable

    from replicator.sinks import vectors

    monkeypatch.setattr(vectors, "PIECE_ROWS", 100)
    monkeypatch.setattr(DeltaRsWriter, "large_rows", 50)
    rng = random.Random(3)
    writer = DeltaRsWriter(tmp_path / "t")
    writer.create(SCHEMA)
    writer.merge_guarded(
        batch([(k, "a", "insert", 0) for k in range(400)]), ["k"], "_cdc_seq", "_cdc_op", None
    )
    for number in range(1, 13):
        touched = rng.sample(range(400), 240)
        found = [(k, "a", "update", number) for k in touched]
        writer.merge_guarded(batch(found), ["k"], "_cdc_seq", "_cdc_op", Txn("job", number))
    assert own_merges(tmp_path / "t", "rewrite") == 13
    assert len(DeltaTable(str(tmp_path / "t")).file_uris()) <= 4
    assert len(content(writer)) == 400
    assert writer.applied_version("job") == 12


def test_a_small_batch_into_large_files_is_merged(tmp_path):
    """The rewrite reads whole files: past DeltaRsWriter.small_bytes in the batch's key range, delta-rs's
    MERGE (which reads the key columns first) does the batch, and nothing of the rewrite is left behind."""

    class Bounded(DeltaRsWriter):
        small_bytes = 1

    writer = Bounded(tmp_path / "t")
    writer.create(SCHEMA)
    writer.merge_guarded(batch([(k, "a", "insert", 1) for k in range(10)]), KEY, "_cdc_seq", "_cdc_op", None)
    writer.merge_guarded(batch([(3, "a", "update", 2)]), KEY, "_cdc_seq", "_cdc_op", Txn("job", 1))
    assert own_merges(tmp_path / "t", "rewrite") == 1  # the first batch: an empty table, nothing to read
    assert writer.applied_version("job") == 1
    assert content(writer)[3] == (3, "a", "update-2", "0002")


def test_spark_reads_the_vectors_and_its_own_are_read_back(spark, tmp_path):
    """A mirror with the engine's vectors reads the same through Delta for Spark; a vector Spark's DELETE
    wrote reads back as the rows it deleted, and the next batch does not bring them back."""
    merged, marked = Merging(tmp_path / "merge"), DeltaRsWriter(tmp_path / "vectors", VECTORS)
    first = batch([(k, "a", "insert", 1) for k in range(100)])
    second = batch([(k, "a", "update" if k % 3 else "delete", 2) for k in range(0, 100, 7)])
    for writer in (merged, marked):
        writer.create(SCHEMA)
        writer.merge_guarded(first, KEY, "_cdc_seq", "_cdc_op", Txn("job", 0))
        writer.merge_guarded(second, KEY, "_cdc_seq", "_cdc_op", Txn("job", 1))
    assert own_merges(tmp_path / "vectors") == 2
    read = sorted(tuple(r) for r in spark.read.format("delta").load(str(tmp_path / "vectors")).collect())
    assert [(k, p, v, s) for k, p, v, _op, s in read] == content(merged)
    # Spark's own deletion vector, then a batch through the engine's: the deleted rows stay deleted
    spark.sql(f"DELETE FROM delta.`{tmp_path / 'vectors'}` WHERE k >= 90")
    descriptors = [
        json.loads(line)["add"]["deletionVector"]
        for commit in sorted((tmp_path / "vectors" / "_delta_log").glob("*.json"))[-1:]
        for line in commit.read_text().splitlines()
        if "add" in json.loads(line) and json.loads(line)["add"].get("deletionVector")
    ]
    assert descriptors and all(read_vector(tmp_path / "vectors", d) for d in descriptors)
    merged.delete_where("k >= 90", Txn("job", 2))
    third = batch([(k, "a", "update", 3) for k in (1, 91, 95)])
    expected = merged.merge_guarded(third, KEY, "_cdc_seq", "_cdc_op", Txn("job", 3))
    result = marked.merge_guarded(third, KEY, "_cdc_seq", "_cdc_op", Txn("job", 3))
    assert (result.inserted, result.updated) == (expected.inserted, expected.updated) == (2, 1)
    assert content(marked) == content(merged)


def test_the_vector_format_round_trips(tmp_path):
    from pyroaring import BitMap

    assert unz85(z85(bytes(range(16)))) == bytes(range(16))
    assert z85(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"  # ZeroMQ's RFC 32 example
    rows = BitMap([0, 5, 70_000, 2**31])
    assert read_vector(tmp_path, write_vector(tmp_path, rows)) == rows
    damaged = next(tmp_path.glob("deletion_vector_*.bin"))
    data = bytearray(damaged.read_bytes())
    data[-6] ^= 0xFF
    damaged.write_bytes(bytes(data))
    name = uuid.UUID(damaged.stem.removeprefix("deletion_vector_"))
    descriptor = {"storageType": "u", "pathOrInlineDv": z85(name.bytes), "offset": 1, "cardinality": 4}
    with pytest.raises(ValueError, match="checksum"):
        read_vector(tmp_path, descriptor)


def test_tables_it_must_not_write_are_merged(tmp_path):
    """A change data feed table (its MERGE writes change files too) and a batch without all of the mirror's
    columns (the MERGE keeps the others' values) go through delta-rs's MERGE."""
    feed = DeltaRsWriter(tmp_path / "feed", {**VECTORS, "delta.enableChangeDataFeed": "true"})
    feed.create(SCHEMA)
    feed.merge_guarded(batch([(1, "a", "insert", 1)]), KEY, "_cdc_seq", "_cdc_op", None)
    feed.merge_guarded(batch([(1, "a", "update", 2)]), KEY, "_cdc_seq", "_cdc_op", None)
    assert own_merges(tmp_path / "feed") == 0 and content(feed) == [(1, "a", "update-2", "0002")]
    narrow = DeltaRsWriter(tmp_path / "narrow", VECTORS)
    narrow.create(SCHEMA)
    narrow.merge_guarded(batch([(1, "a", "insert", 1)]), KEY, "_cdc_seq", "_cdc_op", None)
    update = batch([(1, "a", "update", 2)]).drop_columns(["v"])
    narrow.merge_guarded(update, KEY, "_cdc_seq", "_cdc_op", None)
    assert own_merges(tmp_path / "narrow") == 1  # the first batch only
    assert content(narrow) == [(1, "a", "insert-1", "0002")]


def test_a_commit_never_replaces_another(tmp_path):
    """Put-if-absent: a version another writer committed first stays as it was, and no temporary file is
    left behind (the batch fails and is applied again from its checkpoint)."""
    from replicator.sinks.vectors import _commit

    writer = DeltaRsWriter(tmp_path / "t", VECTORS)
    writer.create(SCHEMA)
    log = tmp_path / "t" / "_delta_log"
    first = (log / f"{0:020d}.json").read_bytes()
    with pytest.raises(FileExistsError):
        _commit(tmp_path / "t", 0, [{"commitInfo": {"operation": "MERGE"}}])
    assert (log / f"{0:020d}.json").read_bytes() == first
    assert sorted(p.name for p in log.iterdir()) == [f"{0:020d}.json"]


def test_the_rewrite_reads_files_with_view_types(tmp_path):
    """A data file whose strings are Utf8View (what delta-rs writes after some operations, seen in the
    PostgreSQL end-to-end test): the rewrite drops the replaced rows from it (pyarrow has no filter kernel
    for view types) and the mirror holds the batch's values."""
    from deltalake import write_deltalake

    writer = DeltaRsWriter(tmp_path / "t")
    writer.create(SCHEMA)
    first = batch([(k, "a", "insert", 1) for k in range(5)])
    viewed = first.cast(
        pa.schema([f.with_type(pa.string_view()) if f.type == pa.string() else f for f in SCHEMA])
    )
    write_deltalake(str(tmp_path / "t"), viewed, mode="append")
    writer.merge_guarded(batch([(3, "a", "update", 2)]), KEY, "_cdc_seq", "_cdc_op", Txn("job", 1))
    assert own_merges(tmp_path / "t", "rewrite") == 1
    assert content(writer) == [
        (k, "a", "update-2" if k == 3 else "insert-1", "0002" if k == 3 else "0001") for k in range(5)
    ]
