"""The package type-checks under mypy --strict, ruff finds nothing, and the README and the docs show the same commands
(the site itself is built by tests/test_docs.py)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_passes_on_the_package() -> None:
    # No cache written (mypy's documented --cache-dir=/dev/null): a test run leaves no .mypy_cache/ in
    # the checkout, and a cold run never reads one; writing it cost 1-2 s of CPU for nothing.
    command = [sys.executable, "-m", "mypy", "--cache-dir", os.devnull, "tracker_saver"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _dotted(node: ast.expr) -> str | None:
    """`torch.fx.Graph` for that attribute chain; None for a chain that does not start at a name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def test_the_package_uses_no_module_mypy_skips_for_speed() -> None:
    # pyproject.toml skips torch's internals and packages that only come in through others (the
    # override with follow_imports_for_stubs): their types would be Any in the package, so the package
    # must neither import them nor reach them as attributes (`torch.distributed.barrier()`).
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    skipped = [m.removesuffix(".*") for o in overrides if o.get("follow_imports_for_stubs") for m in o["module"]]
    assert "torch.distributed" in skipped and "numpy" in skipped
    used = []
    for path in sorted((ROOT / "tracker_saver").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Attribute):
                names = [name] if (name := _dotted(node)) else []
            else:
                continue
            bad = [n for n in names for m in skipped if n == m or n.startswith(m + ".")]
            used += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in bad]
    assert not used, used


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
