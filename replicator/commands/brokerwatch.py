"""A Kafka job's brokers watched while it runs: when they cannot be reached the run says so within seconds,
naming the address, and keeps saying it until they answer (issue 53, item 3).

Spark's Kafka source waits for brokers that do not answer in silence (its admin client retries for minutes),
so a job pointed at the wrong address, or started while the brokers are down, looked like a job with nothing
to read. The watch asks the brokers for their metadata with a real Kafka client (librdkafka, through
confluent-kafka: the decode tasks' own client), in a thread of its own; it reads no record.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from replicator.logging import get_logger

if TYPE_CHECKING:
    from replicator.config import KafkaOptions

log = get_logger("replicator.commands.brokerwatch")
TIMEOUT_S = 5.0  # a metadata request that takes longer: the brokers count as unreachable
EVERY_S = 15.0  # between checks, and between repeats of the warning


class BrokerWatch:
    def __init__(self, kafka: KafkaOptions, timeout: float = TIMEOUT_S, every: float = EVERY_S) -> None:
        self.servers = kafka.bootstrap_servers
        self.settings = _settings(kafka)
        self.timeout = timeout
        self.every = every
        self._stop = threading.Event()
        self._saying = threading.Lock()  # held while a warning is written: stop() waits for it
        self._thread = threading.Thread(target=self._watch, name="broker-watch", daemon=True)
        self.unreachable = False

    def start(self) -> BrokerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No warning is written once this returns (a check under way may still end, unsaid): the run's
        last line stays last."""
        with self._saying:
            self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            error = self.check()
            with self._saying:
                if self._stop.is_set():
                    return
                self._say(error)
            self._stop.wait(self.every)

    def _say(self, error: str | None) -> None:
        if error is not None:
            self.unreachable = True
            log.warning(
                "the Kafka brokers cannot be reached: nothing is read until they answer",
                bootstrap_servers=self.servers,
                error=error,
            )
        elif self.unreachable:
            self.unreachable = False
            log.warning("the Kafka brokers answer again", bootstrap_servers=self.servers)

    def check(self) -> str | None:
        """None when a broker answered a metadata request within the timeout, else why not."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        errors: list[str] = []
        settings = {**self.settings, "error_cb": lambda e: errors.append(str(e))}
        try:
            AdminClient(settings).list_topics(timeout=self.timeout)
        except KafkaException as exc:
            reason = errors[-1] if errors else str(exc.args[0] if exc.args else exc)
            return f"no answer within {self.timeout:g} s ({reason})"
        return None


def _settings(kafka: KafkaOptions) -> dict[str, str]:
    """The client settings the decode tasks use (security included), else the address alone."""
    from replicator.kafka_reader import client_settings

    settings = client_settings({"kafka.bootstrap.servers": kafka.bootstrap_servers, **kafka.options})
    if settings is None:
        settings = {"bootstrap.servers": kafka.bootstrap_servers}
    settings = {k: v for k, v in settings.items() if k not in ("isolation.level", "fetch.wait.max.ms")}
    return {**settings, "socket.connection.setup.timeout.ms": "3000", "log_level": "0"}
