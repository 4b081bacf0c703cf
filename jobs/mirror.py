"""spark-submit entry point: ``spark-submit jobs/mirror.py --config conf/job.yaml [--available-now]``."""

import sys

from replicator.pythonpath import installed_pyspark_first

installed_pyspark_first()  # before anything imports pyspark: spark-submit's zips compile on every start

from replicator.commands.cli import run  # noqa: E402

if __name__ == "__main__":
    run(["mirror", *sys.argv[1:]])
