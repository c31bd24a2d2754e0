"""The releases table of docs/releases.md is the record of each release: its commits exist, its newest
row is the version the package says, and the changelog has a section for every row.

Git tags may not travel with a copy of the repository, so the table is what the upgrade tests
(tests/test_upgrade.py) and people read to find a release's code.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

import tomllib

import tracker_saver
from tests.helpers import ROOT

RELEASES = ROOT / "docs" / "releases.md"
CHANGELOG = ROOT / "CHANGELOG.md"
UNRELEASED = "unreleased"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str  # "unreleased" for the one being made
    date: str


def releases() -> list[Release]:
    """The rows of docs/releases.md's "Releases" table, newest first, as written."""
    text = RELEASES.read_text()
    section = text.split("\n## Releases\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert rows[0] == "| version | commit | date |", rows[0]
    out = []
    for row in rows[1:]:
        version, commit, date = (cell.strip() for cell in row.strip("| ").split(" | "))
        out.append(Release(version, commit, date))
    return out


def released() -> list[Release]:
    """The releases that were made (a commit, not "unreleased"), newest first."""
    return [r for r in releases() if r.commit != UNRELEASED]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def earlier() -> list[Release]:
    """The releases made before the package's own version (``0.2.0`` and ``0.2.0.dev0``: those before 0.2.0)."""
    own = _key(re.sub(r"\.dev\d+$", "", tracker_saver.__version__))
    return [r for r in released() if _key(r.version) < own]


def test_the_releases_table_names_0_1_0_at_its_commit_and_the_release_this_makes() -> None:
    rows = {r.version: r for r in releases()}
    assert rows["0.1.0"] == Release("0.1.0", "69594d5", "2026-12-05")
    assert "0.2.0" in rows


def test_every_release_in_the_table_is_a_commit_of_this_repository() -> None:
    for release in released():
        assert re.fullmatch(r"[0-9a-f]{7,40}", release.commit), release
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", release.date), release
        found = subprocess.run(["git", "cat-file", "-e", f"{release.commit}^{{commit}}"], cwd=ROOT, check=False)
        assert found.returncode == 0, f"{release.version}'s commit {release.commit} is not in this repository's history"


def test_the_table_is_newest_first_with_at_most_the_top_row_unreleased() -> None:
    rows = releases()
    versions = [_key(r.version) for r in rows]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert all(r.commit != UNRELEASED and r.date != UNRELEASED for r in rows[1:]), rows
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", r.version) for r in rows), rows


def test_the_package_version_is_the_newest_release_or_its_development_version() -> None:
    newest = releases()[0]
    if newest.commit == UNRELEASED:
        assert re.fullmatch(re.escape(newest.version) + r"\.dev\d+", tracker_saver.__version__), (
            f"__version__ {tracker_saver.__version__!r}: while {newest.version} is unreleased it is {newest.version}.devN"
        )
    else:
        assert tracker_saver.__version__ == newest.version


def test_pyproject_takes_the_version_from_the_package_alone() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tracker_saver.__version__"}


def test_the_changelog_has_a_section_for_every_release_in_the_table() -> None:
    headings = re.findall(r"^## (\d+\.\d+\.\d+) \((.*)\)$", CHANGELOG.read_text(), flags=re.M)
    assert [v for v, _ in headings] == [r.version for r in releases()]
    for (version, when), release in zip(headings, releases(), strict=True):
        expected = UNRELEASED if release.commit == UNRELEASED else f"{release.date}, commit {release.commit}"
        assert when == expected, (version, when)


def test_the_readme_links_the_changelog_the_policy_and_compatibility() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in ("CHANGELOG.md", "docs/releases.md", "docs/compatibility.md"):
        assert f"]({target}" in readme, target
