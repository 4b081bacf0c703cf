"""Decoding per message, by stage: canal-json workload messages, one process (one core), prints JSON.

Stages, each the best of ``--repeat`` runs with the garbage collector paused (as ``decode`` runs):

- ``parse``: ``orjson.loads`` of every raw record (the general path's parse);
- ``dialect``: the canal-json dialect appending every parsed message to the ``Events`` builder;
- ``records``: raw records -> the builder, as ``decode`` runs it (``Decoder.records``: the parse and the
  dialect together, or canal-json's own typed reader of the raw record, ``dialects/canal_plain.py``);
- ``arrow``: ``Events.to_arrow()`` plus the engine's ``seq_text`` and ``type_key`` columns;
- ``decode``: the whole ``replicator.dialects.base.decode(records, "canal-json", sort_keys=True)``.

    python benchmarks/decode_stages.py [--messages 200000] [--repeat 3] [--profile]

Times are CPU seconds of this process (``time.process_time``), steadier than wall time on a shared
machine. ``decode`` also pays for freeing the batch's Python objects, which the stages do not. The
result is printed and written to ``bench-out/decode_stages/result.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import orjson
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import events

from replicator.dialects.base import Decoder, decode, gc_paused, record_tuples
from replicator.dialects.events import At, Events, seq_texts
from replicator.sources import raw_schema


def records(count: int) -> pa.Table:
    raws = [orjson.dumps(m) for m in events(count, max(1, count // 10))]
    return pa.table(
        [
            pa.array(raws, pa.binary()),
            pa.nulls(count, pa.binary()),  # a file's records have no Kafka key
            pa.array(["landing/part-00000.jsonl"] * count, pa.string()),
            pa.array([None] * count, pa.int64()),
            pa.array(range(1, count + 1), pa.int64()),
        ],
        schema=raw_schema(),
    )


def best(run, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times = []
    result = None
    for _ in range(repeat):
        result = None  # free the previous run's objects before timing the next
        with gc_paused():
            start = time.process_time()
            result = run()
            times.append(time.process_time() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the whole decode (stderr)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/decode_stages/result.json"))
    args = parser.parse_args()
    n = args.messages
    table = records(n)
    raws = table["raw"].to_pylist()
    rows = list(record_tuples(table))  # (raw, source, partition, offset, key), as decode reads them

    parse, parsed = best(lambda: [orjson.loads(r) for r in raws], args.repeat)

    decoder = Decoder("canal-json")
    dialect_obj = decoder.fixed
    assert dialect_obj is not None

    def dialect_stage():  # type: ignore[no-untyped-def]
        out = Events()
        dec = dialect_obj.decode
        for message, (raw, source, partition, offset, _key) in zip(parsed, rows, strict=True):  # type: ignore[call-overload]
            dec(message, At(0, source, partition, offset, 0, raw), out)
        return out

    dialect, _ = best(dialect_stage, args.repeat)
    records_time, built = best(lambda: decoder.records(rows, 0), args.repeat)

    def arrow_stage():  # type: ignore[no-untyped-def]
        out = built.to_arrow()  # type: ignore[attr-defined]
        out = out.append_column("seq_text", seq_texts(out["seq"]))
        return out.append_column("type_key", built.type_keys())  # type: ignore[attr-defined]

    arrow, _ = best(arrow_stage, args.repeat)
    whole, decoded = best(lambda: decode(table, "canal-json", None, 0, sort_keys=True), args.repeat)
    assert decoded.num_rows == n and decoded["error"].null_count == n  # type: ignore[attr-defined]
    if args.profile:
        profiler = cProfile.Profile()
        with gc_paused():
            profiler.runcall(decode, table, "canal-json", None, 0, True)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    us = 1e6 / n
    result = {
        "messages": n,
        "bytes_per_message": round(sum(map(len, raws)) / n),
        "us_per_message": {
            "parse": round(parse * us, 2),
            "dialect": round(dialect * us, 2),
            "records": round(records_time * us, 2),
            "arrow": round(arrow * us, 2),
            "decode": round(whole * us, 2),
        },
        "messages_per_second_per_core": round(n / whole),
    }
    print(json.dumps(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
