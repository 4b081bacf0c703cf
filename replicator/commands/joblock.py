"""One job runs once: a lock file in ``state.path`` held by every command that writes the job's mirrors or
state (mirror, bootstrap, dead-letters retry, optimize).

``fcntl.flock`` on ``<state.path>/job.lock``: the kernel releases it when the holder's process ends, however
it ends (exit, kill -9, a lost node's reboot), so a crashed job's lock is taken over by the next launch with
nothing to clean up. The holder writes its pid, host and start time into the file for the message a second
launch prints. Read-only commands (status, show, the dead-letter listing, replay, which writes only its own
target) take no lock. The lock is as good as the file system's flock: local disks and NFSv4 honour it.

Object stores have no flock: a ``state.path`` there is locked by a lease (:class:`Lease`), the object
``<state.path>/job.lease`` written with a conditional PUT (docs/object-storage.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
from typing import IO

from replicator.config import JobConfig
from replicator.errors import JobRunning

LOCK_FILE = "job.lock"


class JobLock:
    """The job's lock, held from :meth:`acquire` until :meth:`release` or the process's end."""

    def __init__(self, config: JobConfig, command: str) -> None:
        self.config = config
        self.command = command
        self.path = config.state.path / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> JobLock | Lease:
        from replicator.storage import ObjectPath

        if isinstance(self.config.state.path, ObjectPath):
            return Lease(self.config, self.command).acquire()
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


class Lease:
    """A job's lock on an object store: ``<state.path>/job.lease``, a JSON object naming its holder (owner,
    host, pid, command, since, heartbeat, expires), made with a put-if-absent (``If-None-Match: *``) and
    renewed with a put-if-unchanged (``If-Match`` its ETag) every third of ``storage.lease_seconds``. A
    second launch finds it and is refused until it expires; an expired lease (its holder died: kill -9, a
    lost node) is taken over by a put-if-unchanged, so two launches racing for it cannot both win. A holder
    that finds its lease taken (it stalled past the expiry) stops the job: its next commit could race the
    new holder's. Expiry compares wall clocks of the hosts: keep them in sync (NTP)."""

    def __init__(self, config: JobConfig, command: str) -> None:
        from replicator.storage import ObjectPath

        self.config = config
        self.command = command
        self.path: ObjectPath = config.state.path / "job.lease"  # type: ignore[operator,assignment]
        self.seconds = config.storage.lease_seconds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"
        self._etag: str | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.lost = False

    def _store(self):  # type: ignore[no-untyped-def]
        from obstore.store import from_url

        # The bucket as the store, the key as the path: one client for the lease's few requests.
        scheme = "s3" if self.path.scheme in ("s3", "s3a") else self.path.scheme
        return from_url(f"{scheme}://{self.path.bucket}")

    @property
    def _key(self) -> str:
        return self.path.key.split("/", 1)[1]

    def _details(self, since: str | None = None) -> bytes:
        now = dt.datetime.now(dt.UTC)
        details = {
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": self.command,
            "since": since or now.isoformat(timespec="seconds"),
            "heartbeat": now.isoformat(timespec="seconds"),
            "expires": (now + dt.timedelta(seconds=self.seconds)).isoformat(timespec="seconds"),
        }
        self._since = details["since"]
        return (json.dumps(details) + "\n").encode()

    def acquire(self) -> Lease:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        store = self._store()
        for _attempt in range(3):
            try:
                self._etag = obstore.put(store, self._key, self._details(), mode="create").get("e_tag")
                break
            except AlreadyExistsError:
                pass
            try:
                found = obstore.get(store, self._key)
            except NotFoundError:  # released between the two requests: try again
                continue
            holder = _holder(bytes(found.bytes()).decode("utf-8", "replace"))
            expires = _time(holder.get("expires"))
            if expires is not None and expires > dt.datetime.now(dt.UTC):
                raise JobRunning(
                    f"job {self.config.name} is already running (pid {holder.get('pid', '?')} on host "
                    f"{holder.get('host', '?')} since {holder.get('since', '?')}, "
                    f"{holder.get('command', '?')}); lease {self.path} held until {holder.get('expires')}"
                )
            try:  # expired (or unreadable): take it over, unless another launch did first
                mode = {"e_tag": found.meta["e_tag"]}
                self._etag = obstore.put(store, self._key, self._details(), mode=mode).get("e_tag")
                break
            except PreconditionError:
                continue
        else:
            raise JobRunning(f"job {self.config.name}: the lease {self.path} is contended; try again")
        self._beat = threading.Thread(target=self._heartbeat, name="job-lease", daemon=True)
        self._beat.start()
        return self

    def _heartbeat(self) -> None:
        import _thread

        import obstore
        from obstore.exceptions import PreconditionError

        store = self._store()
        while not self._stop.wait(self.seconds / 3):
            try:
                details = self._details(self._since)
                self._etag = obstore.put(store, self._key, details, mode={"e_tag": self._etag}).get("e_tag")
            except PreconditionError:
                self.lost = True
                from replicator.logging import get_logger

                get_logger(__name__).error(
                    "lease_lost", lease=str(self.path), why="another launch took the job's lease over"
                )
                _thread.interrupt_main()  # stop the job: its next commit would race the new holder
                return
            except Exception:  # the store unreachable: try again at the next beat, before the expiry
                continue

    def release(self) -> None:
        import obstore

        beat, self._beat = self._beat, None
        if beat is None:
            return
        self._stop.set()
        beat.join(timeout=10)
        if self.lost:
            return
        try:  # S3 has no conditional DELETE: a lease still ours (our ETag) is removed
            store = self._store()
            if obstore.head(store, self._key).get("e_tag") == self._etag:
                obstore.delete(store, self._key)
        except Exception:  # left to expire
            pass

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _time(text: object) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
