"""Spark's Python daemon with the installed pyspark first on the path (``spark.python.daemon.module``).

Spark starts one daemon per executor (``python -m pyspark.daemon``) with its pyspark.zip first on the
path, and every Python worker is forked from it; modules imported from the zip are compiled again in
each process (replicator.pythonpath). This module fixes the path, then runs pyspark's own daemon.
"""

from replicator.pythonpath import installed_pyspark_first

installed_pyspark_first()

from pyspark import daemon  # noqa: E402

if __name__ == "__main__":
    daemon.manager()
