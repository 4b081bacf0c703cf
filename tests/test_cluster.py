"""A real multi-process Spark cluster on 127.0.0.1: a standalone master and one worker started from the
pyspark package, the mirror job submitted to it with ``spark-submit`` (and run by the ``replicator``
command with ``REPLICATOR_SPARK_MASTER``). Decoding and folding run in the worker's executor processes;
the mirror must equal the one a local run makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replicator.cluster import spark_home, standalone
from tests.helpers import canal, delta_table, order, write_jsonl

REPO = Path(__file__).resolve().parent.parent
ES = 1_700_000_000_000
pytestmark = [pytest.mark.slow, pytest.mark.cluster]  # make test-cluster, not make test


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``spark://127.0.0.1:<port>`` of a master with one 2-core worker; both stopped by PID after."""
    with standalone(tmp_path_factory.mktemp("cluster")) as started:
        yield started


def _job(tmp: Path, name: str, landing: Path) -> Path:
    data = {
        "name": name,
        "source": {"type": "files", "path": str(landing), "dialect": "canal-json"},
        "target": {"path": str(tmp / name / "lake")},
        "state": {"path": str(tmp / name / "state")},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _messages() -> list[dict]:
    """300 inserts, then updates and deletes of some of those keys."""
    messages = [canal("INSERT", [order(i, f"n{i}")], es=ES + i) for i in range(300)]
    messages += [
        canal("UPDATE", [order(i, "u")], old=[{"name": f"n{i}"}], es=ES + 1000 + i) for i in range(0, 300, 3)
    ]
    return [*messages, *(canal("DELETE", [order(i, "u")], es=ES + 2000 + i) for i in range(0, 300, 7))]


def _landing(tmp: Path) -> Path:
    """Three files (three decode tasks), keys spread over them, updates and deletes across files."""
    landing = tmp / "landing"
    messages = _messages()
    for n, start in enumerate(range(0, len(messages), 150)):
        write_jsonl(landing / f"part-{n}.jsonl", messages[start : start + 150])
    return landing


def _mirror(tmp: Path, name: str) -> list[dict]:
    data = delta_table(tmp / name / "lake" / "shop" / "orders")
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    # the first errors (Spark's INFO lines at the shutdown bury them at the end), then the end
    errors = [line for line in done.stderr.splitlines() if "Error" in line or "Exception" in line]
    assert done.returncode == 0, "\n".join(errors[:15]) + "\n...\n" + done.stderr[-2000:]


def _mirror_command(job: Path, env: dict[str, str]) -> None:
    """The ``replicator`` command's mirror, as a user starts it."""
    command = [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(job)]
    _run([*command, "--available-now"], env)


def test_a_cluster_mirrors_what_a_local_run_mirrors(cluster, tmp_path):
    url, env = cluster
    landing = _landing(tmp_path)
    local_env = {**env, "REPLICATOR_SPARK_MASTER": "local[2]"}
    _mirror_command(_job(tmp_path, "local", landing), local_env)
    expected = _mirror(tmp_path, "local")
    assert len(expected) == 300 - len(range(0, 300, 7))

    submit = str(spark_home() / "bin" / "spark-submit")
    _run(
        [
            submit,
            "--master",
            url,
            "--conf",
            "spark.executor.memory=1g",
            # the documented option for executors with replicator installed (docs/operations.md)
            "--conf",
            "spark.python.daemon.module=replicator.worker_daemon",
            str(REPO / "jobs" / "mirror.py"),
            "--config",
            str(_job(tmp_path, "submitted", landing)),
            "--available-now",
        ],
        env,
    )
    assert _mirror(tmp_path, "submitted") == expected

    cluster_env = {**env, "REPLICATOR_SPARK_MASTER": url}
    _mirror_command(_job(tmp_path, "command", landing), cluster_env)
    assert _mirror(tmp_path, "command") == expected
    # Both cluster runs were applications of the worker: it started an executor for each.
    apps = sorted((Path(env["SPARK_WORKER_DIR"])).glob("app-*/*/stderr"))
    assert len(apps) >= 2, apps
    assert any("[replicator.worker_daemon]" in app.read_text() for app in apps), "no executor used the daemon"


@pytest.mark.kafka
def test_a_kafka_job_submitted_with_no_jar_flags_mirrors_what_a_local_run_mirrors(cluster, kafka, tmp_path):
    """``spark-submit jobs/mirror.py`` with no --jars nor --packages, locally and on the standalone cluster:
    the session finds Spark's Kafka connector that `replicator jars` installed (replicator.spark sets
    spark.jars), its executors read the topic's partitions, and the mirror equals the embedded run's."""
    import json
    import zlib

    url, env = cluster
    topic = kafka.topic("cluster", 3)
    messages = [json.dumps(m).encode() for m in _messages()]
    # canal's partitionHash by primary key (shop.orders:id): a key's changes stay in one partition, in order
    kafka.produce(
        topic, [(None, m, zlib.crc32(str(json.loads(m)["data"][0]["id"]).encode()) % 3) for m in messages]
    )

    def job(name: str) -> Path:
        path = _job(tmp_path, name, tmp_path)
        data = yaml.safe_load(path.read_text())
        data["source"] = {
            "type": "kafka",
            "dialect": "canal-json",
            "kafka": {"bootstrap_servers": kafka.servers, "topics": [topic]},
        }
        path.write_text(yaml.safe_dump(data))
        return path

    env = {k: v for k, v in env.items() if k != "REPLICATOR_SPARK_JARS"}  # as a user's shell has it
    _mirror_command(job("local"), {**env, "REPLICATOR_SPARK_MASTER": "local[2]"})
    expected = _mirror(tmp_path, "local")
    assert len(expected) == 300 - len(range(0, 300, 7))
    submit = str(spark_home() / "bin" / "spark-submit")
    for name, master in (("submitted-local", "local[2]"), ("submitted-cluster", url)):
        command = [submit, "--master", master, "--conf", "spark.executor.memory=1g"]
        _run([*command, str(REPO / "jobs" / "mirror.py"), "--config", str(job(name)), "--available-now"], env)
        assert _mirror(tmp_path, name) == expected, name


# The mirror job as spark-submit runs it, with every table's net changes typed on the executors (so that the
# delta-spark writer's later batches MERGE the staged upserts there: TableApplier.commit_staged).
STAGED_JOB = """
import sys
from replicator.pythonpath import installed_pyspark_first
installed_pyspark_first()
from replicator import engine
engine.TYPED_ON_EXECUTORS = 1
from replicator.commands.cli import main
sys.exit(main(["mirror", *sys.argv[1:]]))
"""


def test_a_cluster_mirrors_with_delta_spark_what_delta_rs_mirrors_locally(cluster, tmp_path):
    """The delta-spark writer through spark-submit on the cluster, one file per batch: the mirror equals
    the local delta-rs one. The Delta jars go with ``--jars`` (docs/operations.md): the session's
    ``spark.jars`` (replicator.spark.jar_settings) comes too late for a driver JVM that spark-submit
    started (ClassNotFoundException: org.apache.spark.sql.delta.catalog.DeltaCatalog)."""
    from replicator import jars

    url, env = cluster
    landing = _landing(tmp_path)
    local = _job(tmp_path, "local", landing)
    _mirror_command(local, {**env, "REPLICATOR_SPARK_MASTER": "local[2]"})
    expected = _mirror(tmp_path, "local")

    submitted = _job(tmp_path, "spark", landing)
    data = yaml.safe_load(submitted.read_text())
    data["target"]["writer"] = "delta-spark"
    data["source"]["max_files_per_trigger"] = 1  # batches after the first MERGE into an existing mirror
    submitted.write_text(yaml.safe_dump(data))
    script = tmp_path / "staged_mirror.py"
    script.write_text(STAGED_JOB)
    submit = str(spark_home() / "bin" / "spark-submit")
    _run(
        [
            submit,
            "--master",
            url,
            "--conf",
            "spark.executor.memory=1g",
            "--conf",
            "spark.python.daemon.module=replicator.worker_daemon",
            "--jars",
            ",".join(str(jar) for jar in jars.jars("spark")),
            str(script),
            "--config",
            str(submitted),
            "--available-now",
        ],
        env,
    )
    assert _mirror(tmp_path, "spark") == expected
    from deltalake import DeltaTable

    history = DeltaTable(str(tmp_path / "spark" / "lake" / "shop" / "orders")).history()
    assert sum(h.get("operation") == "MERGE" for h in history) >= 2, history
