"""A real S3-compatible server for tests and benchmarks: SeaweedFS (Apache-2.0), built from the Go module
proxy once per version and cached outside the work tree, started on loopback in a folder of the caller's.

``ensure_binary()`` builds ``weed`` when the cache lacks it (``go mod download`` of the pinned version, then
``go build ./weed`` inside the module: ``go install`` refuses a module whose go.mod has a ``replace``); about
10 minutes of 2 cores, once. :class:`SeaweedServer` starts ``weed server -s3`` (master, volume, filer and S3
gateway in one process) with every port chosen free and given explicitly, the Iceberg and Lance listeners
and telemetry off, one access key, waits until the S3 port answers, makes a bucket and stops the process
group at the end. ``python -m replicator.testing.s3server`` runs one in the foreground (``make s3-server``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
ACCESS_KEY = "replicator"
SECRET_KEY = "replicator-secret"  # a throwaway server's key, on loopback only
REGION = "us-east-1"


class ServerUnavailable(RuntimeError):
    """No binary and no way to build one (Go missing), or the server did not start; the message says why."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "replicator" / "seaweedfs" / VERSION


def binary_path() -> Path:
    return cache_dir() / "weed"


def ensure_binary(wait: float = 1800) -> Path:
    """The cached ``weed`` binary, built first when missing. A build already under way (``weed.tmp`` being
    written by another process) is waited for rather than started twice."""
    path = binary_path()
    if path.is_file():
        return path
    partial = path.with_name("weed.tmp")
    deadline = time.monotonic() + wait
    while partial.exists() and not path.is_file() and time.monotonic() < deadline:
        time.sleep(5)  # another build: its rename makes ``weed``
    if path.is_file():
        return path
    go = shutil.which("go")
    if go is None:
        raise ServerUnavailable(
            "the S3 tests need SeaweedFS, built from source with Go (1.24+): `go` is not on PATH. Install "
            f"Go, or put a `weed` binary of {MODULE}@{VERSION} at {path}"
        )
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    fetched = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True, text=True, env=env
    )
    if fetched.returncode != 0:
        raise ServerUnavailable(f"go mod download {MODULE}@{VERSION} failed: {fetched.stderr[-2000:]}")
    source = json.loads(fetched.stdout)["Dir"]
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"weed.tmp.{os.getpid()}")
    built = subprocess.run(
        [go, "build", "-o", str(temp), "./weed"], cwd=source, capture_output=True, text=True, env=env
    )
    if built.returncode != 0:
        temp.unlink(missing_ok=True)
        raise ServerUnavailable(f"go build ./weed in {source} failed: {built.stderr[-3000:]}")
    os.replace(temp, path)  # whole or not at all: a killed build leaves no half binary named ``weed``
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SeaweedServer:
    """``with SeaweedServer(folder) as s3:`` one server (``s3.endpoint``, ``s3.bucket``, ``s3.env()``)."""

    folder: Path
    bucket: str = "lake"
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def env(self) -> dict[str, str]:
        """The AWS variables a client (this project's storage layer, the AWS CLI) reaches the server with."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self, timeout: float = 60) -> SeaweedServer:
        weed = ensure_binary()
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "data").mkdir(exist_ok=True)
        if not self.ports:  # a restart keeps its ports (clients keep their endpoint)
            names = ("master.port", "volume.port", "filer.port", "s3.port")
            self.ports = {name: free_port() for name in names}
            for name in names:
                self.ports[f"{name}.grpc"] = free_port()
            self.ports["metricsPort"] = free_port()  # Prometheus: the S3 gateway's request counts
        config = self.folder / "s3.json"
        identity = {
            "name": "replicator",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        args = [
            str(weed),
            "server",
            "-s3",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.folder / 'data'}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        self.process = subprocess.Popen(
            args,
            stdout=(self.folder / "server.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole
        )
        deadline = time.monotonic() + timeout
        while not self._bucket_made():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.folder / "server.log").read_text(errors="replace")[-3000:]
                self.stop()
                raise ServerUnavailable(f"SeaweedFS in {self.folder} did not start:\n{tail}")
            time.sleep(0.3)
        return self

    def _bucket_made(self) -> bool:
        """Create the bucket (a signed PUT through pyarrow's S3 client); False while the server is not up."""
        from pyarrow import fs

        try:
            s3 = fs.S3FileSystem(
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
                endpoint_override=self.endpoint,
                scheme="http",
                region=REGION,
                connect_timeout=1,
                request_timeout=2,
                retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),
                allow_bucket_creation=True,
            )
            if s3.get_file_info(self.bucket).type == fs.FileType.NotFound:
                s3.create_dir(self.bucket)
            return s3.get_file_info(self.bucket).type == fs.FileType.Directory
        except OSError:
            return False

    def request_counts(self) -> dict[str, int]:
        """The S3 gateway's requests so far by action (GET, PUT, LIST, ...), from its Prometheus metrics
        (``SeaweedFS_s3_request_total``): what a benchmark or a test counts a piece of work's cost by."""
        import re
        import urllib.request

        url = f"http://127.0.0.1:{self.ports['metricsPort']}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            match = re.match(r'SeaweedFS_s3_request_total\{.*?type="(\w+)".*?\} (\S+)', line)
            if match:
                counts[match.group(1)] = counts.get(match.group(1), 0) + int(float(match.group(2)))
        return counts

    def stop(self, kill: bool = False) -> None:
        from replicator.testing.broker import stop  # the same process-group stop as the tests' Kafka broker

        proc, self.process = self.process, None
        if proc is not None:
            stop(proc, kill=kill)

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main() -> None:
    """``make s3-server``: build if needed, run one server in the foreground until Ctrl-C."""
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="seaweedfs-"))
    with SeaweedServer(folder) as server:
        print(f"SeaweedFS S3 on {server.endpoint}, bucket {server.bucket}, data in {folder}")
        print("".join(f"export {k}={v}\n" for k, v in server.env().items()), end="", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
