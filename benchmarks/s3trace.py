"""A request-tracing pass-through in front of the benchmark's S3 server: every request the job makes
(delta-rs, pyarrow, s3a) is forwarded unchanged to SeaweedFS and recorded as (kind, key), so a run's
requests can be counted by kind and by table, not only by kind as the gateway's metrics do.

The request is passed on byte for byte with its own Host header: SigV4 signs the Host the client sent,
which the server checks against the header it receives, so the proxy needs no credentials. Not a test
double: the server behind it is the real one. Used by ``steady_state.py --s3 --trace``.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}


def kind(method: str, path: str, query: dict, headers) -> str:  # type: ignore[no-untyped-def]
    """The S3 action of a request, as its API names them (LIST, GET, HEAD, PUT, COPY, DELETE, POST)."""
    if method == "GET" and ("list-type" in query or path.count("/") <= 1 or path.endswith("/")):
        return "LIST"
    if method == "PUT" and headers.get("x-amz-copy-source"):
        return "COPY"
    return method


class Trace:
    """``with Trace(upstream_port) as t:`` a proxy on ``t.endpoint``; ``t.records``: (kind, key) pairs."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.records: list[tuple[str, str]] = []
        self.times: list[float] = []
        self.lock = threading.Lock()
        trace = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def _body(self) -> bytes | None:
                """The request's body, a chunked one joined (it is passed on with its length)."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else None
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)

            def _forward(self) -> None:
                body = self._body()
                split = urlsplit(self.path)
                query = parse_qs(split.query, keep_blank_values=True)
                key = unquote(split.path)
                if "prefix" in query:
                    key = f"{key.rstrip('/')}/{query['prefix'][0]}"
                with trace.lock:
                    trace.times.append(time.time())
                    trace.records.append((kind(self.command, split.path, query, self.headers), key))
                conn = getattr(self, "_upstream", None)
                if conn is None:
                    conn = self._upstream = http.client.HTTPConnection("127.0.0.1", trace.upstream)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP | {"expect"}}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response_only(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in HOP and (
                        name.lower() != "content-length" or self.command == "HEAD"
                    ):
                        self.send_header(name, value)  # a HEAD's length is the object's
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def mark(self) -> int:
        with self.lock:
            return len(self.records)

    def since(self, start: int) -> list[tuple[str, str]]:
        with self.lock:
            return self.records[start:]

    def between(self, start: float, end: float) -> list[tuple[str, str]]:
        """The requests made between two instants (seconds since the epoch)."""
        with self.lock:
            return [r for t, r in zip(self.times, self.records, strict=True) if start < t <= end]

    def __enter__(self) -> Trace:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def table_of(key: str) -> str:
    """The table a key belongs to (the folder before ``_delta_log``, or a data file's folder without its
    partition folders), else the key's folder (Spark's checkpoint, the lease, the state's small files)."""
    if "/_delta_log" in key:
        return key.split("/_delta_log")[0]
    parts = key.rstrip("/").split("/")
    folder = parts[:-1] if "." in parts[-1] or parts[-1].isdigit() else parts
    while folder and "=" in folder[-1]:
        folder = folder[:-1]
    return "/".join(folder)


def summary(records: list[tuple[str, str]], batches: int) -> dict:
    """Requests per batch, by table and by kind (a table's data files included under it)."""
    by_table: dict[str, Counter] = {}
    for action, key in records:
        by_table.setdefault(table_of(key), Counter())[action] += 1
    per = max(batches, 1)
    return {
        table: {"total": round(sum(c.values()) / per, 1), **{k: round(v / per, 1) for k, v in c.items()}}
        for table, c in sorted(by_table.items(), key=lambda kv: -sum(kv[1].values()))
    }
