"""Distributed training (gloo, 2 CPU processes): only rank 0 writes objects and records."""

from __future__ import annotations

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tracker_saver import RecordState, TrackerSaver, find_models


def _train(local_rank: int, output: str, registry: str) -> None:
    saver = TrackerSaver(output, project="p", run="ddp", registry=registry)
    net = torch.nn.Linear(2, 1)
    trainer = Engine(lambda engine, batch: idist.all_reduce(torch.ones(1)))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    trainer.run([0, 1], max_epochs=3)


def test_only_rank_zero_saves_under_ddp(tmp_path) -> None:
    output, registry = str(tmp_path / "output"), str(tmp_path / "registry.db")
    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        parallel.run(_train, output, registry)
    records = find_models(project="p", run="ddp", registry=registry)
    assert [r.state for r in records] == [RecordState.EVICTED, RecordState.EVICTED, RecordState.LIVE]
    assert [p.name for p in (tmp_path / "output" / "p" / "ddp").iterdir()] == ["model.slot0.pt"]
