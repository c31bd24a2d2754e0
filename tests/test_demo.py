"""The demo a new user runs: two streams, the folder listing and the registry table."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tracker_saver.cli.demo import cli_command

SCRIPT = Path(sys.executable).absolute().parent / "tracker-saver"


def test_demo_trains_and_shows_three_slot_objects_and_the_registry(tmp_path: Path) -> None:
    # The venv is not activated, as after `bash scripts/dev.sh demo`: its bin folder is not on PATH.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != SCRIPT.parent)
    done = subprocess.run(
        [sys.executable, "-m", "tracker_saver", "demo", "--output-dir", "demo", "--epochs", "4"],
        cwd=tmp_path, env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "holds 3 objects" in out
    for key in ("best_model.slot0.pt", "best_model.slot1.pt", "checkpoint.slot0.pt"):
        assert f"demo/small-cnn/{key}" in out
    assert out.count("│ live") == 3 and "│ evicted" in out
    assert "best live checkpoint: best_model_" in out
    assert not (tmp_path / "demo" / "checkpoints" / "registry.db").exists()
    hint = out.strip().splitlines()[-1]
    # run from tmp_path, with the venv off PATH: the script by its absolute path
    command = shlex.quote(str(SCRIPT)) if SCRIPT.is_file() else f"{shlex.quote(sys.executable)} -m tracker_saver"
    assert hint == f"try: {command} --registry demo/registry.db models list --where 'score>0.5' --sort -score"
    assert not hint.startswith("try: tracker-saver ")  # not on PATH: the bare name is `command not found`


def test_the_hint_names_the_script_beside_python_by_a_path_that_works_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "tracker-saver").write_text("#!/bin/sh\n")
    (bin_dir / "tracker-saver").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert cli_command() == "venv/bin/tracker-saver"  # under the current folder: relative, as the README shows
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert cli_command() == str(bin_dir / "tracker-saver")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin")
    assert cli_command() == "tracker-saver"  # activated: PATH finds that very script


def test_without_a_script_beside_python_the_hint_is_python_m(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "odd dir" / "python3"))
    assert cli_command() == f"'{tmp_path}/odd dir/python3' -m tracker_saver"
