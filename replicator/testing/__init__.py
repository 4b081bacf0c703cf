"""Helpers for testing a job against real services (an S3-compatible server, a Kafka broker, a capture
pipeline: MariaDB -> Debezium -> Kafka): usable from a user's own tests,
as ``pyspark.testing`` is. Nothing here is imported by the engine."""
