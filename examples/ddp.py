"""Distributed training with ``idist.Parallel``: 2 CPU processes (gloo), rank 0 saves.

Run it twice: the second run resumes on both ranks from the checkpoint the first one saved.

    python examples/ddp.py            # writes ./ddp-example/{checkpoints,registry.db}
    python examples/ddp.py --start-method fork   # ranks forked from this process (the tests do)

Every rank builds the same ``TrackerSaver`` and ``Checkpoint``; Ignite calls the saver on every
rank, only rank 0 serializes, uploads and registers, and a save that fails on rank 0 raises on
both ranks. The model is wrapped in ``DistributedDataParallel`` and saved unwrapped.
See docs/ddp.md.
"""

from __future__ import annotations

import argparse
import gc
import socket
import sys
from pathlib import Path

import ignite.distributed as idist
import torch
from ignite.engine import Events, create_supervised_trainer
from ignite.handlers import Checkpoint
from torch.utils.data import TensorDataset

from tracker_saver import TrackerSaver, find_models, resume

ROOT = Path("ddp-example").resolve()
EPOCHS_PER_RUN = 2


# --8<-- [start:training]
def training(local_rank: int, root: str) -> None:
    # The registry on a local disk of the saving node; never on NFS (see docs/ddp.md).
    saver = TrackerSaver(f"{root}/checkpoints", project="examples", run="ddp", registry=f"{root}/registry.db")
    torch.manual_seed(0)  # the same synthetic data and initial weights on every rank
    features = torch.randn(256, 8)
    data = TensorDataset(features, features.sum(dim=1, keepdim=True))
    loader = idist.auto_dataloader(data, batch_size=32, shuffle=True)  # a DistributedSampler per rank
    model = idist.auto_model(torch.nn.Linear(8, 1))  # DistributedDataParallel when world size > 1
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.01))
    trainer = create_supervised_trainer(model, optimizer, torch.nn.MSELoss())

    to_save = {"model": model, "optimizer": optimizer, "trainer": trainer}
    checkpoint = Checkpoint(to_save, saver, n_saved=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
    saver.attach(trainer)  # flushes when the run ends

    loaded = resume(saver, to_save, [checkpoint])  # every rank: same checkpoint, same _saved
    start = trainer.state.epoch
    trainer.run(loader, max_epochs=start + EPOCHS_PER_RUN)
    print(
        f"rank {idist.get_rank()}: resumed from {loaded.name if loaded else 'nothing'} at epoch {start}, "
        f"now at epoch {trainer.state.epoch}, loss {trainer.state.output:.4f}"
    )
    saver.close()


# --8<-- [end:training]


def training_then_free(local_rank: int, root: str) -> None:
    """``training``, then the DDP model freed while the process group still exists.

    Ignite's handlers hold the model in reference cycles (the trainer's handlers → the
    ``Checkpoint`` → ``to_save`` → the trainer), so it would outlive the process group, which
    Ignite destroys as this function returns, and be freed during interpreter shutdown, where
    gloo can abort the process ("terminate called without an active exception").
    """
    training(local_rank, root)
    gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description="2-rank gloo training with idist.Parallel; rank 0 saves.")
    # Spawn, the default, starts each rank as a new interpreter that imports torch and this script
    # again; fork copies this process, which has imported them already (3 s of CPU less per rank).
    parser.add_argument("--start-method", choices=("spawn", "fork"), default="spawn", help="how the ranks start")
    start_method = parser.parse_args().start_method
    ROOT.mkdir(exist_ok=True)
    with socket.socket() as free:  # a free port, so two runs on one machine do not collide
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    # --8<-- [start:parallel]
    with idist.Parallel(backend="gloo", nproc_per_node=2, master_port=port, start_method=start_method) as parallel:
        parallel.run(training_then_free, str(ROOT))
    # --8<-- [end:parallel]
    records = find_models(project="examples", run="ddp", registry=str(ROOT / "registry.db"))
    for record in records:
        print(f"{record.id:>3} {record.name:<20} {record.state.value:<8} slot {record.slot}")
    live = [r for r in records if r.state.loadable]
    if len(live) != 2:
        sys.exit(f"expected the 2 kept checkpoints to be live, found {len(live)}")
    objects = sorted(p.name for p in (ROOT / "checkpoints" / "examples" / "ddp").iterdir())
    print(f"live: {', '.join(r.name for r in live)}; checkpoints/ holds {len(objects)} objects")


if __name__ == "__main__":
    main()
