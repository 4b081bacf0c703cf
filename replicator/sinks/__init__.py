"""Mirror writers: ``delta-rs`` (default, the ``deltalake`` package) and ``delta-spark`` (needs the jars)."""

from __future__ import annotations

from replicator.sinks.base import MergeResult, MirrorWriter, WriterFactory


def writer_factory(name: str) -> WriterFactory:
    if name == "delta-rs":
        from replicator.sinks.delta_rs import DeltaRsWriter

        return DeltaRsWriter
    if name == "delta-spark":
        from replicator.sinks.delta_spark import DeltaSparkWriter

        return DeltaSparkWriter
    raise ValueError(f"unknown writer {name!r}; expected 'delta-rs' or 'delta-spark'")


__all__ = ["MergeResult", "MirrorWriter", "WriterFactory", "writer_factory"]
