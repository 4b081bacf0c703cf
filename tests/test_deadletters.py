"""``replicator dead-letters`` and ``retry``: Debezium messages mirrored before ``tables.keys`` was set
are dead letters; once the key is set, a retry applies them once, in seq order, through the real engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.commands.deadletters import RETRY_BATCH_BASE, print_summary, read_marks, retry, summarize
from replicator.state import State
from tests.helpers import WRITERS, Runner, cli, delta_table, job, job_file, write_jsonl

TS = 1_700_000_000_000


def debezium(op: str, row: dict[str, Any], pos: int, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schemaless Debezium MySQL envelope (no key in it: the table's key must come from tables.keys)."""
    return {
        "before": before,
        "after": None if op == "d" else row,
        "source": {
            "version": "2.5.0.Final",
            "connector": "mysql",
            "name": "dbserver1",
            "ts_ms": TS + pos,
            "snapshot": "false",
            "db": "shop",
            "table": "items",
            "server_id": 1,
            "file": "mysql-bin.000003",
            "pos": 1000 + pos,
            "row": 0,
        },
        "op": op,
        "ts_ms": TS + pos,
        "transaction": None,
    }


def item(i: int, name: str) -> dict[str, Any]:
    return {"id": i, "name": name}


def config(tmp_path: Path, keys: bool, writer: str = "delta-rs"):
    extra = {"tables": {"keys": {"shop.items": ["id"]}}} if keys else {}
    return job(tmp_path, source={"dialect": "debezium"}, target={"writer": writer}, **extra)


def mirror_frame(spark, tmp_path: Path):
    # schemaless Debezium: the mirror's columns are text
    rows = delta_table(tmp_path / "lake" / "shop" / "items").to_pylist()
    return spark.createDataFrame(sorted((r["id"], r["name"]) for r in rows), "id string, name string")


def test_retry_after_setting_keys_applies_each_dead_letter_once(spark, tmp_path, capsys):
    sent = [debezium("c", item(i, f"v{i}"), pos=i) for i in range(1, 7)]
    sent.append(debezium("u", item(2, "v2-updated"), pos=10, before=item(2, "v2")))
    sent.append(debezium("d", item(3, "v3"), pos=11, before=item(3, "v3")))
    runner = Runner(spark, config(tmp_path, keys=False))
    first = runner.messages(tmp_path, sent)
    assert first.dead_letters == len(sent) and first.applied == 0
    assert not (tmp_path / "lake" / "shop" / "items").exists()

    keyed = config(tmp_path, keys=True)
    summary = summarize(keyed)
    assert summary["pending"] == len(sent)
    [group] = summary["groups"]
    assert group["table"] == "shop.items" and "no primary key known" in group["error"]
    assert (group["count"], group["first_batch"], group["last_batch"]) == (len(sent), 0, 0)
    assert group["example"].startswith('{"before": null, "after": {"id": 1') and group["example"].endswith(
        "..."
    )
    capsys.readouterr()  # the batch log so far
    print_summary(keyed, as_json=True)
    assert json.loads(capsys.readouterr().out)["pending"] == len(sent)

    done = retry(keyed)
    assert done.batch_id == RETRY_BATCH_BASE + 1
    assert (done.selected, done.records, done.applied, done.dead_letters) == (len(sent), len(sent), 8, 0)
    expected = spark.createDataFrame(
        [("1", "v1"), ("2", "v2-updated"), ("4", "v4"), ("5", "v5"), ("6", "v6")], "id string, name string"
    )
    assert_df_equality(mirror_frame(spark, tmp_path), expected, ignore_row_order=True)
    assert summarize(keyed)["pending"] == 0
    assert set(read_marks(_state(keyed)).values()) == {RETRY_BATCH_BASE + 1}

    version = _version(tmp_path)
    again = retry(keyed)
    assert again.batch_id is None and again.selected == 0
    assert _version(tmp_path) == version  # nothing written to the mirror
    assert_df_equality(mirror_frame(spark, tmp_path), expected, ignore_row_order=True)

    # the streaming query's own batches go on as before (its app transactions were not advanced)
    later = runner.messages(tmp_path, [debezium("u", item(6, "v6-later"), pos=20, before=item(6, "v6"))])
    assert later.applied == 1 and later.dead_letters == 0
    names = dict(mirror_frame(spark, tmp_path).collect())
    assert names["6"] == "v6-later"


@pytest.mark.slow
@pytest.mark.parametrize("writer", WRITERS)
def test_the_retry_command_applies_the_dead_letters_with_either_writer(spark, tmp_path, writer):
    """Through the command with either writer: Debezium messages without a key are dead letters; with
    tables.keys in the job file, `dead-letters retry` applies them (its batch makes the mirror through
    the job's writer, in a session with that writer's jars)."""
    sent = [debezium("c", item(i, f"v{i}"), pos=i) for i in (1, 2, 3)]
    Runner(spark, config(tmp_path, keys=False, writer=writer)).messages(tmp_path, sent)
    keyed = str(
        job_file(
            tmp_path,
            "tables: {keys: {shop.items: [id]}}\n",
            name="test-job",
            writer=writer,
            dialect="debezium",
        )
    )
    done = cli("dead-letters", "--config", keyed, "retry")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == (
        f"retry batch {RETRY_BATCH_BASE + 1}: 3 dead letters (3 records) re-driven: 3 events applied, "
        "0 filtered, 0 dead letters again"
    )
    assert dict(mirror_frame(spark, tmp_path).collect()) == {"1": "v1", "2": "v2", "3": "v3"}
    assert json.loads(cli("dead-letters", "--config", keyed, "--json").stdout)["pending"] == 0


def test_retry_keeps_newer_values_and_a_failing_record_stays_a_dead_letter(spark, tmp_path):
    runner = Runner(spark, config(tmp_path, keys=False))
    runner.messages(tmp_path, [debezium("c", item(1, "old"), pos=1), debezium("c", item(2, "old"), pos=2)])
    write_jsonl(tmp_path / "other" / "bad.jsonl", ["{not json"])
    runner.batch(tmp_path / "other")
    assert len(runner.dead_letters()) == 3

    keyed = config(tmp_path, keys=True)
    newer = Runner(spark, keyed)
    newer.batch_id = runner.batch_id
    newer.messages(
        tmp_path,
        [
            debezium("u", item(1, "new"), pos=50, before=item(1, "old")),
            debezium("d", item(2, "old"), pos=60, before=item(2, "old")),
            debezium("c", item(3, "third"), pos=70),
        ],
    )

    first = retry(keyed, table="shop.*")  # the undecodable record has no table: not selected
    assert (first.selected, first.applied, first.dead_letters) == (2, 2, 0)
    names = dict(mirror_frame(spark, tmp_path).collect())
    # the retried inserts (pos 1, 2) are older than the update (pos 50) and the delete (pos 60, a
    # tombstone): neither overwrites nor resurrects
    assert names == {"1": "new", "3": "third"}

    second = retry(keyed)  # the bad JSON fails again: a new dead letter of the retry batch
    assert second.batch_id == RETRY_BATCH_BASE + 2
    assert (second.selected, second.applied, second.dead_letters) == (1, 0, 1)
    pending = summarize(keyed)
    assert pending["pending"] == 1
    [group] = pending["groups"]
    assert group["first_batch"] == RETRY_BATCH_BASE + 2 and group["example"] == "{not json"
    third = retry(keyed, error="no such error")
    assert third.batch_id is None


def test_an_interrupted_retry_is_finished_with_its_own_batch_id(spark, tmp_path):
    from replicator.commands.deadletters import RETRIES_SCHEMA, RETRY_JOB_SUFFIX
    from replicator.sinks.base import Txn
    from replicator.state import now

    runner = Runner(spark, config(tmp_path, keys=False))
    runner.messages(tmp_path, [debezium("c", item(1, "a"), pos=1)])
    keyed = config(tmp_path, keys=True)
    state = _state(keyed)
    [dead] = runner.dead_letters()
    n = RETRY_BATCH_BASE + 1
    # a retry that committed its plan, then stopped before its batch ran
    plan = {**{k: dead[k] for k in RETRIES_SCHEMA.names if k in dead}, "retried_by": n, "retried_at": now()}
    import pyarrow as pa

    state.table("dead_letter_retries").append(
        pa.Table.from_pylist([plan], RETRIES_SCHEMA), Txn(keyed.name + RETRY_JOB_SUFFIX + ":plan", n)
    )
    assert summarize(keyed)["pending"] == 0
    result = retry(keyed)
    assert result.resumed == [n] and result.batch_id is None
    assert dict(mirror_frame(spark, tmp_path).collect()) == {"1": "a"}
    assert retry(keyed).resumed == []


def _state(config) -> State:
    return State.of(config)


def _version(tmp_path: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(tmp_path / "lake" / "shop" / "items")).version()


def _records(messages: list[dict[str, Any]], first_offset: int) -> Any:
    import pyarrow as pa

    from replicator.sources import raw_schema

    rows = [
        {"raw": json.dumps(m).encode(), "source": "mem", "partition": 0, "offset": first_offset + i}
        for i, m in enumerate(messages)
    ]
    return pa.Table.from_pylist(rows, raw_schema())


@settings(max_examples=12)
@given(
    ops=st.lists(st.tuples(st.integers(1, 4), st.sampled_from("cud")), min_size=1, max_size=14),
    split=st.integers(0, 14),
)
def test_retry_property_the_mirror_ends_as_the_source(tmp_path_factory, ops, split):
    """Any changes, the first ``split`` sent before tables.keys was set (dead letters), the rest after;
    then a retry: the mirror holds each key's latest change, whatever the order of arrival."""
    from replicator.engine import Engine

    tmp_path = tmp_path_factory.mktemp("retry-property")
    messages, reference = [], {}
    for pos, (key, op) in enumerate(ops, start=1):
        row = item(key, f"v{pos}")
        messages.append(debezium(op, row, pos=pos, before=item(key, "?") if op != "c" else None))
        if op == "d":
            reference.pop(str(key), None)
        else:
            reference[str(key)] = f"v{pos}"
    early, late = messages[:split], messages[split:]
    if early:
        dead = Engine(config(tmp_path, keys=False)).process_records(_records(early, 0), 0)
        assert dead.dead_letters == len(early)
    keyed = config(tmp_path, keys=True)
    if late:
        Engine(keyed).process_records(_records(late, len(early)), 1)
    result = retry(keyed)
    assert result.selected == len(early) and result.dead_letters == 0
    mirror = tmp_path / "lake" / "shop" / "items"
    rows = delta_table(mirror).to_pylist() if mirror.exists() else []
    assert {r["id"]: r["name"] for r in rows} == reference
    assert retry(keyed).batch_id is None


def test_a_discarded_dead_letter_is_never_re_driven_and_an_old_id_is_refused(spark, tmp_path):
    """Issue 53, item 6: `retry` (plain and --table) skips discarded dead letters; a discard is final.
    Item 5: `discard --id` of a dead letter a retry re-drove (its id is gone from the pending list) says
    so and exits non-zero."""
    from replicator.commands.deadletters import dead_letter_id, discard, pending, read_discards

    sent = [debezium("c", item(i, f"v{i}"), pos=i) for i in (1, 2, 3)]
    Runner(spark, config(tmp_path, keys=False)).messages(tmp_path, sent)
    keyed = config(tmp_path, keys=True)
    state = _state(keyed)
    letters = {json.loads(r["raw_text"])["after"]["id"]: dead_letter_id(r) for r in pending(state)}
    assert discard(keyed, "never valid", ids=[letters[2]]) == 1

    by_table = retry(keyed, table="shop.*")
    assert (by_table.selected, by_table.applied) == (2, 2)
    assert retry(keyed).batch_id is None  # plain retry: nothing pending, the discarded one included
    assert dict(mirror_frame(spark, tmp_path).collect()) == {"1": "v1", "3": "v3"}
    retried = {i for i, by in read_marks(state).items()}
    assert not retried & read_discards(state), "a discarded dead letter was re-driven"
    assert summarize(keyed)["pending"] == 0 and summarize(keyed)["discarded"] == 1

    path = str(
        job_file(tmp_path, "tables: {keys: {shop.items: [id]}}\n", name="test-job", dialect="debezium")
    )
    old = cli("dead-letters", "discard", "--config", path, "--id", letters[1], "--reason", "late")
    assert old.returncode == 2, (old.returncode, old.stdout, old.stderr)
    assert f"{letters[1]}: re-driven by retry batch {RETRY_BATCH_BASE + 1}" in old.stderr, old.stderr
    twice = cli("dead-letters", "discard", "--config", path, "--id", letters[2], "--reason", "again")
    assert twice.returncode == 2 and f"{letters[2]}: discarded already" in twice.stderr, twice.stderr
    unknown = cli("dead-letters", "discard", "--config", path, "--id", "0123456789ab", "--reason", "x")
    assert unknown.returncode == 2 and "no dead letter has this id" in unknown.stderr, unknown.stderr
    assert len(read_discards(state)) == 1
