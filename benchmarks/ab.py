"""A/B of two versions of the engine on the same landing files, runs interleaved: this tree against a git
revision of it (checked out in a temporary worktree, put first on the processes' ``PYTHONPATH``).

This VM's speed drifts by 5-10% within an hour, more than most changes are worth: one run of each, an
hour apart, says little. Interleaved runs on the same files (generated once by ``throughput.py``) do.

    python benchmarks/ab.py --base HEAD~3 [--workdir bench-out/throughput-5m] [--runs 3]
    python benchmarks/ab.py --base HEAD --this-job 'changelog: {enabled: false}'  # the same engine, a setting

Prints each run's wall time, CPU seconds by process (driver, JVM, Python workers) and the process tree's
peak RSS (MB), then the medians;
writes ``<workdir>/ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import run_mirror

REPO = Path(__file__).resolve().parent.parent


def one(workdir: Path, tree: Path | None, extra: str = "") -> dict:
    """One mirror run over ``workdir``'s landing files, with the engine of ``tree`` (None: this one) and
    ``extra`` lines added to the job file."""
    for name in ("lake", "state"):
        shutil.rmtree(workdir / name, ignore_errors=True)
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:  # the driver and Spark's Python workers find the tree's package first
        os.environ["PYTHONPATH"] = str(tree)
    try:
        # run in the workdir: this checkout's package is then not first on the driver's path
        elapsed, rss, cpu, _err = run_mirror(workdir, 10, False, cwd=workdir, extra=extra)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    seconds = {k: round(v, 1) for k, v in cpu.items()}
    return {"wall_s": round(elapsed, 1), **seconds, "peak_mb": round(sum(rss.values()) / 2**20)}  # the tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "throughput-5m"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--this-job",
        default="",
        help="YAML lines added to this tree's job file, e.g. 'changelog: {enabled: false}' with --base HEAD",
    )
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()  # the runs change directory to it
    if not (workdir / "landing").is_dir():
        raise SystemExit(f"{workdir}/landing: none; generate it with benchmarks/throughput.py first")
    base = Path(tempfile.mkdtemp(prefix="replicator-ab-")) / "tree"
    git = ["git", "-C", str(REPO), "worktree"]
    subprocess.run([*git, "add", "-q", "--detach", str(base), args.base], check=True)
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    try:
        for _ in range(args.runs):
            for name, tree, extra in (("base", base, ""), ("this", None, args.this_job)):
                runs[name].append(one(workdir, tree, extra))
                print(name, json.dumps(runs[name][-1]), flush=True)
    finally:
        subprocess.run([*git, "remove", "--force", str(base)], check=False)
        shutil.rmtree(base.parent, ignore_errors=True)
    medians = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in runs.items()
    }
    result = {"base": args.base, "runs": runs, "medians": medians}
    print(json.dumps(medians, indent=1))
    (workdir / "ab.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
