"""The file tree draws the architecture: a few rooms, arrows that only point down, one table per seam.

The rules of issue 43, read from the source (every import, lazy ones included), so a change that
breaks the drawing fails here with the module that broke it.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

from tests.test_structure import PACKAGE, _modules
from tests.test_structure import _graph as _read_graph
from tracker_saver import registry, storage
from tracker_saver.registry.base import Labels, RecordStore, Registry, StreamClaims

#: The floors, lowest first: a module imports only from its own floor or below.
FLOORS = {
    "core": 0,
    "storage": 1,
    "registry": 1,
    "lifecycle": 2,
    "save": 3,
    **dict.fromkeys(("find", "models", "resume_run", "fsck", "logs", "saver"), 4),
    "integrations": 5,
    **dict.fromkeys(("clearml", "cli", "ui", "__main__"), 6),
}
#: Modules kept only so that an import path of an earlier release keeps working: each re-exports the
#: names from their new home (which may be a floor up), and nothing in the package imports them.
OLD_PATHS = {"tracker_saver.registry.history", "tracker_saver.registry.webhooks"}
#: Top-level modules kept only so that today's imports keep working (``from tracker_saver.saver import …``).
STUBS = {"saver.py"}
#: The most entries tracker_saver/ may hold besides py.typed and the stubs.
MAX_TOP = 16


@functools.cache
def _graph() -> dict[str, set[str]]:
    """The package's imports, read once for all the tests here (reading them costs most of a CPU second)."""
    return _read_graph()


def _room(module: str) -> str:
    """``tracker_saver.save.pipeline`` → ``save``; ``tracker_saver`` itself → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _upward(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for module, deps in graph.items():
        if not _room(module) or module in OLD_PATHS:
            continue  # the package's __init__ re-exports from every floor; an old path, from its names' new home
        for dep in deps:
            if _room(dep) and FLOORS[_room(dep)] > FLOORS[_room(module)]:
                arrows.append(f"{module} -> {dep}")
    return sorted(arrows)


def test_the_top_level_holds_at_most_16_rooms() -> None:
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name not in ("py.typed", "__pycache__", *STUBS))
    assert len(entries) <= MAX_TOP, entries
    assert {p.removesuffix(".py") for p in entries} - {"__init__"} == set(FLOORS) - {
        s.removesuffix(".py") for s in STUBS
    }


def test_every_folder_says_its_job_in_its_init() -> None:
    for folder in [p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))]:
        init = folder / "__init__.py"
        assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), folder


def test_no_import_runs_up_a_floor() -> None:
    assert _upward(_graph()) == []


def test_the_lifecycle_sits_above_the_registry_and_storage_and_below_the_saver() -> None:
    assert FLOORS["registry"] == FLOORS["storage"] < FLOORS["lifecycle"] < FLOORS["save"] < FLOORS["cli"]
    graph = _graph()
    lifecycle = {dep for module, deps in graph.items() if _room(module) == "lifecycle" for dep in deps}
    assert {_room(dep) for dep in lifecycle} <= {"core", "storage", "registry", "lifecycle"}
    assert any(_room(dep) == "lifecycle" for dep in graph["tracker_saver.save.pipeline"])


def test_an_old_import_path_only_re_exports_and_nothing_imports_it() -> None:
    graph = _graph()
    for old in OLD_PATHS:
        tree = ast.parse(_modules()[old].read_text())
        kinds = {type(node).__name__ for node in tree.body}
        assert kinds <= {"Expr", "ImportFrom", "Assign"}, old  # a docstring, the imports, __all__
        assert [m for m, deps in graph.items() if old in deps] == [], old


def test_storage_and_the_registry_never_import_each_other() -> None:
    graph = _graph()
    crossing = {(m, d) for m, deps in graph.items() for d in deps if {_room(m), _room(d)} == {"storage", "registry"}}
    assert crossing == set(), "storage never sees records; the registry never touches bytes"


def test_the_floor_check_finds_an_arrow_up() -> None:
    graph = {"tracker_saver.core.naming": {"tracker_saver.save.slots"}, "tracker_saver.save.slots": set()}
    assert _upward(graph) == ["tracker_saver.core.naming -> tracker_saver.save.slots"]


#: Who may import a backend module: its own seam package, and the integration that is the backend
#: (the ClearML journal is a SQLite registry: ``class ClearMLJournal(SQLiteRegistry)``).
BACKEND_IMPORTERS = {
    "tracker_saver.registry.sqlite": ("tracker_saver.registry", "tracker_saver.integrations.clearml"),
    "tracker_saver.integrations.clearml.registry": ("tracker_saver.integrations.clearml",),
    "tracker_saver.integrations.mlflow.registry": ("tracker_saver.integrations.mlflow",),
    "tracker_saver.storage.local": ("tracker_saver.storage",),
    "tracker_saver.storage.s3": ("tracker_saver.storage",),
}


@pytest.mark.parametrize(("table", "opener"), [(registry.BACKENDS, "from_spec"), (storage.BACKENDS, "from_uri")])
def test_each_seam_opens_its_backends_from_one_table(table: dict[str, object], opener: str) -> None:
    for backend in table.values():
        module = importlib.import_module(backend.module)  # type: ignore[attr-defined]
        assert callable(getattr(module, opener)), backend
        assert backend.module in BACKEND_IMPORTERS  # type: ignore[attr-defined]


def test_nothing_but_the_table_imports_a_backend() -> None:
    graph = _graph()
    stray = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        for backend, allowed in BACKEND_IMPORTERS.items()
        if (dep == backend or dep.startswith(backend + ".")) and not module.startswith(allowed)
    )
    assert stray == [], "open a backend through registry.open_registry / storage.open_storage"


#: Classes that may derive from a class of another of our files: the seams' ABCs, and the public
#: subclasses users rely on (the drop-in ClearMLSaver is a TrackerSaver; the offline journal is a registry).
SEAM_BASES = {
    "tracker_saver.registry.base.Registry",
    "tracker_saver.registry.base.RecordStore",
    "tracker_saver.registry.base.Labels",
    "tracker_saver.registry.base.StreamClaims",
    "tracker_saver.storage.base.Storage",
    "tracker_saver.storage.base.StagedWrite",
}
PUBLIC_SUBCLASSES = {
    "tracker_saver.integrations.clearml.saver.ClearMLSaver": "tracker_saver.save.saver.TrackerSaver",
    "tracker_saver.integrations.clearml.journal.ClearMLJournal": "tracker_saver.registry.sqlite.SQLiteRegistry",
}


def test_no_class_inherits_from_another_files_class_but_a_seam() -> None:
    towers = []
    for name in _modules():
        module = importlib.import_module(name)
        for cls in [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]:
            for base in cls.__bases__:
                qualified = f"{base.__module__}.{base.__qualname__}"
                if not base.__module__.startswith("tracker_saver") or base.__module__ == name:
                    continue
                if issubclass(base, BaseException) or qualified in SEAM_BASES:
                    continue  # the error tree, and the seams' ABCs
                if PUBLIC_SUBCLASSES.get(f"{name}.{cls.__qualname__}") != qualified:
                    towers.append(f"{name}.{cls.__qualname__}({qualified})")
    assert towers == [], "hold a collaborator instead of inheriting from another file's class"


#: A registry's parts: the attribute each backend sets, and the ABC (registry/base.py) its object derives from.
PARTS: dict[str, type] = {"records": RecordStore, "labels": Labels, "claims": StreamClaims}
#: Methods that hand a call to a collaborator of the same name and are not forwarding a part: the
#: SQLite registry's connection is the whole's (``close``, and ``atomic`` for a bulk import).
WHOLE_OWN = {
    "tracker_saver.registry.sqlite.SQLiteRegistry.close",
    "tracker_saver.registry.sqlite.SQLiteRegistry.atomic",
}


def _forwarders(source: str, module: str) -> list[str]:
    """``module.Class.method`` of each method whose body is one call of a collaborator's method of
    the same or a similar name (``self._labels.rename(...)``, ``self._store.registry_id(...)``)."""

    def similar(a: str, b: str) -> bool:
        a, b = a.strip("_").replace("_", ""), b.strip("_").replace("_", "")
        return a in b or b in a

    found = []
    for cls in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]:
        for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            call = body[0].value if len(body) == 1 and isinstance(body[0], (ast.Return, ast.Expr)) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Attribute)
                and isinstance(call.func.value.value, ast.Name)
                and call.func.value.value.id == "self"
                and similar(call.func.attr, fn.name)
            ):
                found.append(f"{module}.{cls.name}.{fn.name}")
    return found


def _part_methods() -> set[str]:
    return {name for part in PARTS.values() for name, value in vars(part).items() if callable(value)} - {"__init__"}


def test_the_registry_is_made_of_parts_and_holds_no_method_of_theirs() -> None:
    assert not getattr(Registry, "__abstractmethods__", None), "a backend writes its parts, not the Registry"
    assert set(vars(Registry)) & _part_methods() == set()
    assert set(Registry.__annotations__) >= set(PARTS)


def test_each_registry_backend_sets_its_three_parts() -> None:
    # SQLite opened for real; ClearML and MLflow read from their constructors (each needs a server).
    opened = registry.open_registry(":memory:")
    assert {name: isinstance(getattr(opened, name), part) for name, part in PARTS.items()} == dict.fromkeys(PARTS, True)
    for backend in registry.BACKENDS.values():
        module = importlib.import_module(backend.module)
        source = Path(module.__file__ or "").read_text()
        (cls,) = [
            n
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.ClassDef) and issubclass(getattr(module, n.name), Registry)
        ]
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        made = {
            t.id: v
            for n in ast.walk(init)
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name) and isinstance((v := n.value), ast.Call)
        }
        parts = {}
        for node in [n for n in ast.walk(init) if isinstance(n, ast.AnnAssign)]:
            target, value = node.target, node.value
            if isinstance(target, ast.Attribute) and target.attr in PARTS and value is not None:
                call = made.get(value.id) if isinstance(value, ast.Name) else value
                assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name), ast.unparse(node)
                parts[target.attr] = getattr(module, call.func.id)
        assert set(parts) == set(PARTS), f"{backend.module}: {cls.name} sets {sorted(parts)}"
        for name, made_by in parts.items():
            assert issubclass(made_by, PARTS[name]), f"{backend.module}: {name} is a {made_by.__name__}"


def test_no_registry_class_forwards_a_call_to_a_collaborator_of_the_same_name() -> None:
    found = [
        f
        for name in _modules()
        if name.startswith(("tracker_saver.registry", "tracker_saver.integrations"))
        for f in _forwarders(Path(importlib.import_module(name).__file__ or "").read_text(), name)
    ]
    assert sorted(set(found) - WHOLE_OWN) == [], "a backend exposes the collaborator as its part instead"


def test_the_forwarding_check_finds_a_forwarder() -> None:
    source = (
        "class R:\n"
        "    def rename(self, record_id, name):\n"
        '        """Rename."""\n'
        "        return self._labels.rename(record_id, name)\n"
        "    def registry_id(self, project):\n"
        "        self._store.registry_id(project)\n"
        "    def get(self, record_id):\n"
        "        return self._aliased([self._fetch(record_id)])[0]\n"
    )
    assert _forwarders(source, "m") == ["m.R.rename", "m.R.registry_id"]


def _signature(fn: ast.FunctionDef) -> tuple[str, tuple[str, ...]]:
    return fn.name, tuple(a.arg for a in (*fn.args.args, *fn.args.kwonlyargs))


def test_each_part_method_signature_is_written_once_per_backend() -> None:
    # The ABC's one signature, then one implementation in each backend; a forwarder would be one more.
    base = ast.parse(Path(importlib.import_module("tracker_saver.registry.base").__file__ or "").read_text())
    signatures = {
        _signature(fn)
        for cls in base.body
        if isinstance(cls, ast.ClassDef) and cls.name in {p.__name__ for p in PARTS.values()}
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef)
    }
    counts: dict[str, int] = {}
    for name in _modules():
        if name.startswith(("tracker_saver.registry", "tracker_saver.integrations")):
            tree = ast.parse(Path(importlib.import_module(name).__file__ or "").read_text())
            for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _signature(n) in signatures]:
                counts[fn.name] = counts.get(fn.name, 0) + 1
    assert {k: v for k, v in counts.items() if v > 1 + len(registry.BACKENDS)} == {}


def test_every_module_path_is_a_file_of_the_package() -> None:
    assert all(Path(path).is_file() for path in _modules().values())
