"""``make demo-live`` (replicator.testing.live_demo) run briefly: MariaDB, Kafka, Kafka Connect with Debezium
and the continuous mirror job start, the writer changes the table, the demo stops as Ctrl-C stops it, the
mirror equals the table, and no process it started is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_live_demo_runs_and_stops_everything(tmp_path):
    env = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}
    env.pop("REPLICATOR_SPARK_JARS", None)
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replicator.testing.live_demo",
            "--folder",
            str(tmp_path / "live"),
            "--seconds",
            "45",
            "--mirror-log",
            str(tmp_path / "mirror.log"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = demo.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGTERM)
        out, _ = demo.communicate(timeout=300)
        pytest.fail(f"the demo did not stop:\n{out[-3000:]}")
    assert demo.returncode == 0, out[-3000:] + (tmp_path / "mirror.log").read_text(errors="replace")[-3000:]
    assert "the mirror equals shop.orders" in out, out[-3000:]
    assert (tmp_path / "live" / "status.html").is_file()
    [line] = [x for x in out.splitlines() if "started (pid):" in x]
    pids = [int(part.split()[-1]) for part in line.split("started (pid):")[1].split(",")]
    assert len(pids) == 4 and not any(_alive(p) for p in pids), line
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], leftovers
