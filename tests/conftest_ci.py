"""pytest plugin: under ``CI=true`` a skipped test fails the run, so a missing extra or server cannot pass green.

Loaded from the root ``conftest.py`` (``pytest_plugins``), so it sees every test, doctest and
collected file. A skip anywhere becomes a failure that keeps its reason: ``pytest.skip`` in a test
or a fixture, a ``skipif`` mark, ``pytest.importorskip`` in a test, and a module-level
``importorskip``, which runs at collection (the file then fails to collect). Outside CI a skip stays
a skip, with its reason in pytest's short summary (``-ra``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


def in_ci() -> bool:
    """Whether this is a CI run: ``CI`` is set, as every CI service sets it (and the root conftest reads it)."""
    return bool(os.environ.get("CI"))


def _reason(longrepr: Any) -> str:
    """A skip's reason: pytest keeps it as ``(path, line, "Skipped: why")``."""
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"CI runs every test, but this one skipped ({call.when}): {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"CI runs every test, but {collector.nodeid} skipped at collection: {_reason(report.longrepr)}"
        )
