"""ignite's ClearMLSaver replaced by tracker_saver's drop-in: the same code, one import changed.

The scenario of ignite's TrainsSaver report: a CNN under `Task.init(output_uri=...)` with
ClearML's torch.save binding on, `n_saved=1`, `filename_prefix="epoch"`, 3 epochs. With the
drop-in the output folder holds 1 object and ClearML lists one model per checkpoint, named by
Ignite's filename, with typed metadata. Run `--ignite` to see ignite's saver do the same job.

Needs a ClearML server: CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY
(or a clearml.conf). For a first look without one, start the test stand-in (docs/clearml.md).

    python examples/clearml_dropin.py [OUTPUT_DIR] [--ignite]    # default ./clearml-output
"""

import sys
from pathlib import Path

import torch
from clearml import Task
from ignite.engine import Events, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
use_ignite = "--ignite" in sys.argv
output_dir = Path(args[0] if args else "clearml-output").resolve()
output_dir.mkdir(parents=True, exist_ok=True)  # ClearML refuses a local output_uri that does not exist

if use_ignite:
    # --8<-- [start:ignite]
    from ignite.handlers.clearml_logger import ClearMLSaver
    # --8<-- [end:ignite]
else:
    # --8<-- [start:dropin]
    from tracker_saver.clearml import ClearMLSaver  # the only line that changes
    # --8<-- [end:dropin]

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 1, 12, 12), torch.randint(0, 4, (256,)))
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss())

# --8<-- [start:task]
task = Task.init(project_name="examples", task_name="clearml-dropin", output_uri=str(output_dir))
handler = Checkpoint(
    {"model": model},
    ClearMLSaver(),
    n_saved=1,
    filename_prefix="epoch",
    global_step_transform=global_step_from_engine(trainer),
)
trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
trainer.run(DataLoader(data, batch_size=32), max_epochs=3)
# --8<-- [end:task]
task.flush(wait_for_uploads=True)

# .tracker_saver/ says which registry owns each stream: not a checkpoint (docs/sharing.md)
objects = sorted(
    str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.is_file() and ".tracker_saver" not in p.parts
)
print(f"{output_dir} holds {len(objects)} object(s): {', '.join(objects)}")

if use_ignite:
    names = [model.name for model in task.models["output"]]
    print(f"task {task.id} has {len(names)} output model(s): {', '.join(names)}")
else:
    # --8<-- [start:find]
    from tracker_saver import find_models

    for record in find_models(registry="clearml", project="examples", run=f"{task.name}.{task.id}"):
        print(
            f"  model {record.name}: {record.state.value}, global_step={record.global_step}, slot {record.metadata['slot']}"
        )
    # --8<-- [end:find]
task.close()
