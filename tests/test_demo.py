"""The demo a new user runs: two streams, the folder listing and the registry table."""

from __future__ import annotations

import subprocess
import sys


def test_demo_trains_and_shows_three_slot_objects_and_the_registry(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tracker_saver", "demo", "--output-dir", str(tmp_path / "demo"), "--epochs", "4"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "holds 3 objects" in out
    for key in ("best_model.slot0.pt", "best_model.slot1.pt", "checkpoint.slot0.pt"):
        assert f"demo/small-cnn/{key}" in out
    assert out.count("│ live") == 3 and "│ evicted" in out
    assert "best live checkpoint: best_model_" in out
    assert not (tmp_path / "demo" / "checkpoints" / "registry.db").exists()
