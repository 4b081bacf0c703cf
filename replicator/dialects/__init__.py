"""Wire formats. Importing this package registers every dialect module in it (none imports Spark).

Besides one module per format: ``base`` (Dialect, registry, detection, the decode pipeline), ``events``
(the Arrow builder of decoded events), ``jsontext`` (exact JSON values), ``datetext`` (epoch counts as date
and clock text) and ``debezium_values`` (the debezium dialect's column values): ``SUPPORT`` names them,
the modules that define no dialect.
"""

import importlib
import pkgutil

from replicator.dialects.base import DecodeOptions, Decoder, Dialect, decode, dialect_names, get_dialect

SUPPORT = frozenset({"base", "datetext", "debezium_values", "events", "jsontext"})

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in SUPPORT:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["DecodeOptions", "Decoder", "Dialect", "decode", "dialect_names", "get_dialect"]
