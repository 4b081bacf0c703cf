"""The job-file reference page (docs/reference/job-file.md), generated from the pydantic models of
replicator/config.py: each key's type, default and description come from the models only.

``python -m replicator.commands.reference`` writes the page; ``--check`` fails when the committed page
differs from what the models say (``make docs`` and tests/test_reference.py run the check).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from replicator.config import JobConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "job-file.md"

_HEADER = """\
# Job file reference

<!-- Generated from replicator/config.py by `python -m replicator.commands.reference`; do not edit. -->

Every key of a job file, with its type, default and meaning, as the job file's models declare them
(`replicator/config.py`). Unknown keys are errors. [Configuration](../configuration.md) explains the keys
that need more than a line, with examples.
"""


class MissingDescription(ValueError):
    """A job-file key without a description: the reference would have nothing to say about it."""


def _models(annotation: object) -> list[type[BaseModel]]:
    """The models inside an annotation (``X | None``, ``A | B``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _type_text(annotation: object) -> str:
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"mapping {_type_text(args[0])} -> {_type_text(args[1])}"
    names = {str: "string", int: "integer", bool: "boolean", float: "number", Path: "path"}
    if annotation is dt.timedelta:
        return "duration"
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))  # type: ignore[call-overload]


def _constraints(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        for name, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("pattern", "matches")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} `{value}`" if name == "pattern" else f"{sign} {value}")
    return ", ".join(parts)


def _value_text(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(see its keys)"
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
        for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
            if seconds >= size and seconds % size == 0:
                return f"`{int(seconds // size)} {unit}`"
        return f"`{seconds} seconds`"
    return f"`{json.dumps(value)}`"


def _default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return _value_text(info.default_factory())  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return "required"
    return _value_text(info.default)


def _cell(text: str) -> str:
    """Plain text in a Markdown table cell: no pipes, tags or emphasis."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*").replace("\n", " ")


def _sections(model: type[BaseModel], prefix: str, out: list[str], seen: set[str]) -> None:
    rows, nested = [], []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        key = f"{prefix}{name}"
        if not info.description:
            raise MissingDescription(
                f"{model.__name__}.{name} ({key}): no description in replicator/config.py"
            )
        kind = _type_text(info.annotation)
        limits = _constraints(info)
        kind = f"{kind} ({limits})" if limits else kind
        rows.append(f"| `{key}` | {_cell(kind)} | {_cell(_default_text(info))} | {_cell(info.description)} |")
        listed = typing.get_origin(info.annotation) is list
        nested += [(f"{key}[]" if listed else key, inner) for inner in _models(info.annotation)]
    title = f"`{prefix.rstrip('.')}`" if prefix else "Top level"
    out += [f"## {title}", ""]
    if model.__doc__ and prefix and not model.__doc__.startswith(model.__name__):
        out += [" ".join(model.__doc__.replace("``", "`").split()), ""]
    out += ["| key | type | default | description |", "|---|---|---|---|", *rows, ""]
    for where, inner in nested:
        if where not in seen:
            seen.add(where)
            _sections(inner, f"{where}.", out, seen)


def render() -> str:
    """The reference page's text, from the models."""
    out = [_HEADER]
    _sections(JobConfig, "", out, set())
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replicator.commands.reference", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed page is out of date")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is out of date with replicator/config.py; "
                "run: python -m replicator.commands.reference",
                file=sys.stderr,
            )
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
