"""Where the drop-in ``ClearMLSaver`` records and writes when it is not told: the task decides.

``registry=`` naming another registry never touches ClearML (offline mode works), and its
records still get the task's project and ``<task name>.<task id>`` run. Real clearml SDK
(offline, or against the stand-in), real Ignite, real SQLite and files.
"""

from __future__ import annotations

import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_clearml import init_task
from tests.helpers import attach, model, trainer_engine
from tracker_saver import RecordState, find_models
from tracker_saver.naming import key_segment
from tracker_saver.registry.sqlite import SQLiteRegistry

pytestmark = pytest.mark.clearml

#: ignite's own tests match its warning with this text; ours starts with it too.
IGNITE_WARNING = "ClearMLSaver created a temporary checkpoints directory: "
TEMPORARY = re.compile(re.escape(IGNITE_WARNING) + r"(?P<path>.+?); it will not survive a reboot")
# A spawned rank must not take the pytest process for its ClearML master process.
_MASTER_ENV = ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID", "CLEARML_TASK_ID")


def _objects(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _train(saver: Any, epochs: int = 3) -> None:
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=epochs)


@pytest.fixture
def offline_task(clearml_server: Any, clearml_project: str) -> Iterator[Any]:
    """A task made in ClearML's offline mode (no server is asked for anything), closed after the test."""
    from clearml import Task

    Task.set_offline(True)
    task = init_task(clearml_project, "offline")
    try:
        yield task
    finally:
        task.close()
        Task.set_offline(False)


@pytest.fixture
def task_without_output_uri(clearml_server: Any, clearml_project: str) -> Iterator[Any]:
    task = init_task(clearml_project, "no-output")
    try:
        assert not task.output_uri  # the case under test: nowhere the task would write
        yield task
    finally:
        task.close()


@pytest.fixture
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile``'s folder for this test only, so the temporary folders it makes can be counted."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _temporary_folder(caught: list[warnings.WarningMessage]) -> Path:
    (message,) = [str(w.message) for w in caught if str(w.message).startswith(IGNITE_WARNING)]
    found = TEMPORARY.match(message)
    assert found, message
    assert "output_uri=" in message  # and how to keep the checkpoints
    return Path(found["path"])


# -- registry= another registry: ClearML is never asked ----------------------------------------
def test_a_sqlite_registry_under_an_offline_task_saves_and_records(
    offline_task, clearml_standin, clearml_project, tmp_path
) -> None:
    from tracker_saver.clearml import ClearMLSaver

    out, db = tmp_path / "output", str(tmp_path / "registry.db")
    out.mkdir()  # ClearML refuses a local output_uri that does not exist
    sent = len(clearml_standin.calls)
    saver = ClearMLSaver(output_uri=str(out), registry=db)
    _train(saver)
    saver.close()
    assert clearml_standin.calls[sent:] == []  # not one request, not even a login
    run = f"offline.{offline_task.id}"
    records = find_models(registry=db)
    assert [(r.project, r.run) for r in records] == [(clearml_project, run)] * 3
    assert [r.state for r in records] == [RecordState.EVICTED, RecordState.EVICTED, RecordState.LIVE]
    assert _objects(out) == [f"{clearml_project}/{key_segment(run)}/model.slot0.pt"]


@pytest.mark.parametrize("how", ["a path", "a SQLiteRegistry"])
def test_a_sqlite_registry_under_an_online_task_records_the_task_project_and_run(
    clearml_standin, clearml_task, clearml_project, tmp_path, how
) -> None:
    from tracker_saver.clearml import ClearMLSaver

    db = str(tmp_path / "registry.db")
    sent = len(clearml_standin.calls)
    saver = ClearMLSaver(registry=db if how == "a path" else SQLiteRegistry(db))
    _train(saver)
    saver.close()
    # No login, no model, no project lookup: only the task's own event reporter may talk.
    assert [c.endpoint for c in clearml_standin.calls[sent:] if not c.endpoint.startswith("events.")] == []
    # What an online ClearML registry records, without asking the server for it.
    assert (saver.project, saver.run) == (clearml_project, f"run.{clearml_task.id}")
    online = ClearMLSaver()
    online.close()
    assert (online.project, online.run) == (saver.project, saver.run)
    records = find_models(registry=db)
    assert {(r.project, r.run) for r in records} == {(clearml_project, f"run.{clearml_task.id}")} and len(records) == 3
    mine = ClearMLSaver(registry=db, project="mine", run="r1")  # what the user passes still wins
    assert (mine.project, mine.run) == ("mine", "r1")
    mine.close()
