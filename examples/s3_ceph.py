"""Checkpoints in an S3 bucket (Ceph RGW, MinIO, AWS), configured the boto3 way, saved in the background.

Needs an S3 endpoint and keys in the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, or a profile). For a throwaway Ceph RGW on 127.0.0.1 (as root):

    bash scripts/ceph-s3.sh install && eval "$(bash scripts/ceph-s3.sh start)"
    python examples/s3_ceph.py [s3://BUCKET/PREFIX]    # default s3://examples/s3-ceph

The bucket is created if it does not exist. The registry is ./s3-example/registry.db (or
$TRACKER_SAVER_REGISTRY). Synthetic data, CPU, a few seconds.
"""

import os
import sys

import boto3
import torch
from botocore.exceptions import ClientError
from ignite.engine import Events, create_supervised_trainer
from ignite.handlers import Checkpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracker_saver import TrackerSaver, find_models, load_checkpoint

output_uri = sys.argv[1] if len(sys.argv) > 1 else "s3://examples/s3-ceph"
registry = os.environ.get("TRACKER_SAVER_REGISTRY", "s3-example/registry.db")  # this example's own folder
os.makedirs("s3-example", exist_ok=True)
bucket = output_uri.removeprefix("s3://").split("/")[0]

# --8<-- [start:bucket]
s3 = boto3.client("s3")  # endpoint and keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... or a profile
try:
    s3.head_bucket(Bucket=bucket)
except ClientError:
    s3.create_bucket(Bucket=bucket)
    print(f"created bucket {bucket} at {s3.meta.endpoint_url}")
# --8<-- [end:bucket]

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss())

# --8<-- [start:saver]
saver = TrackerSaver(output_uri, project="examples", run="s3-ceph", registry=registry, async_upload=True, timeout=60)
checkpoint = Checkpoint({"model": model, "optimizer": optimizer, "trainer": trainer}, saver, n_saved=2)
trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
saver.attach(trainer, save_on_sigterm=checkpoint)  # flush at the end; a SIGTERM saves once, then exits
trainer.run(DataLoader(data, batch_size=32), max_epochs=5)
# --8<-- [end:saver]

objects = saver.storage.list("examples/")
print(f"{saver.storage.uri} holds {len(objects)} objects: {', '.join(obj.key for obj in objects)}")

# --8<-- [start:load]
# In another process, give load_checkpoint the same endpoint settings: the same AWS_* environment,
# or storage_options={"endpoint_url": ..., "profile": ...} as given to TrackerSaver.
# output_uri: the same project and run at another bucket are other streams, never this run's checkpoints.
latest = find_models(
    output_uri=output_uri, project="examples", run="s3-ceph", live=True, order_by="-global_step", registry=registry
)[0]
load_checkpoint(latest, {"model": model}, registry=registry)
print(f"loaded {latest.name} from {latest.uri}")
# --8<-- [end:load]
saver.close()
