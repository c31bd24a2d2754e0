"""Where the drop-in ``ClearMLSaver`` records and writes when it is not told: the task decides.

``registry=`` naming another registry never touches ClearML (offline mode works), and its
records still get the task's project and ``<task name>.<task id>`` run. A task with no
output_uri gets, as with ignite's ``ClearMLSaver``, a new temporary folder and a warning that
names it; in distributed training every rank writes to the saving rank's one folder. Real
clearml SDK (offline, or against the stand-in), real Ignite, real SQLite and files.
"""

from __future__ import annotations

import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import pytest
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint

from tests.conftest_clearml import init_task
from tests.helpers import attach, model, trainer_engine
from tests.test_ddp import _parallel, _report, _reports, _trainer
from tracker_saver import ConfigError, RecordState, find_models
from tracker_saver.core.naming import key_segment
from tracker_saver.registry.sqlite import SQLiteRegistry

pytestmark = pytest.mark.clearml

#: ignite's own tests match its warning with this text; ours starts with it too.
IGNITE_WARNING = "ClearMLSaver created a temporary checkpoints directory: "
TEMPORARY = re.compile(re.escape(IGNITE_WARNING) + r"(?P<path>.+?); it will not survive a reboot")
# A spawned rank must not take the pytest process for its ClearML master process.
_MASTER_ENV = ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID", "CLEARML_TASK_ID")


def _objects(root: Path) -> list[str]:
    # .tracker_saver/ holds who owns each stream, never a checkpoint (docs/sharing.md)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)


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


# -- no output_uri: a temporary folder, as ignite does ----------------------------------------
def test_a_task_without_output_uri_writes_to_a_new_temporary_folder_and_says_so(
    clearml_standin, task_without_output_uri, clearml_project, private_tempdir
) -> None:
    from tracker_saver.clearml import ClearMLSaver

    run = f"no-output.{task_without_output_uri.id}"
    with pytest.warns(UserWarning, match=re.escape(IGNITE_WARNING)) as caught:
        saver = ClearMLSaver()  # ignite's docstring example: no argument at all
    folder = _temporary_folder(caught.list)
    assert folder.parent == private_tempdir and folder.name.startswith("tracker_saver_checkpoints_")
    _train(saver)
    saver.close()
    assert _objects(folder) == [f"{clearml_project}/{key_segment(run)}/model.slot0.pt"]
    (live,) = saver.records(live=True)
    assert live.uri.startswith(folder.as_uri())
    with pytest.warns(UserWarning, match=re.escape(IGNITE_WARNING)) as again:
        second = ClearMLSaver()
    second.close()
    other = _temporary_folder(again.list)
    assert other != folder and other.is_dir() and folder.is_dir()  # a new folder per saver, as ignite
    assert sorted(p.name for p in private_tempdir.iterdir()) == sorted([folder.name, other.name])


def test_output_uri_comes_first_then_the_task_s_then_a_temporary_folder_never_dirname(
    clearml_standin, task_without_output_uri, private_tempdir, tmp_path
) -> None:
    from tracker_saver.clearml import ClearMLSaver

    given, dirname = tmp_path / "given", str(tmp_path / "dirname")
    given.mkdir()  # ClearML refuses a local output_uri that does not exist (as with ignite's saver)
    with pytest.warns(UserWarning, match=re.escape(IGNITE_WARNING)) as caught:
        temporary = ClearMLSaver(dirname=dirname)
    temporary.close()
    assert temporary.storage.uri == _temporary_folder(caught.list).resolve().as_uri()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no temporary folder below
        explicit = ClearMLSaver(output_uri=str(given), dirname=dirname)
        explicit.close()
        task_s = ClearMLSaver(dirname=dirname)  # output_uri= became the task's, as in ignite
        task_s.close()
    assert explicit.storage.uri == task_s.storage.uri == given.resolve().as_uri()
    assert task_without_output_uri.output_uri == given.as_uri()
    assert len(list(private_tempdir.iterdir())) == 1  # dirname was never the output_uri


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"project": "  "}, "project"), ({"save_on_rank": -1}, "save_on_rank")],
)
def test_bad_input_without_output_uri_leaves_no_temporary_folder(
    clearml_standin, task_without_output_uri, private_tempdir, kwargs, match
) -> None:
    from tracker_saver.clearml import ClearMLSaver

    with warnings.catch_warnings(record=True) as caught, pytest.raises(ConfigError, match=match):
        warnings.simplefilter("always")
        ClearMLSaver(**kwargs)
    assert list(private_tempdir.iterdir()) == []
    assert not [w for w in caught if str(w.message).startswith(IGNITE_WARNING)]  # it would name a folder that is gone


# -- distributed: one folder, made by the saving rank, named to every rank -----------------------
def _train_in_a_temporary_folder(local_rank: int, root: str, save_on_rank: int) -> None:
    from clearml import Task

    from tracker_saver.clearml import ClearMLSaver

    tempfile.tempdir = f"{root}/tmp"
    Task.set_offline(True)  # each rank its own offline task: no server in this test
    task = init_task("ddp", f"rank{idist.get_rank()}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saver = ClearMLSaver(registry=f"{root}/registry.db", save_on_rank=save_on_rank)
    net = torch.nn.Linear(2, 1)
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    trainer.run([0], max_epochs=2)
    saver.close()
    _report(root, made=str(_temporary_folder(caught)), uri=saver.storage.uri, run=saver.run)
    task.close()


def test_in_distributed_training_every_rank_names_the_saving_rank_s_temporary_folder(
    clearml_server, tmp_path, monkeypatch
) -> None:
    for name in _MASTER_ENV:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "tmp").mkdir()
    _parallel(_train_in_a_temporary_folder, str(tmp_path), 1)
    rank0, rank1 = _reports(tmp_path)
    assert rank0["made"] == rank1["made"] and rank0["uri"] == rank1["uri"]
    (made,) = (tmp_path / "tmp").iterdir()  # one folder for the world, not one per rank
    assert str(made) == rank0["made"]
    assert _objects(made) == [f"ddp/{key_segment(rank1['run'])}/model.slot0.pt"]  # rank 1 saved there
