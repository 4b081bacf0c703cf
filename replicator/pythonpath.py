"""Import the installed pyspark and py4j, not spark-submit's zips of the same version.

spark-submit (and Spark's Python daemon on every executor) puts ``$SPARK_HOME/python/lib/pyspark.zip`` and
``py4j-<version>-src.zip`` first on ``sys.path``. Python caches no bytecode for modules imported from a zip,
so each start compiles pyspark's sources again: ~0.5 s of CPU in the driver, and as much in a local run's
daemon and workers (docs/performance.md). When the interpreter has the same versions installed (a pip
``pyspark`` brings both), the zips are moved behind the installed packages; a different or missing
installation leaves the path as it is. Only the standard library is imported here: it runs before pyspark.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from importlib import metadata

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[^-]+)-src\.zip")
_VERSION = re.compile(r"""__version__(?::\s*str)?\s*=\s*["']([^"']+)["']""")


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _zip_version(entry: str) -> tuple[str, str | None] | None:
    """(distribution, version) of a pyspark or py4j zip on the path, or None for any other entry."""
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        try:
            with zipfile.ZipFile(entry) as archive:
                found = _VERSION.search(archive.read("pyspark/version.py").decode())
        except (OSError, KeyError, zipfile.BadZipFile):
            return "pyspark", None
        return "pyspark", found.group(1) if found else None
    matched = _PY4J_ZIP.fullmatch(name)
    return ("py4j", matched.group("version")) if matched else None


def installed_pyspark_first(path: list[str] | None = None) -> list[str]:
    """Move the pyspark/py4j zips whose version this interpreter has installed to the end of ``path``
    (default ``sys.path``); return the entries moved. Call it before anything imports pyspark."""
    path = sys.path if path is None else path
    moved = []
    for entry in list(path):
        found = _zip_version(entry)
        if found is None:
            continue
        distribution, version = found
        if version is not None and version == _installed(distribution):
            moved.append(entry)
    for entry in moved:
        path.remove(entry)
        path.append(entry)  # kept: a module the installed package lacks still resolves
    return moved
