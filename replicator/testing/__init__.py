"""Helpers for testing a job against real services (an S3-compatible server): usable from a user's own tests,
as ``pyspark.testing`` is. Nothing here is imported by the engine."""
