"""pytest plugin: a test that leaves a new entry in the repository's top folder fails, naming it.

Tests write under ``tmp_path``; one that writes into the working folder instead (a relative
``output_uri``, a default registry path) leaves files a later ``git add`` commits. A fuzz test once
wrote owner objects under hostile names there, and they were committed. The top folder is listed
before each test's set-up and after its tear-down; dot-names (tool caches) and ``*.egg-info`` are
left out. Loaded from the root ``conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_before: dict[str, set[str]] = {}


def _entries(root: str) -> set[str]:
    """The top folder's names that a test could have written: not dot-names, not ``*.egg-info``."""
    return {name for name in os.listdir(root) if not name.startswith(".") and not name.endswith(".egg-info")}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _before[item.nodeid] = _entries(str(item.config.rootpath))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    new = sorted(_entries(str(item.config.rootpath)) - _before.pop(item.nodeid, set()))
    if new:
        raise AssertionError(
            f"{item.nodeid} left {new!r} in the repository's top folder {item.config.rootpath}: "
            "write under tmp_path (or a folder the test removes), then delete what it left"
        )
    return result
