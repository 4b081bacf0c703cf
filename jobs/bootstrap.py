"""spark-submit entry point: ``spark-submit jobs/bootstrap.py --config conf/job.yaml ...`` (the options of
``replicator bootstrap --help``; docs/operations.md)."""

import sys

from replicator.pythonpath import installed_pyspark_first

installed_pyspark_first()  # before anything imports pyspark: spark-submit's zips compile on every start

from replicator.commands.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bootstrap", *sys.argv[1:]]))
