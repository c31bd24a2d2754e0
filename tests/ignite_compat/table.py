"""docs/migration.md's table of ignite's tests, and the check that a run of them agrees with it.

A row is ``| `test_checkpoint.py::test_x` | passes |  |`` or ``| ... | fails | REASON: why |``,
where REASON is one of :data:`REASONS`, the only ones issue 26 accepts. The closing note gives
the counts of each file, ours and ignite's own, in the words :data:`COUNTS` reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.ignite_compat.suite import ROOT, SuiteResult

PAGE = ROOT / "docs" / "migration.md"

#: Why one of ignite's tests may fail against our classes: nothing else.
REASONS = (
    "reads a private attribute of ignite's class",
    "pins ignite's message wording",
    "checks a deliberate, documented difference",
)

ROW = re.compile(r"^\|\s*`(test_\w+\.py::[^`]+)`\s*\|\s*(passes|fails)\s*\|(.*)\|\s*$")
VERSION = re.compile(r"Counts with pytorch-ignite ([\w.+-]+)")
COUNTS = re.compile(
    r"`(test_\w+\.py)`[^:\n]*: ours (\d+) passed, (\d+) failed, (\d+) skipped; "
    r"ignite's own class (\d+) passed, (\d+) failed, (\d+) skipped"
)


@dataclass(frozen=True)
class Row:
    """One row of the table: the test id, ``passes`` or ``fails``, and the reason (empty when it passes)."""

    test: str
    result: str
    reason: str


def read_page(page: Path = PAGE) -> tuple[dict[str, Row], str | None, dict[str, tuple[int, ...]]]:
    """The table's rows by test id, the ignite version the counts are for, and the counts by file."""
    text = page.read_text()
    rows: dict[str, Row] = {}
    for line in text.splitlines():
        if match := ROW.match(line):
            test, result, reason = match.group(1), match.group(2), match.group(3).strip()
            rows[test] = Row(test, result, reason)
    version = match.group(1) if (match := VERSION.search(text)) else None
    counts = {m.group(1): tuple(int(n) for n in m.groups()[1:]) for m in COUNTS.finditer(text)}
    return rows, version, counts


def disagreements(
    result: SuiteResult, rows: dict[str, Row], version: str | None, counts: dict[str, tuple[int, ...]]
) -> list[str]:
    """Every way ``result`` and the page disagree, each a sentence naming the test and the fix; [] if none."""
    fix = "run `python -m tests.ignite_compat` and update docs/migration.md"
    problems: list[str] = []
    if version != result.ignite_version:
        problems.append(f"the counts are for pytorch-ignite {version}, but {result.ignite_version} is installed: {fix}")
    for test, base in sorted(result.baseline.items()):
        if base.outcome == "failed":
            problems.append(f"{test} fails with ignite's own classes ({base.error}): this machine cannot run it")
    for test, ours in sorted(result.swapped.items()):
        row = rows.get(test)
        passes = ours.outcome == "passed" or (ours.outcome == "skipped" and result.baseline[test].outcome == "skipped")
        if row is None:
            if ours.ours or not passes:
                what = "passes" if passes else f"fails ({ours.error})"
                problems.append(
                    f"{test} {'builds our saver and ' if ours.ours else ''}{what}, but the table lacks it: {fix}"
                )
            continue
        if row.result == "passes" and not passes:
            problems.append(f"{test}: the table says it passes, but it {ours.outcome} against ours ({ours.error})")
        elif row.result == "fails" and passes:
            problems.append(f"{test}: the table says it fails, but it passes against ours: make the row `passes`")
        elif row.result == "fails" and not row.reason.startswith(REASONS):
            problems.append(
                f"{test} fails ({ours.error}) for a reason issue 26 does not accept ({row.reason!r}): "
                f"fix the code, or give one of {REASONS}"
            )
    for test in sorted(set(rows) - set(result.swapped)):
        problems.append(f"the table names {test}, which ignite's tests (pytorch-ignite {result.ignite_version}) lack")
    for file, runs in sorted(result.counts().items()):
        ours, base = runs["ours"], runs["ignite"]
        measured = tuple(r[k] for r in (ours, base) for k in ("passed", "failed", "skipped"))
        if counts.get(file) != measured:
            problems.append(f"{file}: the closing note gives {counts.get(file)}, measured {measured}: {fix}")
    return problems
