"""Files are readable like Ignite's ``DiskSaver`` files: the umask decides (0o644 under 022).

Each case runs in a subprocess with its own umask (a process-wide setting), through a real
``Checkpoint`` and ``Engine``: the slot files, a log file, a download, and the registry's folder.
"""

from __future__ import annotations

import stat
import textwrap
from pathlib import Path

import pytest

from tests import forkserver
from tests.helpers import process_env

CHILD = textwrap.dedent(
    """
    import os, sys, torch
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint
    from tracker_saver import TrackerSaver, find_models
    from tracker_saver.models import download_model

    os.umask(int(sys.argv[1], 8))
    work = sys.argv[2]
    registry = os.path.join(work, "new-folder", "registry.db")
    saver = TrackerSaver(os.path.join(work, "ckpt"), project="p", run="r", registry=registry)
    trainer = Engine(lambda e, b: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=2))
    trainer.run([0], max_epochs=2)
    download_model(find_models(project="p", registry=registry, live=True)[0], os.path.join(work, "out") + "/")
    """
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"),
    [("022", 0o644, 0o755), ("027", 0o640, 0o750), ("077", 0o600, 0o700)],
    ids=["umask-022", "umask-027", "umask-077"],
)
def test_slot_files_downloads_and_the_registry_folder_follow_the_umask(
    tmp_path: Path, umask: str, file_mode: int, dir_mode: int
) -> None:
    done = forkserver.run("-c", [CHILD, umask, str(tmp_path)], env=process_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    slots = sorted((tmp_path / "ckpt" / "p" / "r").iterdir())
    assert [p.name for p in slots] == ["model.slot0.pt", "model.slot1.pt"]
    for path in [*slots, *(tmp_path / "out").iterdir()]:
        assert _mode(path) == file_mode, f"{path}: {oct(_mode(path))}, umask {umask}"
    assert _mode(tmp_path / "new-folder") == dir_mode
    assert _mode(tmp_path / "new-folder" / "registry.db") == file_mode
