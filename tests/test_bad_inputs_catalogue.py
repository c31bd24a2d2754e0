"""The bad-input catalogue as a whole: every row checked by one test in its door's file, and the docs show it.

``python -m tests.test_bad_inputs_catalogue`` rewrites the tables of docs/bad-inputs.md from the rows.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

from tests.bad_inputs import CATALOGUE, DOORS, door_file, error_type, markdown

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bad-inputs.md"
START, END = "<!-- catalogue:start (python -m tests.test_bad_inputs_catalogue) -->", "<!-- catalogue:end -->"


def door_modules() -> list[ModuleType]:
    """Each door's test module, imported (as pytest names it), so that all its rows are registered."""
    return [importlib.import_module(door_file(door).removesuffix(".py").replace("/", ".")) for door in DOORS]


def test_the_catalogue_has_at_least_forty_rows_each_checked_by_its_test() -> None:
    tests = [fn for module in door_modules() for name, fn in vars(module).items() if hasattr(fn, "row")]
    assert len(CATALOGUE) >= 40
    assert sorted(fn.row.id for fn in tests) == sorted(CATALOGUE)
    for r in CATALOGUE.values():
        if r.error != "none" and not re.fullmatch(r"HTTP \d{3}", r.error):  # the UI's answers: a status
            error_type(r.error)
        assert "|" not in r.input + r.message + r.left, f"{r.id}: a | would split the docs table"


def test_the_docs_table_is_the_catalogue() -> None:
    door_modules()
    text = DOC.read_text()
    assert START in text and END in text, f"{DOC} lost its catalogue markers"
    shown = text.split(START, 1)[1].split(END, 1)[0].strip("\n")
    assert shown == markdown(), f"{DOC.name} differs from the catalogue: run python -m tests.test_bad_inputs_catalogue"


def write_docs() -> None:
    """Put the catalogue's tables between the markers of docs/bad-inputs.md."""
    door_modules()
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}\n{markdown()}\n{END}{tail}")


if __name__ == "__main__":
    write_docs()
