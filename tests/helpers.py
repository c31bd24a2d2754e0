"""Shared test helpers: where a backend's objects and records live, and a tiny training loop."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tracker_saver import TrackerSaver
from tracker_saver.storage import Storage, open_storage

#: Deterministic val scores by epoch (1-based), with a tie (epochs 7 and 8) to exercise Ignite's ordering.
SCORES = [0.5, 0.7, 0.6, 0.9, 0.4, 0.95, 0.8, 0.8, 0.97, 0.3]


@dataclass
class Target:
    """One backend under test: an output_uri (with options) and a registry."""

    output_uri: str
    registry: Any
    storage_options: dict[str, Any] = field(default_factory=dict)

    def saver(self, run: str = "r", **kwargs: Any) -> TrackerSaver:
        return TrackerSaver(
            self.output_uri, project="p", run=run, registry=self.registry, storage_options=self.storage_options, **kwargs
        )

    def storage(self) -> Storage:
        return open_storage(self.output_uri, **self.storage_options)

    def counts(self, run: str = "r") -> dict[str, int]:
        """Objects per stream at output_uri for one run."""
        out: dict[str, int] = collections.Counter()
        for obj in self.storage().list(f"p/{run}/"):
            out[obj.key.rsplit("/", 1)[1].split(".slot")[0]] += 1
        return dict(out)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def trainer_engine(net: torch.nn.Module) -> Engine:
    """An engine whose every iteration changes the weights (so checkpoints differ)."""

    def step(engine: Engine, batch: Any) -> float:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)
        return 0.0

    return Engine(step)


def attach(
    trainer: Engine,
    saver: TrackerSaver,
    to_save: dict[str, Any],
    *,
    n_saved: int | None,
    prefix: str = "",
    scores: Sequence[float] | None = None,
    step_transform: bool = True,
) -> Checkpoint:
    """A real Checkpoint on EPOCH_COMPLETED; with ``scores``, a score-based stream."""
    score_function: Callable[[Engine], float] | None = None
    if scores is not None:
        score_function = lambda engine: scores[engine.state.epoch - 1]  # noqa: E731
    handler = Checkpoint(
        to_save,
        saver,
        n_saved=n_saved,
        filename_prefix=prefix,
        score_function=score_function,
        score_name="val_acc" if scores is not None else None,
        global_step_transform=(lambda e, _: e.state.epoch) if step_transform else None,
    )
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    return handler
