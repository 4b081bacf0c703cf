"""One storage layer for local folders and object stores (docs/object-storage.md).

``target.path``, ``state.path`` and a files source's ``path`` are each a local folder (a
:class:`pathlib.Path`) or an object-store URI (an :class:`ObjectPath`: ``s3://bucket/prefix``, ``s3a://``,
``gs://``, ``abfss://``). An :class:`ObjectPath` offers the part of ``pathlib.Path`` the engine uses (``/``,
``name``, ``parent``, ``exists``, ``read_text`` ...) over pyarrow's file systems, so the code that maps names
to paths works on both. It has no ``__fspath__``: a local-only call (``open``, ``shutil``) on it fails
loudly instead of writing a folder named ``s3:`` on the local disk.

The job file's ``storage:`` section (:class:`replicator.config.StorageConfig`) is turned into one
:class:`Storage`: the AWS variables delta-rs (``object_store``) and Arrow read, pyarrow's ``S3FileSystem``,
and Hadoop's s3a settings for Spark (checkpoint, files source, delta-spark). Secrets are named by
environment variable, never written in the job file.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from pyarrow import fs as pafs

S3_SCHEMES = ("s3", "s3a")
SCHEMES = (*S3_SCHEMES, "gs", "abfss", "az")


class StorageError(ValueError):
    """A location that names no usable place (an unknown scheme, a ``..``); raised with the setting's name."""


def is_uri(value: object) -> bool:
    """Whether ``value`` is an object-store location (``file://`` and plain paths are local folders)."""
    if isinstance(value, ObjectPath):
        return True
    text = str(value)
    return "://" in text and not text.startswith("file://")


def location(value: str | os.PathLike[str] | ObjectPath) -> Location:
    """A configured path as a :class:`pathlib.Path` (``file://`` stripped) or an :class:`ObjectPath`."""
    if isinstance(value, ObjectPath | Path):
        return value
    text = os.fspath(value)
    if text.startswith("file://"):
        return Path(text[len("file://") :])
    if "://" in text:
        return ObjectPath(text)
    return Path(text)


class ObjectPath:
    """``scheme://bucket/key``: a place in an object store, with the ``pathlib.Path`` methods the engine uses.

    The key is kept normalized: no empty, ``.`` or ``..`` component (refused, not folded: a configured
    location or a mapped name never climbs out of its prefix)."""

    __slots__ = ("key", "scheme")

    def __init__(self, uri: str) -> None:
        scheme, sep, rest = uri.partition("://")
        if not sep or scheme not in SCHEMES:
            expected = ", ".join(SCHEMES)
            raise StorageError(f"{uri!r}: not an object-store location (expected one of {expected})")
        parts = [p for p in rest.split("/") if p]
        if not parts:
            raise StorageError(f"{uri!r}: names no bucket")
        if any(p in (".", "..") for p in parts):
            raise StorageError(f"{uri!r}: a location may not contain '.' or '..'")
        self.scheme = scheme
        self.key = "/".join(parts)

    # ---- pure path operations ---------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.scheme, self.key) == (other.scheme, other.key)

    def __hash__(self) -> int:
        return hash((self.scheme, self.key))

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def __truediv__(self, part: str | os.PathLike[str]) -> ObjectPath:
        return self.joinpath(part)

    def joinpath(self, *parts: str | os.PathLike[str]) -> ObjectPath:
        return ObjectPath("/".join([str(self), *(os.fspath(p) for p in parts)]))

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return "" if "/" not in self.key else self.key.rsplit("/", 1)[1]

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def parent(self) -> ObjectPath:
        return self if "/" not in self.key else ObjectPath(f"{self.scheme}://{self.key.rsplit('/', 1)[0]}")

    @property
    def parents(self) -> list[ObjectPath]:
        found, current = [], self
        while "/" in current.key:
            current = current.parent
            found.append(current)
        return found

    @property
    def parts(self) -> tuple[str, ...]:
        return (f"{self.scheme}://", *self.key.split("/"))

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def is_absolute(self) -> bool:
        return True

    def resolve(self) -> ObjectPath:
        return self

    def absolute(self) -> ObjectPath:
        return self

    def expanduser(self) -> ObjectPath:
        return self

    def relative_to(self, other: ObjectPath) -> str:
        if not isinstance(other, ObjectPath) or other.scheme != self.scheme or not self.inside(other):
            raise ValueError(f"{self} is not inside {other}")
        return self.key[len(other.key) + 1 :]

    def inside(self, other: ObjectPath) -> bool:
        """Strictly under ``other`` (same bucket, ``other``'s key a whole-component prefix)."""
        return (
            isinstance(other, ObjectPath)
            and self.scheme == other.scheme
            and self.key.startswith(other.key + "/")
        )

    # ---- the store ----------------------------------------------------------------------------------------
    @property
    def _fs(self) -> pafs.FileSystem:
        return current().filesystem(self.scheme)

    def _info(self) -> Any:
        return self._fs.get_file_info(self.key)

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_file(self) -> bool:
        from pyarrow import fs as pafs

        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        """A "folder" exists when any object lies under it (object stores keep no empty folders)."""
        from pyarrow import fs as pafs

        if self._info().type == pafs.FileType.Directory:
            return True
        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=False)
        try:
            return bool(self._fs.get_file_info(selector))
        except OSError:
            return False

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: an object store has no folders, a key's prefixes exist once an object is written."""

    def iterdir(self) -> Iterator[ObjectPath]:
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=False)
        for info in sorted(self._fs.get_file_info(selector), key=lambda i: i.path):
            yield ObjectPath(f"{self.scheme}://{info.path}")

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """The objects and prefixes right under this one whose name matches ``pattern`` (no ``**``)."""
        from fnmatch import fnmatchcase

        return (p for p in self.iterdir() if fnmatchcase(p.name, pattern))

    def walk_files(self) -> Iterator[tuple[ObjectPath, int, float]]:
        """Every object under this prefix: (path, size, modification time in seconds)."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=True)
        for info in self._fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                yield ObjectPath(f"{self.scheme}://{info.path}"), info.size or 0, mtime

    def read_bytes(self) -> bytes:
        with self._fs.open_input_stream(self.key) as stream:
            return stream.read()

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def write_bytes(self, data: bytes) -> int:
        with self._fs.open_output_stream(self.key) as stream:
            stream.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self._fs.delete_file(self.key)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmtree(self) -> None:
        """Delete every object under this prefix (the caller checked it is one it owns: replicator.paths)."""
        from pyarrow import fs as pafs

        if self._info().type == pafs.FileType.File:
            return
        try:
            self._fs.delete_dir(self.key)
        except FileNotFoundError:
            pass

    def copy_tree_to(self, target: ObjectPath) -> None:
        """Copy every object under this prefix to the same keys under ``target`` (a table moved aside:
        object stores have no rename; the caller deletes the source afterwards)."""
        for source, _size, _mtime in self.walk_files():
            self._fs.copy_file(source.key, f"{target.key}/{source.relative_to(self)}")


Location = Union[Path, ObjectPath]  # noqa: UP007 (a runtime alias pydantic reads)


def remove_tree(path: Location) -> None:
    """Delete a folder or an object-store prefix, whatever it holds (the caller checked it owns it)."""
    import shutil

    if isinstance(path, ObjectPath):
        path.rmtree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def write_whole(path: Location, text: str) -> None:
    """Write a small file whole or not at all: locally a temporary file flushed to disk and renamed over it;
    on an object store one PUT (an object is replaced whole)."""
    if isinstance(path, ObjectPath):
        path.write_text(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


# ---- settings --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Storage:
    """The one object-store setting of a job, as every client needs it. Empty fields leave each client to
    its usual sources (the AWS variables, ``~/.aws`` profiles, instance metadata)."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool | None = None
    allow_http: bool | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    _filesystems: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def environment(self) -> dict[str, str]:
        """The AWS variables delta-rs (object_store) reads, which Spark's JVM and Python workers inherit."""
        env: dict[str, str] = {}
        if self.endpoint:
            env["AWS_ENDPOINT_URL"] = self.endpoint
        if self.region:
            env["AWS_REGION"] = self.region
        if self.allow_http is not None:
            env["AWS_ALLOW_HTTP"] = str(self.allow_http).lower()
        if self.path_style is not None:
            env["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        if self.access_key and self.secret_key:
            env["AWS_ACCESS_KEY_ID"] = self.access_key
            env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        if self.session_token:
            env["AWS_SESSION_TOKEN"] = self.session_token
        # delta-rs commits a log entry with a put-if-absent (If-None-Match: *): two writers racing for one
        # version, one wins and the other sees a conflict (docs/object-storage.md). "etag" turns it on
        # for S3-compatible stores; AWS S3 has honoured it since 2024 ("Conditional writes", S3 User Guide).
        env["AWS_CONDITIONAL_PUT"] = "etag"
        return env

    def delta_options(self) -> dict[str, str]:
        """delta-rs ``storage_options``: the same settings, lower-case keys."""
        return {k.lower(): v for k, v in self.environment().items()}

    def hadoop(self) -> dict[str, str]:
        """Spark session settings for Hadoop's s3a (``s3://`` is mapped to it too)."""
        conf = {
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        }
        endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
        region = self.region or os.environ.get("AWS_REGION")
        if region:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = region
        if self.path_style is not None or endpoint:
            conf["spark.hadoop.fs.s3a.path.style.access"] = str(self.path_style is not False).lower()
        return conf

    def filesystem(self, scheme: str) -> pafs.FileSystem:
        """pyarrow's file system for ``scheme`` (made once)."""
        with _lock:
            made = self._filesystems.get(scheme)
            if made is None:
                made = self._filesystems[scheme] = self._make(scheme)
            return made

    def _make(self, scheme: str) -> pafs.FileSystem:
        from pyarrow import fs as pafs

        if scheme not in S3_SCHEMES:
            return pafs.FileSystem.from_uri(f"{scheme}://")[0]
        env = {**os.environ, **self.environment()}
        endpoint = env.get("AWS_ENDPOINT_URL")
        options: dict[str, Any] = {
            "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=5),
            # A small object (a pending note, a report) in one PUT when its stream closes, not a multipart
            # upload's three requests; an error opening it surfaces at the close instead (measured).
            "allow_delayed_open": True,
        }
        if endpoint:
            scheme_part, _, host = endpoint.partition("://")
            options["endpoint_override"] = host or scheme_part
            options["scheme"] = scheme_part if host else "https"
        if self.path_style is not None:
            options["force_virtual_addressing"] = not self.path_style
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            options["access_key"] = env["AWS_ACCESS_KEY_ID"]
            options["secret_key"] = env["AWS_SECRET_ACCESS_KEY"]
            if env.get("AWS_SESSION_TOKEN"):
                options["session_token"] = env["AWS_SESSION_TOKEN"]
        return pafs.S3FileSystem(**options)


_lock = threading.Lock()
_current = Storage()


def current() -> Storage:
    return _current


def activate(storage: Storage) -> Storage:
    """Make ``storage`` the process's: its AWS variables go into the environment (read by delta-rs, and
    inherited by Spark's JVM and Python workers started after this), and :class:`ObjectPath` uses it."""
    global _current
    os.environ.update(storage.environment())
    _current = storage
    return storage


def from_settings(settings: Mapping[str, Any] | None) -> Storage:
    """A :class:`Storage` from a job file's ``storage`` section (names of variables resolved here)."""
    settings = dict(settings or {})

    def secret(key: str) -> str | None:
        name = settings.get(key)
        if not name:
            return None
        value = os.environ.get(name)
        if value is None:
            raise StorageError(f"storage.{key}: the environment variable {name} is not set")
        return value

    return Storage(
        endpoint=settings.get("endpoint"),
        region=settings.get("region"),
        path_style=settings.get("path_style"),
        allow_http=settings.get("allow_http"),
        access_key=secret("access_key_env"),
        secret_key=secret("secret_key_env"),
        session_token=secret("session_token_env"),
    )


__all__ = [
    "Location",
    "ObjectPath",
    "Storage",
    "StorageError",
    "activate",
    "current",
    "from_settings",
    "is_uri",
    "location",
    "remove_tree",
    "write_whole",
]
