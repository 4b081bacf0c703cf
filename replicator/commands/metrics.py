"""A running ``mirror`` job's figures for Prometheus to scrape (``metrics.port`` in the job file; off by
default, on 127.0.0.1 unless ``metrics.host`` says otherwise). docs/operations.md lists every metric.

Counters and the last batch's gauges are updated from each applied batch's summary (the engine's
``on_batch``); the lag is computed when scraped, from the table registry (now minus the newest applied
source event time), so it grows while nothing arrives, as it should.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replicator.config import JobConfig
    from replicator.state import BatchSummary, State

PREFIX = "replicator"


class JobMetrics:
    def __init__(self, config: JobConfig, state: State) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.config = config
        self.state = state
        self.registry = CollectorRegistry()
        job = ["job"]
        table = ["job", "table"]
        self.batches = Counter(f"{PREFIX}_batches", "micro-batches applied", job, registry=self.registry)
        self.failures = Counter(
            f"{PREFIX}_failures", "runs of the job that stopped on an error", job, registry=self.registry
        )
        self.records = Counter(f"{PREFIX}_records_read", "raw records read", job, registry=self.registry)
        self.events = Counter(
            f"{PREFIX}_events",
            "decoded items by outcome (applied, filtered, dead_letter); their sum is every item read",
            ["job", "outcome"],
            registry=self.registry,
        )
        self.rows = Counter(
            f"{PREFIX}_rows",
            "mirror rows changed, by change (inserted, updated, deleted)",
            [*table, "change"],
            registry=self.registry,
        )
        self.table_events = Counter(
            f"{PREFIX}_table_events",
            "a table's events by outcome (applied: its net changes merged; dead_letter)",
            [*table, "outcome"],
            registry=self.registry,
        )
        self.duration = Gauge(
            f"{PREFIX}_last_batch_seconds",
            "the last batch's duration by phase (total: all of it)",
            ["job", "phase"],
            registry=self.registry,
        )
        self.last_batch = Gauge(
            f"{PREFIX}_last_batch_id", "the last applied batch", job, registry=self.registry
        )
        # Every job-wide series from the start, at 0: a scraper sees the counter before the first batch (a
        # series without a sample until it changes made rate() and alerts blind to the first increase).
        name = config.name
        for counter in (self.batches, self.failures, self.records):
            counter.labels(name)
        for outcome in ("applied", "filtered", "dead_letter"):
            self.events.labels(name, outcome)
        self.registry.register(_Lag(self))
        self._lag: tuple[float, dict[str, dt.datetime]] = (0.0, {})
        self.server: Any = None

    def start(self) -> None:
        from prometheus_client import start_http_server

        from replicator.config import ConfigError

        settings = self.config.metrics
        assert settings is not None
        try:
            self.server, _thread = start_http_server(
                settings.port, addr=settings.host, registry=self.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"metrics: cannot listen on {settings.host}:{settings.port}: {exc.strerror}"
            ) from None

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def observe(self, summary: BatchSummary) -> None:
        job = self.config.name
        self._lag = (0.0, {})  # the registry changed: read it again at the next scrape
        self.batches.labels(job).inc()
        self.last_batch.labels(job).set(summary.batch_id)
        self.records.labels(job).inc(summary.records_in)
        for outcome, count in (
            ("applied", summary.applied),
            ("filtered", summary.filtered),
            ("dead_letter", summary.dead_letters),
        ):
            self.events.labels(job, outcome).inc(count)
        for table, counts in summary.tables.items():
            for change in ("inserted", "updated", "deleted"):
                self.rows.labels(job, table, change).inc(int(counts.get(change) or 0))
            self.table_events.labels(job, table, "dead_letter").inc(int(counts.get("dead_letters") or 0))
            changed = sum(int(counts.get(k) or 0) for k in ("inserted", "updated", "deleted"))
            self.table_events.labels(job, table, "applied").inc(changed)
        self.duration.labels(job, "total").set(summary.duration_ms / 1000)
        for phase, ms in summary.phases_ms.items():
            self.duration.labels(job, phase).set(ms / 1000)

    def failed(self) -> None:
        self.failures.labels(self.config.name).inc()

    def lags(self) -> dict[str, float]:
        """Per table, now minus its newest applied event time (the registry, read again after each batch and
        at most every 5 s; between those the last reading's event times with the clock moved on)."""
        from replicator.model import table_label

        at, cached = self._lag
        if not at or time.monotonic() - at >= 5:
            cached = {
                table_label(t.id): t.last_event_time
                for t in self.state.tables().values()
                if t.last_event_time is not None and not t.dropped
            }
            self._lag = (time.monotonic(), cached)
        now = dt.datetime.now(dt.UTC)
        return {table: (now - newest).total_seconds() for table, newest in cached.items()}


def check_port(config: JobConfig) -> None:
    """``metrics.port`` free to listen on, checked before Spark starts (a minute on a loaded machine), with
    the error :meth:`JobMetrics.start` gives."""
    import socket

    from replicator.config import ConfigError

    settings = config.metrics
    if settings is None:
        return
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the HTTP server binds it
        try:
            probe.bind((settings.host, settings.port))
        except OSError as exc:
            raise ConfigError(
                f"metrics: cannot listen on {settings.host}:{settings.port}: {exc.strerror}"
            ) from None


class _Lag:
    """The per-table lag gauge, computed when scraped."""

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            f"{PREFIX}_lag_seconds",
            "now minus the newest applied source event time of the table",
            labels=["job", "table"],
        )
        for table, seconds in sorted(self.metrics.lags().items()):
            family.add_metric([self.metrics.config.name, table], seconds)
        yield family
