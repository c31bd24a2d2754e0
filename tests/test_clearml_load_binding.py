"""ClearML's torch.load binding registers no input model for a checkpoint tracker_saver loads (stand-in, real SDK).

``Task.init`` patches ``torch.load`` too: every load becomes the task's input model, named after
the file it read. For a resumed checkpoint that file is a slot (later evicted), so the input model
would name a slot key and point at nothing; the binding guard skips our loads as it skips our saves.
"""

from __future__ import annotations

import pytest
from ignite.handlers import Checkpoint

from tests.conftest_clearml import init_task
from tests.helpers import attach, model, trainer_engine
from tracker_saver import TrackerSaver, find_models, load_checkpoint

pytestmark = pytest.mark.clearml


def test_a_checkpoint_loaded_under_a_task_is_not_the_tasks_input_model(
    clearml_standin, clearml_project, tmp_path
) -> None:
    out = tmp_path / "output"
    out.mkdir()
    task = init_task(clearml_project, "resumed", output_uri=str(out), auto_connect_frameworks=True)
    try:
        saver = TrackerSaver(out, registry=f"clearml:{clearml_project}")
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=1)
        (record,) = find_models(live=True, registry=saver.registry)
        load_checkpoint(record, {"model": model()}, registry=saver.registry)
        # Ignite's own restore reads the saver's dirname view: a file named after the checkpoint there
        Checkpoint.load_objects({"model": model()}, str(saver.dirname / record.filename))
        saver.close()
        task.flush(wait_for_uploads=True)
        inputs = clearml_standin.tasks[task.id]["models"]["input"]
    finally:
        task.close()
    assert inputs == []
