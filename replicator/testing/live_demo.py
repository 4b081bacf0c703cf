"""``make demo-live``: watch a mirror follow a running database (docs/getting-started.md).

MariaDB, a Kafka broker and Kafka Connect with Debezium's MariaDB connector start on 127.0.0.1 from what
``make install`` fetched (the pipeline of ``make e2e``, replicator.testing.e2e), a small writer keeps
inserting, updating and deleting orders, and ``replicator mirror`` runs continuously on the connector's
topics. Every few seconds a line compares the table with its mirror, and ``status.html`` in the demo's
folder is rewritten (``replicator status --html``). Ctrl-C (or SIGTERM, or ``--seconds``) stops the writer,
lets the mirror catch up, and stops every process this demo started, by its PID.

    python -m replicator.testing.live_demo [--folder demo-out/live] [--seconds N]
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from replicator.testing.broker import kafka_broker
from replicator.testing.broker import stop as stop_process
from replicator.testing.e2e import EXACT, connector_settings, kafka_connect, mariadb

DATABASE, PREFIX = "shop", "live"
STATUSES = ("new", "paid", "shipped")
JOB = """\
name: live-demo
source:
  type: kafka
  dialect: debezium
  kafka:
    bootstrap_servers: {servers}
    topic_pattern: '^{prefix}(\\..*)?$'   # the table topics and the schema-change topic, anchored
    starting_offsets: earliest
target:
  path: lake
state:
  path: state
tables:
  include: ["{database}.*"]
trigger:
  interval: 2 seconds
"""


def say(text: str) -> None:
    print(f"[demo-live] {text}", flush=True)


def write_changes(server, stop: threading.Event, pause: float, seed: int = 7) -> None:
    """Until ``stop``: a random insert, update or delete of an order every ``pause`` seconds."""
    rng = random.Random(seed)
    with server.connect(DATABASE) as connection, connection.cursor() as cursor:
        while not stop.wait(pause):
            cursor.execute("SELECT id FROM orders")
            ids = [row[0] for row in cursor.fetchall()]
            action = rng.random()
            if action < 0.5 or len(ids) < 5:
                cursor.execute(
                    "INSERT INTO orders (customer, amount, status) VALUES (%s, %s, 'new')",
                    (rng.choice(["Ana", "Bob", "王小明", "Chloé"]), f"{rng.randint(100, 99999) / 100:.2f}"),
                )
            elif action < 0.85:
                cursor.execute(
                    "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
                    (rng.choice(STATUSES), rng.choice(ids)),
                )
            else:
                cursor.execute("DELETE FROM orders WHERE id = %s", (rng.choice(ids),))


def database_rows(server) -> list[tuple]:
    with server.connect(DATABASE) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT id, customer, amount, status FROM orders ORDER BY id")
        return [tuple(r) for r in cursor.fetchall()]


def mirror_rows(lake: Path) -> list[tuple] | None:
    """The mirror's rows as the database query gives them; None while it does not exist."""
    from deltalake import DeltaTable

    path = lake / DATABASE / "orders"
    if not DeltaTable.is_deltatable(str(path)):
        return None
    data = DeltaTable(str(path)).to_pyarrow_table(columns=["id", "customer", "amount", "status"])
    return sorted(tuple(r.values()) for r in data.to_pylist())


def start_mirror(job: Path, log: Path | None) -> subprocess.Popen:
    """``replicator mirror`` in its own process group (Ctrl-C reaches the demo only: the mirror is stopped
    by its PID, finishing its batch)."""
    return subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(job)],
        cwd=job.parent,
        stdout=log.open("a") if log else None,
        stderr=subprocess.STDOUT if log else None,
        start_new_session=True,
    )


def report(job: Path, html: Path) -> None:
    """``replicator status --html``, as the user would run it."""
    command = [
        sys.executable,
        "-m",
        "replicator.commands.cli",
        "status",
        "--config",
        str(job),
        "--html",
        str(html),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:  # the state may not exist yet: next time
        say(f"status.html not written yet: {(done.stderr.strip().splitlines() or [''])[-1][:200]}")


def run(folder: Path, seconds: float | None, pause: float, mirror_log: Path | None) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    job, html, lake = folder / "job.yaml", folder / "status.html", folder / "lake"
    stop = threading.Event()
    with ExitStack() as stack:
        say(f"MariaDB, Kafka and Kafka Connect with Debezium start in {folder} (a minute or two)")
        server = stack.enter_context(mariadb(folder / "mariadb"))
        with server.connect() as connection, connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {DATABASE}.orders (id INT AUTO_INCREMENT PRIMARY KEY, "
                "customer VARCHAR(32), amount DECIMAL(10,2), status VARCHAR(16))"
            )
        broker = stack.enter_context(kafka_broker(folder / "kafka"))
        settings = connector_settings(
            PREFIX,
            server,
            broker,
            PREFIX,
            DATABASE,
            **EXACT,
        )
        connect = stack.enter_context(kafka_connect(folder / "connect", broker, settings))
        job.write_text(JOB.format(servers=broker.bootstrap_servers, prefix=PREFIX, database=DATABASE))
        writer = threading.Thread(target=write_changes, args=(server, stop, pause), daemon=True)
        writer.start()
        stack.callback(writer.join, 30)
        stack.callback(stop.set)
        mirror = start_mirror(job, mirror_log)
        stack.callback(stop_process, mirror, timeout=90)
        pids = {"mariadb": server.pid, "kafka": broker.pid, "connect": connect.pid, "mirror": mirror.pid}
        say("started (pid): " + ", ".join(f"{name} {pid}" for name, pid in pids.items()))
        say(f"the writer changes {DATABASE}.orders; the mirror job runs ({job}); Ctrl-C stops everything")
        say(f"open {html} in a browser (rewritten every 10 s), or: replicator show --config {job}")
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            tick = 0
            while deadline is None or time.monotonic() < deadline:
                time.sleep(5)
                tick += 1
                held = mirror_rows(lake)
                count = "not created yet" if held is None else f"{len(held)} rows"
                say(f"database {DATABASE}.orders: {len(database_rows(server))} rows | mirror: {count}")
                if tick % 2 == 0:
                    report(job, html)
                if mirror.poll() is not None:
                    say(f"the mirror job stopped (exit {mirror.returncode})")
                    return 1
        except KeyboardInterrupt:
            say("stopping")
        stop.set()
        writer.join(30)
        caught_up = _catch_up(server, lake, mirror)
        report(job, html)
        return 0 if caught_up else 1
    return 1  # (not reached: the with block returns)


def _catch_up(server, lake: Path, mirror: subprocess.Popen, timeout: float = 120) -> bool:
    """Writes stopped: wait until the mirror equals the table (Ctrl-C again skips the wait)."""
    say("the writer stopped; waiting for the mirror to hold every change")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and mirror.poll() is None:
            expected = [(i, c, a, s) for i, c, a, s in database_rows(server)]
            if mirror_rows(lake) == expected:
                say(f"the mirror equals {DATABASE}.orders ({len(expected)} rows)")
                return True
            time.sleep(2)
    except KeyboardInterrupt:
        pass
    say("the mirror did not catch up before the demo stopped")
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replicator.testing.live_demo", description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default="demo-out/live", help="where every part keeps its files")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default: Ctrl-C)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the writer's changes")
    parser.add_argument("--mirror-log", default=None, help="the mirror job's output to this file")
    args = parser.parse_args(argv)
    # SIGTERM stops the demo as Ctrl-C does: every process it started is stopped by its PID.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    log = Path(args.mirror_log).resolve() if args.mirror_log else None
    try:
        return run(Path(args.folder).resolve(), args.seconds, args.pause, log)
    except KeyboardInterrupt:  # during the start: the contexts stopped what had started
        say("stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
