"""Exit codes and messages of commands that start no Spark session (issue 53, item 5): a reader that leaves
a pipe early, a repair with nothing to repair, a misspelt dialect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import canal, cli, cli_env, job_file, order, write_jsonl

ES = 1_700_000_000_000
REPO = Path(__file__).resolve().parent.parent


def test_decode_into_a_pipe_closed_early_ends_silently(tmp_path):
    # more than a pipe's buffer (64 KiB) of output, so that the writes meet the closed pipe
    messages = [canal("INSERT", [order(i, name="n" * 40)], es=ES + i) for i in range(2000)]
    write_jsonl(tmp_path / "landing" / "a.jsonl", messages)
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "decode", str(tmp_path / "landing"), "--json"],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # as `| head -1` does
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as a shell reports it
    assert b'"op": "insert"' in first
    assert err == "", err


def test_repair_with_nothing_to_repair_is_no_error(tmp_path):
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    done = cli("repair", "--config", str(job_file(tmp_path)), "--tables", "shop.*")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        done.stdout.strip()
        == "--tables shop.*: no mirror of this job that is behind matches it: nothing to repair"
    )


def test_a_misspelt_dialect_gets_the_nearest_name(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    done = cli("decode", str(tmp_path / "a.jsonl"), "--dialect", "debzium")
    assert done.returncode == 2
    assert done.stderr.strip() == "replicator: --dialect: unknown dialect; did you mean 'debezium'?"
    other = cli("decode", str(tmp_path / "a.jsonl"), "--dialect", "xyz")
    assert other.returncode == 2 and "unknown dialect; expected one of auto, " in other.stderr


def test_a_taken_metrics_port_is_refused_before_spark_starts(tmp_path):
    import socket

    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = job_file(tmp_path, f"metrics: {{port: {port}}}\n")
        done = cli("mirror", "--config", str(config), "--available-now")
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"metrics: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert "Spark" not in done.stderr and not (tmp_path / "state" / "checkpoint").exists(), done.stderr


def test_job_counters_are_exported_at_0_before_the_first_batch(tmp_path):
    from prometheus_client import generate_latest

    from replicator.commands.metrics import JobMetrics
    from replicator.config import load_config
    from replicator.state import State

    config = load_config(job_file(tmp_path, "metrics: {port: 9}\n"))
    text = generate_latest(JobMetrics(config, State.of(config)).registry).decode()
    for series in (
        'replicator_batches_total{job="cli-job"} 0.0',
        'replicator_failures_total{job="cli-job"} 0.0',
        'replicator_records_read_total{job="cli-job"} 0.0',
        'replicator_events_total{job="cli-job",outcome="dead_letter"} 0.0',
    ):
        assert series in text, text
