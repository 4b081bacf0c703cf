"""One job runs once: a lock file in ``state.path`` held by every command that writes the job's mirrors or
state (mirror, bootstrap, dead-letters retry, optimize).

``fcntl.flock`` on ``<state.path>/job.lock``: the kernel releases it when the holder's process ends, however
it ends (exit, kill -9, a lost node's reboot), so a crashed job's lock is taken over by the next launch with
nothing to clean up. The holder writes its pid, host and start time into the file for the message a second
launch prints. Read-only commands (status, show, the dead-letter listing, replay, which writes only its own
target) take no lock. The lock is as good as the file system's flock: local disks and NFSv4 honour it;
object stores have none (docs/operations.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from pathlib import Path
from typing import IO

from replicator.config import JobConfig
from replicator.errors import JobRunning

LOCK_FILE = "job.lock"


class JobLock:
    """The job's lock, held from :meth:`acquire` until :meth:`release` or the process's end."""

    def __init__(self, config: JobConfig, command: str) -> None:
        self.config = config
        self.command = command
        self.path = Path(config.state.path) / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> JobLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not truncated on open: the holder's details stay readable until we hold the lock.
        handle = open(self.path, "a+", encoding="utf-8")  # held until release
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read())
            handle.close()
            raise JobRunning(
                f"job {self.config.name} is already running (pid {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')} since {holder.get('since', '?')}, {holder.get('command', '?')}); "
                f"lock {self.path}"
            ) from None
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        details = {"pid": os.getpid(), "host": socket.gethostname(), "since": since, "command": self.command}
        handle.write(json.dumps(details) + "\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        handle, self._file = self._file, None
        if handle is None:
            return
        import fcntl

        try:
            handle.seek(0)
            handle.truncate()  # no stale holder named once released
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()

    def __enter__(self) -> JobLock:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _holder(text: str) -> dict[str, object]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
