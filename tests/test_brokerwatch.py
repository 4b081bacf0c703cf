"""The broker watch (replicator.commands.brokerwatch): its warnings while brokers do not answer, and none once
it is stopped, even when a check was under way then (the run's last line, "replicator: interrupted ...",
must stay last: CI saw a warning after it)."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from replicator.commands.brokerwatch import BrokerWatch
from replicator.config import KafkaOptions
from replicator.testing.broker import free_port


class SlowWatch(BrokerWatch):
    """A watch whose metadata request lasts until the test lets it end, and fails."""

    def __init__(self) -> None:
        super().__init__(KafkaOptions(bootstrap_servers=f"127.0.0.1:{free_port()}", topics=["t"]), every=0.05)
        self.asked = threading.Event()
        self.answer = threading.Event()

    def check(self) -> str | None:
        self.asked.set()
        self.answer.wait(30)
        return "no answer within 5 s (test)"


def warnings(logs: list[dict]) -> list[dict]:
    return [e for e in logs if "cannot be reached" in e["event"]]


def test_a_check_that_fails_is_said_with_the_address():
    watch = SlowWatch()
    with capture_logs() as logs:
        watch.start()
        assert watch.asked.wait(30)
        watch.answer.set()
        watch._thread.join(0.5)  # it checks again and again: still running
        watch.stop()
        watch._thread.join(30)
    said = warnings(logs)
    assert said and all(e["bootstrap_servers"] == watch.servers for e in said)
    assert not watch._thread.is_alive()


def test_nothing_is_said_after_stop_returns_even_from_a_check_under_way():
    watch = SlowWatch()
    with capture_logs() as logs:
        watch.start()
        assert watch.asked.wait(30)
        watch.stop()  # the check is under way
        watch.answer.set()
        watch._thread.join(30)
    assert not watch._thread.is_alive()
    assert warnings(logs) == []


def test_the_real_check_names_brokers_nobody_answers_for():
    port = free_port()
    watch = BrokerWatch(KafkaOptions(bootstrap_servers=f"127.0.0.1:{port}", topics=["t"]), timeout=1.0)
    error = watch.check()
    assert error is not None and error.startswith("no answer within 1 s")
