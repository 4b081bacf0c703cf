"""Document patches (MongoDB ``$set`` / ``$unset``, dotted paths) applied to JSON text in source order."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


class PatchError(ValueError):
    pass


def _walk(doc: dict[str, Any], path: str, create: bool) -> tuple[dict[str, Any] | None, str]:
    parts = path.split(".")
    node: Any = doc
    for part in parts[:-1]:
        if not isinstance(node, dict):
            return None, parts[-1]
        if part not in node and create:
            node[part] = {}
        node = node.get(part)
    return (node if isinstance(node, dict) else None), parts[-1]


def apply_patch(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply one update spec. Only ``$set`` and ``$unset`` are supported (what DRS emits, seed 003)."""
    unknown = set(patch) - {"$set", "$unset"}
    if unknown:
        raise PatchError(f"unsupported update operators {sorted(unknown)} (only $set and $unset)")
    for path, value in (patch.get("$set") or {}).items():
        parent, leaf = _walk(document, path, create=True)
        if parent is None:
            raise PatchError(f"$set path {path!r} crosses a non-object value")
        parent[leaf] = value
    for path in patch.get("$unset") or {}:
        parent, leaf = _walk(document, path, create=False)
        if parent is not None:
            parent.pop(leaf, None)
    return document


def apply_patches(document_json: str | None, patches: Iterable[str]) -> str | None:
    """JSON text of the document after the patches; None when there is no document to patch."""
    if document_json is None:
        return None
    document = json.loads(document_json)
    for patch in patches:
        document = apply_patch(document, json.loads(patch))
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
