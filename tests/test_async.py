"""``async_upload=True``: training waits only for the snapshot; order, bounds, errors and shutdown.

The invariants themselves run in async mode too (``TestLocalAsyncInvariants``); these tests
pin what is specific to the background worker, with real ``Checkpoint``/``Engine`` runs.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tests.helpers import ROOT, model, process_env
from tests.waiting import until_idle, when_waiting
from tracker_saver import (
    CallbackError,
    ConfigError,
    FlushTimeoutError,
    RecordState,
    SerializationError,
    find_models,
)
from tracker_saver.core.records import UploadInfo


class Gate:
    """A pre-upload callback that holds each upload until ``open()``; records what it saw."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.seen: list[str] = []

    def __call__(self, info: UploadInfo) -> UploadInfo:
        self.seen.append(info.filename)
        assert self.opened.wait(60), "the gate was never opened"
        return info

    def open(self) -> None:
        self.opened.set()


def _trainer(net: torch.nn.Module) -> Engine:
    def step(engine: Engine, batch: object) -> None:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)

    return Engine(step)


def test_a_save_returns_before_its_upload_and_saves_the_weights_of_its_moment(local_target) -> None:
    gate = Gate()
    saver = local_target.saver(async_upload=True, pre_upload=[gate])
    net = model()
    trainer = _trainer(net)
    handler = Checkpoint({"model": net}, saver, n_saved=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    trainer.run([0], max_epochs=1)  # returns while the upload waits at the gate
    expected = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(100.0)  # training goes on: the checkpoint must not see this
    assert find_models(project="p", live=True, registry=local_target.registry) == []
    gate.open()
    saver.flush()
    (record,) = find_models(project="p", live=True, registry=local_target.registry)
    with local_target.storage().get(record.key) as f:
        saved = torch.load(f, weights_only=True)  # one object in to_save: its state_dict itself
    assert all(torch.equal(saved[k], v) for k, v in expected.items())
    saver.close()


def test_a_remove_of_a_pending_upload_runs_in_order_and_keeps_the_footprint(local_target) -> None:
    # neptune-client #884 / Lightning #14035: the file was deleted before its async upload ran.
    gate = Gate()
    saver = local_target.saver(async_upload=True, max_pending=4, pre_upload=[gate])
    net = model()
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    trainer.run([0], max_epochs=3)  # save 1, remove 1 + save 2, remove 2 + save 3: all queued
    gate.open()
    saver.flush()
    records = find_models(project="p", registry=local_target.registry)
    assert [(r.filename, r.state) for r in records] == [
        ("model_1.pt", RecordState.EVICTED),
        ("model_2.pt", RecordState.EVICTED),
        ("model_3.pt", RecordState.LIVE),
    ]
    assert local_target.counts() == {"model": 1}
    saver.close()


def test_at_most_max_pending_snapshots_then_the_training_thread_waits(local_target) -> None:
    gate = Gate()
    saver = local_target.saver(async_upload=True, max_pending=1, pre_upload=[gate])
    net = model()
    handler = Checkpoint({"model": net}, saver, n_saved=3)
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    # The second save waits for the first's upload (held at the gate): the gate opens only then.
    with when_waiting(saver._background._slots, gate.open) as waited:
        trainer.run([0], max_epochs=2)
    assert len(waited) == 1, "the second save did not wait for the first"
    saver.flush()
    assert gate.seen == ["model_1.pt", "model_2.pt"]
    assert len(find_models(project="p", live=True, registry=local_target.registry)) == 2
    saver.close()


def test_a_background_error_is_raised_by_the_next_save_with_its_cause(local_target) -> None:
    calls: list[str] = []

    def refuse_first(info: UploadInfo) -> UploadInfo:
        calls.append(info.filename)
        if len(calls) == 1:
            raise OSError("quota exceeded")
        return info

    saver = local_target.saver(async_upload=True, pre_upload=[refuse_first])
    net = model()
    handler = Checkpoint({"model": net}, saver, n_saved=2)
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    trainer.run([0], max_epochs=1)
    until_idle(saver._background)  # the worker has met the error
    with pytest.raises(CallbackError, match="model_1.pt") as raised:
        trainer.run([0], max_epochs=2)  # the next save raises it, before taking its snapshot
    assert isinstance(raised.value.__cause__, OSError)
    assert calls == ["model_1.pt"]
    saver.flush()
    saver.close()


def test_a_remove_that_raises_an_earlier_error_is_still_done(local_target) -> None:
    """Ignite drops the oldest file from ``_saved`` and calls ``remove`` before the next save; if
    ``remove`` raises the error a background save met, Ignite never asks again. The remove must
    still happen, or that file's slot stays taken and the stream grows past ``n_saved``."""
    failing = {"model_3.pt"}

    def fail_once(info: UploadInfo) -> UploadInfo:
        if info.filename in failing:
            failing.discard(info.filename)
            raise RuntimeError("the server failed this save")
        return info

    saver = local_target.saver(async_upload=True, pre_upload=[fail_once])
    net = model()
    handler = Checkpoint({"model": net}, saver, n_saved=2)
    trainer = _trainer(net)

    @trainer.on(Events.EPOCH_COMPLETED)
    def save(engine: Engine) -> None:
        until_idle(saver._background)  # each save meets the previous one's outcome
        with contextlib.suppress(CallbackError):  # the user's choice: go on training after a failure
            handler(engine)

    trainer.run([0], max_epochs=7)
    saver.flush()
    assert [r.name for r in saver.records(live=True)] == ["model_6.pt", "model_7.pt"]
    assert local_target.counts() == {"model": 2}
    saver.close()


def test_flush_raises_the_error_and_close_names_what_is_not_durable(local_target) -> None:
    saver = local_target.saver(async_upload=True, pre_upload=[lambda info: 1 / 0])
    net = model()
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    trainer.run([0], max_epochs=1)
    with pytest.raises(CallbackError) as raised:
        saver.flush()
    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    gate = Gate()
    slow = local_target.saver(run="slow", async_upload=True, pre_upload=[gate])
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, slow, n_saved=1))
    trainer.run([0], max_epochs=1)
    with pytest.raises(FlushTimeoutError, match="not done after 0 s, so not durable: model_1.pt"):
        slow.close(timeout=0)  # the upload is held at the gate: not done when the limit is reached
    gate.open()
    saver.close()


def test_attach_flushes_at_completion_and_reraises_a_training_error(local_target) -> None:
    gate = Gate()
    gate.open()
    saver = local_target.saver(async_upload=True, pre_upload=[gate])
    net = model()

    def step(engine: Engine, batch: object) -> None:
        if engine.state.epoch == 3:
            raise RuntimeError("diverged")

    trainer = Engine(step)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    saver.attach(trainer)
    with pytest.raises(RuntimeError, match="diverged"):  # Ignite would swallow it if the handler did
        trainer.run([0], max_epochs=5)
    (record,) = find_models(project="p", live=True, registry=local_target.registry)
    assert record.filename == "model_2.pt"  # durable: flushed before the error went on
    saver.close()


def test_a_snapshot_that_cannot_be_taken_fails_on_the_training_thread(local_target) -> None:
    saver = local_target.saver(async_upload=True)
    net = model()
    trainer = _trainer(net)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net, "lock": _Locked()}, saver, n_saved=1))
    with pytest.raises(SerializationError, match="could not copy 'checkpoint_1.pt' for a background save"):
        trainer.run([0], max_epochs=1)
    assert find_models(project="p", registry=local_target.registry) == []
    saver.close()


class _Locked:
    def state_dict(self) -> dict[str, object]:
        return {"lock": threading.Lock()}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_pending_must_be_a_positive_int(local_target, bad) -> None:
    with pytest.raises(ConfigError, match=f"max_pending={bad!r}: pass how many snapshots"):
        local_target.saver(async_upload=True, max_pending=bad)


def _script(body: str) -> str:
    return textwrap.dedent(
        """
        import logging, sys, threading, time, torch
        from ignite.engine import Engine, Events
        from ignite.handlers import Checkpoint
        from tracker_saver import TrackerSaver
        import tracker_saver.save.background as background
        logging.basicConfig(level=logging.ERROR)
        out, registry = sys.argv[1], sys.argv[2]
        """
    ) + textwrap.dedent(body)


@pytest.mark.parametrize("hang", [False, True])
def test_interpreter_exit_flushes_or_gives_up_within_the_limit(local_target, hang) -> None:
    body = """
        # The upload is held until the interpreter exits (an atexit hook registered after the saver's
        # runs before it), so the at-exit flush always finds it pending; a hang is never let go, and
        # the flush gives up at its limit (1 s here), saying what is not durable.
        import atexit
        background.ATEXIT_TIMEOUT_S = 1.0 if HANG else 60.0
        exiting = threading.Event()
        def held(info):
            threading.Event().wait() if HANG else exiting.wait()
            return info
        saver = TrackerSaver(out, project="p", run="r", registry=registry, async_upload=True, pre_upload=[held])
        atexit.register(exiting.set)
        net = torch.nn.Linear(2, 1)
        trainer = Engine(lambda e, b: None)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
        trainer.run([0], max_epochs=1)
        print("training done", flush=True)
    """.replace("HANG", str(hang))
    # A process of its own, whose exit is the point: forked from the tests' fork server, which has
    # imported torch and ignite once; its exit joins threads and then runs atexit, as an interpreter's.
    done = forkserver.run(
        "-c", [_script(body), local_target.output_uri, local_target.registry], env=process_env(), timeout=120
    )
    assert done.returncode == 0 and "training done" in done.stdout, done.stderr
    states = [r.state for r in find_models(project="p", registry=local_target.registry)]
    if hang:  # held in the pre-upload callback, before its pending record: nothing half-written
        assert states == [] and "not durable: model_1.pt" in done.stderr, done.stderr
    else:
        assert states == [RecordState.LIVE], done.stderr


@pytest.mark.ceph
def test_interpreter_exit_flushes_a_multipart_upload_to_s3(s3_output_uri, tmp_path) -> None:
    """At an atexit flush concurrent.futures takes no new work: the writer's parts still go up."""
    from tracker_saver.storage import open_storage

    body = """
        saver = TrackerSaver(
            out, project="p", run="r", registry=registry, async_upload=True,
            storage_options={"writer_part_size": 5 << 20},
        )
        net = torch.nn.Linear(1024, 3000)  # 12 MiB: three parts
        trainer = Engine(lambda e, b: None)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
        trainer.run([0], max_epochs=1)
        print("training done", flush=True)
    """
    registry = str(tmp_path / "registry.db")
    done = subprocess.run(
        [sys.executable, "-c", _script(body), s3_output_uri, registry],
        cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "training done" in done.stdout, done.stderr
    [record] = find_models(project="p", registry=registry)
    assert record.state == RecordState.LIVE, done.stderr
    assert open_storage(s3_output_uri).digest(record.key) == (record.size, record.sha256)
