"""Kafka topics deleted and re-created under the same name, told apart by their topic IDs.

Spark's checkpoint holds offsets by topic name. A topic deleted and re-created starts its offsets again, and
Spark's Kafka source cannot tell: with more records in the new topic than the job had read, it goes on from
the old offset and skips the new topic's first records unseen; with fewer, it fails while planning with a
Java error. Kafka gives each topic a UUID when it is created (KIP-516, "Topic Identifiers"), which a
re-created topic does not keep. The job records each topic's ID when it first reads it, in
``<state.path>/kafka_topics.json``, and compares at start and at each batch's planning
(``source.kafka.fail_on_data_loss``: stop, naming the topic and both IDs, or read the new topic from its
start and record the event for ``replicator status``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicator.logging import get_logger

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from replicator.config import KafkaOptions

log = get_logger("replicator.kafka_topics")

TOPICS_FILE = "kafka_topics.json"


@dataclass(frozen=True)
class Recreated:
    topic: str
    old_id: str
    new_id: str


def recreated_message(found: list[Recreated]) -> str:
    """The one line a run stops with (``fail_on_data_loss: true``)."""
    first = found[0]
    more = f" (and {len(found) - 1} more topic(s))" if len(found) > 1 else ""
    return (
        f"Kafka topic {first.topic!r} was deleted and re-created: its topic ID was {first.old_id} when "
        f"this job read it and is {first.new_id} now{more}, so the offsets in the job's checkpoint are not "
        "the new topic's and nothing of it was applied. To read the new topic from its start, set "
        "source.kafka.fail_on_data_loss: false (`replicator status` then shows the event)"
    )


class TopicIds:
    """``<state.path>/kafka_topics.json``: ``{"topics": {name: id}, "recreated": [event, ...]}``, written
    whole (a temporary file renamed over it)."""

    def __init__(self, root: Any) -> None:
        from replicator.storage import location

        self.path = location(root) / TOPICS_FILE  # a local file, or an object under an s3:// state.path

    def load(self) -> dict[str, Any]:
        try:
            if not self.path.exists():
                return {"topics": {}, "recreated": []}
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"topics": {}, "recreated": []}
        except (OSError, ValueError) as exc:
            from replicator.errors import StateDamaged

            raise StateDamaged(
                f"damaged state file {self.path}: {exc}. It holds the IDs of the Kafka topics the job read; "
                "remove it to record them again from the topics as they are now"
            ) from None
        if not isinstance(value, dict):
            return {"topics": {}, "recreated": []}
        return {"topics": dict(value.get("topics") or {}), "recreated": list(value.get("recreated") or [])}

    def known(self) -> dict[str, str]:
        return self.load()["topics"]

    def events(self) -> list[dict[str, Any]]:
        return self.load()["recreated"]

    def compare(self, current: dict[str, str]) -> list[Recreated]:
        """The topics whose ID now differs from the one recorded."""
        known = self.known()
        return [
            Recreated(topic, known[topic], new)
            for topic, new in sorted(current.items())
            if topic in known and known[topic] != new
        ]

    def record(self, current: dict[str, str]) -> None:
        """IDs of topics read for the first time (a known topic's ID changes only by :meth:`replace`)."""
        data = self.load()
        new = {t: i for t, i in current.items() if t not in data["topics"]}
        if new:
            data["topics"].update(new)
            self._save(data)

    def replace(self, found: list[Recreated], batch_id: int) -> None:
        """A batch that read re-created topics from their start is applied: their new IDs from now on."""
        data = self.load()
        at = datetime.now(UTC).isoformat()
        for r in found:
            data["topics"][r.topic] = r.new_id
            data["recreated"].append(
                {"topic": r.topic, "old_id": r.old_id, "new_id": r.new_id, "batch_id": batch_id, "at": at}
            )
        self._save(data)

    def _save(self, data: dict[str, Any]) -> None:
        if not isinstance(self.path, Path):  # an object store's PUT replaces an object whole
            self.path.write_text(json.dumps(data, indent=1), encoding="utf-8")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(temporary, self.path)


# ---- the checks --------------------------------------------------------------------------------------------


def _current(spark: SparkSession, options: KafkaOptions, topics: list[str]) -> dict[str, str] | None:
    from replicator.sources import kafka_topic_ids

    try:
        return kafka_topic_ids(spark, options, topics)
    except Exception as exc:  # brokers not answering: the batch's own read reports them
        log.warning("the Kafka topics' IDs not read: a re-created topic not looked for", error=str(exc)[:300])
        return None


def check_at_start(spark: SparkSession, options: KafkaOptions, root: str | Path) -> None:
    """Before the query starts: a topic the job read that was re-created stops the run (one line, exit 4)
    unless ``fail_on_data_loss: false`` (then the batch that reads it again: :func:`check_batch`). Spark's
    source fails its planning with a Java error when the new topic has fewer records than the job read."""
    from replicator.errors import SourceFailed

    ids = TopicIds(root)
    known = ids.known()
    if not known or not options.fail_on_data_loss:
        return
    current = _current(spark, options, sorted(known))
    found = ids.compare(current or {})
    if found:
        raise SourceFailed(recreated_message(found))


def check_batch(
    spark: SparkSession,
    options: KafkaOptions,
    root: str | Path,
    ranges: dict[tuple[str, int], tuple[int, int]],
) -> tuple[dict[tuple[str, int], tuple[int, int]], list[Recreated]]:
    """A batch's planned ranges, checked: topics read for the first time have their IDs recorded; a
    re-created topic stops the run (``fail_on_data_loss: true``) or is read from its start: its ranges
    start at 0 (the reader reads from the oldest offset Kafka still has, and records any gap), whatever
    offset the checkpoint held for the old topic. The new IDs are recorded once the batch is applied
    (:meth:`TopicIds.replace`), so a batch that fails reads the new topic from its start again."""
    from replicator.errors import SourceFailed

    current = _current(spark, options, sorted({topic for topic, _p in ranges}))
    if current is None:
        return ranges, []
    ids = TopicIds(root)
    found = ids.compare(current)
    ids.record(current)
    if not found:
        return ranges, []
    if options.fail_on_data_loss:
        raise SourceFailed(recreated_message(found))
    again = {r.topic for r in found}
    for r in found:
        log.warning(
            "Kafka topic re-created: read from its start (fail_on_data_loss: false)",
            topic=r.topic,
            old_id=r.old_id,
            new_id=r.new_id,
        )
    checked = {(t, p): ((0, end) if t in again else (start, end)) for (t, p), (start, end) in ranges.items()}
    return checked, found
