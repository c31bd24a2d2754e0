"""MLflow: every checkpoint of a small CNN becomes an MLflow LoggedModel of the active run.

Start a tracking server, point MLflow at it, and run the script from any folder:

    mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri sqlite:///mlflow.db
    MLFLOW_TRACKING_URI=http://127.0.0.1:5000 python examples/mlflow_run.py

It trains 4 epochs on synthetic data on the CPU under `mlflow.start_run`, with a `best`
stream (n_saved=2) and a `last` stream (n_saved=1). The bytes go to ./mlflow-example/checkpoints
(3 objects, however many checkpoints were saved); the records are the logged models on the run's
experiment, `tracker-saver-example` (MLflow's UI: the experiment's Models tab).
"""

import os
import sys

import mlflow
import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from ignite.metrics import Accuracy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracker_saver import TrackerSaver, find_models

if not os.environ.get("MLFLOW_TRACKING_URI"):
    sys.exit(
        "examples/mlflow_run.py needs an MLflow tracking server: start one with "
        "`mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri sqlite:///mlflow.db` "
        "and set MLFLOW_TRACKING_URI=http://127.0.0.1:5000"
    )

# Synthetic 12x12 images in 4 classes: the class is which quadrant is bright.
torch.manual_seed(0)
labels = torch.randint(0, 4, (512,))
images = torch.randn(512, 1, 12, 12)
for i, label in enumerate(labels.tolist()):
    row, col = divmod(label, 2)
    images[i, 0, row * 6 : row * 6 + 6, col * 6 : col * 6 + 6] += 0.3
train_loader = DataLoader(TensorDataset(images[:384], labels[:384]), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(images[384:], labels[384:]), batch_size=128)

model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss())
evaluator = create_supervised_evaluator(model, metrics={"val_acc": Accuracy()})


@trainer.on(Events.EPOCH_COMPLETED)
def validate(engine):
    evaluator.run(val_loader)
    print(f"epoch {engine.state.epoch}: val_acc={evaluator.state.metrics['val_acc']:.3f}")


# --8<-- [start:run]
mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
mlflow.set_experiment("tracker-saver-example")
with mlflow.start_run(run_name="small-cnn"):
    # project = the run's experiment, run = its name; the bytes go to this example's own folder
    saver = TrackerSaver("./mlflow-example/checkpoints", registry="mlflow")
    best = Checkpoint(
        {"model": model},
        saver,
        n_saved=2,
        filename_prefix="best",
        score_function=Checkpoint.get_default_score_fn("val_acc"),
        score_name="val_acc",
        global_step_transform=global_step_from_engine(trainer),
    )
    last = Checkpoint({"model": model, "optimizer": optimizer, "trainer": trainer}, saver, n_saved=1)
    evaluator.add_event_handler(Events.COMPLETED, best)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
    trainer.run(train_loader, max_epochs=4)
    saver.close()
# --8<-- [end:run]

# --8<-- [start:read]
where = {"project": saver.project, "run": saver.run, "output_uri": saver.storage.uri}  # this folder's streams
records = find_models(**where, live=True, registry="mlflow")
for record in records:
    print(f"live: {record.name} (stream {record.stream}, score {record.score})")
objects = saver.storage.list()
print(f"./mlflow-example/checkpoints holds {len(objects)} objects: {', '.join(obj.key for obj in objects)}")
print(f"MLflow experiment {saver.project!r}, run {saver.run!r}: {len(records)} live logged models")
# --8<-- [end:read]
