"""Run the mirror stream: Structured Streaming with ``foreachBatch`` into the engine."""

from __future__ import annotations

import signal
import sys
import threading
from typing import IO, TYPE_CHECKING

from replicator.config import JobConfig
from replicator.logging import get_logger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from replicator.state import BatchSummary

log = get_logger("replicator.commands.runner")
INTERRUPTED_EXIT = 130  # a run stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C)


class MirrorJob:
    """One streaming query. A lock spans each micro-batch so that a stop request waits for the running
    batch to finish, then stops the query before the next one starts any work."""

    def __init__(self, config: JobConfig, spark: SparkSession) -> None:
        from replicator.dialects import Decoder
        from replicator.engine import Engine

        self.config = config
        self.spark = spark
        self.engine = Engine(config)
        # A dialect's job-file prerequisites (dts-avro's schema file) fail here, before any batch.
        Decoder(config.source.dialect, self.engine.options)
        # Mirrors made before the catalog was turned on (or whose entry a failed sync left out) are
        # registered at the start, without waiting for a batch.
        self.engine.sync_catalog()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.interrupted: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM), if one did
        self.error: BaseException | None = None
        self.progress = None  # progress.CatchUp of an --available-now run (a bar on a terminal)
        self.lines = None  # progress.BatchLines of a continuous run on a terminal
        self.summaries: list[BatchSummary] = []  # this run's applied batches (replicator.commands.outcome)
        self.metrics = None  # metrics.JobMetrics when the job file asks for them (metrics.port)
        if config.metrics is not None:
            from replicator.commands.metrics import JobMetrics

            self.metrics = JobMetrics(config, self.engine.state)
        self._skipped: dict[str, int] | None = None  # the last landing scan's counts (report_skipped)

    def report_skipped(self, batch_id: int | None = None) -> None:
        """Scan the landing folder for entries the stream does not read (hidden names, symbolic links, other
        suffixes: sources.scan_landing); log a warning with the counts and a few names at the start and
        whenever they change, and keep the newest for ``status``. Spark's file source lists the whole folder
        each trigger too; this walk is of the same order, without opening a file."""
        from replicator.sources import scan_landing

        source = self.config.source
        if source.type != "files" or source.path is None:
            return
        try:
            landing = scan_landing(source.path, source.follow_symlinks)  # type: ignore[arg-type]
        except OSError as exc:  # a report only: Spark's own listing fails the batch if it must
            log.warning("landing folder not scanned", error=str(exc))
            return
        counts = landing.counts()
        if counts == self._skipped:
            return
        self._skipped = counts
        report = landing.report()
        self.engine.state.save_skipped(report)
        if report["skipped"]:
            log.warning("files in the landing folder not read", batch_id=batch_id, **report)

    def _batch(self, frame: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._stop.is_set():
                # Spark fails the query with this error and logs it, with a traceback, as a query that
                # died; the run is stopping on purpose, so the query's own error log is turned off first.
                quiet_query_errors(self.spark)
                raise InterruptedError("stopping: the batch is left for the next run")
            if self.engine.state.done("batches", batch_id):
                # Applied whole by a run stopped before Spark recorded its commit: Spark runs it again, with
                # the same inputs. Its record is the last step of its apply, so there is nothing left to
                # do, and this run's summary does not count it a second time.
                log.info("batch applied by the previous run; skipped", batch_id=batch_id)
                if self.progress is not None and self.config.source.type == "files":
                    from replicator.commands.progress import batch_files

                    self.progress.skipped(batch_files(self.engine.state.checkpoint, batch_id))
                return
            try:
                self.report_skipped(batch_id)
                if self.config.trigger.overlap:  # applied while Spark decodes the next batch
                    self.engine.submit(frame, batch_id)
                else:
                    self.engine.process(frame, batch_id)
            except BaseException as exc:  # Spark wraps it; keep the original for the caller
                self.error = exc
                raise

    def _applied(self, summary: BatchSummary) -> None:
        self.summaries.append(summary)
        if self.metrics is not None:
            self.metrics.observe(summary)
        if self.progress is not None:
            self.progress.add_events(summary.events)
            self.progress.note(summary)
        if self.lines is not None:
            self.lines.note(summary)

    def run(
        self, available_now: bool = False, progress_stream: IO[str] | None = None, checked: bool = False
    ) -> int:
        """``progress_stream``: where a catch-up's bar goes (stderr), shown only if it is a terminal;
        ``checked``: the state was checked already (commands.preflight, before Spark started)."""
        if self.metrics is not None:
            self.metrics.start()
        try:
            return self._run(available_now, progress_stream, checked)
        except BaseException:
            if self.metrics is not None:
                self.metrics.failed()
            raise
        finally:
            if self.metrics is not None:
                self.metrics.stop()

    def _run(self, available_now: bool, progress_stream: IO[str] | None, checked: bool) -> int:
        from replicator.commands.preflight import check_state
        from replicator.commands.progress import BatchLines, catch_up, is_terminal, poll
        from replicator.errors import SourceFailed
        from replicator.sources import build_stream, data_loss_message

        if not checked:  # a damaged checkpoint or Delta log, a mirror that lost commits: stop here
            check_state(self.config)
        warming = threading.Thread(target=warm_workers, args=(self.spark, self.config), daemon=True)
        warming.start()  # the Python workers start while the query does
        from replicator.apply.schema import reconcile_declared_types

        reconcile_declared_types(self.config, self.engine.state)  # tables.types for existing columns
        from replicator.apply.history import seed_history

        seed_history(self.config, self.engine.state)  # history turned on for mirrors that have rows
        self.report_skipped()
        kafka = self.config.source.kafka if self.config.source.type == "kafka" else None
        if kafka is not None:  # a topic deleted and re-created since the last run: stopped here, in one line
            from replicator.kafka_topics import check_at_start

            check_at_start(self.spark, kafka, self.engine.state.root)
        # A batch Spark committed while the last run applied it (trigger.overlap) is applied first.
        self.summaries += self.engine.recover(self.spark)
        self.engine.on_batch = self._applied
        stream = build_stream(self.spark, self.config)
        writer = (
            stream.writeStream.foreachBatch(self._batch)
            .option("checkpointLocation", self.engine.state.checkpoint)
            .queryName(self.config.name)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
            self.progress = catch_up(self.config, self.engine.state.checkpoint, progress_stream)
        else:
            seconds = self.config.trigger.interval.total_seconds()
            writer = writer.trigger(processingTime=f"{max(seconds, 0.1)} seconds")
            stream_to = progress_stream if progress_stream is not None else sys.stderr
            if is_terminal(stream_to):
                self.lines = BatchLines(stream_to)
        query = writer.start()
        if self.lines is not None:
            self.lines.started(self.config.name)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def request_stop(signum: int, _frame: object) -> None:
            if self._stop.is_set():
                return  # (a second Ctrl-C: the first is being honoured)
            self.interrupted = signal.Signals(signum).name
            log.info("stop requested, finishing the current batch", signal=self.interrupted)
            self._stop.set()

        for sig in previous:
            signal.signal(sig, request_stop)
        drained = False
        try:
            while query.isActive:
                failed = self.engine.failure()  # a batch applied behind failed: stop at once
                if self._stop.is_set() or failed is not None:
                    # The running batch ends first (its lock), then the query stops. Not while holding the
                    # lock: stopping waits for Spark's stream thread, which may be entering the next batch
                    # and waiting for that lock (a stop that hung for good); that batch sees the stop and
                    # leaves its input for the next run.
                    with self._lock:
                        pass
                    if self._stop.is_set():  # what Spark logs while it cancels is the stop's, not an error
                        quiet_query_errors(self.spark)
                    query.stop()
                    break
                try:
                    query.awaitTermination(0.5)
                except Exception:  # the query failed: its error (self.error, the original) is raised below
                    break
                if self.progress is not None and self.progress.enabled:
                    self.progress.update(poll(query))
            if self.progress is not None and self.progress.enabled:
                self.progress.update(poll(query))
            exc = query.exception()
            if exc is not None and not self._stop.is_set():
                error = self.error if self.error is not None else exc
                lost = data_loss_message(error) if self.config.source.type == "kafka" else None
                if lost is not None:
                    raise SourceFailed(lost) from error
                if kafka is not None:  # Spark's planning fails on a re-created topic with fewer records
                    check_at_start(self.spark, kafka, self.engine.state.root)
                raise error
            drained = True
            self.engine.drain()  # the last batch, applied behind: its error is this run's
        finally:
            if not drained:  # an error above: the batch applied behind still ends before the process
                try:
                    self.engine.drain()
                except Exception as exc:
                    log.error("the batch applied behind the failed one failed too", error=str(exc))
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.progress is not None:
                self.progress.close()
        log.info("mirror stopped", job=self.config.name)
        if self.lines is not None:
            self.lines.close()  # after the line above: on the terminal, its short lines were the run's
        if self.progress is not None:
            from replicator.logging import quiet_console

            quiet_console(False)  # the bar's run is over
        return INTERRUPTED_EXIT if self.interrupted else 0

    def stopped_at(self) -> str:
        """Where an interrupted run stopped, for its last line: the last batch it applied (or the job's
        last before it), and that the rest is left for the next run."""
        last = max((s.batch_id for s in self.summaries), default=None)
        done = "before this run applied a batch" if last is None else f"stopped after batch {last}"
        return f"replicator: interrupted ({self.interrupted}): {done}; the next run goes on from there"


def warm_workers(spark: SparkSession, config: JobConfig) -> None:
    """Start Spark's Python workers with the decode modules loaded (replicator.decode.warm), a task per
    core. A failure here is left to the first decode task to report."""
    from functools import partial

    import pyarrow as pa

    from replicator.decode import warm
    from replicator.spark import local_frame, struct

    tasks = max(1, spark.sparkContext.defaultParallelism)
    schema = pa.schema([("task", pa.int32())])
    try:
        frame = local_frame(spark, [(i,) for i in range(tasks)], schema)
        frame.mapInArrow(partial(warm, config.source.dialect), struct(schema)).collect()
    except Exception as exc:
        log.debug("workers not warmed", error=str(exc))


def quiet_query_errors(spark: SparkSession) -> None:
    """Spark's error log of a streaming query that died turned off (log4j's level for its package, Spark
    3's and Spark 4's names): a query stopped on purpose dies with the batch it refused, and the jobs it
    cancels fail to store their broadcasts and blocks."""
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in (
            "org.apache.spark.sql.execution.streaming",
            "org.apache.spark.sql.streaming",
            "org.apache.spark.broadcast",
            "org.apache.spark.storage",
        ):
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception as exc:  # only the log's noise is at stake
        log.debug("query error log not turned off", error=str(exc))
