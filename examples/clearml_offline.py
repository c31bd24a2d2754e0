"""Train under ClearML's offline mode, then sync the session: every checkpoint becomes a model, once.

Offline (no server), the saver keeps exactly n_saved objects in the output folder and records
every checkpoint in a journal inside ClearML's offline session, zipped when the task closes.
Later, where the server is reachable, `import_offline_session` (or `tracker-saver sync ZIP`)
imports the session and makes each record the model an online save would have made; a second
sync adds nothing.

Needs a ClearML server for the sync: CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and
CLEARML_API_SECRET_KEY (or a clearml.conf). For a first look without one, start the test
stand-in (docs/clearml.md).

    python examples/clearml_offline.py [OUTPUT_DIR]    # default ./clearml-offline-output
"""

import sys
from pathlib import Path

import torch
from clearml import Task
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

# --8<-- [start:imports]
from tracker_saver import find_models
from tracker_saver.clearml import ClearMLSaver, import_offline_session

# --8<-- [end:imports]

output_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "clearml-offline-output").resolve()
output_dir.mkdir(parents=True, exist_ok=True)  # ClearML refuses a local output_uri that does not exist
model = torch.nn.Linear(4, 2)
trainer = Engine(lambda engine, batch: model.weight.data.add_(0.1))

# --8<-- [start:offline]
Task.set_offline(True)  # or CLEARML_OFFLINE_MODE=1, or ignite's ClearMLLogger.set_bypass_mode(True)
task = Task.init(project_name="examples", task_name="clearml-offline")
saver = ClearMLSaver(output_uri=str(output_dir))  # offline, Task.init keeps no output_uri: give one
trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": model}, saver, n_saved=2))
trainer.run([0, 1], max_epochs=5)
saver.close()  # before task.close(), which zips the session (the journal with it)
session = f"{task.get_offline_mode_folder()}.zip"
task.close()
# --8<-- [end:offline]

# .tracker_saver/ says which registry owns each stream: not a checkpoint (docs/sharing.md)
objects = sorted(
    str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts
)
print(f"{output_dir} holds {len(objects)} object(s): {', '.join(objects)}")

# --8<-- [start:sync]
Task.set_offline(False)  # later, where the server is reachable
first = import_offline_session(session)  # the same as: tracker-saver sync SESSION
again = import_offline_session(session)
print(f"task {first.task_id}: {first.created} models created; again: {again.created} created, {again.unchanged} there")
for record in find_models(registry="clearml", project="examples", run=saver.run):  # the models on the server
    print(f"  model {record.name}: {record.state.value}, global_step={record.global_step}")
# --8<-- [end:sync]
