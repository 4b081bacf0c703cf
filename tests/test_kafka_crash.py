"""kill -9 of the mirror job in the middle of Kafka micro-batches, at seeded random instants, then a run to
the end: the mirrors equal the model (tests/test_crash.py's workload and model) and every Kafka record is
accounted for once: each offset of each partition in exactly one batch's range, each event once in the
change log, each batch committed once per table."""

from __future__ import annotations

import json
import os
import random
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.kafka_helpers import canal_placement
from tests.test_crash import TABLES, differences, events_of, finish, kill_after, status, txns, workload

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
PARTITIONS = 2


def kafka_job(root: Path, servers: str, topic: str) -> Path:
    path = root / "job.yaml"
    path.write_text(
        textwrap.dedent(f"""
        name: crash-job
        source:
          type: kafka
          dialect: canal-json
          kafka: {{bootstrap_servers: "{servers}", topics: [{topic}], max_offsets_per_trigger: 6}}
        target: {{path: lake}}
        state: {{path: state}}
        trigger: {{interval: 100ms}}
        """),
        encoding="utf-8",
    )
    return path


# CI runs one seed (three kills in it); `make soak` (HYPOTHESIS_PROFILE=soak) runs them all.
SEEDS = [5, 17, 29] if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else [5]


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_9_inside_kafka_batches_then_run_to_the_end(kafka, tmp_path, seed):
    from deltalake import DeltaTable

    rng = random.Random(seed)
    files, model = workload(seed, files=3, messages=10)
    messages = [json.dumps(m).encode() for f in files for m in f]
    topic = kafka.topic("crash", PARTITIONS)
    stream = []
    for m in messages:  # as canal puts them: a table's messages in one partition, no key
        key, partition = canal_placement(m, PARTITIONS)
        stream.append((key, m, partition))
    placed = kafka.produce(topic, stream)
    config = kafka_job(tmp_path, kafka.servers, topic)

    kills = [(1, rng.uniform(0, 1)), (rng.randint(1, 2), rng.uniform(0, 3)), (1, rng.uniform(0, 2))]
    history = [kill_after(config, batches, delay) for batches, delay in kills]
    assert history[0].startswith("killed"), history
    finish(config)
    problems = differences(tmp_path, model)
    assert not problems, f"seed {seed}: {history}:\n" + "\n".join(problems)

    report = status(config)
    batches = report["batches"]
    assert [b["batch_id"] for b in batches] == list(range(len(batches))), history
    assert sum(b["records_in"] for b in batches) == len(messages)
    events = sum(events_of(m) for f in files for m in f)
    assert sum(b["events"] for b in batches) == events
    for b in batches:
        assert b["applied"] + b["filtered"] + b["dead_letters"] == b["events"], b
    assert report["dead_letters"] == 0
    # Every offset in exactly one batch's range, none lost, each partition read to its end.
    ranges = DeltaTable(str(tmp_path / "state" / "kafka_partitions")).to_pyarrow_table().to_pylist()
    ends = Counter((t, p) for t, p, _o in placed)
    for partition, end in ends.items():
        covered = sorted((r["start"], r["end"]) for r in ranges if (r["topic"], r["partition"]) == partition)
        assert [a for a, _b in covered] == [0] + [b for _a, b in covered[:-1]], covered
        assert covered[-1][1] == end
    assert all(r["lost_from"] is None for r in ranges)
    assert {(p["topic"], p["partition"]): p["next_offset"] for p in report["kafka"]} == dict(ends)
    # Each event once in the change log, at its record's coordinates.
    log = DeltaTable(str(tmp_path / "state" / "changelog")).to_pyarrow_table(columns=["coordinates"])
    coordinates = Counter(
        (c["source"], c["partition"], c["offset"], c["index"], c["row"])
        for c in log["coordinates"].to_pylist()
    )
    assert set(coordinates.values()) == {1} and len(coordinates) == events
    assert {(s, p, o) for s, p, o, _i, _r in coordinates} == set(placed)
    for table in TABLES:
        counts = txns(tmp_path / "lake" / "shop" / table)
        assert set(counts.values()) == {1}, f"{table}: a batch committed twice: {counts}"
