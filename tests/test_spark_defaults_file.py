"""conf/spark-defaults.conf, the properties a user gives spark-submit, says what the embedded session sets
(replicator.spark): one source of truth checked, so that the file does not drift from the code."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from replicator.commands.jvm_archive import write_submit_defaults
from replicator.spark import LOCAL_DEFAULTS, _warn_driver_options, missing_driver_options, submitted_defaults

FILE = Path(__file__).resolve().parent.parent / "conf" / "spark-defaults.conf"


def _properties(path: Path = FILE) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            found[key] = value.strip()
    return found


def test_every_property_of_the_file_is_the_embedded_sessions():
    properties = _properties()
    assert properties["spark.driver.extraJavaOptions"] == LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]
    for key, value in properties.items():
        assert LOCAL_DEFAULTS.get(key) == value, key
    assert properties == submitted_defaults()


def test_the_archives_properties_file_maps_it_with_the_same_settings(tmp_path):
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"x")  # only its path matters here
    written = write_submit_defaults(archive)
    assert written == tmp_path / "spark-submit.conf"
    properties = _properties(written)
    options = properties.pop("spark.driver.extraJavaOptions").split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert missing_driver_options(" ".join(options)) == []
    expected = submitted_defaults()
    del expected["spark.driver.extraJavaOptions"]
    assert properties == expected


def test_a_driver_without_the_options_is_told_which_and_where_they_are():
    assert missing_driver_options(_properties()["spark.driver.extraJavaOptions"]) == []
    assert missing_driver_options("-Xss4m -XX:+UseSerialGC") == [
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:TieredStopAtLevel=1",
        "-XX:CICompilerCount=1",
    ]
    with capture_logs() as logs:
        _warn_driver_options("")
        _warn_driver_options(LOCAL_DEFAULTS["spark.driver.extraJavaOptions"] + " -Xss4m")
    assert len(logs) == 1
    assert logs[0]["log_level"] == "warning"
    assert "-XX:+ExitOnOutOfMemoryError" in logs[0]["missing"]
    assert "conf/spark-defaults.conf" in logs[0]["fix"]
