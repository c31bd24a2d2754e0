"""The error tree drawn in docs/index.md is the tree of tracker_saver/core/errors.py: every class, under its parent."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from tracker_saver.core import errors

INDEX = Path(__file__).resolve().parents[1] / "docs" / "index.md"


def _drawn_tree() -> dict[str, str]:
    """Each class the page draws, mapped to the class drawn above it one level up."""
    block = INDEX.read_text().split("```text\nTrackerSaverError\n", 1)[1].split("```", 1)[0]
    parents, stack = {}, ["TrackerSaverError"]
    for line in block.splitlines():
        found = re.match(r"^([ │]*)[├└]── (\w+)", line)
        assert found, f"not a line of the tree: {line!r}"
        depth = len(found.group(1)) // 5 + 1
        del stack[depth:]
        parents[found.group(2)] = stack[-1]
        stack.append(found.group(2))
    return parents


def _package_tree() -> dict[str, str]:
    """Each error class of the package, mapped to its parent in the tree (the base that is a TrackerSaverError)."""
    tree = {}
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.TrackerSaverError) and cls is not errors.TrackerSaverError:
            tree[name] = next(base.__name__ for base in cls.__bases__ if issubclass(base, errors.TrackerSaverError))
    return tree


def test_the_index_pages_error_tree_draws_every_error_class_under_its_parent() -> None:
    assert _drawn_tree() == _package_tree()
