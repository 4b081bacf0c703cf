"""The engine's own deletion vectors on delta-rs mirrors (replicator.sinks.vectors): every batch gives the
mirror delta-rs's copy-on-write MERGE gives, read by delta-rs and by Delta for Spark; checkpoints and
vectors Spark wrote are read back; tables it must not write are left to the MERGE."""

from __future__ import annotations

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


def own_merges(path: Path) -> int:
    """Commits this module wrote (commitInfo's writer marker)."""
    found = 0
    for commit in (path / "_delta_log").glob("*.json"):
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo", {})
            found += info.get("operationParameters", {}).get("writer") == "replicator deletion vectors"
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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(changes, min_size=1, max_size=5), ties=st.booleans(), checkpoint_at=st.integers(0, 5))
def test_every_batch_gives_the_mirror_the_merge_gives(tmp_path_factory, batches, ties, checkpoint_at):
    folder = tmp_path_factory.mktemp("vectors")
    merged, marked = DeltaRsWriter(folder / "merge"), DeltaRsWriter(folder / "vectors", VECTORS)
    for writer in (merged, marked):
        writer.create(SCHEMA)
    for number, found in enumerate(batches):
        if number == checkpoint_at:
            marked._table().create_checkpoint()  # the next batch reads the files from a checkpoint
        txn = Txn("job", number)
        expected = merged.merge_guarded(batch(found), KEY, "_cdc_seq", "_cdc_op", txn, ties=ties)
        result = marked.merge_guarded(batch(found), KEY, "_cdc_seq", "_cdc_op", txn, ties=ties)
        assert (result.inserted, result.updated, result.deleted) == (
            expected.inserted,
            expected.updated,
            expected.deleted,
        )
        assert content(marked) == content(merged)
        assert marked.applied_version("job") == number
    assert own_merges(folder / "vectors") == len(batches)


def test_spark_reads_the_vectors_and_its_own_are_read_back(spark, tmp_path):
    """A mirror with the engine's vectors reads the same through Delta for Spark; a vector Spark's DELETE
    wrote reads back as the rows it deleted, and the next batch does not bring them back."""
    merged, marked = DeltaRsWriter(tmp_path / "merge"), DeltaRsWriter(tmp_path / "vectors", VECTORS)
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
