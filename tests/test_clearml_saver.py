"""TrackerSaver with the ClearML registry, through the real clearml SDK against the stand-in.

Includes the reproduction from the TrainsSaver discussion: a CNN trained under
``Task.init(output_uri=<dir>)`` with ClearML's torch.save binding on, ``n_saved=1``,
``filename_prefix="epoch"``, 3 epochs — once with ignite's ClearMLSaver, once with ours.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from ignite.engine import Events, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from torch.utils.data import DataLoader

from tests import forkserver
from tests.conftest_clearml import init_task
from tests.contracts.invariants import InvariantContract
from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver import RecordState, RegistryError, TrackerSaver, find_models, load_checkpoint
from tracker_saver.cli.demo import make_data, small_cnn
from tracker_saver.core.errors import StreamBusyError

pytestmark = pytest.mark.clearml


class TestClearMLInvariants(InvariantContract):
    FAULTS = ("serialize", "skip")  # the "registry" fault locks a SQLite file

    @pytest.fixture
    def target(self, clearml_server, clearml_project, tmp_path):
        return Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")


def _objects(root: Path) -> list[str]:
    # .tracker_saver/ holds who owns each stream, never a checkpoint (docs/sharing.md)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts)


@contextlib.contextmanager
def _task(project: str, name: str, out: Path, **kwargs):
    # The default Task.init: ClearML patches torch.save and uploads whatever it sees.
    out.mkdir(parents=True, exist_ok=True)  # ClearML refuses a missing local output_uri
    task = init_task(project, name, output_uri=str(out), auto_connect_frameworks=True, **kwargs)
    try:
        yield task
    finally:
        task.close()


def _train_cnn(saver, epochs: int = 3):
    """Train the CNN for ``epochs``; returns a function that trains on to a later epoch."""
    torch.manual_seed(0)
    net = small_cnn()
    opt = torch.optim.SGD(net.parameters(), lr=0.02)
    trainer = create_supervised_trainer(net, opt, torch.nn.CrossEntropyLoss())
    handler = Checkpoint({"model": net}, saver, n_saved=1, filename_prefix="epoch",
                         global_step_transform=global_step_from_engine(trainer))  # fmt: skip
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    data = DataLoader(make_data(64, seed=1), batch_size=32)
    trainer.run(data, max_epochs=epochs)
    return lambda until: trainer.run(data, max_epochs=until)


def test_ignite_clearml_saver_in_the_discussion_scenario(clearml_standin, clearml_project, tmp_path) -> None:
    """The baseline our docs compare against: one model per slot, renamed; metadata a string."""
    from ignite.handlers.clearml_logger import ClearMLSaver as IgniteClearMLSaver

    out = tmp_path / "output"
    with _task(clearml_project, "ignite-saver", out) as task:
        _train_cnn(IgniteClearMLSaver(dirname=str(tmp_path / "tmp")))
        task.flush(wait_for_uploads=True)
        models = [m for m in clearml_standin.models.values() if m["task"] == task.id]
    assert len(_objects(out)) == 1
    assert len(models) == 1  # three checkpoints, one entity
    (entity,) = models
    assert entity["name"] != "epoch_model_1.pt" and not entity.get("metadata")
    assert "Checkpoint Metadata" in entity.get("comment", "")


def test_tracker_saver_in_the_discussion_scenario(clearml_standin, clearml_project, tmp_path) -> None:
    from tracker_saver.clearml import ClearMLSaver

    out = tmp_path / "output"
    with _task(clearml_project, "our-saver", out) as task:
        saver = ClearMLSaver(dirname=str(tmp_path / "tmp"))
        train_on = _train_cnn(saver)
        names = sorted(m["name"] for m in clearml_standin.models.values() if m["task"] == task.id)
        records = find_models(project=clearml_project, run=f"our-saver.{task.id}", registry=saver.registry)
        clearml_standin.edit_model(records[0].id, name="renamed in the web UI")
        train_on(5)
        after = saver.registry.records.get(records[0].id)
    assert _objects(out) == [f"{clearml_project}/our-saver.{task.id}/epoch_model.slot0.pt"]  # ClearML's own layout
    assert names == ["epoch_model_1.pt", "epoch_model_2.pt", "epoch_model_3.pt"]
    assert [r.global_step for r in records] == [1, 2, 3] and type(records[0].metadata["global_step"]) is int
    assert [r.state for r in records] == [RecordState.EVICTED, RecordState.EVICTED, RecordState.LIVE]
    assert after.name == "renamed in the web UI"
    live = [
        m
        for m in clearml_standin.models.values()
        if m["task"] == task.id and "archived" not in m.get("system_tags", [])
    ]
    assert len(live) == 1 and live[0]["uri"].endswith("epoch_model.slot0.pt")
    # only the live model can be downloaded through ClearML: the others' slot holds other bytes now
    assert [m["uri"] for m in clearml_standin.models.values() if m["task"] == task.id and m not in live] == [""] * 4
    assert clearml_standin.unknown_calls == []


def test_defaults_come_from_the_task(clearml_standin, clearml_project, tmp_path) -> None:
    out = tmp_path / "output"
    with _task(clearml_project, "defaults", out) as task:
        saver = TrackerSaver(registry="clearml")
        assert (saver.project, saver.run) == (clearml_project, f"defaults.{task.id}")  # a run is a task id
        assert saver.storage.uri == out.resolve().as_uri()


@pytest.mark.parametrize("make", ["ClearMLSaver", "TrackerSaver"])
def test_a_task_named_as_people_name_them_is_saved_under_a_safe_key(
    clearml_standin, clearml_project, tmp_path, make
) -> None:
    from tracker_saver.clearml import ClearMLSaver
    from tracker_saver.core.naming import key_segment

    name = "resnet (lr=0.1) [v2]: run #3, final"
    out = tmp_path / "output"
    with _task(clearml_project, name, out) as task:
        saver = ClearMLSaver() if make == "ClearMLSaver" else TrackerSaver(registry="clearml")
        trainer = trainer_engine(model())
        attach(trainer, saver, {"model": model()}, n_saved=1)
        trainer.run([0], max_epochs=2)
        (record,) = saver.records(live=True)
        models = [m for m in clearml_standin.models.values() if m["task"] == task.id]
    run = f"{name}.{task.id}"
    assert (saver.run, record.run, record.project) == (run, run, clearml_project)
    assert _objects(out) == [f"{clearml_project}/{key_segment(run)}/model.slot0.pt"]
    assert sorted(m["name"] for m in models) == ["model_1.pt", "model_2.pt"]


def test_the_binding_guard_makes_clearml_skip_what_torch_saves_during_our_writes(
    clearml_standin, clearml_project, tmp_path
) -> None:
    """Our writer has no file name, so ClearML's patch already ignores it; the guard makes that
    hold for any writer: a named file saved while a slot is being written is skipped too."""
    from tracker_saver.clearml import guard_torch_save_binding
    from tracker_saver.save.pipeline import writing

    out = tmp_path / "output"
    with _task(clearml_project, "guarded", out) as task:
        guard_torch_save_binding()
        with writing():
            torch.save({"w": torch.ones(2)}, str(tmp_path / "inside.pt"))
        torch.save({"w": torch.ones(2)}, str(tmp_path / "outside.pt"))
        task.flush(wait_for_uploads=True)
        names = sorted(m["name"] for m in clearml_standin.models.values() if m["task"] == task.id)
    assert names == ["guarded - outside"]
    assert _objects(out) == [p for p in _objects(out) if p.endswith("outside.pt")] and len(_objects(out)) == 1


@pytest.mark.parametrize("make", ["TrackerSaver(registry='clearml')", "ClearMLSaver(registry=<SQLite file>)"])
def test_savers_under_a_task_install_the_binding_guard(
    clearml_standin, clearml_project, tmp_path, monkeypatch, make
) -> None:
    """The generic saver imports no ClearML glue: the ClearML registry (through ``RunContext``) and the
    drop-in install the guard. Another registry under a task: ``guard_torch_save_binding()`` (docs/clearml.md)."""
    from clearml.binding.frameworks import WeightsFileHandler

    import tracker_saver.integrations.clearml.binding as binding
    from tracker_saver.clearml import ClearMLSaver
    from tracker_saver.save.pipeline import is_writing

    monkeypatch.setattr(binding, "_predicates", [])
    with _task(clearml_project, "guard", tmp_path / "output"):
        if make.startswith("ClearMLSaver"):
            ClearMLSaver(registry=str(tmp_path / "registry.db")).close()
        else:
            TrackerSaver(registry="clearml").close()
    assert binding._predicates == [is_writing]
    assert binding._skip in WeightsFileHandler._model_pre_callbacks.values()


def test_a_server_failure_during_a_save_reaches_training(clearml_standin, clearml_project, tmp_path) -> None:
    saver = TrackerSaver(tmp_path / "output", project="proj", registry=f"clearml:{clearml_project}")
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2)
    trainer.run([0], max_epochs=1)
    clearml_standin.fail("models.create", code=500)
    try:
        with pytest.raises(RegistryError) as caught:
            trainer.run([0], max_epochs=2)
    finally:
        clearml_standin.clear_faults()
    assert "injected fault" in str(caught.value) and "model_2.pt" in str(caught.value)
    (record,) = find_models(project="proj", live=True, registry=saver.registry)
    load_checkpoint(record.id, {"model": model()}, registry=saver.registry)


def test_a_second_saver_on_a_stream_is_busy_until_the_first_closes(clearml_server, clearml_project, tmp_path) -> None:
    def saver() -> TrackerSaver:
        registry = f"clearml:{clearml_project}"
        return TrackerSaver(tmp_path / "output", project="proj", run="one-writer", registry=registry)

    first, second = saver(), saver()
    attach(trainer := trainer_engine(model()), first, {"model": model()}, n_saved=1)
    trainer.run([0], max_epochs=1)
    attach(other := trainer_engine(model()), second, {"model": model()}, n_saved=1)
    with pytest.raises(StreamBusyError, match=r"proj/one-writer/model at .* is being written by another saver, pid"):
        other.run([0], max_epochs=1)
    first.close()
    attach(again := trainer_engine(model()), second, {"model": model()}, n_saved=1)
    again.run([0], max_epochs=2)
    assert [r.filename for r in second.records(live=True)] == ["model_2.pt"]
    second.close()


RESUME_SCRIPT = """
import json, sys, torch
from clearml import Task
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
from tracker_saver import TrackerSaver, resume
project, out, epochs, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
task = Task.init(project_name=project, task_name="resnet", output_uri=out, reuse_last_task_id=(mode == "continue"),
                 continue_last_task=(mode == "continue"), auto_connect_frameworks=True,
                 auto_connect_streams=False, auto_resource_monitoring=False, auto_connect_arg_parser=False)
saver = TrackerSaver(registry="clearml")          # project, run and output_uri from the task
net = torch.nn.Linear(2, 1)
trainer = Engine(lambda e, b: None)
scores = [0.5, 0.7, 0.6, 0.9, 0.4, 0.95]
best = Checkpoint({"model": net}, saver, n_saved=2, filename_prefix="best", score_name="acc",
                  score_function=lambda e: scores[e.state.epoch - 1], global_step_transform=lambda e, _: e.state.epoch)
last = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=1, global_step_transform=lambda e, _: e.state.epoch)
trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
resume(saver, {"model": net, "trainer": trainer}, [best, last])
trainer.run([0], max_epochs=epochs)
print(json.dumps({"task": task.id, "best": [f for _, f in best._saved]}))
task.close()
"""


@pytest.mark.parametrize("mode", ["new-task", "continue"])
def test_a_continued_task_rebuilds_its_slots_and_a_new_task_starts_its_own(
    clearml_standin, clearml_project, tmp_path, mode
) -> None:
    import json
    import os

    out = tmp_path / "output"
    out.mkdir()
    root = Path(__file__).resolve().parents[1]

    # Task.init in this process exports CLEARML_PROC_MASTER_ID, which makes a child's Task.init
    # join the parent's task: each run here is its own process, as after a real restart.
    env = {k: v for k, v in os.environ.items() if not k.endswith("PROC_MASTER_ID")}
    env["PYTHONPATH"] = str(root)

    script = tmp_path / "resume_clearml.py"
    script.write_text(RESUME_SCRIPT)

    def run(epochs: int) -> dict:  # a new process each time, forked from the fork server that imported clearml
        done = forkserver.run(
            str(script),
            [clearml_project, str(out), str(epochs), mode],
            env=env,
            timeout=180,
            preload=forkserver.CLEARML,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(3), run(6)
    assert (first["task"] == second["task"]) == (mode == "continue")
    assert second["best"] == ["best_model_4_acc=0.9000.pt", "best_model_6_acc=0.9500.pt"]
    objects = _objects(out)
    assert all(".slot" in p for p in objects)

    def live(task_id: str) -> list[str]:
        records = find_models(project=clearml_project, run=f"resnet.{task_id}", live=True, registry="clearml")
        return sorted(r.filename for r in records)

    assert live(second["task"]) == ["best_model_4_acc=0.9000.pt", "best_model_6_acc=0.9500.pt", "checkpoint_6.pt"]
    if mode == "continue":  # the same task id: the same run, its slots continued
        assert len(objects) == 3
    else:  # a new task with the same name is a new run: the earlier task's checkpoints stay untouched
        assert len(objects) == 6
        assert live(first["task"]) == ["best_model_2_acc=0.7000.pt", "best_model_3_acc=0.6000.pt", "checkpoint_3.pt"]
    assert clearml_standin.unknown_calls == []
