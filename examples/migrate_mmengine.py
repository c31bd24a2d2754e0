"""From mmengine's CheckpointHook to tracker_saver, setting by setting.

The mmengine config below is what an OpenMMLab user has; the Ignite code after it does the same
with tracker_saver: `out_dir` is the output_uri, `max_keep_ckpts` is `n_saved` of the `last`
stream, `save_best` is a second stream with a score function, and `keep_local` has nothing to
clean up, because checkpoints are written straight to the output_uri (a folder or
s3://BUCKET/PREFIX), never to a local copy first.

    python examples/migrate_mmengine.py [OUT_DIR]    # default ./mmengine-example/checkpoints; registry
                                                     # ./mmengine-example/registry.db
"""

import os
import sys

import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from ignite.metrics import Accuracy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tracker_saver
from tracker_saver import TrackerSaver, find_models

out_dir = sys.argv[1] if len(sys.argv) > 1 else "mmengine-example/checkpoints"  # this example's own folder
registry = os.environ.get("TRACKER_SAVER_REGISTRY", "mmengine-example/registry.db")
os.makedirs("mmengine-example", exist_ok=True)

# --8<-- [start:mmengine]
# mmengine config: what the OpenMMLab run had
default_hooks = dict(
    checkpoint=dict(
        type="CheckpointHook",
        interval=1,  # every epoch
        out_dir=out_dir,  # e.g. "s3://ckpts/mmcls"
        max_keep_ckpts=3,  # the last 3 epoch checkpoints
        save_best="accuracy",  # plus the best by this metric
        rule="greater",
        keep_local=False,  # delete the local copy once uploaded
    )
)
resume = True  # continue from the latest checkpoint
# --8<-- [end:mmengine]

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss())
evaluator = create_supervised_evaluator(model, metrics={"accuracy": Accuracy()})
trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run(DataLoader(data, batch_size=256)))

# --8<-- [start:tracker_saver]
saver = TrackerSaver(out_dir, project="mmcls", run="mlp", registry=registry)  # out_dir
last = Checkpoint(
    {"model": model, "optimizer": optimizer, "trainer": trainer},
    saver,
    n_saved=3,  # max_keep_ckpts=3
    filename_prefix="epoch",
)
trainer.add_event_handler(Events.EPOCH_COMPLETED(every=1), last)  # interval=1
best = Checkpoint(
    {"model": model},
    saver,
    n_saved=1,  # mmengine keeps one best checkpoint
    filename_prefix="best",
    score_function=Checkpoint.get_default_score_fn("accuracy"),  # save_best="accuracy", rule="greater"
    score_name="accuracy",
    global_step_transform=global_step_from_engine(trainer),
)
evaluator.add_event_handler(Events.COMPLETED, best)
# keep_local=False: nothing to do, no local copy is ever made
tracker_saver.resume(
    saver, {"model": model, "optimizer": optimizer, "trainer": trainer}, [last, best], stream="epoch_checkpoint"
)
trainer.run(DataLoader(data, batch_size=32, shuffle=True), max_epochs=trainer.state.epoch + 5)  # resume=True
saver.close()
# --8<-- [end:tracker_saver]

objects = saver.storage.list("mmcls/")
print(f"{saver.storage.uri} holds {len(objects)} objects: {', '.join(obj.key for obj in objects)}")
for record in find_models(project="mmcls", run="mlp", live=True, order_by="global_step", registry=registry):
    print(f"  live: {record.name}")
