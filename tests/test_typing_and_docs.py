"""The package type-checks under mypy --strict, ruff finds nothing, and the README and the docs show the same commands
(the site itself is built by tests/test_docs.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_passes_on_the_package(tmp_path: Path) -> None:
    # Its cache in the test's folder: a test run leaves no .mypy_cache/ in the checkout.
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "tracker_saver"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_lint_and_format_are_clean() -> None:
    for args in (["check", "--no-cache", "."], ["format", "--no-cache", "--check", "."]):
        done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_readme_and_getting_started_show_the_same_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    start = (ROOT / "docs" / "index.md").read_text()
    for command in ("bash scripts/dev.sh demo", "bash scripts/dev.sh test"):
        assert command in readme
    assert "bash scripts/dev.sh demo" in start
    for snippet in re.findall(
        r'TrackerSaver\(output_uri="\./checkpoints", project="mnist", run="resnet-lr0.1"\)', readme
    ):
        assert snippet in start
    assert (ROOT / ".ci" / "run").read_text().count("scripts/dev.sh test") == 1
