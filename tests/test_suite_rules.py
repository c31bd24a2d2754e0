"""The tests' own rules: no assert on how long something took, no sleep or fixed window to sync on.

A test checks order and outcome (the error surfaced, training went on, a later save succeeded),
never seconds: on a loaded machine any number is wrong sometimes, and a red run nobody can trust
is worse than none. Timings live in ``benchmarks/``. And a test waits for the event it means (a
barrier, a file, a line the process prints, :mod:`tests.waiting`), never for a sleep or a fixed
window: ``Event.wait(0.3)`` to show that something did *not* happen is a sleep by another name.
Both rules read every file under ``tests/``, helpers and subprocess scripts included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: Where a sleep, or a poll with one, is the thing itself and not a way to wait for an event.
SLEEPS_ALLOWED: dict[str, tuple[int, str]] = {
    "preempt_trainer.py": (1, "a training step's 20 ms of compute, without burning a CPU"),
    "soak/trainer.py": (2, "a training step's compute; a process waiting for the SIGKILL it sent itself"),
    "soak/racer.py": (
        1,
        "the race's schedule: every racer makes its operation at the round's shared instant, to collide",
    ),
    "clearml_standin/server.py": (1, "the stand-in's simulated network latency, a feature tests ask for"),
    "conftest_ceph.py": (2, "flock(2) has no timeout: a lock wait with a limit polls the non-blocking try"),
    "conftest_mlflow.py": (1, "`mlflow server` gives no readiness signal: poll /health until it answers"),
    "test_mlflow_postgres.py": (1, "PostgreSQL gives no readiness signal but pg_isready: poll it"),
    "test_clearml_offline.py": (1, "the stand-in gives no signal when it holds a request: poll its list"),
    "test_cpu_budget.py": (
        1,
        "a sample test that waits without CPU, which the CPU report must rank below one that computes",
    ),
}
#: A timed wait shorter than this is a window, not a guard against a hang.
GUARD_S = 10.0

_SLEEP = re.compile(r"\bsleep\(|\bTimer\(")
_SHORT_WAIT = re.compile(r"\.(wait|join|get)\((?:timeout=)?([0-9]*\.?[0-9]+)\)")
_CLOCK = re.compile(r"monotonic\(|perf_counter\(|time\.time\(|process_time\(")
_DURATION = re.compile(
    r"\bseconds\b|elapsed|duration|\btook\b|latency|\bwaited\b|\bwalls?\b|\btimes\b|\btimings\b|blocked\b|blocks\b|\w_s\b|\w_s['\"]"
)


def sleeps(source: str) -> list[int]:
    """Lines that sleep, start a timer, or wait a window: a timed wait under ``GUARD_S`` (a longer one
    only guards against a hang).

    Examples:
        >>> sleeps("time.sleep(0.2)\\nassert not done.wait(0.5)\\nassert done.wait(60)\\nq.get(timeout=2)\\n")
        [1, 2, 4]
    """
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        short = [m for m in _SHORT_WAIT.finditer(line) if float(m.group(2)) < GUARD_S]
        if _SLEEP.search(line) or short:
            found.append(number)
    return found


def _number(node: ast.expr) -> bool:
    """Whether ``node`` is a bound made of numbers: a literal (not 0), a named constant (``T``,
    ``MARGIN``), or arithmetic and conditionals with one (``T + MARGIN``, ``x + 0.4``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool) and node.value != 0
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand)
    if isinstance(node, ast.BinOp):
        return _number(node.left) or _number(node.right)
    if isinstance(node, ast.IfExp):
        return _number(node.body) or _number(node.orelse)
    return False


def _duration(node: ast.expr) -> bool:
    """Whether ``node`` reads a clock or names a duration (``took``, ``blocked``, ``save_durable_s``);
    a count of them (``len(...)``) is no duration."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("len", "sum", "any", "all"):
        return False
    text = ast.unparse(node)
    return bool(_CLOCK.search(text) or _DURATION.search(text))


def timing_asserts(source: str) -> list[int]:
    """Lines of ``assert``s that compare a duration (a clock read, a name that says seconds) with a number.

    Examples:
        >>> timing_asserts("assert time.monotonic() - t0 < 10\\nassert blocked <= T + MARGIN\\nassert len(x) <= 2\\n")
        [1, 2]
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            operands = [compare.left, *compare.comparators]
            if any(_number(o) for o in operands) and any(_duration(o) for o in operands):
                found.append(node.lineno)
                break
    return found


def _sources() -> dict[str, str]:
    return {p.relative_to(TESTS).as_posix(): p.read_text() for p in sorted(TESTS.rglob("*.py"))}


def test_no_test_asserts_how_long_something_took() -> None:
    found = [f"tests/{name}:{line}" for name, text in _sources().items() for line in timing_asserts(text)]
    assert found == [], f"timing asserts (check order and outcome; time it in benchmarks/): {found}"


def test_no_test_sleeps_or_waits_out_a_window_but_where_the_allow_list_says_why() -> None:
    found = {
        name: lines for name, text in _sources().items() if name != "test_suite_rules.py" if (lines := sleeps(text))
    }
    over = {
        f"tests/{name}": lines for name, lines in found.items() if len(lines) > SLEEPS_ALLOWED.get(name, (0, ""))[0]
    }
    assert over == {}, f"sleeps or fixed windows (wait for the event, see tests/waiting.py): {over}"
    stale = {name for name in SLEEPS_ALLOWED if len(found.get(name, [])) < SLEEPS_ALLOWED[name][0]}
    assert stale == set(), f"the allow-list allows more than these files do: lower it: {sorted(stale)}"


def test_the_rules_find_a_timing_assert_and_a_sleep() -> None:
    source = "def test_x():\n    took = time.monotonic() - started\n    assert took <= 6.0\n    time.sleep(1)\n"
    assert timing_asserts(source) == [3] and sleeps(source) == [4]
    assert timing_asserts("assert 0 < meta['save_blocked_s'] <= wall\n") == []  # an order, not a bound
