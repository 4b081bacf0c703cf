from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from replicator import types
from replicator.commands.inspect import decode_path, event_records
from replicator.dialects import get_dialect
from tests.dialects.golden import FIXTURES, check_golden, params


@pytest.mark.parametrize("case", params("drs-json-c"))
def test_golden(case):
    check_golden(case, "drs-json-c")


def test_only_by_name():
    """JSON-C has drs-json's keys (Huawei DRS «Kafka消息格式»): auto detection never picks it."""
    assert get_dialect("drs-json-c").detectable is False


def test_formatted_timestamp_is_wall_clock_in_source_timezone():
    """The JSON-C text of Huawei DRS «Kafka消息格式»'s TIMESTAMP, read in source.timezone, is the instant
    drs-json carries as
    epoch seconds (1624614713.201)."""
    event = event_records(
        decode_path(FIXTURES / "drs-json-c" / "seed003-mysql-init-as-json-c.json", "drs-json-c")
    )[0]
    text = event["after"]["c5"]
    assert text == "2021-06-25 17:51:53.201"
    parsed, errors = types.parse_values(
        pa.array([text]), types.arrow_type("timestamp"), timezone="Asia/Shanghai"
    )
    assert errors == []
    assert parsed.to_pylist()[0] == dt.datetime(2021, 6, 25, 9, 51, 53, 201000, tzinfo=dt.UTC)


def test_delete_image_is_data():
    events = check_golden(FIXTURES / "drs-json-c" / "constructed-dml.jsonl", "drs-json-c")
    # An error row carries no op: the DELETEs are the file's third and fourth messages.
    deletes = events[2:4]
    assert deletes[0]["op"] == "delete" and deletes[0]["before"]["id"] == "1" and "error" not in deletes[0]
    assert deletes[1]["error"] == "no rows in 'data'"
