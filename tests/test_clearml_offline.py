"""ClearML offline mode: a local journal while offline; models on the server once the session is synced.

Real clearml SDK (``Task.set_offline``, ``CLEARML_OFFLINE_MODE``, ignite's bypass mode, its
session zip and ``Task.import_offline_session``), real ignite ``Checkpoint``/``Engine``, real
SQLite, real files; the server is the stand-in (``tests/clearml_standin/``).
"""

from __future__ import annotations

import json
import os
import signal
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tests.conftest_clearml import init_task
from tests.helpers import process_env
from tracker_saver import ConfigError, RecordState, TrackerSaver, load_checkpoint
from tracker_saver.clearml import ClearMLSaver, import_offline_session
from tracker_saver.cli.main import main
from tracker_saver.fsck import check
from tracker_saver.integrations.clearml.journal import JOURNAL, ClearMLJournal
from tracker_saver.integrations.clearml.registry import ClearMLRegistry
from tracker_saver.integrations.clearml.sync import SESSION_TAG
from tracker_saver.registry import Query
from tracker_saver.registry.context import RunContext
from tracker_saver.registry.sqlite import SQLiteRegistry

pytestmark = pytest.mark.clearml

#: The record fields an online save and a synced offline one must agree on (ids differ).
FIELDS = ("name", "state", "filename", "stream", "run", "slot", "key", "uri", "sha256", "size", "metadata",
          "tags", "created_at", "output_uri", "project")  # fmt: skip


@pytest.fixture
def offline(clearml_server: Any) -> Iterator[None]:
    """ClearML in offline mode for the test's training; online again afterwards."""
    from clearml import Task

    Task.set_offline(True)
    try:
        yield
    finally:
        Task.set_offline(False)


def _objects(root: Path) -> list[str]:
    # .tracker_saver/ holds who owns each stream, never a checkpoint (docs/sharing.md)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)


def _fields(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, f) for f in FIELDS)


def _train(saver: Any, epochs: int, n_saved: int = 2, edit: Callable[[Any], None] | None = None) -> torch.nn.Module:
    """Train ``epochs``, then ``edit(saver.registry)`` (renames, tags...) and close the saver."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    trainer = Engine(lambda engine, batch: net.weight.data.add_(1.0))  # each checkpoint differs
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=n_saved))
    trainer.run([0, 1], max_epochs=epochs)
    if edit is not None:
        edit(saver.registry)
    saver.close()
    return net


def _offline_session(
    project: str, out: Path, epochs: int = 5, edit: Callable[[Any], None] | None = None, **task_kwargs: Any
) -> tuple[Path, list[Any], torch.nn.Module]:
    """Train offline with ``ClearMLSaver`` (``edit(its journal)`` after): the session zip ClearML
    wrote, the journal's records, the model."""
    from clearml import Task

    assert Task.is_offline()
    out.mkdir(parents=True, exist_ok=True)
    task = init_task(project, "resnet (lr=0.1) [v2]", **task_kwargs)
    folder = Path(task.get_offline_mode_folder())
    net = _train(ClearMLSaver(output_uri=str(out)), epochs, edit=edit)
    task.close()
    journal = SQLiteRegistry(folder / JOURNAL)
    records = sorted(journal.records.query(Query()), key=lambda r: r.created_at)
    journal.close()
    return Path(f"{folder}.zip"), records, net


def _pushed(project: str) -> list[Any]:
    return sorted(ClearMLRegistry().records.query(Query(project=project)), key=lambda r: r.created_at)


def _session_models(standin: Any, zip_path: Path) -> list[dict[str, Any]]:
    """The models a sync of the session ``zip_path`` (``<offline id>.zip``) created."""
    return [m for m in standin.models.values() if SESSION_TAG + zip_path.stem in m["system_tags"]]


def test_offline_saver_keeps_n_saved_objects_and_journals_every_checkpoint(offline, clearml_project, tmp_path):
    out = tmp_path / "out"
    # ClearML's torch.save binding on: offline it would copy each checkpoint into the session.
    zip_path, records, _ = _offline_session(clearml_project, out, epochs=5, auto_connect_frameworks=True)
    assert len(_objects(out)) == 2 and all(".slot" in name for name in _objects(out))
    assert [(r.name, r.state) for r in records] == [
        ("model_2.pt", RecordState.EVICTED), ("model_4.pt", RecordState.EVICTED), ("model_6.pt", RecordState.EVICTED),
        ("model_8.pt", RecordState.LIVE), ("model_10.pt", RecordState.LIVE),
    ]  # fmt: skip
    assert records[-1].metadata["global_step"] == 10 and isinstance(records[-1].metadata["slot"], int)
    assert records[0].project == clearml_project
    assert records[0].run.startswith("resnet (lr=0.1) [v2].offline-")
    with zipfile.ZipFile(zip_path) as archive:  # the journal travels in the session zip
        names = archive.namelist()
        task_json = json.loads(archive.read("task.json"))
    assert JOURNAL in names
    assert not [n for n in names if n.startswith("models/")] and task_json["offline_output_models"] == []


@pytest.mark.parametrize("how", ["set_offline", "ignite_bypass_mode"])
def test_registry_clearml_is_the_tasks_journal_under_offline_mode(clearml_server, clearml_project, tmp_path, how):
    from clearml import Task
    from ignite.handlers.clearml_logger import ClearMLLogger

    ClearMLLogger.set_bypass_mode(True) if how == "ignite_bypass_mode" else Task.set_offline(True)
    try:
        task = init_task(clearml_project, "run")
        saver = TrackerSaver(tmp_path / "out", registry="clearml")  # raised ConfigError before
        assert isinstance(saver.registry, ClearMLJournal)
        # A RunContext, so the saver asks it for the task's project (5917bfc's artifact_task lost that).
        assert isinstance(saver.registry, RunContext) and saver.registry.artifact_task() is None
        assert Path(saver.registry.path) == Path(task.get_offline_mode_folder()) / JOURNAL
        assert (saver.project, saver.run) == (clearml_project, f"run.{task.id}")
        _train(saver, epochs=3, n_saved=1)
        assert len(_objects(tmp_path / "out")) == 1
        with pytest.raises(ConfigError, match=r"offline mode, where a ClearMLRegistry has no server.*keep a journal"):
            ClearMLRegistry()  # it said "cannot connect (AttributeError: ...)"
        task.close()
    finally:
        ClearMLLogger.set_bypass_mode(False) if how == "ignite_bypass_mode" else Task.set_offline(False)


def test_clearml_offline_mode_env_var_gives_the_journal_and_a_saver_left_open_still_syncs(
    clearml_server, clearml_project, tmp_path
):
    script = (
        "import sys, torch\n"
        "from ignite.engine import Engine, Events\nfrom ignite.handlers import Checkpoint\n"
        "from clearml import Task\nfrom tracker_saver import TrackerSaver\n"
        f"task = Task.init({clearml_project!r}, 'run', auto_connect_frameworks=False, auto_resource_monitoring=False)\n"
        "saver = TrackerSaver(sys.argv[1], registry='clearml')\n"
        "trainer = Engine(lambda e, b: None)\n"
        "trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({'m': torch.nn.Linear(2, 1)}, saver, n_saved=1))\n"
        "trainer.run([0], max_epochs=3)\nprint('journal', saver.registry.path, len(saver.records()))\n"
    )  # the saver is never closed: ClearML zips the session at exit, the journal's -wal file with it
    env = {**process_env(), "CLEARML_OFFLINE_MODE": "1"}
    # A new process (clearml reads CLEARML_OFFLINE_MODE at its import and zips the session at exit),
    # forked from the tests' fork server: it has imported torch and ignite, never clearml.
    done = forkserver.run("-c", [script, str(tmp_path / "out")], env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    _, path, count = next(line for line in done.stdout.splitlines() if line.startswith("journal ")).split()
    assert "/offline/offline-" in path and path.endswith(JOURNAL) and count == "3"
    assert len(_objects(tmp_path / "out")) == 1
    zip_path = Path(f"{Path(path).parents[1]}.zip")
    with zipfile.ZipFile(zip_path) as archive:
        assert JOURNAL + "-wal" in archive.namelist()  # the records may still be in the -wal file only
    report = import_offline_session(zip_path)
    assert (report.created, len(_pushed(clearml_project))) == (3, 3)


def test_a_session_imported_later_shows_each_checkpoint_as_a_model(offline, clearml_project, clearml_standin, tmp_path):
    from clearml import Task

    def edit(journal: Any) -> None:  # made offline, in the journal: they travel with the records
        live = [r for r in journal.records.query(Query()) if r.state is RecordState.LIVE]
        journal.labels.rename(live[0].id, "the one we ship")
        journal.labels.add_tags(live[0].id, ["reviewed"])
        journal.labels.set_alias(live[1].id, "production")

    zip_path, records, trained = _offline_session(clearml_project, tmp_path / "out", edit=edit)
    assert {r.name for r in records} >= {"the one we ship", "model_10.pt"}
    Task.set_offline(False)  # later, on a machine that reaches the server
    report = import_offline_session(zip_path)
    assert (report.imported, report.created, report.completed, report.unchanged) == (True, 5, 0, 0)
    # The server's registry now owns the stream at output_uri, as the journal did: fsck checks it from there.
    assert report.handed_over == 1
    fsck = check(ClearMLRegistry(), project=clearml_project)
    assert len(fsck.streams) == 1 and [f.kind for f in fsck.findings] == [], fsck.findings
    pushed = _pushed(clearml_project)
    assert [_fields(r) for r in pushed] == [_fields(r) for r in records]  # names, typed metadata, states
    assert [r.aliases for r in pushed] == [r.aliases for r in records]  # production, latest, best
    task = clearml_standin.tasks[report.task_id]
    assert task["name"] == "resnet (lr=0.1) [v2]" and task["status"] == "completed"
    # clearml-server changes no finished task: each model is linked by its task field, none is listed
    assert task["models"]["output"] == []
    assert {m["task"] for m in _session_models(clearml_standin, zip_path)} == {report.task_id}
    evicted = [m for m in _session_models(clearml_standin, zip_path) if "evicted" in m["tags"]]
    assert len(evicted) == 3 and all("archived" in m["system_tags"] and not m["uri"] for m in evicted)
    # the newest checkpoint, saved offline, loads from its model
    net = torch.nn.Linear(3, 2)
    loaded = load_checkpoint(pushed[-1].id, {"model": net}, registry=ClearMLRegistry())
    assert loaded.filename == "model_10.pt" and torch.equal(net.weight, trained.weight)


def test_syncing_twice_is_syncing_once(offline, clearml_project, clearml_standin, tmp_path, capsys):
    from clearml import Task

    zip_path, records, _ = _offline_session(clearml_project, tmp_path / "out")
    Task.set_offline(False)
    first = import_offline_session(zip_path.with_suffix(""))  # the session folder ...
    ClearMLRegistry().labels.rename(_pushed(clearml_project)[-1].id, "renamed on the server")
    models, tasks = len(clearml_standin.models), len(clearml_standin.tasks)
    capsys.readouterr()
    assert main(["sync", str(zip_path), "--json"]) == 0  # ... and its zip, from the command line
    second = json.loads(capsys.readouterr().out)
    assert second == {"task_id": first.task_id, "imported": False, "created": 0, "completed": 0, "unchanged": 5, "handed_over": 0,
                      "records": 5}  # fmt: skip
    assert (len(clearml_standin.models), len(clearml_standin.tasks)) == (models, tasks)
    pushed = _pushed(clearml_project)
    assert pushed[-1].name == "renamed on the server"  # a later sync never overwrites a rename
    assert [_fields(r)[1:] for r in pushed] == [_fields(r)[1:] for r in records]


def test_a_sync_killed_half_way_finishes_on_rerun_without_duplicates(
    offline, clearml_project, clearml_standin, tmp_path
):
    from clearml import Task

    zip_path, records, _ = _offline_session(clearml_project, tmp_path / "out")
    Task.set_offline(False)
    k = 2  # killed once the k-th model exists and before its metadata (the commit point) is written
    held = len(clearml_standin.hung)
    with clearml_standin.hang(r"^models\.add_or_update_metadata$", after=k - 1):
        with (tmp_path / "sync.log").open("w") as log:
            # a process of its own, to be killed: forked from the tests' fork server (imports paid once)
            child = forkserver.spawn(
                "tracker_saver", ["sync", str(zip_path)], env=process_env(), stdout=log, stderr=log
            )
            deadline = time.monotonic() + 120
            while len(clearml_standin.hung) == held:  # the child waits on the k-th record's metadata
                assert child.poll() is None and time.monotonic() < deadline, (tmp_path / "sync.log").read_text()
                time.sleep(0.01)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    half = _session_models(clearml_standin, zip_path)
    assert len(half) == k and "state" not in half[-1]["metadata"]  # the k-th model is not a record yet
    report = import_offline_session(zip_path)
    assert not report.imported and report.created == len(records) - k and report.completed >= 1
    assert len(_session_models(clearml_standin, zip_path)) == len(records)
    assert len([t for t in clearml_standin.tasks.values() if SESSION_TAG + zip_path.stem in t["system_tags"]]) == 1
    assert [_fields(r) for r in _pushed(clearml_project)] == [_fields(r) for r in records]


def test_a_plain_clearml_import_carries_no_model_and_sync_task_id_pushes_them(
    offline, clearml_project, clearml_standin, tmp_path, capsys
):
    from clearml import Task

    zip_path, records, _ = _offline_session(clearml_project, tmp_path / "out")
    Task.set_offline(False)
    task_id = Task.import_offline_session(str(zip_path))
    assert _pushed(clearml_project) == []  # why users call tracker-saver sync
    capsys.readouterr()
    assert main(["sync", str(zip_path), "--task-id", task_id]) == 0
    out = capsys.readouterr().out
    assert f"already in task {task_id}: 5 records, 5 models created" in out and "model_10.pt" in out
    project_id = next(p["id"] for p in clearml_standin.projects.values() if p["name"] == clearml_project)
    assert [t["id"] for t in clearml_standin.tasks.values() if t.get("project") == project_id] == [task_id]
    assert [_fields(r) for r in _pushed(clearml_project)] == [_fields(r) for r in records]


def test_sync_refuses_what_is_not_a_session_before_importing_anything(
    offline, clearml_project, clearml_standin, tmp_path
):
    from clearml import Task

    task = init_task(clearml_project, "no saver")
    bare = Path(f"{task.get_offline_mode_folder()}.zip")
    task.close()
    not_zip = tmp_path / "session.zip"
    not_zip.write_text("not a zip")
    with pytest.raises(ConfigError, match="ClearML is in offline mode here.*unset CLEARML_OFFLINE_MODE"):
        import_offline_session(bare)
    Task.set_offline(False)
    tasks = len(clearml_standin.tasks)
    with pytest.raises(ConfigError, match=r"does not exist: pass the offline session zip or folder"):
        import_offline_session(tmp_path / "missing.zip")
    with pytest.raises(ConfigError, match="is not a zip file"):
        import_offline_session(not_zip)
    with pytest.raises(ConfigError, match="has no tracker_saver journal.*Task.import_offline_session instead"):
        import_offline_session(bare)
    assert len(clearml_standin.tasks) == tasks


def test_sync_project_root_puts_the_models_under_it(offline, clearml_project, tmp_path, capsys):
    from clearml import Task

    zip_path, records, _ = _offline_session(clearml_project, tmp_path / "out", epochs=2)
    Task.set_offline(False)
    assert main(["sync", str(zip_path), "--project-root", "team-root"]) == 0
    under = ClearMLRegistry(project_root="team-root").records.query(Query(project=clearml_project))
    assert sorted(_fields(r) for r in under) == sorted(_fields(r) for r in records)
    assert _pushed(clearml_project) == []  # not in the project itself
