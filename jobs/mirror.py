"""spark-submit entry point: ``spark-submit jobs/mirror.py --config conf/job.yaml [--available-now]``."""

import sys

from replicator.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["mirror", *sys.argv[1:]]))
