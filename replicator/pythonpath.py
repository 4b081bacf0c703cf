"""Import the installed pyspark and py4j, not spark-submit's zips of the same files.

spark-submit (and Spark's Python daemon on every executor) puts ``$SPARK_HOME/python/lib/pyspark.zip`` and
``py4j-<version>-src.zip`` first on ``sys.path``. Python caches no bytecode for modules imported from a zip,
so each start compiles pyspark's sources again: ~0.5 s of CPU in the driver, and as much in a local run's
daemon and workers (docs/performance.md). When Spark runs from the pip ``pyspark`` package, its zips lie
inside that package and hold the same files: they are moved behind the installed packages. A zip of
another Spark distribution (a vendor's build may patch pyspark under the same version) and a py4j zip
whose version is not the installed py4j's stay where they are. Only the standard library is imported
here: it runs before pyspark.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[^-]+)-src\.zip")


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def installed_package_dir() -> Path | None:
    """The installed pyspark package's folder (found without importing it), or None."""
    try:
        located = metadata.distribution("pyspark").locate_file("pyspark")
    except metadata.PackageNotFoundError:
        return None
    return Path(str(located)).resolve()


def _same_files(entry: str, package: Path) -> bool:
    """Whether a path entry is one of the installed package's own pyspark/py4j zips."""
    path = Path(entry)
    py4j = _PY4J_ZIP.fullmatch(path.name)
    if path.name != "pyspark.zip" and py4j is None:
        return False
    if not path.resolve().is_relative_to(package):
        return False
    return py4j is None or py4j.group("version") == _installed("py4j")


def installed_pyspark_first(path: list[str] | None = None, package: Path | None = None) -> list[str]:
    """Move the installed pyspark package's own zips to the end of ``path`` (default ``sys.path``);
    ``package`` is that package's folder (default: found from its metadata). Returns the entries moved.
    Call it before anything imports pyspark."""
    path = sys.path if path is None else path
    package = package or installed_package_dir()
    if package is None:
        return []
    moved = [entry for entry in path if _same_files(entry, package)]
    for entry in moved:
        path.remove(entry)
        path.append(entry)  # kept: a module the installed package lacks still resolves
    return moved
