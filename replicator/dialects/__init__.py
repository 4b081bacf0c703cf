"""Wire formats. Importing this package registers every dialect module in it (none imports Spark)."""

import importlib
import pkgutil

from replicator.dialects.base import DecodeOptions, Dialect, decode, dialect_names, get_dialect

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["DecodeOptions", "Dialect", "decode", "dialect_names", "get_dialect"]
