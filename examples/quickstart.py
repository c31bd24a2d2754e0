"""Quickstart: a small CNN with a `best` and a `last` checkpoint stream, then resume.

Run it twice from any folder; it trains on synthetic data on the CPU in a few seconds:

    python examples/quickstart.py    # trains 3 epochs
    python examples/quickstart.py    # resumes after epoch 3 and trains 3 more

Checkpoints go to ./checkpoints (or the first argument: a folder or s3://BUCKET/PREFIX), the
registry to ./registry.db (or $TRACKER_SAVER_REGISTRY). Both runs end with exactly 3 objects:
2 slots for `best`, 1 for `last`, however many checkpoints were saved.
"""

import os
import sys

import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from ignite.metrics import Accuracy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracker_saver import TrackerSaver, find_models, resume

output_uri = sys.argv[1] if len(sys.argv) > 1 else "checkpoints"
registry = os.environ.get("TRACKER_SAVER_REGISTRY", "registry.db")

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

# --8<-- [start:saver]
saver = TrackerSaver(output_uri, project="quickstart", run="small-cnn", registry=registry)
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
# --8<-- [end:saver]


# --8<-- [start:callback]
def tag_learning_rate(info):  # an UploadInfo: stream, name, slot, key, metadata, tags
    info.metadata["lr"] = optimizer.param_groups[0]["lr"]
    info.tags.append("quickstart")
    return info  # or None to skip this upload


saver.add_pre_upload(tag_learning_rate)
# --8<-- [end:callback]


@trainer.on(Events.EPOCH_COMPLETED)
def validate(engine):
    evaluator.run(val_loader)
    print(f"epoch {engine.state.epoch}: val_acc={evaluator.state.metrics['val_acc']:.3f}")


# --8<-- [start:resume]
# A rerun continues the run: the newest `last` checkpoint is loaded (its sha256 verified) and
# both handlers get back the checkpoints they keep, so eviction goes on as if nothing stopped.
restored = resume(saver, {"model": model, "optimizer": optimizer, "trainer": trainer}, [best, last])
if restored is not None:
    print(f"resumed from {restored.name} (epoch {trainer.state.epoch})")
trainer.run(train_loader, max_epochs=trainer.state.epoch + 3)
saver.close()
# --8<-- [end:resume]

objects = saver.storage.list("quickstart/")
print(f"{saver.storage.uri} holds {len(objects)} objects: {', '.join(obj.key for obj in objects)}")
records = find_models(project="quickstart", run="small-cnn", registry=registry)
live = [record.name for record in records if record.state.loadable]
print(f"the registry {registry} holds {len(records)} records; live: {', '.join(live)}")
