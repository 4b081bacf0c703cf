from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from replicator.config import ConfigError, load_config, parse_duration


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """
name: shop-mirror
source:
  type: files
  path: landing
  dialect: canal-json
target:
  path: lakehouse
state:
  path: state
"""


def test_minimum_job_file_and_relative_paths(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    assert config.name == "shop-mirror"
    assert config.source.path == tmp_path / "landing"
    assert config.target.path == tmp_path / "lakehouse"
    assert config.state.path == tmp_path / "state"
    assert config.on_error == "dead_letter" and config.schema_evolution == "lenient"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("dialect: canal-json", "dialect: nope"),
            "source.dialect: Value error, unknown dialect; expected one of auto, ",
        ),
        (
            GOOD.replace("  path: lakehouse\n", "  writer: delta-rs\n"),
            "target.path: a required key is missing",
        ),
        (GOOD.replace("type: files", "type: ftp"), "source.type: Input should be 'files' or 'kafka'"),
        (GOOD + "trigger:\n  interval: soon\n", "trigger.interval: Value error, expected a duration"),
        (GOOD + "on_error: explode\n", "on_error: Input should be 'dead_letter' or 'fail'"),
        (
            GOOD + "unknown_key: 1\n",
            "unknown_key: unknown key; expected one of catalog, changelog, dead_tables",
        ),
        (
            GOOD.replace("source:\n  type: files\n", "source:\n  type: files\n  timezone: Mars/Base\n"),
            "source.timezone: Value error, unknown time zone 'Mars/Base'",
        ),
        (
            GOOD.replace("type: files\n  path: landing", "type: kafka"),
            "a kafka source needs a 'kafka' section",
        ),
        ("name: [\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
    ],
)
def test_invalid_files_name_the_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read job file"):
        load_config(tmp_path / "absent.yaml")


def test_durations():
    assert parse_duration("10 seconds") == dt.timedelta(seconds=10)
    assert parse_duration("500ms") == dt.timedelta(milliseconds=500)
    assert parse_duration("7 days") == dt.timedelta(days=7)
    assert parse_duration(3) == dt.timedelta(seconds=3)


def test_cli_config_error_exits_before_spark(tmp_path, capsys):
    from replicator.commands.cli import main

    code = main(["mirror", "--config", str(write(tmp_path, GOOD.replace("canal-json", "nope")))])
    assert code == 2
    assert "source.dialect" in capsys.readouterr().err


def test_kafka_options_are_built_from_the_job_file(tmp_path):
    from replicator.sources import kafka_options

    text = GOOD.replace(
        "type: files\n  path: landing",
        "type: kafka\n  kafka:\n    bootstrap_servers: k1:9092,k2:9092\n"
        "    topics: [shop]\n    max_offsets_per_trigger: 5000\n    options: {kafka.security.protocol: SSL}",
    )
    config = load_config(write(tmp_path, text))
    assert kafka_options(config.source.kafka) == {
        "kafka.bootstrap.servers": "k1:9092,k2:9092",
        "subscribe": "shop",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "maxOffsetsPerTrigger": "5000",
        "kafka.max.poll.records": "2000",
        "kafka.security.protocol": "SSL",
        "kafka.fetch.max.wait.ms": "10",  # (kafka_reader.FETCH_MAX_WAIT_MS)
    }
    # the job file's own consumer settings win
    waits = load_config(write(tmp_path, text.replace("SSL}", "SSL, kafka.fetch.max.wait.ms: '200'}")))
    assert kafka_options(waits.source.kafka)["kafka.fetch.max.wait.ms"] == "200"


def test_the_job_files_consumer_options_win_over_the_defaults(tmp_path):
    from replicator.sources import kafka_options

    text = GOOD.replace(
        "type: files\n  path: landing",
        "type: kafka\n  kafka:\n    bootstrap_servers: k1:9092\n"
        "    topics: [shop]\n    options: {kafka.max.poll.records: '300'}",
    )
    assert kafka_options(load_config(write(tmp_path, text)).source.kafka)["kafka.max.poll.records"] == "300"


def test_a_noted_kafka_batch_is_read_again_by_its_offset_ranges(tmp_path):
    """A batch left pending (trigger.overlap) is read again from the ranges its decode tasks read: the
    partitions assigned, each from its first offset to the one after its last, the job's own options."""
    import json

    import pyarrow as pa

    from replicator.decode import manifest_rows, merge_manifest
    from replicator.sources import kafka_range_options

    text = GOOD.replace(
        "type: files\n  path: landing",
        "type: kafka\n  kafka:\n    bootstrap_servers: k1:9092\n    topics: [shop, crm]\n"
        "    options: {kafka.security.protocol: SSL}",
    )
    config = load_config(write(tmp_path, text))

    def records(topic: str, partition: int, offsets: list[int]) -> pa.Table:
        n = len(offsets)
        return pa.table({"source": [topic] * n, "partition": [partition] * n, "offset": offsets})

    # two tasks read parts of shop/0, one task crm/2 (in two slices)
    tasks = [
        manifest_rows("kafka", pa.record_batch({"x": [1]}), [records("shop", 0, [7, 5, 6])]),
        manifest_rows(
            "kafka", pa.record_batch({"x": [1]}), [records("shop", 0, [9, 8]), records("crm", 2, [40])]
        ),
        manifest_rows("kafka", pa.record_batch({"x": [1]}), [records("crm", 2, [41, 43])]),
    ]
    ranges = merge_manifest([t for t in tasks if t is not None])
    assert sorted(ranges.to_pylist(), key=lambda r: r["source"]) == [
        {"source": "crm", "partition": 2, "first": 40, "last": 43},
        {"source": "shop", "partition": 0, "first": 5, "last": 9},
    ]
    options = kafka_range_options(config.source.kafka, ranges)
    assert {k: v for k, v in options.items() if k not in ("assign", "startingOffsets", "endingOffsets")} == {
        "kafka.bootstrap.servers": "k1:9092",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "kafka.fetch.max.wait.ms": "10",
        "kafka.max.poll.records": "2000",
        "kafka.security.protocol": "SSL",
    }
    assert json.loads(options["assign"]) == {"crm": [2], "shop": [0]}
    assert json.loads(options["startingOffsets"]) == {"crm": {"2": 40}, "shop": {"0": 5}}
    assert json.loads(options["endingOffsets"]) == {"crm": {"2": 44}, "shop": {"0": 10}}
    files = manifest_rows("files", pa.record_batch({"path": ["file:/a", "file:/b"], "mtime": [1, 2]}), [])
    assert merge_manifest([files]).to_pylist() == [
        {"source": "file:/a", "partition": 1, "first": None, "last": None},
        {"source": "file:/b", "partition": 2, "first": None, "last": None},
    ]


def test_the_command_builds_its_config_models_without_scanning_for_pydantic_plugins():
    """The scan reads every installed distribution's entry points (~40 ms of a driver's start); the
    command's own models have nothing for a plugin to observe."""
    import subprocess
    import sys

    probe = (
        "import os; os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)\n"
        "import replicator.commands.cli\n"
        "from pydantic.plugin import _loader\n"
        "print(os.environ['PYDANTIC_DISABLE_PLUGINS'], _loader._plugins)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["__all__", "None"]
