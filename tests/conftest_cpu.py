"""pytest plugin: the CPU each test costs; the costliest and the collected count per marker, printed at the end.

Loaded from the root ``conftest.py`` (``pytest_plugins``), so doctests are measured too.

A test's CPU is what its process spent from the start of its set-up to the end of its tear-down:
user + system time of all its threads (``time.process_time``), the children it reaped
(``RUSAGE_CHILDREN``) and the processes :mod:`tests.forkserver` forked for it (the fork server reaps
those and reports each one's CPU back). A pytest-xdist worker runs one test at a time, so the figure
is that test's own whatever the other workers do, and the figures add up across workers. What no
one test owns is reported apart, as "outside tests": each process's start-up and collection, the
set-up of session and module fixtures (a server started once for many tests), the tear-down after a
worker's last test. Not in either figure: processes that no worker reaps (the Ceph daemons, the
shared MLflow server when another worker stops it); ``scripts/dev.sh test`` measures the whole command.
With ``TRACKER_SAVER_CPU_JSON=PATH`` every test's figures are also written to PATH (JSON,
``{nodeid: [cpu_s, wall_s]}``), for a closer look than the 25 costliest.

Examples:
    ``pytest -p tests.conftest_cpu tests/test_cli.py`` ends with the section::

        ------------------------------------ CPU ------------------------------------
        62 tests collected; by marker: no marker 62
        CPU in tests 31.2 s; outside tests 4.1 s (start-up, collection, shared fixtures)
        the 25 costliest tests by CPU (seconds of CPU, seconds of wall):
            3.1 cpu    2.9 wall  tests/test_cli.py::test_...
"""

from __future__ import annotations

import collections
import json
import os
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests import forkserver

#: How many of the costliest tests the summary names.
TOP = 25
#: pytest's own markers: not a kind of test.
_BUILTIN_MARKS = frozenset({"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"})
_KEY = "cpu_s"


def cpu_now() -> float:
    """CPU seconds (user + system) this process, its reaped children and its forked tests' processes spent."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + forkserver.forked_cpu()


def marker_counts(items: list[pytest.Item]) -> dict[str, int]:
    """How many ``items`` carry each marker (``no marker`` for the rest); a test with two counts under each.

    Examples:
        >>> marker_counts([])
        {}
    """
    counts: collections.Counter[str] = collections.Counter()
    for item in items:
        names = {mark.name for mark in item.iter_markers()} - _BUILTIN_MARKS
        counts.update(names or {"no marker"})
    return dict(sorted(counts.items(), key=lambda kv: (kv[0] == "no marker", -kv[1], kv[0])))


@dataclass
class _Ledger:
    """What this process measured, and (in the process that reports) what every worker sent."""

    started: float | None = None  # CPU at the start of the running test's set-up
    shared: float = 0.0  # CPU inside the running test that belongs to no one test
    own_tests: float = 0.0  # CPU of this process's tests
    tests: dict[str, tuple[float, float]] = field(default_factory=dict)  # nodeid -> (cpu, wall)
    outside: float = 0.0  # the workers' CPU outside tests (filled from their output)
    collected: dict[str, int] | None = None
    count: int = 0
    workers: int = 0  # xdist workers that reported


_ledger = _Ledger()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _ledger.started, _ledger.shared = cpu_now(), 0.0
    yield
    _ledger.started = None


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[None]:
    """A session or module fixture's set-up serves many tests: it is counted outside tests."""
    if fixturedef.scope == "function" or _ledger.started is None:
        yield
        return
    before = cpu_now()
    yield
    _ledger.shared += cpu_now() - before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a process's last test, its tear-down stops the session's fixtures: outside tests."""
    if nextitem is not None:
        yield
        return
    before = cpu_now()
    yield
    _ledger.shared += cpu_now() - before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "teardown" and _ledger.started is not None:
        cpu = max(0.0, cpu_now() - _ledger.started - _ledger.shared)
        _ledger.own_tests += cpu
        outcome.get_result().user_properties.append((_KEY, round(cpu, 3)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every test's figure reaches the reporting process: its own, or a worker's report."""
    cpu, wall = _ledger.tests.get(report.nodeid, (0.0, 0.0))
    if report.when == "teardown":
        cpu = sum(float(value) for name, value in report.user_properties if name == _KEY)
    _ledger.tests[report.nodeid] = (cpu, wall + report.duration)


def pytest_collection_finish(session: pytest.Session) -> None:
    _ledger.collected = marker_counts(session.items)
    _ledger.count = len(session.items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker sends what no test owns and what it collected (xdist's ``workeroutput``)."""
    output = getattr(session.config, "workeroutput", None)
    if output is None:  # xdist's controller counts only itself: its children are the workers, counted above
        _ledger.outside += time.process_time() if _ledger.workers else cpu_now() - _ledger.own_tests
        return
    output[_KEY] = cpu_now() - _ledger.own_tests
    output["collected"] = [_ledger.count, _ledger.collected or {}]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In xdist's controller: a worker finished; add what it sent (every worker collects the same tests)."""
    output = getattr(node, "workeroutput", {})
    _ledger.workers += 1
    _ledger.outside += float(output.get(_KEY, 0.0))
    if "collected" in output and _ledger.collected is None:
        _ledger.count, _ledger.collected = output["collected"][0], dict(output["collected"][1])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if path := os.environ.get("TRACKER_SAVER_CPU_JSON"):
        with open(path, "w") as out:
            json.dump({nodeid: [round(cpu, 3), round(wall, 3)] for nodeid, (cpu, wall) in _ledger.tests.items()}, out)
    write = terminalreporter.write_line
    terminalreporter.section("CPU")
    by_marker = ", ".join(f"{name} {n:,}" for name, n in (_ledger.collected or {}).items())
    write(f"{_ledger.count:,} tests collected; by marker: {by_marker or 'none'}")
    in_tests = sum(cpu for cpu, _ in _ledger.tests.values())
    write(
        f"CPU in tests {in_tests:.1f} s; outside tests {_ledger.outside:.1f} s "
        "(start-up, collection, shared fixtures, each process's last tear-down)"
    )
    costliest = sorted(_ledger.tests.items(), key=lambda kv: -kv[1][0])[:TOP]
    if costliest:
        write(f"the {len(costliest)} costliest tests by CPU (seconds of CPU, seconds of wall):")
        for nodeid, (cpu, wall) in costliest:
            write(f"{cpu:8.1f} cpu {wall:7.1f} wall  {nodeid}")
