"""drs-mongo documents converge whatever the delivery order (issue 35): the merge state
(replicator.apply.documents) against an independent model of the source, and numbers kept as written.

The model below is the test's own: it applies the source's changes in source order to plain dicts."""

from __future__ import annotations

import json
import random
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.apply import documents

# ---- the source: an independent model --------------------------------------------------------------------


class Dec(str):
    """A JSON number with a fraction, as written."""

    __slots__ = ()


def render(value) -> str:
    """JSON text with Dec numbers written as they are."""
    if isinstance(value, Dec):
        return str.__str__(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def parse(text: str):
    return json.loads(text, parse_float=Dec)


FIELDS = ["a", "b", "c", "meta.x", "meta.y"]
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).map(lambda d: Dec(format(d, "f"))),
)
values = st.one_of(
    numbers, st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(), max_size=3)
)


def model_set(doc: dict, path: str, value) -> None:
    head, _, rest = path.partition(".")
    if rest:
        if not isinstance(doc.get(head), dict):
            doc[head] = {}
        doc[head][rest] = value
    else:
        doc[head] = value


def model_unset(doc: dict, path: str) -> None:
    head, _, rest = path.partition(".")
    if rest:
        if isinstance(doc.get(head), dict):
            doc[head].pop(rest, None)
    else:
        doc.pop(head, None)


@st.composite
def histories(draw, keys=("k1", "k2", "k3"), max_steps=14, id_of=lambda key: key, min_steps=1):
    """The source's changes in order: (position, key, kind, payload), and the final documents (``_id``:
    ``id_of(key)``)."""
    docs: dict[str, dict] = {}
    changes = []
    for step in range(draw(st.integers(min_steps, max_steps))):
        key = draw(st.sampled_from(keys))
        position = (1_700_000_000 + step // 3, step % 3 + 1, 100 + step)
        if key not in docs:
            kind = "insert"
        else:
            kind = draw(st.sampled_from(["replace", "patch", "patch", "patch", "delete"]))
        if kind in ("insert", "replace"):
            body = {f: draw(values) for f in draw(st.sets(st.sampled_from(["a", "b", "c"])))}
            if draw(st.booleans()):
                body["meta"] = {"x": draw(values)}
            docs[key] = {"_id": id_of(key), **body}
            changes.append((position, key, kind, render(docs[key])))
        elif kind == "delete":
            del docs[key]
            changes.append((position, key, kind, None))
        else:
            sets = {p: draw(values) for p in draw(st.sets(st.sampled_from(FIELDS), max_size=2))}
            unsets = {p: True for p in draw(st.sets(st.sampled_from(FIELDS), max_size=2)) if p not in sets}
            if any(p.startswith("meta.") for p in sets) and any(p == "meta" for p in unsets):
                unsets.pop("meta")
            if not sets and not unsets:
                sets = {"a": draw(values)}
            for p, v in sets.items():
                model_set(docs[key], p, v)
            for p in unsets:
                model_unset(docs[key], p)
            spec = {**({"$set": sets} if sets else {}), **({"$unset": unsets} if unsets else {})}
            changes.append((position, key, kind, render(spec)))
    return changes, docs


@st.composite
def deliveries(draw, changes, min_batches=1):
    """The changes shuffled, some delivered more than once, split into micro-batches."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    delivered = list(changes) + [c for c in changes if rng.random() < 0.3]
    rng.shuffle(delivered)
    splits = draw(st.integers(min_batches - 1, 3))
    cuts = sorted(rng.sample(range(1, len(delivered)), min(len(delivered) - 1, splits)))
    return [delivered[i:j] for i, j in zip([0, *cuts], [*cuts, len(delivered)], strict=True)]


# ---- the mirror's side: the merge state, stored between batches as the mirror stores it ------------------


def mirror_after(batches) -> dict[str, dict]:
    """Each batch merges its changes into the stored rows (document, _cdc_fields, seq) or tombstones."""
    rows: dict[str, tuple[str, str, tuple]] = {}
    tombstones: dict[str, tuple] = {}
    for batch in batches:
        states: dict[str, documents.Document] = {}
        for position, key, kind, payload in batch:
            if key not in states:
                if key in rows:
                    states[key] = documents.Document.stored(key, *rows[key])
                elif key in tombstones:
                    states[key] = documents.Document.tombstone(key, tombstones[key])
                else:
                    states[key] = documents.Document(key)
            state = states[key]
            if kind == "patch":
                state.patch(position, documents.loads(payload))
            else:
                state.full(position, documents.loads(payload) if payload is not None else None)
        for key, state in states.items():
            if state.exists():
                rows[key] = (state.document_json(), state.fields_json(), state.newest())
                tombstones.pop(key, None)
            else:
                rows.pop(key, None)
                if state.base:
                    tombstones[key] = state.base
    return {key: row[0] for key, row in rows.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_documents_converge_whatever_the_order_and_redelivery(data):
    changes, final = data.draw(histories())
    batches = data.draw(deliveries(changes))
    mirror = mirror_after(batches)
    # field by field, numbers compared as the texts they were written as (Dec)
    assert {key: parse(text) for key, text in mirror.items()} == {
        key: parse(render(doc)) for key, doc in final.items()
    }


@settings(max_examples=200, deadline=None)
@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=None),
    st.integers(min_value=-(10**40), max_value=10**40),
)
def test_numbers_keep_every_digit(decimal: Decimal, integer: int):
    """Any size and scale: a document's numbers are written back as the source wrote them."""
    number = format(decimal, "f")
    text = f'{{"_id":"x","n":{number},"i":{integer},"keep":1.50}}'
    assert documents.apply_patches(text, [f'{{"$set":{{"m":{number}}}}}']) == (
        f'{{"_id":"x","n":{number},"i":{integer},"keep":1.50,"m":{number}}}'
    )
    state = documents.Document("x")
    state.full((1,), documents.loads(text))
    state.patch((2,), documents.loads(f'{{"$set":{{"meta.m":{number}}}}}'))
    assert state.document_json() == text[:-1] + f',"meta":{{"m":{number}}}}}'
    again = documents.Document.stored("x", state.document_json(), state.fields_json(), state.newest())
    assert again.fields_json() == state.fields_json() and again.document_json() == state.document_json()


def test_apply_patches_keeps_numbers_exact():
    """The issue's examples: 1.50 stayed 1.5 and 12345678901234567890.12 became 1.2345678901234567e+19."""
    out = documents.apply_patches('{"_id":"x","p":1.50}', ['{"$set":{"q":12345678901234567890.12}}'])
    assert out == '{"_id":"x","p":1.50,"q":12345678901234567890.12}'
