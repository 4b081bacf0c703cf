"""replicator: CDC table replication into Delta Lake mirrors."""

__version__ = "0.1.0"
