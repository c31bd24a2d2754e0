"""ClearML stays in its own modules: generic code never imports them, and its leaves import nothing of ours.

Reads the source (every import, module level or inside a function), imports no clearml. Import
cycles across the whole package are ``tests/test_structure.py``'s.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tracker_saver.integrations.clearml.registry import ClearMLRegistry
from tracker_saver.registry import Registry
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.save.saver import RunContext

PACKAGE = Path(__file__).resolve().parents[1] / "tracker_saver"

#: The ClearML integration: its public face and its one package (tracker_saver.integrations.clearml).
CLEARML = ("tracker_saver.clearml", "tracker_saver.integrations")
#: Leaves: they import nothing of tracker_saver, so nothing can cycle through them.
LEAVES = ("tracker_saver.integrations.clearml.binding", "tracker_saver.integrations.clearml.conf")


def _is_clearml(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in CLEARML)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The tracker_saver modules ``module`` imports anywhere in its source (with the packages on the way)."""
    base = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            src = node.module or ""
            if node.level:
                parent = base.split(".")[: len(base.split(".")) - node.level + 1]
                src = ".".join([*parent, *([node.module] if node.module else [])])
            names.add(src)
            names.update(f"{src}.{a.name}" for a in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(p for p in (".".join(parts[: i + 1]) for i in range(len(parts))) if p in known)
    # a submodule runs its package's __init__ first; that is not a dependency worth a cycle
    return {m for m in found if m != module and not module.startswith(m + ".")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def test_generic_code_never_imports_the_clearml_integration() -> None:
    graph = _graph()
    leaks = {(m, d) for m, deps in graph.items() if not _is_clearml(m) for d in deps if _is_clearml(d)}
    # The one exception, imported lazily: `tracker-saver sync` runs the offline sync (its own module,
    # not the tracker_saver.clearml face, which also loads the drop-in saver and torch). The registry
    # backends are named in registry.BACKENDS by module path and imported by importlib, never here.
    sync = "tracker_saver.integrations.clearml.sync"  # with the packages on the way to it
    assert leaks == {("tracker_saver.cli.sync", p) for p in (sync, sync.rsplit(".", 1)[0], sync.rsplit(".", 2)[0])}


def test_the_clearml_leaves_import_nothing_of_tracker_saver() -> None:
    graph = _graph()
    for leaf in LEAVES:
        assert graph[leaf] == set(), leaf


def test_tracker_policy_is_not_on_the_registry_seam() -> None:
    """A task's defaults and clearml.conf credentials reach the saver through ``RunContext``, not ``Registry``."""
    for name in ("run_defaults", "storage_options_for", "guard_writes"):
        assert not hasattr(Registry, name), name
    assert issubclass(ClearMLRegistry, RunContext)
    assert not issubclass(SQLiteRegistry, RunContext)
