"""The record of the Kafka topics' IDs (replicator.kafka_topics) without a broker: first IDs kept, a changed
one found, replaced only when told, and a damaged file named."""

from __future__ import annotations

import pytest

from replicator.errors import StateDamaged
from replicator.kafka_topics import Recreated, TopicIds, recreated_message


def test_ids_are_recorded_once_and_a_changed_one_is_found(tmp_path):
    ids = TopicIds(tmp_path)
    assert ids.known() == {} and ids.compare({"a": "A1"}) == []
    ids.record({"a": "A1", "b": "B1"})
    ids.record({"a": "A2"})  # a known topic's ID changes only by replace()
    assert ids.known() == {"a": "A1", "b": "B1"}
    found = ids.compare({"a": "A2", "b": "B1", "c": "C1"})
    assert found == [Recreated("a", "A1", "A2")]
    message = recreated_message(found)
    assert "'a' was deleted and re-created" in message and "A1" in message and "A2" in message
    assert "fail_on_data_loss: false" in message and "\n" not in message
    ids.replace(found, batch_id=7)
    assert ids.known()["a"] == "A2" and ids.compare({"a": "A2"}) == []
    [event] = ids.events()
    assert (event["topic"], event["old_id"], event["new_id"], event["batch_id"]) == ("a", "A1", "A2", 7)


def test_a_damaged_record_is_named(tmp_path):
    (tmp_path / "kafka_topics.json").write_text('{"topics": {"a": ', encoding="utf-8")
    with pytest.raises(StateDamaged, match=r"kafka_topics\.json"):
        TopicIds(tmp_path).known()
