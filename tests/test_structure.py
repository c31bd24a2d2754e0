"""The package's shape: no import cycles, one job per module said in its docstring, generic code apart."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tracker_saver"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # the package does not change during a session; callers only read it
def _modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, except those under ``if TYPE_CHECKING:`` (imports for the type checker only)."""
    out: list[ast.AST] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        out.append(node)
        out.extend(_nodes(node))
    return out


def _imports(path: Path, name: str) -> set[str]:
    """Modules of this package that ``path`` imports, at the top or lazily inside a function.

    A lazy import is still a dependency: ``cli → demo → cli`` is a cycle even when one side
    imports inside a function.
    """
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    modules = _modules()
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    return {name: _imports(path, name) for name, path in _modules().items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_package_has_no_import_cycles() -> None:
    # The package's own __init__ re-exports everything; a submodule never imports it.
    graph = {name: {m for m in deps if m != "tracker_saver"} for name, deps in _graph().items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_every_module_says_its_one_job_in_one_line(name: str) -> None:
    doc = ast.get_docstring(ast.parse(_modules()[name].read_text()))
    assert doc, f"{name} has no module docstring"
    first = doc.splitlines()[0]
    assert first.endswith((".", ":")) and len(first) <= 110, f"{name}: {first!r}"


GENERIC = ("tracker_saver.save.saver", "tracker_saver.save.pipeline", "tracker_saver.save.slots", "tracker_saver.core.records",
           "tracker_saver.core.naming", "tracker_saver.save.recovery", "tracker_saver.registry.base",
           "tracker_saver.storage.base", "tracker_saver.models", "tracker_saver.find", "tracker_saver.resume_run",
           "tracker_saver.registry.sqlite_query", "tracker_saver.registry.sqlite_connection",
           "tracker_saver.registry.sqlite_check")  # fmt: skip


@pytest.mark.parametrize("name", GENERIC)
def test_generic_code_never_imports_a_tracker_integration(name: str) -> None:
    path = _modules()[name]
    imported = {
        node.module or "" for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    glue = {m for m in imported if "clearml" in m or "mlflow" in m}
    assert not glue, f"{name} imports a tracker's glue: {sorted(glue)}"


#: The most lines one module may have (STYLE.md; issue 53 moved it from 450: the cap stands for one job
#: per module, and at 450 it made people pack lines instead of laying them out).
MAX_LINES = 600


def _too_long(texts: dict[str, str]) -> dict[str, int]:
    """The modules of ``texts`` (name → source) over :data:`MAX_LINES`, with their line counts."""
    return {name: n for name, text in texts.items() if (n := len(text.splitlines())) > MAX_LINES}


def test_no_module_is_over_600_lines() -> None:
    texts = {name: path.read_text() for name, path in _modules().items()}
    assert _too_long(texts) == {}, "split these modules by job"


def test_the_length_check_finds_a_long_module() -> None:
    assert _too_long({"ok": "x = 1\n" * MAX_LINES, "long": "x = 1\n" * (MAX_LINES + 1)}) == {"long": MAX_LINES + 1}


#: The most ``# fmt: skip`` markers the package may carry (STYLE.md: the formatter lays out the code;
#: a marker only where an aligned table reads better, with the comment line above it saying so).
MAX_FMT_SKIPS = 5


def _unexplained_fmt_skips(texts: dict[str, str]) -> dict[str, list[int]]:
    """Lines of ``texts`` (name → source) with ``# fmt: skip`` whose line above does not say it keeps a table aligned."""
    found: dict[str, list[int]] = {}
    for name, text in texts.items():
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if "# fmt: skip" in line and not (n and "aligned" in lines[n - 1]):
                found.setdefault(name, []).append(n + 1)
    return found


def test_the_formatter_lays_out_the_code_but_for_a_few_aligned_tables() -> None:
    texts = {name: path.read_text() for name, path in _modules().items()}
    assert _unexplained_fmt_skips(texts) == {}, "let `ruff format` lay these out, or say why a table stays aligned"
    assert sum(text.count("# fmt: skip") for text in texts.values()) <= MAX_FMT_SKIPS


def test_the_fmt_skip_check_finds_an_unexplained_marker() -> None:
    table = "# an aligned table reads better\nX = {1: 2}  # fmt: skip\n"
    assert _unexplained_fmt_skips({"ok": table, "packed": "f(a,\n  b)  # fmt: skip\n"}) == {"packed": [2]}


def _defined(tree: ast.Module) -> set[str]:
    """The names a module's top level defines: functions, classes and assigned names."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_submodule_shadows_a_name_its_package_defines() -> None:
    # Importing ``pkg.name`` sets the attribute ``pkg.name`` to the module: a function or constant
    # of ``pkg/__init__.py`` with that name is replaced the moment anything imports the submodule.
    modules = _modules()
    clashes = [
        f"{name}.{defined}"
        for name, path in modules.items()
        if path.name == "__init__.py"
        for defined in sorted(_defined(ast.parse(path.read_text())))
        if f"{name}.{defined}" in modules
    ]
    assert clashes == []


def test_the_shadowing_check_finds_a_clash() -> None:
    assert _defined(ast.parse("def sqlite_path(): ...\nX: int = 1\nclass C: ...")) == {"sqlite_path", "X", "C"}


#: The shims: the only modules that may read a third-party object's private attributes, one per
#: library, each with a test that fails when an upgrade changes what it reads.
SHIMS = (
    "save/ignite_engine.py",  # Engine._event_handlers (tests/test_ignite_engine.py)
    "cli/argparse_walk.py",  # ArgumentParser._actions, … (tests/test_argparse_walk.py)
    "integrations/clearml/internals.py",  # ClearML's Session, ConfigWrapper, a request's _action
    "integrations/mlflow/internals.py",  # MlflowClient._tracking_client (tests/test_mlflow_internals.py)
)

#: Underscored names that are a documented public API: namedtuple's methods and fields.
DOCUMENTED = frozenset({"_asdict", "_fields", "_field_defaults", "_make", "_replace"})


def _own_names(trees: dict[str, ast.Module]) -> set[str]:
    """Every name our package defines: functions, classes, module and class globals, ``self.x = …``."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, (ast.Module, ast.ClassDef)):
                for statement in node.body:
                    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                        names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


def _foreign_privates(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Per module, each private attribute of an object not ours: ``x._name`` (``x`` not ``self`` or
    ``cls``, ``_name`` defined nowhere in ``trees``), ``getattr(x, "_name")`` and its kin, and
    ``from lib import _name``: ``{"mod.py": ["12: engine._event_handlers"]}``."""
    own = _own_names(trees)
    found: dict[str, list[str]] = {}
    for path, tree in trees.items():
        hits: list[str] = []
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute):
                mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                name = None if mine else node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
            ):
                name = node.args[1].value
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if not node.module.startswith("tracker_saver") and any(_private(a.name) for a in node.names):
                    hits.append(f"{node.lineno}: {ast.unparse(node)}")
            if name is not None and _private(name) and name not in own:
                hits.append(f"{node.lineno}: {ast.unparse(node)}")
        if hits:
            found[path] = sorted(hits, key=lambda hit: int(hit.partition(":")[0]))
    return found


@functools.cache  # parsed once a session: three tests read the same trees, and none changes them
def _trees() -> dict[str, ast.Module]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text()) for path in _modules().values()}


@functools.cache  # two tests ask, for the same package: the walk is computed once per session
def _package_foreign_privates() -> dict[str, list[str]]:
    """:func:`_foreign_privates` of this package."""
    return _foreign_privates(_trees())


@functools.cache  # as above: it imports and parses every third-party base class, the costly part
def _package_overridden_privates() -> dict[str, list[str]]:
    """:func:`_overridden_privates` of this package."""
    return _overridden_privates(_trees())


def test_no_private_attribute_of_a_third_party_object_is_read_outside_its_shim() -> None:
    outside = {path: hits for path, hits in _package_foreign_privates().items() if path not in SHIMS}
    assert outside == {}, (
        "these read a library's private attributes: route each through that library's shim "
        f"({', '.join(SHIMS)}) or add one, with a test against the installed library: {outside}"
    )


def test_every_shim_exists_and_reads_what_it_is_there_for() -> None:
    # A shim left with nothing private to read leaves the list, so the list stays the truth.
    found = {**_package_foreign_privates(), **_package_overridden_privates()}
    assert [shim for shim in SHIMS if shim not in _trees() or shim not in found] == []


def test_the_private_attribute_check_finds_a_third_party_internal() -> None:
    trees = {
        "ours.py": ast.parse("class Pool:\n    def __init__(self):\n        self._closed = False\n"),
        "bad.py": ast.parse(
            "import argparse\nfrom clearml.task import _helper\n"
            "def f(p, pool, row):\n"
            "    a = p._actions\n    b = getattr(p, '_mutually_exclusive_groups')\n"
            "    return pool._closed, self._mine, row._asdict(), type(p).__name__, argparse.Namespace\n"
        ),
    }
    assert _foreign_privates(trees) == {
        "bad.py": [
            "2: from clearml.task import _helper",
            "4: p._actions",
            "5: getattr(p, '_mutually_exclusive_groups')",
        ]
    }


def _base_classes(tree: ast.Module, node: ast.ClassDef) -> list[type]:
    """The third-party classes ``node`` derives from, imported as its module imports them."""
    imported = {
        alias.asname or alias.name: (item.module, alias.name)
        for item in ast.walk(tree)
        if isinstance(item, ast.ImportFrom) and item.level == 0 and item.module
        if not item.module.startswith("tracker_saver")
        for alias in item.names
    }
    modules = {
        alias.asname or alias.name: alias.name
        for item in ast.walk(tree)
        if isinstance(item, ast.Import)
        for alias in item.names
        if not alias.name.startswith("tracker_saver")
    }
    found = []
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in imported:
            module, name = imported[base.id]
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in modules:
            module, name = modules[base.value.id], base.attr
        else:
            continue  # one of ours (or a generic alias): its privates are ours
        cls = getattr(importlib.import_module(module), name)
        if isinstance(cls, type):
            found.append(cls)
    return found


def _instance_names(klass: type | ast.ClassDef) -> frozenset[str]:
    """The ``self.<name>`` attributes a class's own methods store (``self._atomic = atomic``)."""
    if isinstance(klass, ast.ClassDef):
        return frozenset(_self_stores(klass))
    return _library_instance_names(klass)


@functools.cache  # many of our classes share a library base (and every MRO ends in object): read each once
def _library_instance_names(klass: type) -> frozenset[str]:
    """The ``self.<name>`` attributes a library class's source stores; none when it ships no source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):  # a builtin, or no source shipped
        return frozenset()
    return frozenset(_self_stores(tree))


def _self_stores(tree: ast.AST) -> set[str]:
    """Every ``self.<name> = …`` target under ``tree``."""
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        if isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _overridden_privates(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Per module, each private name a class defines (in its body, or as ``self._x = …``) that a
    third-party base class already has: an override of that library's internals
    (``class _Bounded(Session): def _load_vaults``; ``class S(DiskSaver): self._atomic = True``)."""
    found: dict[str, list[str]] = {}
    for path, tree in trees.items():
        hits = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            klasses = {klass for cls in _base_classes(tree, node) for klass in cls.__mro__}
            theirs = {name for klass in klasses for name in {*vars(klass), *_instance_names(klass)}}
            mine = {
                n.id if isinstance(n, ast.Name) else n.name
                for statement in node.body
                for n in (
                    [statement] if not isinstance(statement, (ast.Assign, ast.AnnAssign)) else ast.walk(statement)
                )
                if isinstance(n, (ast.Name, ast.FunctionDef, ast.AsyncFunctionDef))
            } | _instance_names(node)
            hits += [f"{node.lineno}: {node.name}.{name}" for name in sorted(mine & theirs) if _private(name)]
        if hits:
            found[path] = hits
    return found


def test_no_private_method_of_a_third_party_class_is_overridden_outside_its_shim() -> None:
    outside = {path: hits for path, hits in _package_overridden_privates().items() if path not in SHIMS}
    assert outside == {}, "these override a library's private attributes: move each into that library's shim"


def test_the_override_check_finds_an_overridden_internal() -> None:
    source = (
        "import argparse\nfrom ignite.handlers import DiskSaver\n"
        "class Mine(DiskSaver):\n    def _check_and_setup(self): ...\n    def _own_helper(self): ...\n"
        "class Formatter(argparse.HelpFormatter):\n    def _fill_text(self, text, width, indent): ...\n"
        "class Atomic(DiskSaver):\n    def __init__(self):\n        self._atomic = True\n        self._mine = 1\n"
    )
    assert _overridden_privates({"bad.py": ast.parse(source)}) == {
        "bad.py": ["3: Mine._check_and_setup", "6: Formatter._fill_text", "8: Atomic._atomic"]
    }
