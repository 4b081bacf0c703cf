"""The catch-up progress bar of ``mirror --available-now``: its total is the files listed at the start, it
ends there, and nothing is printed when stderr is not a terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import pyte
import pytest

from replicator.commands.progress import CatchUp, checkpoint_files, listed_files
from replicator.commands.runner import MirrorJob
from tests.helpers import canal, job, order, write_jsonl

ES = 1_700_000_000_000
REPO = Path(__file__).resolve().parent.parent


class Terminal(io.StringIO):
    """A stream that says it is a terminal (what tqdm writes is kept for the test)."""

    def isatty(self) -> bool:
        return True


def landing(tmp_path: Path, names: list[str], start: int) -> None:
    for i, name in enumerate(names):
        write_jsonl(tmp_path / "landing" / name, [canal("INSERT", [order(start + i)], es=ES + start + i)])


def read_to_end(leader: int, seen: bytes) -> bytes:
    """What the terminal shows until the process ends (its terminal closes then)."""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            return seen
        if not chunk:
            return seen
        seen += chunk


def test_bar_total_is_the_files_listed_and_it_ends_there(spark, tmp_path):
    config = job(tmp_path, source={"max_files_per_trigger": 2})
    landing(tmp_path, ["a.jsonl", "b.jsonl", "sub/c.jsonl", "sub/d.jsonl", "e.jsonl"], start=1)
    assert len(listed_files(config.source.path)) == 5

    first = MirrorJob(config, spark)
    out = Terminal()
    first.run(available_now=True, progress_stream=out)
    assert (first.progress.bar.total, first.progress.bar.n) == (5, 5)
    assert first.progress.events == 5
    assert "5/5" in out.getvalue() and "events/s" in out.getvalue()
    # the checkpoint's file log now names every listed file: a second catch-up starts from the rest
    assert checkpoint_files(first.engine.state.checkpoint) == {
        os.path.abspath(p) for p in listed_files(config.source.path)
    }

    landing(tmp_path, ["f.jsonl", "g.jsonl"], start=10)
    second = MirrorJob(config, spark)
    out = Terminal()
    second.run(available_now=True, progress_stream=out)
    assert (second.progress.bar.total, second.progress.bar.n) == (2, 2)
    assert "2/2" in out.getvalue()


def test_a_batch_applied_but_not_committed_is_in_the_next_total_and_not_counted_again(spark, tmp_path):
    """Issue 53, item 1: a run stopped after applying its last batch, before Spark recorded the commit. The
    next run's bar counts that batch's files in its total (it ended past its total, then without one), and
    Spark's replay of the batch is not applied or counted a second time."""
    from deltalake import DeltaTable

    config = job(tmp_path, source={"max_files_per_trigger": 2})
    landing(tmp_path, ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl", "e.jsonl"], start=1)
    first = MirrorJob(config, spark)
    first.run(available_now=True, progress_stream=Terminal())
    assert [s.batch_id for s in first.summaries] == [0, 1, 2]
    commits = Path(first.engine.state.checkpoint) / "commits"
    for name in ("2", ".2.crc"):
        (commits / name).unlink(missing_ok=True)  # as a stop between the apply and Spark's commit leaves it
    assert len(checkpoint_files(first.engine.state.checkpoint)) == 4  # e.jsonl, batch 2's, is to do again

    second = MirrorJob(config, spark)
    second.run(available_now=True, progress_stream=Terminal())
    assert (second.progress.bar.total, second.progress.bar.n) == (1, 1)
    assert second.summaries == []  # replayed by Spark, skipped: applied by the first run
    batches = DeltaTable(str(tmp_path / "state" / "batches")).to_pyarrow_table()["batch_id"].to_pylist()
    assert sorted(batches) == [0, 1, 2]
    assert (commits / "2").exists()


def test_nothing_is_printed_when_not_a_terminal(spark, tmp_path):
    config = job(tmp_path)
    landing(tmp_path, ["a.jsonl", "b.jsonl"], start=1)
    out = io.StringIO()
    mirror = MirrorJob(config, spark)
    mirror.run(available_now=True, progress_stream=out)
    assert out.getvalue() == ""
    assert not mirror.progress.enabled and mirror.progress.events == 2


def test_kafka_totals_come_from_the_first_batch_progress():
    """Kafka progress entries as Spark reports them (startOffset/endOffset/latestOffset per partition)."""
    bar = CatchUp(None, "offset", Terminal(), kafka=True)
    bar.update(
        [
            {
                "batchId": 0,
                "sources": [
                    {
                        "startOffset": {"t": {"0": 100, "1": 0}},
                        "endOffset": {"t": {"0": 150, "1": 20}},
                        "latestOffset": {"t": {"0": 200, "1": 100}},
                    }
                ],
            }
        ]
    )
    assert (bar.bar.total, bar.bar.n) == (200, 70)
    batch = {
        "batchId": 1,
        "sources": [
            {
                "startOffset": '{"t": {"0": 150, "1": 20}}',
                "endOffset": '{"t": {"0": 200, "1": 100}}',
                "latestOffset": '{"t": {"0": 260, "1": 100}}',
            }
        ],
    }
    bar.update([batch, batch])  # an entry seen twice counts once
    assert (bar.bar.total, bar.bar.n) == (200, 200)


JOB = """
name: tty-job
source: {type: files, path: landing, dialect: canal-json}
target: {path: lake}
state: {path: state}
"""


@pytest.mark.slow
def test_cli_shows_the_bar_on_a_pseudo_terminal_only(tmp_path):
    (tmp_path / "job.yaml").write_text(textwrap.dedent(JOB), encoding="utf-8")
    landing(tmp_path, ["a.jsonl", "b.jsonl", "c.jsonl"], start=1)
    command = [
        sys.executable,
        "-m",
        "replicator.commands.cli",
        "mirror",
        "--config",
        str(tmp_path / "job.yaml"),
    ]
    env = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}
    leader, follower = pty.openpty()
    # a terminal of 120 columns (a new pseudo-terminal says 0, where a bar has no room)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [*command, "--available-now"], stdout=subprocess.DEVNULL, stderr=follower, env=env, cwd=REPO
    )
    os.close(follower)
    seen = read_to_end(leader, b"")
    assert proc.wait(timeout=300) == 0, seen[-3000:]
    os.close(leader)
    assert b"catch-up" in seen and b"3/3" in seen, seen[-3000:]
    # What a person sees: the bytes played on a 120x40 terminal emulator (pyte), as the screen ends.
    screen = pyte.Screen(120, 40)
    pyte.ByteStream(screen).feed(seen.replace(b"\n", b"\r\n"))
    rows = [row.rstrip() for row in screen.display if row.strip()]
    batch_rows = [r for r in rows if r.startswith("batch ")]
    assert batch_rows and all(
        re.fullmatch(r"batch \d+: [\d,]+ events, .* dead letters, [\d.]+ s", r) for r in batch_rows
    ), rows
    [bar] = [i for i, r in enumerate(rows) if r.startswith("catch-up")]  # one bar, drawn in place
    assert rows[bar].startswith("catch-up: 100%") and "3/3" in rows[bar] and rows[bar].endswith("]"), rows
    assert rows.index(batch_rows[-1]) < bar  # the batch lines stay above it, whole
    assert not any("WARN" in r or "log4j" in r or "incubator" in r for r in rows), rows  # no JVM noise
    assert not any('"event"' in r or "[info" in r for r in rows), rows  # no long log lines
    assert (tmp_path / "state" / "logs" / "spark-driver.log").stat().st_size > 0  # the JVM's lines went there

    landing(tmp_path, ["d.jsonl"], start=10)
    piped = subprocess.run(
        [*command, "--available-now"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "catch-up" not in piped.stderr and "1/1" not in piped.stderr


@pytest.mark.slow
def test_a_continuous_run_on_a_terminal_prints_short_batch_lines_and_ctrl_c_says_where_it_stopped(tmp_path):
    """Issue 53, item 12: not the raw log lines (phases_ms={...} tables={...}) of a continuous run."""
    import select
    import signal
    import time

    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(JOB) + "trigger: {interval: 1 second}\n", encoding="utf-8"
    )
    landing(tmp_path, ["a.jsonl", "b.jsonl"], start=1)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(tmp_path / "job.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"},
        cwd=REPO,
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 400
        while b"batch 0:" not in seen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 65536)
        assert b"batch 0:" in seen, seen[-3000:]
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        seen = read_to_end(leader, seen)
        assert proc.wait(timeout=120) == 130, seen[-3000:]
    finally:
        proc.kill()
        os.close(leader)
    screen = pyte.Screen(120, 40)
    pyte.ByteStream(screen).feed(seen.replace(b"\n", b"\r\n"))
    rows = [row.rstrip() for row in screen.display if row.strip()]
    assert rows[0] == "replicator: tty-job mirroring; each batch below once applied (Ctrl-C stops)", rows
    batch_rows = [r for r in rows if r.startswith("batch ")]
    assert batch_rows and all(
        re.fullmatch(r"batch \d+: [\d,]+ events, .* dead letters, [\d.]+ s", r) for r in batch_rows
    ), rows
    assert not any("phases_ms" in r or '"event"' in r or "[info" in r for r in rows), rows
    assert rows[-1].startswith("replicator: interrupted (SIGINT): stopped after batch "), rows


def test_without_a_terminal_there_is_no_bar_and_updates_do_nothing():
    import io

    from replicator.commands.progress import CatchUp

    quiet = io.StringIO()
    bar = CatchUp(3, "file", quiet)
    bar.add_events(10)
    bar.update([{"batchId": 0, "sources": [{"numInputRows": 10}]}])
    bar.close()
    assert (bar.enabled, bar.bar, quiet.getvalue()) == (False, None, "")
