"""Import the installed pyspark and py4j, not spark-submit's zips of the same files.

spark-submit (and Spark's Python daemon on every executor) puts ``$SPARK_HOME/python/lib/pyspark.zip`` and
``py4j-<version>-src.zip`` first on ``sys.path``. Python caches no bytecode for modules imported from a zip,
so each start compiles pyspark's sources again: ~0.5 s of CPU in the driver, and as much in a local run's
daemon and workers (benchmarks/LOG.md). When Spark runs from the installed ``pyspark`` package (pip's),
its zips lie inside that package and hold the same files: they are moved behind the installed packages.
A zip of another Spark distribution (a vendor's build may patch pyspark under the same version) and a
py4j zip whose version is not the installed py4j's stay where they are. Only the standard library is imported
here: it runs before pyspark.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.machinery import PathFinder
from pathlib import Path

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[^-]+)-src\.zip")
_VERSION = re.compile(r"""__version__\s*=\s*['"]([^'"]+)['"]""")


def _find(name: str, path: list[str]) -> Path | None:
    """The folder of the package ``name`` as Python imports it from ``path``'s folders (not its zips),
    found without importing it. ``importlib.metadata`` would do it too, but its import and its scan of
    every distribution cost ~0.1 s of CPU in each driver and executor daemon."""
    folders = [entry for entry in path if os.path.isdir(entry or ".")]
    spec = PathFinder.find_spec(name, folders)
    if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
        return None
    return Path(spec.origin).resolve().parent


def _installed_py4j(path: list[str]) -> str | None:
    """The version of the py4j package installed in ``path``'s folders (read from its version.py)."""
    package = _find("py4j", path)
    try:
        found = _VERSION.search((package / "version.py").read_text()) if package else None
    except OSError:
        return None
    return found.group(1) if found else None


def installed_package_dir(path: list[str] | None = None) -> Path | None:
    """The folder of the pyspark package installed in ``path``'s folders (default ``sys.path``), or None."""
    return _find("pyspark", sys.path if path is None else path)


def _same_files(entry: str, package: Path, py4j_version: str | None) -> bool:
    """Whether a path entry is one of the installed package's own zips: its pyspark.zip, or its py4j zip
    when the installed py4j is of that version."""
    path = Path(entry)
    py4j = _PY4J_ZIP.fullmatch(path.name)
    if path.name != "pyspark.zip" and py4j is None:
        return False
    if not path.resolve().is_relative_to(package):
        return False
    return py4j is None or py4j.group("version") == py4j_version


def installed_pyspark_first(path: list[str] | None = None, package: Path | None = None) -> list[str]:
    """Move the installed pyspark package's own zips to the end of ``path`` (default ``sys.path``);
    ``package`` is that package's folder (default: the pyspark package in ``path``'s folders). Returns the
    entries moved. Call it before anything imports pyspark."""
    path = sys.path if path is None else path
    package = package or installed_package_dir(path)
    if package is None:
        return []
    py4j_version = _installed_py4j(path)
    moved = [entry for entry in path if _same_files(entry, package, py4j_version)]
    for entry in moved:
        path.remove(entry)
        path.append(entry)  # kept: a module the installed package lacks still resolves
    return moved
