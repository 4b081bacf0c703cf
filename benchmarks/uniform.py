"""Uniform updates into a full mirror (issue 54, item 1), with a generator of its own (not workload.py's).

The shape: canal-json events of one table (``shop.accounts``, 11 columns of varied values: names and
e-mail addresses with some non-ASCII, decimals, doubles, millisecond and microsecond timestamps, free
text of 20-200 characters in several scripts); the first ``--keys`` events insert every key in a random
order (a full mirror from the first batch), every later one picks its key uniformly over the key space:
an update (most of them), a delete, or a re-insert of a deleted key. ``mirror --available-now`` over
the files, ``--files-per-trigger`` a batch, the default settings.

Reports what throughput.py does (wall, events/s, peak RSS and CPU seconds of the process tree, the
floor) plus each batch's phases and ``rows_copied`` from the batch log, and checks the mirror against
the generator's own final state (rows, a checksum of every row): a run that mirrors wrong fails.
Not a test; ``make bench`` runs the 5M shape:

    python benchmarks/uniform.py [--events 5000000] [--keys 500000] [--per-file 50000]
                                 [--files-per-trigger 10] [--deletes 0.02]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import floor, run_mirror
from workload import batch_lines, write_messages

REPO = Path(__file__).resolve().parent.parent

TYPES = {
    "id": "bigint(20)",
    "name": "varchar(80)",
    "email": "varchar(120)",
    "balance": "decimal(14,2)",
    "score": "double",
    "visits": "int(11)",
    "created": "datetime(3)",
    "updated": "timestamp(6)",
    "status": "varchar(16)",
    "note": "text",
    "active": "tinyint(1)",
}
SQL_TYPES = {
    "id": -5,
    "name": 12,
    "email": 12,
    "balance": 3,
    "score": 8,
    "visits": 4,
    "created": 93,
    "updated": 93,
    "status": 12,
    "note": -1,
    "active": -6,
}
FIRST = "Anna Bruno Chloé Dmitri Émilie François Grete Hiroshi Ingrid José Katarzyna Lars".split()
FIRST += "Mónica Nikos Olga".split()
FIRST += "Pål Quentin Renée Søren Tomás Ulrike Vítor Wiktoria Xavier Yusuf Zoë 明 Ольга Ahmed Priya".split()
LAST = "Müller García Łukasiewicz O'Brien Nakamura Smith Dubois Ivanova Rossi Kowalski Nguyễn".split()
LAST += "Jensen Öztürk".split()
LAST += "Silva Novák Papadopoulos Fernández Schäfer 山田 Петров Kumar Haddad Lindqvist Costa Walsh".split()
WORDS = (
    "order delivered late customer asked refund parcel damaged address changed Straße café naïve "
    "résumé übermäßig señal przesyłka доставка 配送 подтверждено called twice wants invoice VAT "
    "priority gold silver bronze discount applied coupon expired renewal pending ✓ → €"
).split()
STATUSES = ["active", "suspended", "pending", "closed", "vip"]
ES0 = 1_760_000_000_000


class Generator:
    """The events and the final state they leave (the check)."""

    def __init__(self, keys: int, seed: int = 54) -> None:
        self.rng = random.Random(seed)
        self.keys = keys
        self.rows: dict[int, dict[str, Any]] = {}

    def note(self) -> str:
        rng = self.rng
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))
        return text[: rng.randint(20, 200)]

    def row(self, key: int, n: int) -> dict[str, Any]:
        rng = self.rng
        first, last = rng.choice(FIRST), rng.choice(LAST)
        return {
            "id": str(key),
            "name": f"{first} {last}",
            "email": f"{first.lower()}.{key}@example.com",
            "balance": f"{rng.randint(-5_000_000, 500_000_000) / 100:.2f}",
            "score": repr(rng.random() * 100),
            "visits": str(rng.randint(0, 10_000)),
            "created": f"20{rng.randint(10, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}."
            f"{rng.randint(0, 999):03d}",
            "updated": self.stamp(n),
            "status": rng.choice(STATUSES),
            "note": self.note(),
            "active": str(rng.randint(0, 1)),
        }

    def stamp(self, n: int) -> str:
        seconds, micro = divmod(n * 7919, 1_000_000)
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_760_000_000 + seconds)) + f".{micro:06d}"

    def changed(self, old: dict[str, Any], n: int) -> dict[str, Any]:
        """An update: the timestamp, the balance and visits always, the rest now and then."""
        rng = self.rng
        new = dict(old)
        new["updated"] = self.stamp(n)
        new["balance"] = f"{rng.randint(-5_000_000, 500_000_000) / 100:.2f}"
        new["visits"] = str(int(old["visits"]) + 1)
        if rng.random() < 0.5:
            new["score"] = repr(rng.random() * 100)
        if rng.random() < 0.2:
            new["status"] = rng.choice(STATUSES)
        if rng.random() < 0.2:
            new["note"] = self.note()
        if rng.random() < 0.05:
            new["name"] = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        return new

    def events(self, count: int, deletes: float) -> Any:
        rng = self.rng
        order = list(range(self.keys))
        rng.shuffle(order)
        for n in range(count):
            if n < self.keys:
                key = order[n]
                self.rows[key] = self.row(key, n)
                yield message("INSERT", self.rows[key], None, n)
                continue
            key = rng.randrange(self.keys)
            roll = rng.random()
            if key not in self.rows:  # deleted: this event brings it back
                self.rows[key] = self.row(key, n)
                yield message("INSERT", self.rows[key], None, n)
            elif roll < deletes:
                yield message("DELETE", self.rows.pop(key), None, n)
            else:
                old = self.rows[key]
                new = self.rows[key] = self.changed(old, n)
                yield message("UPDATE", new, {k: v for k, v in old.items() if new[k] != v}, n)


def message(kind: str, data: dict[str, Any], old: dict[str, Any] | None, n: int) -> dict[str, Any]:
    es = ES0 + n // 10
    return {
        "data": [data],
        "database": "shop",
        "es": es,
        "id": n,
        "isDdl": False,
        "mysqlType": TYPES,
        "old": [old] if old is not None else None,
        "pkNames": ["id"],
        "sql": "",
        "sqlType": SQL_TYPES,
        "table": "accounts",
        "ts": es + 3,
        "type": kind,
    }


def write_files(folder: Path, generator: Generator, count: int, per_file: int, deletes: float) -> list[Path]:
    return write_messages(folder, generator.events(count, deletes), per_file)


def fingerprint(rows: list[tuple[str, ...]]) -> str:
    """A checksum of rows given as canonical text tuples, independent of their order."""
    digest = 0
    for r in rows:
        digest ^= int.from_bytes(hashlib.blake2b("\x1f".join(r).encode(), digest_size=8).digest(), "little")
    return f"{digest:016x}"


CHECKED = ["id", "name", "balance", "visits", "status", "note"]


def expected(generator: Generator) -> tuple[int, str]:
    return len(generator.rows), fingerprint([tuple(r[c] for c in CHECKED) for r in generator.rows.values()])


def mirrored(path: Path) -> tuple[int, str]:
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=CHECKED).to_pydict()
    columns = [table[c] for c in CHECKED]
    rows = [
        (str(i), name, f"{balance:.2f}", str(visits), status, note)
        for i, name, balance, visits, status, note in zip(*columns, strict=True)
    ]
    return len(rows), fingerprint(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--per-file", type=int, default=50_000)
    parser.add_argument("--files-per-trigger", type=int, default=10)
    parser.add_argument("--deletes", type=float, default=0.02, help="share of the later events that delete")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "uniform"))
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    started = time.monotonic()
    generator = Generator(args.keys)
    paths = write_files(workdir / "landing", generator, args.events, args.per_file, args.deletes)
    generated = time.monotonic() - started
    os.sync()  # (landed earlier: not written back while the run reads them)
    load = os.getloadavg()[0]
    elapsed, rss, cpu, err = run_mirror(workdir, args.files_per_trigger)
    load = max(load, os.getloadavg()[0])
    (workdir / "mirror.log").write_text(err)
    batches = batch_lines(err)
    if not batches:
        raise SystemExit(f"the job ran no batch:\n{err[-3000:]}")
    want, got = expected(generator), mirrored(workdir / "lake" / "shop" / "accounts")
    floor_s = floor(paths, workdir)
    result = {
        "events": args.events,
        "keys": args.keys,
        "per_file": args.per_file,
        "files_per_trigger": args.files_per_trigger,
        "mirror_rows": got[0],
        "mirror_right": want == got,
        "wall_s": round(elapsed, 2),
        "events_per_s": round(args.events / elapsed),
        "cpu_s_by_process": {k: round(v, 1) for k, v in cpu.items()},
        "cpu_s": round(sum(cpu.values()), 1),
        "peak_rss_mb": round(sum(rss.values()) / 2**20),
        "peak_rss_mb_by_process": {k: round(v / 2**20) for k, v in rss.items()},
        "floor_s": round(floor_s, 2),
        "ratio_to_floor": round(elapsed / floor_s, 1),
        "load_1min_max": round(load, 1),
        "batches": [{"phases_ms": b.get("phases_ms"), "rows_copied": _copied(b)} for b in batches],
        "generate_s": round(generated, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(json.dumps(result, indent=1))
    (workdir / "result.json").write_text(json.dumps(result, indent=1))
    if want != got:
        raise SystemExit(f"the mirror is wrong: {got} against the generator's {want}")


def _copied(batch: dict[str, Any]) -> int:
    return sum(t.get("rows_copied") or 0 for t in (batch.get("tables") or {}).values())


if __name__ == "__main__":
    main()
