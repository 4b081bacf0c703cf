"""One batch's apply of benchmarks/uniform.py in isolation: the guarded MERGE of the second batch (uniform
updates and deletes of ~316k keys) into the 500k-row mirror the first batch made, timed by writer path.

Reads the mirror a ``uniform.py --events 1000000`` run left (its version 2 is the first batch's, its
version 3 the second's MERGE) and makes the second batch's typed rows again from the difference: the
rows version 3 changed (op ``update``) and the keys it deleted (op ``delete``, a newer seq). Each path
runs on a fresh copy of version 2; CPU seconds are the process's (every thread), so a loaded machine
inflates them less than the wall.

    python benchmarks/uniform_apply.py [--lake bench-out/uniform-1m/lake/shop/accounts] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def batch_of(lake: Path) -> tuple[pa.Table, int]:
    """The second batch's typed rows (from the mirror's versions 2 and 3) and version 2's row count."""
    from deltalake import DeltaTable

    before = DeltaTable(str(lake), version=2).to_pyarrow_table()
    after = DeltaTable(str(lake), version=3).to_pyarrow_table()
    changed = after.filter(pc.invert(pc.is_in(after["_cdc_seq"], value_set=before["_cdc_seq"])))
    gone = before.filter(pc.invert(pc.is_in(before["id"], value_set=after["id"])))
    seq = pc.binary_join_element_wise(gone["_cdc_seq"], pa.scalar("z"), "")  # newer than the row's
    gone = gone.set_column(gone.schema.get_field_index("_cdc_seq"), "_cdc_seq", seq)
    gone = gone.set_column(
        gone.schema.get_field_index("_cdc_op"), "_cdc_op", pa.array(["delete"] * gone.num_rows)
    )
    return pa.concat_tables([changed, gone]), before.num_rows


def fresh(lake: Path, into: Path) -> str:
    """A copy of the mirror at version 2 (its later commits left out)."""
    shutil.copytree(lake, into)
    for log in (into / "_delta_log").glob("*.json"):
        if int(log.name.split(".")[0]) > 2:
            log.unlink()
    for extra in (into / "_delta_log").glob("*.checkpoint*"):
        extra.unlink()
    (into / "_delta_log" / "_last_checkpoint").unlink(missing_ok=True)
    return str(into)


def run(path: str, batch: pa.Table, writer_class: type) -> dict:
    from replicator.sinks.base import Txn

    writer = writer_class(path) if writer_class else None
    wall, cpu = time.monotonic(), time.process_time()
    if writer_class is None:
        from deltalake import DeltaTable

        from replicator.sinks import vectors

        table = DeltaTable(path)
        schema = pa.schema(table.schema().to_arrow())
        args = (table, path, batch, schema, ["id"], "_cdc_seq", "_cdc_op", Txn("bench", 1))
        result = vectors.merge(*args, rewrite=True)
    else:
        result = writer.merge_guarded(batch, ["id"], "_cdc_seq", "_cdc_op", Txn("bench", 1))
    return {
        "wall_s": round(time.monotonic() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "result": result.__dict__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lake", default=str(REPO / "bench-out" / "uniform-1m" / "lake" / "shop" / "accounts")
    )
    parser.add_argument(
        "--paths",
        default="merge,writer",
        help="merge (delta-rs), rewrite (vectors.merge), writer (as configured)",
    )
    args = parser.parse_args()
    from deltalake import DeltaTable

    from replicator.sinks.delta_rs import DeltaRsWriter

    lake = Path(args.lake)
    batch, rows = batch_of(lake)
    expected = DeltaTable(str(lake), version=3).to_pyarrow_table().sort_by("id")

    class MergeOnly(DeltaRsWriter):
        small_rows = 0
        rewrite_share = 0.0  # delta-rs's MERGE whatever the batch

    out: dict = {"mirror_rows": rows, "batch_rows": batch.num_rows}
    with tempfile.TemporaryDirectory() as tmp:
        for n, name in enumerate(args.paths.split(",")):
            path = fresh(lake, Path(tmp) / str(n))
            one = run(path, batch, {"merge": MergeOnly, "writer": DeltaRsWriter}.get(name))
            got = DeltaTable(path).to_pyarrow_table().sort_by("id")
            one["files"] = len(DeltaTable(path).file_uris())
            one["right"] = got.cast(expected.schema).equals(expected)
            out.setdefault(name, []).append(one)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
