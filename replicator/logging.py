"""structlog setup: JSON lines when not on a terminal (jobs), readable output on a terminal; with a log file,
every line also goes there as JSON (docs/operations.md, "What appears where")."""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO, Any

import structlog


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is now: a stream bound at configure time may be closed later
    (pytest's capture, a redirected stream)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _Outputs:
    """The last processor: each event as JSON into the log file (when there is one) and rendered for
    stderr, unless the console is quiet (a progress bar owns the terminal: it shows its own short line
    per batch) and the event is below WARNING."""

    def __init__(self, console: structlog.typing.Processor, log_file: IO[str] | None) -> None:
        self.console = console
        self.json = structlog.processors.JSONRenderer()
        self.log_file = log_file
        self.lock = threading.Lock()

    def __call__(self, logger: Any, name: str, event: dict[str, Any]) -> str:
        if self.log_file is not None:
            line = self.json(logger, name, dict(event))
            with self.lock:
                self.log_file.write(str(line) + "\n")
                self.log_file.flush()
        if (
            _quiet.is_set()
            and logging.getLevelName(str(event.get("level", "info")).upper()) < logging.WARNING
        ):
            raise structlog.DropEvent
        return str(self.console(logger, name, event))


_quiet = threading.Event()


def quiet_console(on: bool) -> None:
    """While on, only warnings and errors reach stderr (the log file still gets every line)."""
    if on:
        _quiet.set()
    else:
        _quiet.clear()


def configure(level: str = "INFO", json: bool | None = None, log_file: str | None = None) -> None:
    """Configure structlog once per process. ``json=None`` picks JSON unless stderr is a terminal;
    ``log_file``: also append every line there as JSON."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    target = open(log_file, "a", encoding="utf-8") if log_file else None
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _Outputs(renderer, target),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "replicator") -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
