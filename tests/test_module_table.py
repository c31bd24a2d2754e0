"""docs/architecture.md's module table is the one scripts/module_table.py generates from the docstrings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("module_table", ROOT / "scripts" / "module_table.py")
assert _spec and _spec.loader
module_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module_table)


def test_the_architecture_page_holds_the_generated_module_table() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert page == module_table.render(page), (
        "docs/architecture.md's module table is stale (a module added, removed or its first docstring "
        "line changed): run python scripts/module_table.py"
    )


def test_every_module_has_a_row() -> None:
    paths = [path for path, _ in module_table.rows()]
    assert len(paths) == len(set(paths)) == len(list((ROOT / "tracker_saver").rglob("*.py")))
    assert "save/pipeline.py" in paths and "storage/s3/staged.py" in paths


def test_the_table_changes_when_a_module_is_added_or_its_first_line_changes(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text('"""Does a | b."""\n')
    page = f"# T\n\n{module_table.START}\nold\n{module_table.END}\n\nafter\n"
    first = module_table.render(page, package)
    assert "| `a.py` | Does a \\| b. |" in first and first.endswith(f"{module_table.END}\n\nafter\n")
    (package / "sub" / "b.py").write_text('"""Does b.\n\nMore."""\n')
    added = module_table.render(first, package)
    assert added != first and added.index("`a.py`") < added.index("**`sub/`**") < added.index(
        "| `sub/b.py` | Does b. |"
    )
    (package / "a.py").write_text('"""Does only a."""\n')
    assert "| `a.py` | Does only a. |" in module_table.render(added, package)
    assert module_table.render(module_table.render(added, package), package) == module_table.render(added, package)
