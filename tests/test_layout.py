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


def test_every_module_path_is_a_file_of_the_package() -> None:
    assert all(Path(path).is_file() for path in _modules().values())
