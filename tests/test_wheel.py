"""A wheel built from the clone holds every folder of the package, and its commands run outside the clone.

The layout moved modules into folders (issue 43): a folder the build missed would fail only for
users who install a wheel, never in this editable checkout. So build one, install it into an
empty folder, and run ``tracker-saver`` and ``python -m tracker_saver`` from elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import ROOT


def test_a_wheel_installed_outside_the_clone_runs_both_commands(tmp_path: Path) -> None:
    wheels, target, elsewhere, source = (tmp_path / name for name in ("wheels", "site", "elsewhere", "source"))
    elsewhere.mkdir()
    # A copy of what a build reads, so that the build leaves no build/ folder in the clone.
    shutil.copytree(ROOT / "tracker_saver", source / "tracker_saver", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
                   check=True, cwd=tmp_path, timeout=300)  # fmt: skip
    (wheel,) = wheels.glob("tracker_saver-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for folder in (p for p in (ROOT / "tracker_saver").rglob("*") if p.is_dir() and p.name != "__pycache__"):
        assert any(n.startswith(folder.relative_to(ROOT).as_posix() + "/") for n in names), folder
    assert "tracker_saver/py.typed" in names and any(n.startswith("tracker_saver/ui/static/") for n in names)
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run([sys.executable, "-c", "import tracker_saver; print(tracker_saver.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert where.stdout.strip().startswith(str(target))
    for command in (
        [str(target / "bin" / "tracker-saver"), "--help"],
        [sys.executable, "-m", "tracker_saver", "--help"],
    ):
        done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "models" in done.stdout, (command, done.stderr[-2000:])
