"""The driver JVM's class data sharing archive: where it lives, when a session uses it, and that the one
`replicator jvm-archive` writes is one Spark's JVM can map with Spark's class path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from replicator.spark import ARCHIVE_ENV, LOCAL_DEFAULTS, _java, class_archive, driver_java_options


def test_options_name_the_archive_only_when_it_exists(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    defaults = LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]
    assert driver_java_options(archive) == defaults
    archive.write_bytes(b"x")
    options = driver_java_options(archive)
    assert options.startswith(defaults)
    assert f"-XX:SharedArchiveFile={archive}" in options.split()


def test_archive_path_is_keyed_and_can_be_moved_or_turned_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ARCHIVE_ENV, raising=False)
    default = class_archive()
    assert default is not None and default == class_archive()  # stable: the same JVM and jars
    assert default.name.startswith("spark-driver-") and default.suffix == ".jsa"
    assert default.parent == Path(sys.prefix) / "share" / "replicator"
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "a.jsa"))
    assert class_archive() == tmp_path / "a.jsa"
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert class_archive() is None
    assert driver_java_options() == LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]


@pytest.mark.slow
@pytest.mark.cluster  # `replicator jvm-archive` runs its sample on a standalone cluster: make test-cluster
def test_written_archive_maps_with_sparks_class_path(spark, tmp_path: Path) -> None:
    target = tmp_path / "driver.jsa"
    done = subprocess.run(
        [sys.executable, "-m", "replicator.commands.cli", "jvm-archive", "--path", str(target)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == str(target)
    # and spark-submit's properties file beside it, which maps it (docs/how-to/cluster.md)
    assert f"-XX:SharedArchiveFile={target}" in (tmp_path / "spark-submit.conf").read_text()
    assert target.stat().st_size > 10_000_000  # thousands of Spark's classes, not an empty shell
    assert not list(tmp_path.glob(".*.tmp"))  # moved into place whole
    class_path = spark.sparkContext._jvm.System.getProperty("java.class.path")
    java = _java()
    assert java is not None
    # -Xshare:on: the JVM refuses to start unless it maps the archive (same JVM, same class path)
    mapped = subprocess.run(
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={target}", "-cp", class_path, "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mapped.returncode == 0, mapped.stderr
    assert "sharing" in mapped.stderr
    # the sample ran embedded and on a standalone cluster: both schedulers' classes are in it
    listed = subprocess.run(
        [str(java), f"-XX:SharedArchiveFile={target}", "-XX:+PrintSharedArchiveAndExit", "-cp", class_path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "archive is valid" in listed.stdout + listed.stderr
    for name in ("scheduler.local.LocalSchedulerBackend", "deploy.client.StandaloneAppClient"):
        assert f"org.apache.spark.{name} " in listed.stdout, name
    other = subprocess.run(  # another class path: refused, so a stale archive is never used silently
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={target}", "-cp", str(tmp_path), "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode != 0
