"""One training process that tests drive line by line, and may kill: a real restart each time.

Usage: ``python -m tests.worker CONFIG_JSON``. CONFIG has ``output_uri``, ``registry``,
``storage_options``, ``run``, ``restore`` (``"none"``: a fresh ``Checkpoint``; ``"resume"``:
tracker_saver's resume helper; ``"ignite"``: Ignite's own ``Checkpoint.load_objects`` from the
newest checkpoint, whose ``checkpointer`` entry ``include_self=True`` wrote), and optionally
``n_best`` / ``n_last`` / ``pattern`` (a custom ``filename_pattern`` for the best stream) and
``saver_options`` (``{"async_upload": true}``: saves run on the background worker; the saver is
attached to the trainer, so each epoch's run ends with its saves durable or their error raised).

Two streams, both ``include_self=True``: ``best_checkpoint`` (model + trainer, scored,
``n_saved=n_best``) and ``checkpoint`` (model + trainer, ``n_saved=n_last``). Each stdin line is
one epoch: ``{"score": 0.8, "fault": null, "stream": "best_checkpoint"}``. A fault applies to
that stream's save in this epoch, through real mechanisms only:

* ``serialize``: the checkpoint holds a lock, so ``torch.save`` fails;
* ``skip``: a pre-upload callback returns ``None``;
* ``registry``: while ``torch.save`` runs, another connection locks the SQLite registry, so
  the commit-point transaction times out; with an MLflow registry (``"mlflow:URI"``, and
  ``experiment_prefix``), the worker talks to the tracking server through a
  :class:`tests.tcp_gate.Gate` that the fault closes, so the commit-point write meets a server
  that does not answer (MLflow has no lock to take: an outage is its way to refuse a write);
* ``storage`` (local output_uri): while ``torch.save`` runs, the staged temp file is unlinked, so
  the rename at the commit point fails after the commit-point transaction;
* ``kill-pre`` / ``kill-serialize`` / ``kill-stage`` / ``kill-post``: SIGKILL in a pre-upload
  callback (before the pending record), in the middle of ``torch.save`` (after it), right after
  the commit-point transaction (before the storage commit), and in a post-upload callback
  (after the storage commit, before the record is live).

Each save prints ``{"call": stream, "filename": ..., "ok": bool}`` once it returns or raises,
preceded by ``{"call": stream, "filename": ...}`` when it starts; each epoch ends with one JSON
line: Ignite's ``_saved`` per stream and the error, if any. A killed process prints no more. The
``ready`` line also has ``saved``: what the restore put back into Ignite's lists.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.tcp_gate import Gate
from tests.waiting import let_time_pass
from tracker_saver import TrackerSaver, find_models, resume
from tracker_saver.core.records import UploadInfo
from tracker_saver.models import open_verified
from tracker_saver.registry.sqlite import SQLiteRegistry

STREAMS = ("best_checkpoint", "checkpoint")
_fault: dict[str, Any] = {"stream": None, "kind": None}
_locks: list[sqlite3.Connection] = []
_gate: Gate | None = None
_gated: Any = None  # the registry behind the gate


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _armed(stream: str, kind: str) -> bool:
    return _fault["stream"] == stream and _fault["kind"] == kind


class _Fault:
    """Kept as it is by the async snapshot, so it strikes where serialization really runs."""

    def __deepcopy__(self, memo: Any) -> Any:
        return self


class _KillInPickle(_Fault):
    def __reduce__(self) -> Any:
        _die()
        return (int, (0,))


class _LockRegistry(_Fault):
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        _locks.append(conn)
        return (int, (0,))


class _CloseGate(_Fault):
    """The MLflow registry's fault: its tracking server stops answering (see tests/tcp_gate.py)."""

    def __reduce__(self) -> Any:
        assert _gate is not None
        _gate.close()
        return (int, (0,))


class _LoseStagedFile(_Fault):
    def __init__(self, root: str) -> None:
        self.root = root

    def __reduce__(self) -> Any:
        for tmp in Path(self.root).rglob(".tmp-*"):
            tmp.unlink()
        return (int, (0,))


class FaultySaver(TrackerSaver):
    """A TrackerSaver whose next save of one stream meets the fault the test asked for."""

    def __call__(self, checkpoint: Any, filename: str, metadata: Any = None) -> None:
        stream = str((metadata or {}).get("basename"))
        if _armed(stream, "serialize"):
            checkpoint = {**checkpoint, "fault": threading.Lock()}
        elif _armed(stream, "kill-serialize"):
            checkpoint = {**checkpoint, "fault": _KillInPickle()}
        elif _armed(stream, "storage"):
            checkpoint = {**checkpoint, "fault": _LoseStagedFile(str(self.storage.root))}  # type: ignore[attr-defined]
        elif _armed(stream, "registry"):
            lock = _CloseGate() if _gate is not None else _LockRegistry(self.registry.path)  # type: ignore[attr-defined]
            checkpoint = {**checkpoint, "fault": lock}
        print(json.dumps({"call": stream, "filename": filename}), flush=True)
        ok = False
        try:
            super().__call__(checkpoint, filename, metadata)
            ok = True
        finally:
            print(json.dumps({"call": stream, "filename": filename, "ok": ok}), flush=True)
            if self._background is None:
                _unlock()


def _unlock() -> None:
    for conn in _locks:
        conn.rollback() if conn.in_transaction else None
        conn.close()
    _locks.clear()
    if _gate is not None and not _gate.is_open:
        _gate.open()
        # The server answers again; the registry tries it once half its timeout has passed
        # (tracker_saver.core.outage.Outage): the next epoch comes later, as in a process that lives on.
        let_time_pass(_gated._transport._outage)


def _killing(base: type) -> type:
    """``base``, a real registry, with a SIGKILL right after the commit-point transaction."""

    class Killing(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            records, supersede = self.records, self.records.supersede

            def killing(record_id: str, **kwargs: Any) -> None:
                supersede(record_id, **kwargs)
                if _fault["kind"] == "kill-stage" and records.get(record_id).stream == _fault["stream"]:
                    _die()

            records.supersede = killing

    return Killing


def _pre(info: UploadInfo) -> UploadInfo | None:
    if _armed(info.stream, "kill-pre"):
        _die()
    return None if _armed(info.stream, "skip") else info


def _post(info: UploadInfo) -> None:
    if _armed(info.stream, "kill-post"):
        _die()


def _mlflow(config: dict[str, Any]) -> Any:
    """The MLflow registry of ``config``, reached through a gate the ``registry`` fault closes."""
    global _gate, _gated
    from urllib.parse import urlsplit

    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    server = urlsplit(str(config["registry"]).partition(":")[2])
    _gate = Gate(server.hostname or "127.0.0.1", int(server.port or 80))
    # At least 6 s: a shorter one means a read timeout of 1 s and no retry for every request of the
    # worker, and on a loaded 2-core machine an MLflow request took longer (CI, in-process tests).
    timeout = max(6.0, float(config.get("timeout", 30)))
    _gated = _killing(MLflowRegistry)(_gate.uri, experiment_prefix=config.get("experiment_prefix", ""), timeout=timeout)
    return _gated


def main(config: dict[str, Any]) -> None:
    registry: Any = config["registry"]
    if str(registry).startswith("mlflow:"):
        registry = _mlflow(config)
    elif str(registry).startswith("clearml"):
        from tracker_saver.integrations.clearml.registry import ClearMLRegistry

        registry = _killing(ClearMLRegistry)(project_root=str(registry).partition(":")[2] or None)
    elif registry:
        registry = _killing(SQLiteRegistry)(registry, timeout=float(config.get("timeout", 30)))
    saver = FaultySaver(
        config["output_uri"], project="p", run=config["run"], registry=registry,
        storage_options=config.get("storage_options") or {}, pre_upload=[_pre], post_upload=[_post],
        **(config.get("saver_options") or {}),
    )  # fmt: skip
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    scores: list[float] = []

    def step(engine: Engine, batch: Any) -> None:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)

    trainer = Engine(step)
    best = Checkpoint(
        {"model": net, "trainer": trainer}, saver, filename_prefix="best", n_saved=config.get("n_best", 2),
        score_function=lambda e: scores[-1], score_name="acc", include_self=True,
        filename_pattern=config.get("pattern"), global_step_transform=lambda e, _: e.state.epoch,
    )  # fmt: skip
    last = Checkpoint({"model": net, "trainer": trainer}, saver, n_saved=config.get("n_last", 1), include_self=True)
    restore = config.get("restore", "none")
    if restore == "resume":
        resume(saver, {"model": net, "trainer": trainer}, [best, last])
    elif restore == "ignite":
        newest = find_models(project="p", run=config["run"], stream="checkpoint", live=True, registry=saver.registry)
        newest = [r for r in newest if r.output_uri == saver.storage.uri]
        if newest:
            with open_verified(newest[-1], storage=saver.storage) as f:
                state = torch.load(f, weights_only=True)
            Checkpoint.load_objects({"model": net, "trainer": trainer, "checkpointer": last}, state)
            best_records = [r for r in find_models(project="p", run=config["run"], stream="best_checkpoint",
                                                   live=True, registry=saver.registry) if r.output_uri == saver.storage.uri]  # fmt: skip
            if best_records:
                with open_verified(best_records[-1], storage=saver.storage) as f:
                    Checkpoint.load_objects({"checkpointer": best}, torch.load(f, weights_only=True))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, best)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
    saver.attach(trainer)  # async saving: each epoch's run ends with its saves durable
    print(json.dumps({"ready": True, "epoch": trainer.state.epoch, "saved": _saved(best, last)}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        scores.append(float(command["score"]))
        _fault.update(stream=command.get("stream"), kind=command.get("fault"))
        error = None
        try:
            trainer.run([0], max_epochs=trainer.state.epoch + 1)
        except Exception as exc:  # reported to the test, which checks the records
            error = f"{type(exc).__name__}: {exc}"
            trainer.state.epoch += 1  # the next line is the next epoch, as after Ignite's raise
        _fault.update(stream=None, kind=None)
        _unlock()  # async saving: the locked save has run by now (attach flushed at the end of the run)
        print(json.dumps({"saved": _saved(best, last), "error": error, "epoch": trainer.state.epoch}), flush=True)
    saver.close()


def _saved(best: Checkpoint, last: Checkpoint) -> dict[str, list[list[Any]]]:
    """Ignite's ``_saved`` of both streams, as ``[priority, filename]`` pairs."""
    return {"best_checkpoint": [list(i) for i in best._saved], "checkpoint": [list(i) for i in last._saved]}


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
