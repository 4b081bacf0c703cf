"""SIGINT and SIGTERM at measured moments of a real ``replicator mirror`` (issue 53, items 1-2; issue 49,
item 10): during Spark's start, in the middle of a catch-up, between batches of a continuous run. Every
moment: the command ends (no hang) with exit code 130, one line saying it was interrupted and where it
stopped, no traceback, no child process left; the next run applies and counts only what is left.

Each test is a process or two of the real command; a moment is measured, not slept for: the signal goes
when a log line (or the driver's JVM) shows the run is there."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import canal, cli, cli_env, delta_table, job_file, order, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ES = 1_700_000_000_000
REPO = Path(__file__).resolve().parent.parent
FILES = 4
ROWS = 40  # per file: 20 messages of 2 rows


def landing(root: Path, first: int = 0) -> None:
    for f in range(first, first + FILES):
        messages = [
            canal("INSERT", [order(f * 1000 + 2 * i), order(f * 1000 + 2 * i + 1)], es=ES + f * 100 + i)
            for i in range(ROWS // 2)
        ]
        write_jsonl(root / "landing" / f"f{f:02d}.jsonl", messages)


def job(root: Path) -> Path:
    """One file per batch: a catch-up of several batches."""
    path = job_file(root)
    path.write_text(
        path.read_text().replace("dialect: canal-json}", "dialect: canal-json, max_files_per_trigger: 1}")
    )
    return path


def start(config: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(config), *flags],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen, text: str, seen: list[str], timeout: float = 400) -> None:
    """Read the command's stderr until a line holds ``text`` (kept in ``seen``)."""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s: {''.join(seen)[-2000:]}"
    raise AssertionError(f"the command ended before {text!r}: {''.join(seen)[-3000:]}")


def finish(proc: subprocess.Popen, seen: list[str], timeout: float = 120) -> tuple[str, str]:
    """The command's end, which must come within ``timeout`` (a stop that hangs fails here)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"still running {timeout} s after the signal: {''.join(seen)[-3000:]}{err}"
        ) from exc
    return out, "".join(seen) + err


def check_interrupted(proc: subprocess.Popen, err: str, name: str) -> str:
    """Exit 130, the one line naming the signal (the last on stderr); no traceback, Python's or the JVM's
    (stderr is no terminal here: the JVM's start-up lines are on it too, docs/operations.md)."""
    assert proc.returncode == 130, (proc.returncode, err[-3000:])
    # (the JVM's own start-up notice may come after the line when the signal lands during its start)
    lines = [
        line for line in err.splitlines() if line.strip() and not line.startswith("WARNING: Using incubator")
    ]
    assert lines[-1].startswith(f"replicator: interrupted ({name})"), lines[-3:]
    errors = [
        line
        for line in lines
        if any(word in line for word in ("Traceback", "Exception", "ERROR", "Error:"))
        or line.startswith(("\tat ", "Caused by"))
    ]
    assert not errors, errors[:5]
    assert [line for line in lines if line.startswith("replicator:")] == lines[-1:]
    return lines[-1]


def jvms(proc: subprocess.Popen) -> list[psutil.Process]:
    """The command's Java child processes (its Spark driver)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "java" in c.name().lower()]


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def mirror_ids(root: Path) -> list[int]:
    return sorted(delta_table(root / "lake" / "shop" / "orders")["id"].to_pylist())


def batch_ids(root: Path) -> list[int]:
    return sorted(delta_table(root / "state" / "batches")["batch_id"].to_pylist())


def test_sigint_in_the_middle_of_a_catch_up_then_the_next_run_counts_the_rest(tmp_path):
    landing(tmp_path)
    config = job(tmp_path)
    proc, seen = start(config, "--available-now"), []
    try:
        wait_for_line(proc, '"batch_id": 0', seen)  # batch 0 applied; batch 1 decoding (trigger.overlap)
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, seen)
    finally:
        proc.kill()
    last = check_interrupted(proc, err, "SIGINT")
    applied = [json.loads(line)["batch_id"] for line in err.splitlines() if line.startswith('{"batch_id"')]
    assert applied and f"stopped after batch {max(applied)}" in last, (applied, last)
    assert out.startswith(f"replicator: {20 * len(applied)} records in {len(applied)} batch"), out
    assert len(applied) < FILES, "the run was not interrupted: it read every file"
    assert batch_ids(tmp_path) == applied

    again = cli("mirror", "--config", str(config), "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    rest = FILES - len(applied)
    # only what this run applied: a batch the first run applied is neither applied nor counted again
    assert again.stdout.startswith(f"replicator: {20 * rest} records in {rest} batch"), again.stdout
    assert mirror_ids(tmp_path) == sorted(f * 1000 + i for f in range(FILES) for i in range(ROWS))
    assert batch_ids(tmp_path) == list(range(FILES))


def test_sigterm_during_sparks_start_leaves_no_jvm(tmp_path):
    landing(tmp_path)
    config = job(tmp_path)
    proc, seen = start(config, "--available-now"), []
    try:
        deadline = time.monotonic() + 300
        while not (java := jvms(proc)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert java, "no Spark driver JVM started"
        assert not (tmp_path / "state" / "batches").exists(), "too late: a batch was applied already"
        proc.send_signal(signal.SIGTERM)
        _out, err = finish(proc, seen)
    finally:
        proc.kill()
    check_interrupted(proc, err, "SIGTERM")
    assert not [p.pid for p in java if alive(p)], "the driver JVM outlived the command"
    assert not (tmp_path / "lake" / "shop" / "orders").exists()

    again = cli("mirror", "--config", str(config), "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.startswith(f"replicator: {20 * FILES} records in {FILES} batches"), again.stdout


def test_continuous_run_stopped_between_batches_then_mid_batch(tmp_path):
    """A continuous run: SIGTERM once it idles after its batches (between batches); a second run gets new
    files and SIGINT while it works on them."""
    landing(tmp_path)
    config = job(tmp_path)
    proc, seen = start(config), []
    try:
        wait_for_line(proc, f'"batch_id": {FILES - 1}', seen)
        time.sleep(3)  # idle: the next triggers find nothing
        proc.send_signal(signal.SIGTERM)
        out, err = finish(proc, seen)
    finally:
        proc.kill()
    last = check_interrupted(proc, err, "SIGTERM")
    assert f"stopped after batch {FILES - 1}" in last
    assert out == ""  # a continuous run prints no summary
    assert mirror_ids(tmp_path) == sorted(f * 1000 + i for f in range(FILES) for i in range(ROWS))

    landing(tmp_path, first=FILES)
    proc, seen = start(config), []
    try:
        wait_for_line(proc, f'"batch_id": {FILES}', seen)
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, seen)
    finally:
        proc.kill()
    check_interrupted(proc, err, "SIGINT")
    applied = batch_ids(tmp_path)
    assert applied == sorted(set(applied)) and FILES in applied

    again = cli("mirror", "--config", str(config), "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    rest = 2 * FILES - len(applied)
    assert again.stdout.startswith(f"replicator: {20 * rest} records in {rest} batch") or (
        rest == 0 and "nothing new" in again.stdout
    ), again.stdout
    assert len(mirror_ids(tmp_path)) == 2 * FILES * ROWS


def kafka_job(root: Path, servers: str, topic: str, extra: str = "") -> Path:
    path = root / "job.yaml"
    path.write_text(
        "name: kafka-stops\nsource: {type: kafka, dialect: canal-json, kafka: "
        f"{{bootstrap_servers: '{servers}', topics: [{topic}]{extra}}}}}\n"
        "target: {path: lake}\nstate: {path: state}\n",
        encoding="utf-8",
    )
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:  # bound, never listening: nobody answers there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
def test_unreachable_brokers_are_named_within_seconds_and_sigterm_stops_with_one_line(tmp_path):
    """Issue 53, item 3: brokers nobody answers for (a free port): said from the start, with the address,
    and again; SIGTERM then ends the run in one line."""
    servers = f"127.0.0.1:{free_port()}"
    config = kafka_job(tmp_path, servers, "t1")
    started = time.monotonic()
    proc, seen = start(config, "--available-now"), []
    try:
        wait_for_line(proc, "the Kafka brokers cannot be reached", seen, timeout=120)
        first = time.monotonic() - started
        wait_for_line(proc, "the Kafka brokers cannot be reached", seen, timeout=120)  # and again
        proc.send_signal(signal.SIGTERM)
        _out, err = finish(proc, seen)
    finally:
        proc.kill()
    assert first < 60, f"the brokers were named only after {first:.0f} s"  # before Spark's start ends
    warnings = [json.loads(line) for line in err.splitlines() if "cannot be reached" in line]
    assert len(warnings) >= 2 and all(w["bootstrap_servers"] == servers for w in warnings), warnings
    check_interrupted(proc, err, "SIGTERM")


@pytest.mark.kafka
def test_kafka_catch_up_stopped_mid_batch_then_the_next_run_counts_the_rest(kafka, tmp_path):
    """Issue 49, item 10: SIGTERM while a Kafka catch-up is in its batches (not after them)."""
    topic = kafka.topic("stops", 1)
    records = [(None, json.dumps(canal("INSERT", [order(i)], es=ES + i)).encode(), 0) for i in range(1, 201)]
    kafka.produce(topic, records)
    config = kafka_job(tmp_path, kafka.servers, topic, ", max_offsets_per_trigger: 40")
    proc, seen = start(config, "--available-now"), []
    try:
        wait_for_line(proc, '"batch_id": 0', seen)
        proc.send_signal(signal.SIGTERM)
        out, err = finish(proc, seen)
    finally:
        proc.kill()
    last = check_interrupted(proc, err, "SIGTERM")
    applied = batch_ids(tmp_path)
    assert f"stopped after batch {max(applied)}" in last and len(applied) < 5, (applied, last)
    assert out.startswith(f"replicator: {40 * len(applied)} records in {len(applied)} batch"), out

    again = cli("mirror", "--config", str(config), "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    rest = 5 - len(applied)
    assert again.stdout.startswith(f"replicator: {40 * rest} records in {rest} batch"), again.stdout
    assert mirror_ids(tmp_path) == list(range(1, 201))
    assert batch_ids(tmp_path) == list(range(5))
