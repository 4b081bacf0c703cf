"""A progress bar for ``mirror --available-now`` catch-ups, on a terminal only (docs/operations.md).

The total is what is known at the start: for files, the message files under ``source.path`` that the
query's checkpoint has not seen yet; for Kafka, the offsets between where the first batch starts and the
latest offsets the query saw then (Spark reports both in the batch progress). Done comes from each
micro-batch's progress (``query.recentProgress``: the files source's input rows are files, Kafka's are
offsets); events/s from the engine's batch summaries. When stderr is not a terminal nothing is printed and
the JSON batch log is all there is.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from replicator.jsonl import split_lines
from replicator.storage import is_uri, location

if TYPE_CHECKING:
    from replicator.config import JobConfig


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    return os.path.abspath(unquote(parsed.path)) if parsed.scheme in ("", "file") else uri


def checkpoint_files(checkpoint: str | Path) -> set[str]:
    """The files the query's file source has listed in a batch (its metadata log under
    ``<checkpoint>/sources/0``: a ``v1`` line, then one JSON object per file, in batch files and compacted
    ``N.compact`` files)."""
    log = location(checkpoint) / "sources" / "0"
    seen: set[str] = set()
    if not log.is_dir():
        return seen
    # A batch Spark planned but never committed (a run stopped in it) is read again by the next run: its
    # files are still to do, and belong in the catch-up's total.
    done = _last_commit(location(checkpoint) / "commits")
    for entry in log.iterdir():
        if entry.name.startswith(".") or entry.suffix == ".crc" or not entry.is_file():
            continue
        for line in split_lines(entry.read_text(encoding="utf-8", errors="replace")):
            if line.startswith("{"):
                try:
                    item = json.loads(line)
                    if int(item.get("batchId", -1)) <= done:
                        seen.add(_local(item["path"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return seen


def batch_files(checkpoint: str | Path, batch_id: int) -> int:
    """How many files the query's file log gives batch ``batch_id`` (its ``N`` or ``N.compact`` file)."""
    log = location(checkpoint) / "sources" / "0"
    count = 0
    for name in (str(batch_id), f"{batch_id}.compact"):
        entry = log / name
        if entry.is_file():
            for line in split_lines(entry.read_text(encoding="utf-8", errors="replace")):
                if line.startswith("{") and f'"batchId":{batch_id}' in line.replace(" ", ""):
                    count += 1
    return count


def _last_commit(commits: Any) -> int:
    """The newest batch id in the query's commit log (-1: none)."""
    if not commits.is_dir():
        return -1
    return max((int(e.name) for e in commits.iterdir() if e.name.isdigit()), default=-1)


def listed_files(root: str | Path, follow_symlinks: bool = False) -> list[Path]:
    """Message files as the stream reads them (sources.scan_landing): sources.FILE_SUFFIXES in any case,
    recursively, without the hidden (``.``) and metadata (``_``) files and folders Spark's file index skips
    and, unless followed, symbolic links."""
    from replicator.sources import scan_landing

    return scan_landing(location(root), follow_symlinks).files


def pending_files(config: JobConfig, checkpoint: str | Path) -> int:
    """Files a catch-up will read: listed under ``source.path``, not in the checkpoint's log."""
    seen = checkpoint_files(checkpoint)
    # absolute, symbolic links kept: the paths as Spark's file index names them
    return sum(
        1
        for p in listed_files(config.source.path, config.source.follow_symlinks)
        if (str(p) if is_uri(p) else os.path.abspath(p)) not in seen
    )


def _offsets(value: Any) -> int:
    """Sum of a Kafka offsets object ``{topic: {partition: offset}}`` (a JSON text or a dict)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return 0
    if not isinstance(value, dict):
        return 0
    return sum(int(o) for parts in value.values() if isinstance(parts, dict) for o in parts.values())


def _columns(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


class _AboveTheBar:
    """``sys.stderr`` while a bar is shown on it: the batch log lines (logging.py writes to the current
    ``sys.stderr``) are printed above the bar instead of through it."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):
            return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.stream, name)


class CatchUp:
    """A tqdm bar on ``stream`` (stderr) when it is a terminal; otherwise it prints nothing."""

    def __init__(
        self, total: int | None, unit: str, stream: IO[str] | None = None, kafka: bool = False
    ) -> None:
        stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(stream)
        self.kafka = kafka
        self.events = 0
        self._seen: set[int] = set()
        self._start: int | None = None  # Kafka: the offsets the catch-up started from
        self._t0 = time.monotonic()
        self._stderr: IO[str] | None = None
        self.bar: Any = None
        if not self.enabled:  # no bar, and no tqdm import (its version lookup reads spark-submit's zips)
            return
        from tqdm import tqdm

        width = _columns(stream)
        self.bar = tqdm(
            total=total,
            unit=unit,
            desc="catch-up",
            file=stream,
            dynamic_ncols=bool(width),
            # a terminal that says it has 0 columns and rows (a fresh pty) hides the bar: give it a size
            ncols=None if width else 100,
            nrows=None if width else 20,
        )
        if stream is sys.stderr:
            self._stderr, sys.stderr = sys.stderr, _AboveTheBar(stream)  # type: ignore[assignment]
        # The bar owns the terminal: a batch is one short line above it (note), not the ~600-character
        # log line, which wrapped over several rows that the bar's redraw then cut. Warnings still show;
        # --log-file or a pipe gets the full lines.
        from replicator.logging import quiet_console

        quiet_console(True)

    def note(self, summary: Any) -> None:
        """One short line for an applied batch, above the bar, cut to the terminal's width."""
        if self.bar is None:
            return
        line = batch_line(summary)
        width = self.bar.ncols or _columns(self.bar.fp) or 100
        self.bar.write(line[: max(width - 1, 20)], file=self.bar.fp)

    def skipped(self, files: int) -> None:
        """A batch the previous run applied, replayed by Spark and skipped: Spark reports no input for it
        (its rows were never read), so its files are counted done here."""
        if self.bar is not None and not self.kafka:
            self.bar.update(files)

    def add_events(self, n: int) -> None:
        """A batch's events (from its summary); the bar shows events/s at its next update."""
        self.events += n

    def update(self, progresses: list[dict[str, Any]]) -> None:
        """New micro-batch progress entries (``json.loads(p.json)`` of ``query.recentProgress``)."""
        if self.bar is None:
            return
        for p in progresses:
            batch = p.get("batchId")
            if batch in self._seen:
                continue
            self._seen.add(batch)
            for source in p.get("sources") or []:
                self.bar.update(self._done(source))
        seconds = max(time.monotonic() - self._t0, 1e-6)
        self.bar.set_postfix({"events/s": f"{self.events / seconds:,.0f}"}, refresh=False)
        self.bar.refresh()

    def _done(self, source: dict[str, Any]) -> int:
        if not self.kafka:
            return int(source.get("numInputRows") or 0)
        start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
        if self._start is None:
            self._start = start
            latest = _offsets(source.get("latestOffset"))
            if self.bar.total is None and latest:
                self.bar.total = latest - start
        return max(end - start, 0)

    def close(self) -> None:
        """The bar's last state; the console stays quiet until the run ends (MirrorJob.run)."""
        if self._stderr is not None:
            sys.stderr, self._stderr = self._stderr, None
        if self.bar is not None:
            seconds = max(time.monotonic() - self._t0, 1e-6)  # the batches applied since the last update
            self.bar.set_postfix({"events/s": f"{self.events / seconds:,.0f}"})
            self.bar.close()


def batch_line(summary: Any) -> str:
    """An applied batch in one short line (a terminal's, instead of its JSON log line)."""
    return (
        f"batch {summary.batch_id}: {summary.events:,} events, {summary.applied:,} applied, "
        f"{summary.dead_letters:,} dead letters, {summary.duration_ms / 1000:.1f} s"
    )


class BatchLines:
    """A continuous run on a terminal: each applied batch as its short line on ``stream`` (as a catch-up
    prints them above its bar), the console's other lines warnings and errors only (``--log-file`` keeps
    them all)."""

    def __init__(self, stream: IO[str]) -> None:
        from replicator.logging import quiet_console

        self.stream = stream
        quiet_console(True)

    def started(self, job: str) -> None:
        print(f"replicator: {job} mirroring; each batch below once applied (Ctrl-C stops)", file=self.stream)

    def note(self, summary: Any) -> None:
        width = _columns(self.stream) or 100
        print(batch_line(summary)[: max(width - 1, 20)], file=self.stream, flush=True)

    def close(self) -> None:
        from replicator.logging import quiet_console

        quiet_console(False)


def is_terminal(stream: IO[str] | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


def catch_up(config: JobConfig, checkpoint: str | Path, stream: IO[str] | None = None) -> CatchUp:
    """The bar of a catch-up (the files are listed only when there is a terminal to show them on)."""
    if config.source.type == "files":
        return CatchUp(pending_files(config, checkpoint) if is_terminal(stream) else None, "file", stream)
    return CatchUp(None, "offset", stream, kafka=True)


def poll(query: Any) -> list[dict[str, Any]]:
    """The query's recent progress entries as plain dicts."""
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]
