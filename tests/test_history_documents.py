"""History tables of document collections (drs-mongo, issue 35 item 3): one version per source change,
each the document as the source had it right after that change, whatever the delivery order, the batch
splits and the redelivery (replicator.apply.history.documents).

The property drives the real history writer (``HistoryTable`` over delta-rs tables in a tmp dir, no Spark)
with decoded events of the model's changes (tests/test_document_merge.py), and compares with the test's
own model: the received changes applied in source order to plain dicts. Huawei DRS «Kafka消息格式»'s messages
go through
the engine (Spark) as the golden example."""

from __future__ import annotations

import copy
import datetime as dt
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.apply.history import HistoryTable, history_path, markers_root
from replicator.apply.table import CDC_FIELDS, TableApplier, TableBatch
from replicator.dialects.events import decoded_schema
from replicator.model import seq_text
from replicator.sinks.delta_rs import DeltaRsWriter
from replicator.state import State, TableState
from tests.helpers import Runner, delta_table, job, write_jsonl
from tests.test_document_merge import deliveries, histories, mirror_after, model_set, model_unset, parse
from tests.test_document_order import KEYS, OID, SEED, message_of, seed

TABLE = ("ljx", None, "ljx")
BOUNDS = ("_cdc_valid_from", "_cdc_valid_to", "_cdc_current")
T0 = dt.datetime(2023, 11, 14, tzinfo=dt.UTC)


def at(position: tuple[int, ...]) -> dt.datetime:
    """A change's event time: a second per step of the model (its DRS id is 100 + step)."""
    return T0 + dt.timedelta(seconds=position[2])


# ---- the model: the received changes in source order -------------------------------------------------------


def model_versions(received: set[tuple], time=at, id_of=lambda key: key) -> list[tuple]:
    """(key, document, valid_from, valid_to, current, op, partial) of every version, by key then source
    order. A patch on no document (its image never received, or after a delete) starts from ``_id`` alone
    and is partial until the next full image."""
    docs: dict[str, dict] = {}
    complete: dict[str, bool] = {}
    versions: dict[str, list[dict]] = {}
    for position, key, kind, payload in sorted(received):
        mine = versions.setdefault(key, [])
        if mine and mine[-1]["current"]:
            mine[-1].update(valid_to=time(position), current=False)
        if kind == "delete":
            docs.pop(key, None)
            complete[key] = False
            continue
        if kind in ("insert", "replace"):
            docs[key], complete[key] = parse(payload), True
        else:
            doc = docs.setdefault(key, {"_id": id_of(key)})
            spec = parse(payload)
            for path, value in (spec.get("$set") or {}).items():
                model_set(doc, path, value)
            for path in spec.get("$unset") or {}:
                model_unset(doc, path)
        mine.append(
            {
                "document": copy.deepcopy(docs[key]),
                "valid_from": time(position),
                "valid_to": None,
                "current": True,
                "op": "insert" if kind == "insert" else "update",
                "partial": not complete.get(key, False),
            }
        )
    return [
        (key, v["document"], v["valid_from"], v["valid_to"], v["current"], v["op"], v["partial"])
        for key in sorted(versions)
        for v in versions[key]
    ]


# ---- the history writer, fed decoded events ---------------------------------------------------------------


class Store:
    """One drs-mongo collection's mirror (schema only: the history reads its columns), history table and
    markers, under ``root``; each :meth:`deliver` is one batch of the history writer."""

    def __init__(self, root: Path) -> None:
        self.state = State(root / "state", "job", DeltaRsWriter, target=root / "lake")
        mirror = str(root / "lake" / "ljx" / "ljx")
        self.table_state = TableState("ljx", None, "ljx", mirror, primary_key=("_id",))
        columns = [pa.field("_id", pa.string(), nullable=False), pa.field("document", pa.string())]
        columns += [pa.field("_cdc_fields", pa.string()), pa.field("_cdc_partial", pa.bool_())]
        DeltaRsWriter(mirror).create(pa.schema([*columns, *CDC_FIELDS]))
        self.batch_id = 0
        self.rng = random.Random(0)

    def events(self, changes: list[tuple], batch_id: int) -> pa.Table:
        """Decoded events as drs-mongo makes them (after / before / meta), delivery coordinates of this
        batch (a redelivery's differ)."""
        schema = decoded_schema()
        rows = []
        for position, key, kind, payload in changes:
            meta = {"mongo_doc": {"patch": "patch", "delete": "delete"}.get(kind, kind)}
            after, before = None, None
            if kind in ("insert", "replace"):
                after = [("_id", key), ("document", payload)]
            elif kind == "patch":
                after, meta["mongo_update"] = [("_id", key)], payload
            else:
                before = [("_id", key)]
            delivery = (batch_id, 7, self.rng.randrange(10**6), 0, 0)
            rows.append(
                {
                    "op": {"insert": "insert", "delete": "delete"}.get(kind, "update"),
                    "after": after,
                    "before": before,
                    "meta": list(meta.items()),
                    "seq_text": seq_text((*position, *delivery)),
                    "event_time": at(position),
                    "position": f"{position[0]}:{position[1]}",
                    "coordinates": {"source": "m.jsonl", "partition": 7, "offset": delivery[2]},
                }
            )
        fields = [schema.field(c) for c in ("op", "after", "before", "meta")]
        fields += [pa.field("seq_text", pa.string())]
        fields += [schema.field(c) for c in ("event_time", "position", "coordinates")]
        return pa.Table.from_pylist(rows, pa.schema(fields))

    def history(self) -> HistoryTable:
        writer = DeltaRsWriter
        mirror = writer(self.table_state.mirror)
        events = self.events([], 0)
        work = TableBatch(TABLE, mirror, events, [], {}, self.table_state)
        applier = TableApplier(work, self.state, self.batch_id)
        root = markers_root(self.state, TABLE)
        return HistoryTable(
            applier,
            writer(history_path(self.table_state.mirror)),
            writer(root / "markers"),
            writer(root / "truncates"),
        )

    def deliver(self, changes: list[tuple], batch_id: int | None = None) -> HistoryTable:
        if batch_id is None:
            batch_id, self.batch_id = self.batch_id, self.batch_id + 1
        history = self.history()
        history.apply(self.events(changes, batch_id), self.state.txn(batch_id))
        return history

    def rows(self) -> list[dict[str, Any]]:
        path = history_path(self.table_state.mirror)
        if not Path(path).exists():
            return []
        rows = delta_table(path, cdc=True).to_pylist()
        return sorted(rows, key=lambda r: (r["_id"], r["_cdc_seq"]))

    def versions(self) -> list[tuple]:
        return [
            (
                r["_id"],
                parse(r["document"]),
                r["_cdc_valid_from"],
                r["_cdc_valid_to"],
                r["_cdc_current"],
                r["_cdc_op"],
                r["_cdc_partial"],
            )
            for r in self.rows()
        ]


@st.composite
def received_deliveries(draw, **kwargs):
    """The model's changes, some full images never received (their patches' documents are partial), the
    rest shuffled, partly redelivered, split into batches."""
    changes, _final = draw(histories(**{"max_steps": 12, **kwargs}))
    rng = random.Random(draw(st.integers(0, 2**32)))
    lose = draw(st.booleans())
    kept = [c for c in changes if not (lose and c[2] in ("insert", "replace") and rng.random() < 0.5)]
    kept = kept or changes[:1]
    return set(kept), draw(deliveries(kept))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=received_deliveries())
def test_history_of_documents_equals_the_model(tmp_path_factory, case):
    """Random documents and patch sequences, lost images, shuffling, redelivery, batch splits: the history
    holds exactly the model's versions (documents field by field, bounds, ops, partial marks), and its
    current versions are the mirror's documents, text for text."""
    received, batches = case
    store = Store(tmp_path_factory.mktemp("hist"))
    for batch in batches:
        store.deliver(batch)
    assert store.versions() == model_versions(received)
    current = {r["_id"]: r["document"] for r in store.rows() if r["_cdc_current"]}
    assert current == mirror_after(batches)


# ---- worked examples -----------------------------------------------------------------------------------


def change(step: int, key: str, kind: str, payload: str | None) -> tuple:
    return ((1_700_000_000, 1, 100 + step), key, kind, payload)


def test_a_late_patch_corrects_the_versions_after_it(tmp_path):
    """The issue's case in history: the replace and the `$set qty` after it are recorded; the `$unset note`
    between them arrives in a later batch: its version lands between them, and the `$set qty` version
    loses `note` (a field the late patch wrote) but keeps `qty` (the later patch's)."""
    store = Store(tmp_path)
    replace = change(1, "d", "replace", '{"_id":"d","status":"PAID","note":"x","qty":1}')
    unset = change(2, "d", "patch", '{"$unset":{"note":true}}')
    set_qty = change(3, "d", "patch", '{"$set":{"qty":2,"note":"y"}}')
    set_status = change(4, "d", "patch", '{"$set":{"status":"SENT"}}')
    store.deliver([set_status, replace, set_qty])
    store.deliver([unset])
    store.deliver([unset, set_qty])  # redelivered: nothing changes
    assert [(v[1], v[5], v[6]) for v in store.versions()] == [
        ({"_id": "d", "status": "PAID", "note": "x", "qty": 1}, "update", False),
        ({"_id": "d", "status": "PAID", "qty": 1}, "update", False),
        ({"_id": "d", "status": "PAID", "qty": 2, "note": "y"}, "update", False),
        ({"_id": "d", "status": "SENT", "qty": 2, "note": "y"}, "update", False),
    ]
    assert [(v[2], v[3], v[4]) for v in store.versions()] == [
        (at(replace[0]), at(unset[0]), False),
        (at(unset[0]), at(set_qty[0]), False),
        (at(set_qty[0]), at(set_status[0]), False),
        (at(set_status[0]), None, True),
    ]


def test_patches_without_their_document_are_partial_versions_counted(tmp_path):
    """A patch for a document never seen opens a partial version (counted); its late insert makes the
    later versions complete."""
    store = Store(tmp_path)
    insert = change(1, "d", "insert", '{"_id":"d","a":1,"b":1}')
    first = change(2, "d", "patch", '{"$set":{"a":2}}')
    second = change(3, "d", "patch", '{"$unset":{"b":true}}')
    assert store.deliver([second, first]).partial_versions == 2
    assert [(v[1], v[6]) for v in store.versions()] == [
        ({"_id": "d", "a": 2}, True),
        ({"_id": "d", "a": 2}, True),
    ]
    assert store.deliver([insert]).partial_versions == 0
    assert [(v[1], v[6]) for v in store.versions()] == [
        ({"_id": "d", "a": 1, "b": 1}, False),
        ({"_id": "d", "a": 2, "b": 1}, False),
        ({"_id": "d", "a": 2}, False),
    ]


def test_a_batch_retried_after_a_failed_rewrite_is_written_once(tmp_path, monkeypatch):
    """A batch whose late patch rewrites stored versions fails after its markers (its delete) were
    appended and before the MERGE; retried, the history equals a run without the failure, and a batch
    replayed after its commit (same batch id) changes nothing."""
    changes = [
        change(1, "d", "insert", '{"_id":"d","a":1}'),
        change(2, "d", "patch", '{"$set":{"b":2}}'),
        change(3, "d", "patch", '{"$set":{"a":3}}'),
        change(4, "d", "delete", None),
    ]
    clean, store = Store(tmp_path / "clean"), Store(tmp_path / "crashed")
    for s in (clean, store):
        s.deliver([changes[0], changes[2]])
    clean.deliver([changes[1], changes[3]])
    original = HistoryTable._merge

    def fail(self, *args):
        raise RuntimeError("killed before the MERGE")

    monkeypatch.setattr(HistoryTable, "_merge", fail)
    with pytest.raises(RuntimeError):
        store.deliver([changes[1], changes[3]], batch_id=1)
    monkeypatch.setattr(HistoryTable, "_merge", original)
    store.deliver([changes[1], changes[3]], batch_id=1)
    assert store.versions() == clean.versions()
    assert store.deliver([changes[1]], batch_id=1).partial_versions == 0  # skipped: applied already
    assert store.versions() == clean.versions()
    assert [(v[1], v[4]) for v in clean.versions()] == [
        ({"_id": "d", "a": 1}, False),
        ({"_id": "d", "a": 1, "b": 2}, False),
        ({"_id": "d", "a": 3, "b": 2}, False),
    ]


# ---- Huawei DRS «Kafka消息格式» through the engine
# --------------------------------------------------------------------------


def es(name: str) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=seed(name)["es"])


@pytest.mark.parametrize(  # (the delta-spark run takes ~40 s: a Spark MERGE per batch)
    "writer", ["delta-rs", pytest.param("delta-spark", marks=[pytest.mark.delta_spark, pytest.mark.slow])]
)
def test_seed_history_newest_first_then_redelivered(spark, tmp_path, writer):
    """Huawei DRS «Kafka消息格式»'s insert, replace, $set, $unset+$set and remove, delivered newest first (a
    batch each: the
    remove first, then patches of a document not seen yet) and then all again: the history is the source's,
    one version per change, the remove closing the last."""
    runner = Runner(
        spark,
        job(
            tmp_path,
            source={"dialect": "drs-mongo"},
            tables={"history": ["ljx.*"]},
            changelog={"enabled": False},
            target={"writer": writer},
        ),
    )
    path = Path(runner.config.target.path) / "ljx" / "ljx__history"
    partial = []
    for name in reversed(SEED):
        summary = runner.messages(tmp_path, [seed(name)])
        partial.append(summary.tables["ljx.ljx"].get("partial_history_versions", 0))
    assert partial == [0, 1, 1, 0, 0]  # the $unset+$set, then the $set: no image yet
    oid = f'{{"$oid":"{OID}"}}'
    expected = [
        (f'{{"_id":{oid},"c1":"baz","tags":["mongodb","database","NoSQL"]}}', "insert"),
        (f'{{"_id":{oid},"c1":"sss"}}', "update"),
        (f'{{"_id":{oid},"c1":"aaa"}}', "update"),
        (f'{{"_id":{oid},"column1":"aaa"}}', "update"),
    ]
    bounds = [(es(SEED[i]), es(SEED[i + 1]), False) for i in range(4)]

    def versions() -> list[tuple]:
        rows = sorted(delta_table(path, cdc=True).to_pylist(), key=lambda r: r["_cdc_seq"])
        return [tuple(r[c] for c in ("_id", "document", "_cdc_op", "_cdc_partial", *BOUNDS)) for r in rows]

    want = [(OID, doc, op, False, *b) for (doc, op), b in zip(expected, bounds, strict=True)]
    assert versions() == want
    before = delta_table(path, cdc=True).to_pylist()
    runner.messages(tmp_path, [seed(n) for n in SEED] * 2)
    assert delta_table(path, cdc=True).to_pylist() == before  # not even a seq moved
    # inserted again after the remove: a new current version equal to the mirror's document
    again = message_of((1684346300, 1, 500), OID, "insert", f'{{"_id":{oid},"n":1.50}}')
    runner.messages(tmp_path, [again, seed("seed003-update-set")])
    assert versions()[:4] == want
    [last] = versions()[4:]
    [row] = runner.mirror(database="ljx", table="ljx")
    assert last[1:4] == (row["document"], "insert", False) == (f'{{"_id":{oid},"n":1.50}}', "insert", False)
    assert last[5:] == (None, True)
    assert runner.dead_letters() == []


def test_seeded_and_legacy_versions_are_kept_as_states():
    """A ``seeded`` version (the mirror's document when history was turned on, its merge state the
    mirror's) stays as it is when older changes arrive late or its own change is redelivered; a later
    patch applies to its document. A version written before documents had history (no ``_cdc_fields``)
    counts as a full image."""
    from replicator.apply.history import documents as history_documents

    def seq(step: int, batch: int = 0) -> str:
        return seq_text((1_700_000_000, 1, 100 + step, batch, 0, 0, 0, 0))

    def stored(step: int, op: str, document: str, fields: str | None) -> history_documents.Change:
        row = {
            "_id": "d",
            "document": document,
            "_cdc_fields": fields,
            "_cdc_partial": None if fields is None else False,
            "_cdc_seq": seq(step),
            "_cdc_op": op,
            "_cdc_valid_from": at((0, 0, step)),
        }
        return history_documents.stored_change(row)

    def batch(step: int, op: str, patch: str | None = None, image: str | None = None):
        return history_documents.Change(
            seq(step, 9), op, at((0, 0, step)), image=image and parse(image), patch=patch and parse(patch)
        )

    mirror_state = '{"base":[1700000000,1,101],"kind":"image",'
    mirror_state += '"patches":[[[1700000000,1,105],{"$set":{"a":5}}]],"image":{"_id":"d","a":1}}'
    legacy = stored(1, "insert", '{"_id":"d","a":1}', None)
    seeded = stored(5, "seeded", '{"_id":"d","a":5}', mirror_state)
    late = batch(3, "update", patch='{"$set":{"b":3}}')
    again = batch(5, "update", patch='{"$set":{"a":5}}')
    later = batch(7, "update", patch='{"$set":{"c":7}}')
    versions = history_documents.chain("d", [later, again, seeded, late, legacy])
    assert [(v.op, parse(v.row["document"]), v.current) for v in versions] == [
        ("insert", {"_id": "d", "a": 1}, False),
        ("update", {"_id": "d", "a": 1, "b": 3}, False),
        ("seeded", {"_id": "d", "a": 5}, False),
        ("update", {"_id": "d", "a": 5, "c": 7}, True),
    ]
    assert versions[0].row["_cdc_fields"] is None  # the oldest: kept as stored
    assert versions[2].row["_cdc_fields"] == mirror_state and versions[2].seq == seq(5)
    assert parse(versions[3].row["_cdc_fields"]) == {
        "base": [1700000000, 1, 101],
        "kind": "image",
        "patch": {"$set": {"c": 7}},
    }


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=received_deliveries(keys=KEYS, id_of=lambda key: {"$oid": key}, min_steps=6, max_steps=10))
def test_engine_history_of_shuffled_and_redelivered_streams(spark, case):
    """The property through the engine (DRS messages in files, a few per batch in random file order): the
    history table holds the model's versions, with the messages' event times."""
    received, batches = case
    tmp = Path(tempfile.mkdtemp())
    try:
        config = job(
            tmp, source={"dialect": "drs-mongo"}, tables={"history": ["ljx.*"]}, changelog={"enabled": False}
        )
        runner = Runner(spark, config)
        for i, batch in enumerate(batches):
            folder = tmp / f"in-{i}"
            rng = random.Random(i)
            for j in range(0, len(batch), 3):
                write_jsonl(
                    folder / f"{rng.randrange(10**6):06d}-{j}.jsonl",
                    [message_of(*c) for c in batch[j : j + 3]],
                )
            runner.batch(folder)
        assert runner.dead_letters() == []
        path = tmp / "lake" / "ljx" / "ljx__history"
        rows = sorted(delta_table(path, cdc=True).to_pylist(), key=lambda r: (r["_id"], r["_cdc_seq"]))
        columns = (*BOUNDS, "_cdc_op", "_cdc_partial")
        got = [(r["_id"], parse(r["document"]), *(r[c] for c in columns)) for r in rows]
        want = model_versions(received, time=lambda p: es_of(p[0]), id_of=lambda key: {"$oid": key})
        assert got == want
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def es_of(secs: int) -> dt.datetime:
    """message_of's event time: the position's seconds (es = secs * 1000)."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=secs)


def test_replay_as_of_a_time_rebuilds_the_history_of_documents(spark, tmp_path):
    """``replay --as-of`` over the change log of a shuffled, partly redelivered stream (three batches): the
    history as of each cut holds the versions of the changes up to it, by the same rule."""
    from replicator.commands.replay import replay
    from tests.test_document_order import _history

    changes = _history(OID)
    config = job(tmp_path, source={"dialect": "drs-mongo"}, tables={"history": ["ljx.*"]})
    runner = Runner(spark, config)
    for batch in ([7, 2, 0], [4, 1, 6, 2], [3, 5, 0]):
        runner.messages(tmp_path, [message_of(*changes[i]) for i in batch])

    def model(upto: int) -> list[tuple]:
        received = {c for c in changes if c[0][0] <= upto}
        return model_versions(received, time=lambda p: es_of(p[0]), id_of=lambda key: {"$oid": key})

    def versions(path: Path) -> list[tuple]:
        rows = sorted(delta_table(path, cdc=True).to_pylist(), key=lambda r: r["_cdc_seq"])
        columns = (*BOUNDS, "_cdc_op", "_cdc_partial")
        return [(r["_id"], parse(r["document"]), *(r[c] for c in columns)) for r in rows]

    assert versions(tmp_path / "lake" / "ljx" / "ljx__history") == model(10**10)
    for cut in (2, 5, 6):
        secs = changes[cut][0][0]
        out = tmp_path / f"out-{cut}"
        replay(runner.config, out, as_of=str(secs * 1000))
        assert versions(out / "ljx" / "ljx__history") == model(secs), cut
