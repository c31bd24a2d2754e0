"""Shared test helpers: where a backend's objects and records live, and a tiny training loop."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tracker_saver import TrackerSaver
from tracker_saver.storage import Storage, open_storage

#: Deterministic val scores by epoch (1-based), with a tie (epochs 7 and 8) to exercise Ignite's ordering.
SCORES = [0.5, 0.7, 0.6, 0.9, 0.4, 0.95, 0.8, 0.8, 0.97, 0.3]


@dataclass
class Target:
    """One backend under test: an output_uri (with options), a registry, and saver options
    (``{"async_upload": True}`` runs every test through the background worker)."""

    output_uri: str
    registry: Any
    storage_options: dict[str, Any] = field(default_factory=dict)
    saver_options: dict[str, Any] = field(default_factory=dict)

    def saver(self, run: str = "r", **kwargs: Any) -> TrackerSaver:
        return TrackerSaver(
            self.output_uri,
            project="p",
            run=run,
            registry=self.registry,
            storage_options=self.storage_options,
            **{**self.saver_options, **kwargs},
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
    """A real Checkpoint on EPOCH_COMPLETED; with ``scores``, a score-based stream.

    The saver is attached too, as users of async saving do: a run ends with its saves durable.
    """
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
    if not trainer.has_event_handler(saver._flush_then_reraise, Events.EXCEPTION_RAISED):
        saver.attach(trainer)
    return handler


ROOT = Path(__file__).resolve().parents[1]


def process_spec(target: Target, *, run: str, **config: Any) -> dict[str, Any]:
    """The JSON config a training subprocess (``tests.worker``, ``tests.resume_run``) reads."""
    registry = target.registry if isinstance(target.registry, str) else None
    if str(getattr(target.registry, "uri", "")).startswith("mlflow:"):  # the server, and this test's experiments
        registry = f"mlflow:{target.registry.tracking_uri}"
        config.setdefault("experiment_prefix", target.registry.experiment_prefix)
        config.setdefault("timeout", target.registry.timeout)  # the outage bound the test chose
    return {
        "output_uri": target.output_uri,
        "registry": registry,
        "storage_options": target.storage_options,
        "saver_options": target.saver_options,
        "run": run,
        **config,
    }


def spec_preload(config: dict[str, Any]) -> tuple[str, ...]:
    """What the fork server of a process with this config imports beyond torch: ClearML's SDK when it
    talks to ClearML (the stand-in, whose address every such child's environment names alike)."""
    return forkserver.CLEARML if str(config["registry"]).startswith("clearml") else ()


def spec_registry(config: dict[str, Any]) -> Any:
    """The registry a process config names: its spec, or for MLflow a registry with the test's prefix."""
    spec = config["registry"]
    if not str(spec).startswith("mlflow:"):
        return spec
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    return MLflowRegistry(spec.partition(":")[2], experiment_prefix=config.get("experiment_prefix", ""),
                          timeout=float(config.get("timeout", 30)))  # fmt: skip


def process_env() -> dict[str, str]:
    """The environment of a training subprocess: this one's, as after a real restart.

    ``Task.init`` in this process exports ``CLEARML_PROC_MASTER_ID``, which would make a child's
    ``Task.init`` join the parent's task.
    """
    env = {k: v for k, v in os.environ.items() if not k.endswith("PROC_MASTER_ID")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def train(
    saver: TrackerSaver, to_save: dict[str, Any], *, n_saved: int = 1, prefix: str = "", epochs: int = 1
) -> Checkpoint:
    """A fresh engine and ``Checkpoint`` through ``saver``, trained for ``epochs``."""
    net = next(iter(to_save.values()))
    trainer = trainer_engine(net)
    handler = attach(trainer, saver, to_save, n_saved=n_saved, prefix=prefix)
    trainer.run([0], max_epochs=epochs)
    return handler


class Worker:
    """A ``tests.worker`` training process: one JSON line per epoch; it may be killed mid-save.

    Examples:
        ``with Worker(target, run="r", restore="resume") as w: w.epoch(0.7)``
    """

    def __init__(self, target: Target, *, run: str = "r", restore: str = "none", **config: Any) -> None:
        spec = process_spec(target, run=run, restore=restore, **config)
        self._json = json
        self._err = tempfile.TemporaryFile(mode="w+")  # a pipe could fill up and block the worker
        # A new process, forked from a server that has imported torch once (tests/forkserver.py).
        self.proc = forkserver.spawn(
            "tests.worker", [json.dumps(spec)], env=process_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, preload=spec_preload(spec),
        )  # fmt: skip
        ready = self._read()
        assert ready is not None and ready.get("ready"), self.stderr()
        self.restored: dict[str, list[str]] = {s: [f for _, f in saved] for s, saved in ready["saved"].items()}
        self.last: dict[str, Any] = {}

    def _read(self) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return self._json.loads(line) if line else None

    def stderr(self) -> str:
        self.proc.wait(60)
        self._err.seek(0)
        return self._err.read()[-3000:]

    def epoch(
        self, score: float, *, fault: str | None = None, stream: str = "best_checkpoint"
    ) -> dict[str, Any] | None:
        """Run one epoch; its answer, or ``None`` when the process was killed."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(self._json.dumps({"score": score, "fault": fault, "stream": stream}) + "\n")
        self.proc.stdin.flush()
        self.events: list[dict[str, Any]] = []
        while (answer := self._read()) is not None and "call" in answer:
            self.events.append(answer)
        if answer is None:
            self.proc.wait(60)
            assert self.proc.returncode == -9, self.stderr()
        else:
            self.last = answer
        return answer

    def saved(self, stream: str) -> list[str]:
        """The filenames Ignite keeps in ``stream`` after the last epoch."""
        return [filename for _, filename in self.last["saved"][stream]]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            assert self.proc.wait(120) == 0, self.stderr()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.proc.kill()
            self.proc.wait()


def chained(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception reachable from it: ``__cause__``, ``__context__``, its args and attributes."""
    found: list[BaseException] = []
    stack: list[Any] = [exc]
    while stack:
        each = stack.pop()
        if isinstance(each, BaseException) and all(each is not e for e in found):
            found.append(each)
            stack += [each.__cause__, each.__context__, *each.args, *vars(each).values()]
    return found


def exception_texts(exc: BaseException) -> str:
    """Everything one exception shows: str, repr, args, attributes, and its formatted traceback."""
    return "\n".join([str(exc), repr(exc), repr(exc.args), repr(vars(exc)), *traceback.format_exception(exc)])
