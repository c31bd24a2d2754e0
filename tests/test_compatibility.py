"""docs/compatibility.md's tables agree with pyproject.toml: every declared range has a row, and its
lower bound is the version the matrix's lowest cell ran (``scripts/dev.sh matrix``), so a range is
only what was tested. Reads text only: nothing is installed, no cell runs here.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.helpers import ROOT

PAGE = ROOT / "docs" / "compatibility.md"
#: Extras that are tools for developers, not ranges users install against.
TOOL_EXTRAS = {"test", "docs", "all"}


def matrix_script() -> ModuleType:
    """scripts/matrix.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("matrix_script", ROOT / "scripts" / "matrix.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("matrix_script", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def table(heading: str, first: str) -> list[dict[str, str]]:
    """The table under ``## heading`` whose first column is ``first``, one dict per row by column, backticks dropped."""
    section = PAGE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    lines = lines[[i for i, line in enumerate(lines) if line.strip("| ").startswith(f"{first} |")][0] :]
    lines = lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def declared() -> dict[str, str]:
    """Every range a user installs against, by name: Python, the dependencies and the extras' requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    reqs += [r for extra, rs in project["optional-dependencies"].items() if extra not in TOOL_EXTRAS for r in rs]
    ranges = {"Python": project["requires-python"]}
    for req in map(Requirement, reqs):
        ranges[req.name] = ",".join(sorted(str(s) for s in req.specifier))
    return ranges


def lower_bound(spec: str) -> Version:
    (bound,) = [s.version for s in SpecifierSet(spec) if s.operator == ">="]
    return Version(bound)


def same_release(bound: Version, tested: str) -> bool:
    """``0.5`` is ``0.5.0`` and ``0.5.0.post2``: a post-release or a local build (``+cpu``) repackages its release."""
    release = Version(tested).release
    return bound.release + (0,) * (len(release) - len(bound.release)) == release


def test_every_declared_range_has_a_row_with_pyprojects_words() -> None:
    rows = {row["package"]: row for row in table("Declared ranges", "package")}
    assert set(rows) == set(declared()), "docs/compatibility.md's 'Declared ranges' rows must be pyproject's ranges"
    for name, spec in declared().items():
        assert SpecifierSet(rows[name]["declared"]) == SpecifierSet(spec), (name, rows[name]["declared"], spec)


def test_each_lower_bound_is_the_version_the_lowest_cell_ran() -> None:
    rows = {row["package"]: row for row in table("Declared ranges", "package")}
    for name, spec in declared().items():
        tested = rows[name]["lowest cell"].split()[0]
        if name == "Python":  # a cell per minor version: test_every_python_the_range_admits_has_a_passing_cell
            continue
        if name == "torch":  # never varied: the local CPU wheel constraints.txt pins (a CUDA build is GBs)
            pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
            assert pin and tested == f"{pin[1]}+cpu", tested
        else:
            assert same_release(lower_bound(spec), tested), f"{name}: declared {spec}, the lowest cell ran {tested}"


def test_the_matrix_table_is_the_scripts_and_its_lowest_row_ran_the_lower_bounds() -> None:
    script = matrix_script()
    rows = {row["cell"]: row for row in table("The matrix", "cell")}
    assert list(rows["lowest"]) == ["cell", "python", *script.KEY_PACKAGES, "result", "wall"]
    assert set(script.DEFAULT_CELLS) <= set(rows), "every cell of a release's run has a row"
    ranges = {row["package"]: row["lowest cell"].split()[0] for row in table("Declared ranges", "package")}
    for package in script.KEY_PACKAGES:
        assert rows["lowest"][package] == ranges[package], package
    assert all(rows[cell]["result"].startswith(("pass", "fail")) for cell in script.DEFAULT_CELLS), rows
    assert re.search(r"Last run: \d{4}-\d\d-\d\d, commit [0-9a-f]{7}", PAGE.read_text()), "the table says when it ran"


def test_every_python_the_range_admits_has_a_passing_cell() -> None:
    rows = table("The matrix", "cell")
    spec = SpecifierSet(declared()["Python"])
    passing = {".".join(row["python"].split(".")[:2]) for row in rows if row["result"] == "pass"}
    admitted = {f"3.{minor}" for minor in range(8, 15) if spec.contains(f"3.{minor}.0")}
    assert admitted <= passing, f"requires-python {spec} admits {sorted(admitted - passing)}, which no cell passed"


def test_a_python_3_11_cell_can_only_take_the_local_cpu_torch() -> None:
    """A version with ``+cpu`` exists only as the local wheel: a miss fails the install, it never fetches CUDA."""
    script = matrix_script()
    pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    lowest = script.constraints(script.CELLS["lowest"]).splitlines()
    assert pin and [line for line in lowest if line.startswith("torch==")] == [f"torch=={pin[1]}+cpu"]
    assert any(line.startswith("pytest==") for line in lowest), "test tools are pinned to .venv's versions"


def test_every_file_the_matrix_runs_exists() -> None:
    for group, files in matrix_script().GROUPS.items():
        for file in files:
            assert (ROOT / file).is_file(), f"scripts/matrix.py's group {group} names {file}, which is gone"
