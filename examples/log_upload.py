"""Log upload: a run's `logging` file goes to output_uri beside its checkpoints, during and after training.

Run it from any folder; it trains a tiny model on synthetic data on the CPU in a few seconds:

    python examples/log_upload.py                  # output_uri ./checkpoints
    python examples/log_upload.py s3://BUCKET/runs  # or a folder / S3 prefix of your own

The training log is written to ./logs/train.log by a plain `logging.FileHandler`.
`LogUploader` takes output_uri, project and run from the `TrackerSaver`, uploads the log every
20 iterations on a background thread (only when it changed), and once more when the run ends.
The log lands under `<output_uri>/example/log-upload/logs/`, apart from the checkpoint slots,
and is listed and downloaded by `list_logs` / `download_logs` (`tracker-saver runs logs`).
The registry is ./registry.db (or $TRACKER_SAVER_REGISTRY).
"""

import logging
import os
import sys
from pathlib import Path

import torch
from ignite.engine import Events, create_supervised_trainer
from ignite.handlers import Checkpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracker_saver import TrackerSaver
from tracker_saver.logs.upload import LogUploader, download_logs, list_logs

output_uri = sys.argv[1] if len(sys.argv) > 1 else "checkpoints"
registry = os.environ.get("TRACKER_SAVER_REGISTRY", "registry.db")

Path("logs").mkdir(exist_ok=True)
log_file = logging.FileHandler("logs/train.log", mode="w")
log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
logging.basicConfig(level=logging.INFO, handlers=[log_file])
log = logging.getLogger("train")

# Synthetic regression data: y = x @ w + noise.
torch.manual_seed(0)
inputs = torch.randn(640, 8)
targets = inputs @ torch.randn(8, 1) + 0.1 * torch.randn(640, 1)
loader = DataLoader(TensorDataset(inputs, targets), batch_size=32, shuffle=True)
model = nn.Linear(8, 1)
trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.MSELoss())


@trainer.on(Events.ITERATION_COMPLETED(every=10))
def log_loss(engine):
    log.info("epoch %d iteration %d loss %.4f", engine.state.epoch, engine.state.iteration, engine.state.output)


# --8<-- [start:uploader]
saver = TrackerSaver(output_uri, project="example", run="log-upload", registry=registry)
trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": model}, saver, n_saved=1))
uploader = LogUploader(saver=saver, files=["logs/*.log"], every_iterations=20)
uploader.attach(trainer)  # periodic uploads, and a final one at COMPLETED or EXCEPTION_RAISED
saver.attach(trainer)
trainer.run(loader, max_epochs=3)
uploader.close()  # uploads the lines logged after COMPLETED, then stops its thread
saver.close()
# --8<-- [end:uploader]

# --8<-- [start:read]
for obj in list_logs("example", "log-upload", output_uri=output_uri):
    print(f"{obj.name}: {obj.size} bytes at {obj.key}")
(copy,) = download_logs("example", "log-upload", "downloaded-logs", output_uri=output_uri)
# --8<-- [end:read]
print(f"downloaded to {copy}: {copy.read_text().count('loss')} loss lines")
