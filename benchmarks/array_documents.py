"""Decode rate of one array document against the same messages as JSONL (issue 14, item 4).

    .venv/bin/python benchmarks/array_documents.py [--messages 20000]

Prints messages per second of ``dialects.base.decode`` for: the messages as JSONL records, one ``*.json``
array document, and the document with every element a dead letter (each cut to its own bytes).
"""

from __future__ import annotations

import argparse
import json
import time

import orjson
import pyarrow as pa

from replicator.dialects.base import decode
from replicator.sources import raw_schema


def debezium(i: int) -> str:
    source = {"connector": "mysql", "db": "inventory", "table": "products", "file": "mysql-bin.000003"}
    after = {
        "id": i,
        "name": f"n{i}",
        "weight": orjson.Fragment("3.140000104904175"),
    }  # the number as written
    source |= {"pos": 154 + i, "row": 0}
    return orjson.dumps(
        {"before": None, "after": after, "source": source, "op": "c", "ts_ms": 1589355606100}
    ).decode()


def raw_records(values: list, source: str = "file:/m.jsonl") -> pa.Table:
    raws = [v.encode() if isinstance(v, str) else v for v in values]
    n = len(raws)
    return pa.table([raws, [None] * n, [source] * n, [0] * n, list(range(1, n + 1))], schema=raw_schema())


def rate(records, count: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    decode(records, "debezium")
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    n = parser.parse_args().messages
    messages = [debezium(i) for i in range(n)]
    document = ("[" + ",".join(messages) + "]").encode()
    bad = ("[" + ",".join(json.dumps({"op": "x", "n": i}) for i in range(n)) + "]").encode()
    result = {
        "messages": n,
        "document_mb": round(len(document) / 2**20, 1),
        "jsonl_per_s": round(rate(raw_records(messages), n)),
        "document_per_s": round(rate(raw_records([document], "file:/d.json"), n)),
        "dead_document_per_s": round(rate(raw_records([bad], "file:/d.json"), n)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
