"""The JVM parts replicator runs beside pyspark, from Maven Central: where they live and how they are fetched.

Groups (``pom.xml`` beside this file, a Maven profile each, each its own class path):

* ``spark``: what a session adds to pyspark's jars: Spark's Kafka connector and Delta Lake for Spark;
* ``kafka``: an Apache Kafka broker (KRaft), which the tests and ``make e2e`` start;
* ``connect``: Kafka Connect with Debezium's MariaDB and PostgreSQL connectors (``make e2e``);
* ``s3``: Hadoop's s3a file system and the AWS SDK modules it uses, for a session whose checkpoint, files
  source or delta-spark mirrors are on S3 (docs/object-storage.md).

``make install`` runs ``replicator jars``, which copies them into ``<venv>/share/replicator/jars/<group>``
(``REPLICATOR_JARS`` names another folder). A session that needs the spark group (a Kafka source, the
delta-spark writer) is started with those files (``spark.jars``); where none were fetched it asks Spark's
own resolver for the same coordinates (``spark.jars.packages``), the convention for pip users.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GROUPS = ("spark", "kafka", "connect", "s3")
ENV = "REPLICATOR_JARS"
POM = Path(__file__).with_name("pom.xml")
# One Spark version for everything: pyproject.toml pins pyspark to it, and Delta 4.4 is built for it.
SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
SPARK_PACKAGES = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
)
HADOOP_VERSION = "3.5.0"  # pyspark's (its jars/hadoop-client-api-*.jar)
# Spark's resolver cannot leave out hadoop-aws's 600 MB SDK bundle: the fallback fetches it once.
S3_PACKAGES = (f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",)
_STAMP = ".pom-sha256"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")


class JarsMissing(RuntimeError):
    """A group's jars are not installed; the message says how to install them."""


def home() -> Path:
    """The folder holding one sub-folder of jars per group."""
    setting = os.environ.get(ENV)
    return Path(setting) if setting else Path(sys.prefix) / "share" / "replicator" / "jars"


def jars(group: str) -> list[Path]:
    """The group's jar files, sorted; empty when the group was never fetched (or the pom changed since)."""
    folder = home() / group
    if not (folder / _STAMP).is_file() or (folder / _STAMP).read_text().strip() != _pom_digest():
        return []
    return sorted(folder.glob("*.jar"))


def require(group: str) -> list[Path]:
    """The group's jars, or :class:`JarsMissing` with the one command that installs them."""
    found = jars(group)
    if not found:
        raise JarsMissing(
            f"the {group!r} jars are not installed in {home() / group}: run `replicator jars` "
            "(make install does; it needs `mvn` and Maven Central)"
        )
    return found


def classpath(group: str) -> str:
    return os.pathsep.join(str(p) for p in require(group))


def s3_settings() -> dict[str, str]:
    """What a session reaching S3 through s3a adds: the fetched jars, else Spark's resolver."""
    found = jars("s3")
    if found:
        return {"spark.jars": ",".join(str(p) for p in found)}
    return {"spark.jars.packages": ",".join(S3_PACKAGES)}


def spark_settings() -> dict[str, str]:
    """What a session that reads Kafka or writes with delta-spark adds: the fetched jars, else Spark's
    resolver for the same coordinates (it downloads them once into ~/.ivy2)."""
    found = jars("spark")
    if found:
        return {"spark.jars": ",".join(str(p) for p in found)}
    return {"spark.jars.packages": ",".join(SPARK_PACKAGES)}


def fetch(groups: tuple[str, ...] = GROUPS, mvn: str = "mvn") -> dict[str, int]:
    """Copy each group's jars with Maven into :func:`home`; a group already there for this pom is kept.

    Returns the number of jars per group. The spark group leaves out what pyspark already ships (Spark's
    own jars, Scala, Jackson, Hadoop's client ...): two versions of one library on a class path break."""
    if shutil.which(mvn) is None:
        raise JarsMissing(f"`{mvn}` is not on PATH: install Maven to fetch the JVM parts")
    counts = {}
    for group in groups:
        if group not in GROUPS:
            raise ValueError(f"unknown jar group {group!r}; expected one of {', '.join(GROUPS)}")
        if jars(group):
            counts[group] = len(jars(group))
            continue
        target = home() / group
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{group}-") as scratch:
            out = Path(scratch) / group
            command = [
                mvn,
                "-q",
                "-B",
                "-f",
                str(POM),
                f"-P{group}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={out}",
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                errors = [line for line in done.stdout.splitlines() if "ERROR" in line][:3]
                raise JarsMissing(f"Maven could not fetch the {group!r} jars: " + " | ".join(errors))
            if group in ("spark", "s3"):
                _drop_shipped(out)
            (out / _STAMP).write_text(_pom_digest())
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)  # whole or not at all
        counts[group] = len(jars(group))
    return counts


def _drop_shipped(folder: Path) -> None:
    """Remove the jars whose artifact pyspark ships (its own version stays the only one)."""
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in folder.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()


def _artifact(name: str) -> str:
    match = _VERSIONED.match(name)
    return match.group("artifact") if match else name


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()
