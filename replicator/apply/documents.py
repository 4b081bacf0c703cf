"""Documents (drs-mongo) that converge whatever the delivery order: a field remembers the source position
that wrote it.

DRS sends a MongoDB document's changes as full images (``insert``, ``replace``), deletes and patches
(``$set`` / ``$unset`` of dotted paths; Huawei DRS «Kafka消息格式»). A mirror that let the newest message win
per key was
wrong as soon as a message came late or twice (issue 35). So each stored document keeps, in its
``_cdc_fields`` column, the state a change is merged into:

- ``base``: the source position of the newest full image or delete, ``kind`` (``image`` / ``delete``;
  none while only patches were seen) and, while patches follow it, the ``image`` itself;
- ``patches``: the patches newer than ``base``, each with its position.

The document is the image with those patches applied in position order. A full image older than ``base``
changes nothing; a newer one becomes the base and drops the patches older than itself (fields a newer patch
wrote stay as that patch wrote them); a patch older than ``base`` changes nothing, a newer one joins the
patches (where it falls in position order: a field written by a newer patch stays as that one wrote it);
a delete is a full image of no document. The state is a function of the set of changes seen, not of
their order: redelivering or reordering changes nothing. A document exists when its newest change is not
a delete; it is *partial* (``_cdc_partial``) while no full image older than its patches was seen.
Patches are kept whole, not as a position per field, because a ``$set`` of ``a.b`` also creates ``a``: a
later ``$unset`` of ``a.b`` leaves ``{}`` in the source, which only a replay in order reproduces.

Positions are the source's (clusterTime seconds, increment, DRS id): the seq without its delivery
coordinates. Numbers stay as written (``replicator.dialects.jsontext``: ``1.50`` stays ``1.50``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from replicator.dialects.jsontext import dumps, loads_exact

FIELDS = "_cdc_fields"  # the document's merge state (JSON)
PARTIAL = "_cdc_partial"  # true while the document was built from patches without its full image
COLUMN_TYPES = {FIELDS: "json", PARTIAL: "boolean"}  # source types of the two columns (replicator.types)
IMAGE = "image"
DELETE = "delete"
_OBJECT_ID = re.compile(r"^[0-9a-fA-F]{24}$")

Position = tuple[int, ...]


class PatchError(ValueError):
    pass


def loads(text: str) -> Any:
    """JSON text -> Python values, numbers with a fraction or exponent kept as written."""
    return loads_exact(text)


def id_value(key: str) -> Any:
    """The ``_id`` column's text (an ObjectId's 24 hex digits, else the id's JSON text) -> its JSON value."""
    if _OBJECT_ID.match(key):
        return {"$oid": key}
    try:
        return loads(key)
    except ValueError:
        return key


# ---- patches ---------------------------------------------------------------------------------------------
def _child(node: Any, part: str, create: bool) -> Any:
    if isinstance(node, list) and part.isdigit():
        index = int(part)
        if index < len(node):
            if create and not isinstance(node[index], dict | list):
                node[index] = {}
            return node[index]
        if not create:
            return None
        node.extend([None] * (index - len(node)))
        node.append({})
        return node[index]
    if not isinstance(node, dict):
        return None
    if create and not isinstance(node.get(part), dict | list):
        # A scalar in the way is replaced: in the source it was an object by then (a change that made it
        # one has not arrived yet; when it does, it is merged before this one by position).
        node[part] = {}
    return node.get(part)


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node: Any = document
    for part in parts[:-1]:
        node = _child(node, part, create=True)
    leaf = parts[-1]
    if isinstance(node, list) and leaf.isdigit():
        index = int(leaf)
        node.extend([None] * (index + 1 - len(node)))  # MongoDB pads an array with nulls
        node[index] = copy.deepcopy(value)
    elif isinstance(node, dict):
        node[leaf] = copy.deepcopy(value)


def unset_path(document: dict[str, Any], path: str) -> None:
    parts = path.split(".")
    node: Any = document
    for part in parts[:-1]:
        node = _child(node, part, create=False)
        if node is None:
            return
    leaf = parts[-1]
    if isinstance(node, dict):
        node.pop(leaf, None)
    elif isinstance(node, list) and leaf.isdigit() and int(leaf) < len(node):
        node[int(leaf)] = None  # $unset of an array element leaves null (MongoDB)


def patch_ops(patch: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """An update spec -> (path, ``set``/``unset``, value). Only ``$set`` and ``$unset`` (what DRS emits)."""
    if not isinstance(patch, dict):
        raise PatchError("an update spec must be a JSON object")
    unknown = set(patch) - {"$set", "$unset"}
    if unknown:
        raise PatchError(f"unsupported update operators {sorted(unknown)} (only $set and $unset)")
    ops: list[tuple[str, str, Any]] = []
    for name, kind in (("$set", "set"), ("$unset", "unset")):
        spec = patch.get(name) or {}
        if not isinstance(spec, dict):
            raise PatchError(f"{name} must be a JSON object")
        ops += [(path, kind, value if kind == "set" else None) for path, value in spec.items()]
    return ops


def apply_patch(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply one update spec in place (and return the document)."""
    for path, kind, value in patch_ops(patch):
        if kind == "set":
            set_path(document, path, value)
        else:
            unset_path(document, path)
    return document


def apply_patches(document_json: str | None, patches: Iterable[str]) -> str | None:
    """JSON text of the document after the patches, in order; None when there is no document to patch."""
    if document_json is None:
        return None
    document = loads(document_json)
    for patch in patches:
        document = apply_patch(document, loads(patch))
    return dumps(document)


def document_text(key: str, document: dict[str, Any]) -> str:
    """A document's JSON text as the mirror writes it: ``_id`` first when the document has none (a partial
    document built from patches)."""
    if "_id" not in document:
        document = {"_id": id_value(key), **document}
    return dumps(document)


# ---- the merge state -------------------------------------------------------------------------------------
@dataclass
class Document:
    """One document's merge state (see the module's docstring): the newest full image or delete (``base``,
    ``kind``, ``image``) and the patches newer than it, by source position. The document is the image with
    the patches applied in position order: the source's own replay, whatever order they came in."""

    key: str
    base: Position = ()
    kind: str | None = None
    image: dict[str, Any] | None = None
    patches: dict[Position, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def stored(cls, key: str, document: str | None, fields: str | None, seq: Position) -> Document:
        """From the mirror's row; a row written before the merge state existed counts as a full image at
        its ``_cdc_seq``."""
        if not fields:
            return cls(key, seq, IMAGE, loads(document) if document is not None else None)
        state = loads(fields)
        kind = state.get("kind")
        patches = {tuple(p): spec for p, spec in state.get("patches") or []}
        image = state.get("image") if patches else (loads(document) if document is not None else None)
        return cls(key, tuple(state.get("base") or ()), kind, image if kind == IMAGE else None, patches)

    @classmethod
    def tombstone(cls, key: str, seq: Position) -> Document:
        """A deleted document (its key's tombstone)."""
        return cls(key, seq, DELETE)

    # ---- what it is ----
    def newest(self) -> Position:
        return max([self.base, *self.patches])

    def exists(self) -> bool:
        return bool(self.patches) or self.kind == IMAGE

    def partial(self) -> bool:
        return self.exists() and self.kind != IMAGE

    def fields_json(self) -> str:
        state: dict[str, Any] = {"base": list(self.base), "kind": self.kind}
        if self.patches:
            state["patches"] = [[list(p), self.patches[p]] for p in sorted(self.patches)]
            if self.image is not None:  # (without patches, the document is the image)
                state["image"] = self.image
        return dumps(state)

    def document_json(self) -> str | None:
        if not self.exists():
            return None
        doc = copy.deepcopy(self.image) if self.image is not None else {}
        for position in sorted(self.patches):
            apply_patch(doc, self.patches[position])
        return document_text(self.key, doc)

    def fingerprint(self) -> tuple[Any, ...]:
        return (self.exists(), self.fields_json())

    # ---- changes ----
    def full(self, position: Position, image: dict[str, Any] | None) -> None:
        """A full image (``None``: a delete) at ``position``."""
        if position <= self.base:
            return
        self.base, self.kind = position, IMAGE if image is not None else DELETE
        self.image = image
        self.patches = {p: spec for p, spec in self.patches.items() if p > position}

    def patch(self, position: Position, patch: dict[str, Any]) -> None:
        """A ``$set`` / ``$unset`` spec at ``position``."""
        patch_ops(patch)  # refuses what is not an update spec of $set / $unset
        if position > self.base:
            self.patches[position] = patch
