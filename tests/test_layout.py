"""The package follows the data flow: its imports point one way (docs: README "Layout").

Every ``import`` of every module is read with ``ast``: top level, inside functions, under TYPE_CHECKING.
A stage may import the stages before it and never one after it, so that a reader can follow a batch top to
bottom: helpers < state < sources < decode < fold < apply < engine < commands. Inside ``apply`` the
modules are ordered the same way, and ``fold.arrow`` (the Arrow fold) does not import the Spark stages
around it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "replicator"

STAGES = ("helpers", "state", "sources", "decode", "fold", "apply", "engine", "commands")

# The first name under ``replicator.`` -> its stage. A new module must be placed here.
STAGE_OF = {
    **dict.fromkeys(
        (
            "model",
            "config",
            "types",
            "ddl",
            "defaults",
            "changes",
            "logging",
            "sinks",
            "dialects",
            "positions",
            "spark",
            "cluster",
            "broker",
            "kafka_reader",
            "e2e",
            "jars",
            "errors",
            "pythonpath",
            "worker_daemon",
            "paths",
            "jsonl",
            "storage",
            "testing",
            "columns",
        ),
        "helpers",
    ),
    "state": "state",
    **dict.fromkeys(("sources", "kafka_topics"), "sources"),
    **dict.fromkeys(("decode", "payload", "routing", "exchange"), "decode"),
    "fold": "fold",
    **dict.fromkeys(("apply", "catalog"), "apply"),
    "engine": "engine",
    "commands": "commands",
}

# Order inside a package; ``__init__`` (the package itself) comes last: it re-exports its modules.
INSIDE = {
    "apply": (
        "documents",
        "declared_types",
        "tombstones",
        "row_types",
        "table",
        "barriers",
        "schema",
        "phases",
        "history",
    ),
    "fold": ("unavailable", "arrow"),
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, wherever it stands."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # ``from replicator import payload`` imports the module replicator.payload
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.append((node.lineno, name if is_module(name, root) else base))
    return sorted({(line, name) for line, name in found if name.split(".")[0] == root.name})


def rank(name: str, root: Path) -> tuple[int, int] | None:
    """(stage, place inside the stage's package) of a module, None for the top package itself."""
    parts = name.split(".")[1:]
    if not parts:
        return None
    head = parts[0]
    if head not in STAGE_OF:
        if (root / f"{head}.py").exists() or (root / head).is_dir():
            raise AssertionError(
                f"{root.name}.{head} is in no stage: add it to STAGE_OF in tests/test_layout.py"
            )
        return None  # a name imported from the package, not a module
    order = INSIDE.get(head)
    place = 0
    if order is not None:
        place = order.index(parts[1]) if len(parts) > 1 and parts[1] in order else len(order)
    return STAGES.index(STAGE_OF[head]), place


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        mine = rank(me, root)
        if mine is None:
            continue
        for line, name in imports(path, root):
            theirs = rank(name, root)
            if theirs is None or name == me:
                continue
            same_package = theirs[0] == mine[0] and name.split(".")[1] == me.split(".")[1]
            later = theirs > mine if same_package else theirs[0] > mine[0]
            if later:
                found.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return found


def test_imports_follow_the_data_flow() -> None:
    assert violations(ROOT) == []


def test_every_module_has_a_stage() -> None:
    for path in ROOT.rglob("*.py"):
        rank(module_name(path, ROOT), ROOT)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # the former circle: a schema change imported the engine's error, the engine imports apply
        (
            {
                "engine.py": "from replicator.apply import x\n",
                "apply/__init__.py": "from replicator.engine import E\n",
            },
            ["replicator/apply/__init__.py:1 imports replicator.engine"],
        ),
        # function-level and TYPE_CHECKING imports count too
        (
            {
                "fold/__init__.py": "def f():\n    from replicator.apply.table import T\n",
                "apply/table.py": "",
                "engine.py": "",
                "state.py": "if TYPE_CHECKING:\n    from replicator import engine\n",
            },
            [
                "replicator/fold/__init__.py:2 imports replicator.apply.table",
                "replicator/state.py:2 imports replicator.engine",
            ],
        ),
        # inside apply: the applier does not import what runs after it
        (
            {
                "apply/table.py": "def f():\n    from replicator.apply.schema import S\n",
                "apply/schema.py": "",
            },
            ["replicator/apply/table.py:2 imports replicator.apply.schema"],
        ),
        # the Arrow fold does not import the package around it; the reverse is fine
        (
            {
                "fold/__init__.py": "from replicator.fold.arrow import fold\n",
                "fold/arrow.py": "from replicator.fold import x\n",
            },
            ["replicator/fold/arrow.py:1 imports replicator.fold"],
        ),
    ],
)
def test_a_later_import_is_found(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    root = write(tmp_path / "replicator", {"__init__.py": "", **files})
    assert violations(root) == expected
