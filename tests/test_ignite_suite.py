"""pytorch-ignite's own saver tests pass against our classes, or docs/migration.md's table says why not.

``test_ignite_own_tests_agree_with_the_migration_table`` fetches the sdist of the installed
pytorch-ignite, runs its ClearMLSaver tests and ``test_checkpoint.py`` with ignite's classes and
with ours (``python -m tests.ignite_compat``), and fails on any disagreement with the table: a
row that says ``fails`` for a test that passes, or the reverse, a failure with a reason issue 26
does not accept, a test that builds our saver and is not in the table, wrong counts. It needs the
package index (``pip download``): offline it fails, saying how to run it; it never skips. The
other tests check the checker and the fetch on made-up outcomes, without the network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.ignite_compat import __main__ as cli
from tests.ignite_compat.suite import Outcome, SuiteResult, SuiteUnavailable, fetch_sdist, ignite_version
from tests.ignite_compat.table import REASONS, Row, disagreements, read_page


@pytest.mark.ignite_suite
def test_ignite_own_tests_agree_with_the_migration_table(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main([])
    out, err = capsys.readouterr()
    if status == 2:  # never a skip: CI must run ignite's tests
        pytest.fail(err.strip(), pytrace=False)
    assert status == 0, f"ignite's own tests disagree with docs/migration.md:\n{err}\n{out}"
    counts = json.loads(out.strip().splitlines()[-1])["counts"]
    assert set(counts) == {"test_clearml_logger.py", "test_checkpoint.py"}
    assert all(runs["ours"]["built_ours"] > 0 for runs in counts.values()), "the swap built none of our savers"


# ------------------------------------------------------------------ the checker, on made-up outcomes

DOCS_ROWS = {
    "test_a.py::test_passes": Row("test_a.py::test_passes", "passes", ""),
    "test_a.py::test_private": Row("test_a.py::test_private", "fails", f"{REASONS[0]}: `_CallbacksContext`"),
}
DOCS_COUNTS = {"test_a.py": (1, 1, 0, 2, 0, 0)}


def _result(**ours: str) -> SuiteResult:
    """Both tests pass with ignite's classes and build our saver; ``ours`` gives their outcome with ours."""
    outcomes = {"test_passes": "passed", "test_private": "failed", **ours}
    return SuiteResult(
        "0.5.5",
        baseline={f"test_a.py::{name}": Outcome("passed") for name in outcomes},
        swapped={f"test_a.py::{name}": Outcome(outcome, "boom", ours=True) for name, outcome in outcomes.items()},
    )


def test_outcomes_that_match_the_table_have_no_disagreement() -> None:
    assert disagreements(_result(), DOCS_ROWS, "0.5.5", DOCS_COUNTS) == []


def test_a_test_the_table_says_passes_but_fails_is_a_disagreement() -> None:
    problems = disagreements(_result(test_passes="failed"), DOCS_ROWS, "0.5.5", {"test_a.py": (0, 2, 0, 2, 0, 0)})
    assert problems == ["test_a.py::test_passes: the table says it passes, but it failed against ours (boom)"]


def test_a_test_the_table_says_fails_but_passes_is_a_disagreement() -> None:
    problems = disagreements(_result(test_private="passed"), DOCS_ROWS, "0.5.5", {"test_a.py": (2, 0, 0, 2, 0, 0)})
    assert problems == [
        "test_a.py::test_private: the table says it fails, but it passes against ours: make the row `passes`"
    ]


def test_a_failure_for_a_reason_issue_26_does_not_accept_is_a_disagreement() -> None:
    rows = {**DOCS_ROWS, "test_a.py::test_private": Row("test_a.py::test_private", "fails", "not done yet")}
    (problem,) = disagreements(_result(), rows, "0.5.5", DOCS_COUNTS)
    assert problem.startswith(
        "test_a.py::test_private fails (boom) for a reason issue 26 does not accept ('not done yet')"
    )


def test_a_test_that_builds_ours_or_fails_must_be_in_the_table() -> None:
    result = _result(test_new="failed")
    problems = disagreements(result, DOCS_ROWS, "0.5.5", {"test_a.py": (1, 2, 0, 3, 0, 0)})
    assert problems == [
        "test_a.py::test_new builds our saver and fails (boom), but the table lacks it: "
        "run `python -m tests.ignite_compat` and update docs/migration.md"
    ]
    result.swapped["test_a.py::test_new"] = Outcome("passed", ours=True)
    problems = disagreements(result, DOCS_ROWS, "0.5.5", {"test_a.py": (2, 1, 0, 3, 0, 0)})
    assert [p.split(",")[0] for p in problems] == ["test_a.py::test_new builds our saver and passes"]


def test_a_row_for_a_test_ignite_no_longer_has_is_a_disagreement() -> None:
    rows = {**DOCS_ROWS, "test_a.py::test_gone": Row("test_a.py::test_gone", "passes", "")}
    assert disagreements(_result(), rows, "0.5.5", DOCS_COUNTS) == [
        "the table names test_a.py::test_gone, which ignite's tests (pytorch-ignite 0.5.5) lack"
    ]


def test_wrong_counts_or_another_ignite_version_are_disagreements() -> None:
    problems = disagreements(_result(), DOCS_ROWS, "0.5.4", {"test_a.py": (2, 0, 0, 2, 0, 0)})
    assert [p.split(":")[0] for p in problems] == [
        "the counts are for pytorch-ignite 0.5.4, but 0.5.5 is installed",
        "test_a.py",
    ]


def test_a_test_that_fails_with_ignites_own_classes_is_reported() -> None:
    result = _result()
    result.baseline["test_a.py::test_passes"] = Outcome("failed", "no such folder")
    (problem,) = disagreements(result, DOCS_ROWS, "0.5.5", {"test_a.py": (1, 1, 0, 1, 1, 0)})
    assert (
        problem == "test_a.py::test_passes fails with ignite's own classes (no such folder): this machine cannot run it"
    )


def test_the_migration_page_has_the_table_the_version_and_both_counts() -> None:
    rows, version, counts = read_page()
    assert version == ignite_version()
    assert set(counts) == {"test_clearml_logger.py", "test_checkpoint.py"}
    failing = [row for row in rows.values() if row.result == "fails"]
    assert failing and all(row.reason.startswith(REASONS) for row in failing)


# ------------------------------------------------------------------ the fetch, without the network


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip with no configuration and an index that refuses connections: a developer offline."""
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def test_offline_the_fetch_fails_saying_how_to_run_the_suite(no_index: None, tmp_path: Path) -> None:
    with pytest.raises(SuiteUnavailable, match=r"pip download failed .*pytorch-ignite==0\.5\.5.*-m 'not ignite_suite'"):
        fetch_sdist("0.5.5", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # no partial download left behind


def test_offline_a_cached_sdist_is_used_without_pip(no_index: None, tmp_path: Path) -> None:
    cached = tmp_path / "pytorch_ignite-0.5.5.tar.gz"
    cached.write_bytes(b"an sdist")
    assert fetch_sdist("0.5.5", tmp_path) == cached
