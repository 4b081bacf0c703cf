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
            "source.dialect: Value error, unknown dialect 'nope'",
        ),
        (GOOD.replace("  path: lakehouse\n", "  writer: delta-rs\n"), "target.path: Field required"),
        (GOOD.replace("type: files", "type: ftp"), "source.type: Input should be 'files' or 'kafka'"),
        (GOOD + "trigger:\n  interval: soon\n", "trigger.interval: Value error, expected a duration"),
        (GOOD + "on_error: explode\n", "on_error: Input should be 'dead_letter' or 'fail'"),
        (GOOD + "unknown_key: 1\n", "unknown_key: Extra inputs are not permitted"),
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
        "kafka.security.protocol": "SSL",
    }
