"""Outages of the object store, against the real Ceph RGW: stopped by its pid, or frozen (SIGSTOP).

Each test trains with a real ``Engine`` and ``Checkpoint`` through ``TrackerSaver(timeout=T)``
and a SQLite registry; the gateway goes away in the middle of training. Sync mode: the next
save raises ``StorageError``: a stopped gateway refuses at once ("cannot reach": botocore's few
attempts, no wait); for a frozen one what ended the wait is the bound ``T``, the saver's outage
clock had passed half of it (``Outage.exhausted()``) and retries had stopped. Async mode: training goes on, the error surfaces on a later save or on
``flush()``. Once radosgw is back a later save succeeds (:func:`tests.waiting.let_time_pass`: a
save made after the half timeout in which the saver refuses requests), and storage and registry,
read directly, show no lie and no extra object. No test reads the clock.
(The ClearML side is ``tests/test_clearml_outages.py``; SIGTERM is ``tests/test_preemption.py``.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.helpers import trainer_engine
from tests.waiting import let_time_pass, on_first_failure
from tracker_saver import RecordState, StorageError, TrackerSaver, find_models
from tracker_saver.storage import open_storage

pytestmark = pytest.mark.ceph

#: The bound under test: ``TrackerSaver(timeout=T)``.
T = 6.0
N_SAVED = 2
#: The streaming writer's part size here: a 20 MiB save is three parts, so outages hit multipart uploads.
PART = 8 * 1024 * 1024


def big_model() -> torch.nn.Module:
    """About 20 MiB of weights: with ``PART``-sized parts every save is a streamed multipart upload."""
    torch.manual_seed(0)
    return torch.nn.Linear(1024, 5120)


class Training:
    """One saver and one ``Checkpoint``, trained in runs of real engines; what happened, in order, in ``events``."""

    def __init__(
        self,
        output_uri: str,
        registry: str,
        *,
        timeout: float = T,
        net: torch.nn.Module | None = None,
        **saver_options: Any,
    ) -> None:
        self.net = net if net is not None else big_model()
        self.saver = TrackerSaver(
            output_uri,
            project="p",
            run="r",
            registry=registry,
            timeout=timeout,
            storage_options={"writer_part_size": PART},
            **saver_options,
        )
        self.step = 0
        self.events: list[str] = []  # "saved N", "save N raised"
        self.handler = Checkpoint(
            {"model": self.net}, self.saver, n_saved=N_SAVED, global_step_transform=lambda *_: self.step
        )

    def run(self, epochs: int, *, at_epoch: dict[int, Callable[[], object]] | None = None) -> None:
        """Train ``epochs`` epochs on a fresh engine, saving after each; ``at_epoch[k]()`` runs before epoch k's save."""
        trainer = trainer_engine(self.net)

        @trainer.on(Events.EPOCH_COMPLETED)
        def save(engine: Engine) -> None:
            self.step += 1
            if at_epoch and engine.state.epoch in at_epoch:
                at_epoch[engine.state.epoch]()
            try:
                self.handler(engine)
            except BaseException:
                self.events.append(f"save {self.step} raised")
                raise
            self.events.append(f"saved {self.step}")

        self.saver.attach(trainer)
        trainer.run([0], max_epochs=epochs)

    def live(self) -> list[str]:
        return sorted(r.name for r in self.saver.records(live=True))


def assert_true_and_small(output_uri: str, registry: str, *, settled: bool = True) -> None:
    """Read storage and registry directly: no lie, no extra object; once ``settled`` (a save of
    the stream succeeded since the outage) no unfinished upload and no pending record either.

    Right after an outage an unfinished multipart upload may remain: the abort of the failed
    upload could not reach the server, and a frozen gateway may run a retried
    CreateMultipartUpload after the client gave up on it. The stream's next save removes them.
    """
    storage = open_storage(output_uri)
    live = [r for r in find_models(project="p", run="r", registry=registry, live=True) if r.output_uri == storage.uri]
    for record in live:
        assert storage.digest(record.key) == (record.size, record.sha256), f"a lie: {record}"
    objects = [o.key for o in storage.list("p/r/")]
    assert len(objects) <= N_SAVED, f"more than n_saved objects: {objects}"
    assert all(".slot" in key for key in objects), objects
    if not settled:
        return
    assert storage.staged("p/r") == [], "an unfinished upload was left behind"
    pending = find_models(project="p", run="r", registry=registry, states=(RecordState.PENDING,))
    assert pending == [], f"unsettled records: {pending}"


def assert_ended_by_the_bound(training: Training, kind: str, message: str) -> None:
    """A stopped gateway refuses: the save fails at once, with the fix. A frozen one answers nothing:
    the saver retried until its outage clock passed half the timeout, and that ended the wait."""
    if kind == "stopped":
        assert "cannot reach" in message and "check AWS_ENDPOINT_URL" in message, message
    else:
        assert "stopped answering" in message and training.saver.storage.outage.exhausted(), message


Outage = Callable[[], AbstractContextManager[None]]


@pytest.fixture(params=["stopped", "frozen"])
def outage(request: pytest.FixtureRequest, ceph_s3: Any) -> Iterator[tuple[str, Outage]]:
    """radosgw stopped by its pid (connections refused) or frozen (connections open, no answer)."""
    kind = request.param
    yield kind, (ceph_s3.gateway_stopped if kind == "stopped" else ceph_s3.gateway_frozen)


def _down(ceph_s3: Any, kind: str) -> None:
    if kind == "stopped":
        ceph_s3.kill_rgw()  # SIGTERM by its pid


def test_sync_the_next_save_raises_by_the_bound_and_a_later_one_succeeds(
    s3_output_uri: str, tmp_path: Any, ceph_s3: Any, outage: tuple[str, Outage]
) -> None:
    kind, gateway_out = outage
    registry = str(tmp_path / "registry.db")
    training = Training(s3_output_uri, registry)
    training.run(2)
    before = training.live()
    with gateway_out():
        _down(ceph_s3, kind)
        with pytest.raises(StorageError) as caught:
            training.run(3)
        assert training.events[-1] == "save 3 raised", training.events
        message = str(caught.value)
        assert "127.0.0.1" in message and "p/r/model.slot" in message and s3_output_uri in message
        assert_ended_by_the_bound(training, kind, message)
        # The slot's previous object and its record are intact: a fresh saver-free read after the outage.
    assert training.live() == before
    assert_true_and_small(s3_output_uri, registry, settled=False)
    let_time_pass(training.saver.storage.outage)  # the saver tries S3 again half a timeout after its last failure
    training.run(1)  # radosgw is back: the next save succeeds
    assert training.live() == sorted([before[-1], "model_4.pt"])
    assert_true_and_small(s3_output_uri, registry)
    training.saver.close()


def test_async_training_goes_on_and_the_error_surfaces_then_a_later_save_succeeds(
    s3_output_uri: str, tmp_path: Any, ceph_s3: Any, outage: tuple[str, Outage]
) -> None:
    kind, gateway_out = outage
    registry = str(tmp_path / "registry.db")
    training = Training(s3_output_uri, registry, async_upload=True)
    training.run(2)  # attach flushes at the end of the run: durable
    before = training.live()
    with gateway_out():
        _down(ceph_s3, kind)
        try:
            with pytest.raises(StorageError, match="stopped answering|cannot reach") as caught:
                training.run(4)  # the error reaches the training thread on a later save or the final flush
        except pytest.fail.Exception as exc:  # say whether someone started the gateway again meanwhile
            raise AssertionError(f"{exc}: {ceph_s3.rgw_report()}") from exc
        # The save made as the gateway went away (step 3) returned: training went on while it met the outage.
        assert training.events[:3] == ["saved 1", "saved 2", "saved 3"], training.events
        assert "in the background: model_3.pt" in getattr(caught.value, "__notes__", [])
        assert_ended_by_the_bound(training, kind, str(caught.value))
    assert training.live() == before
    assert_true_and_small(s3_output_uri, registry, settled=False)
    let_time_pass(training.saver.storage.outage)
    training.run(1)
    assert training.live()[-1] == f"model_{training.step}.pt"
    assert_true_and_small(s3_output_uri, registry)
    training.saver.close()


@pytest.mark.parametrize("operation", ["PutObject", "CompleteMultipartUpload"])
def test_a_commit_refused_by_a_killed_gateway_keeps_the_previous_record_live_at_once(
    s3_output_uri: str, tmp_path: Any, ceph_s3: Any, operation: str
) -> None:
    """radosgw is killed right before the save's commit request: the one PUT of a small checkpoint,
    or the CompleteMultipartUpload once every part of a 20 MiB one is up. Every attempt is
    refused, which proves that nothing reached the store, so as soon as the save raises, with
    the gateway still down, the slot's previous record is live again; the new one is failed.
    (Before the staged write, the previous record stayed evicted until the gateway came back.)
    """
    registry = str(tmp_path / "registry.db")
    training = Training(s3_output_uri, registry, net=torch.nn.Linear(4, 4) if operation == "PutObject" else None)
    training.run(2)
    before = training.live()
    events = training.saver.storage._client.meta.events  # the saver's own client: its commit request
    killed: list[str] = []

    def kill(params: dict[str, Any], **_: Any) -> None:
        if not killed:
            killed.append(params["Key"])
            ceph_s3.kill_rgw()

    with ceph_s3.gateway_stopped():
        events.register(f"before-parameter-build.s3.{operation}", kill, unique_id="test-kill")
        try:
            with pytest.raises(StorageError, match="stopped answering|cannot reach"):
                training.run(1)
                pytest.fail(f"the save succeeded; killed before {killed}; {ceph_s3.rgw_report()}")
        finally:
            events.unregister(f"before-parameter-build.s3.{operation}", unique_id="test-kill")
        assert killed and killed[0].endswith("p/r/model.slot0.pt"), killed
        assert training.live() == before  # at once: nothing reads the store, which is still down
        states = {r.filename: r.state for r in find_models(project="p", run="r", registry=registry)}
        assert states["model_3.pt"] is RecordState.FAILED, states
        assert RecordState.PENDING not in states.values(), states
    let_time_pass(training.saver.storage.outage)
    training.run(1)
    assert training.live() == sorted([before[-1], "model_4.pt"])
    assert_true_and_small(s3_output_uri, registry)
    training.saver.close()


@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_an_outage_shorter_than_the_bound_is_ridden_through_in_order(
    s3_output_uri: str, tmp_path: Any, ceph_s3: Any, async_upload: bool
) -> None:
    """Frozen until the first request of a save has timed out, then thawed, within a 12 s bound: the
    save retries, the saves complete in order, and nothing is raised. The timed-out request may
    have started a multipart upload that the gateway ran once thawed: the next saver's start-up
    recovery removes it."""
    registry = str(tmp_path / "registry.db")
    training = Training(s3_output_uri, registry, timeout=12.0, async_upload=async_upload, max_pending=2)
    training.run(1)
    with ceph_s3.gateway_frozen():
        pid = ceph_s3.rgw_pid()
        failed = on_first_failure(training.saver.storage.outage, lambda: os.kill(pid, signal.SIGCONT))
        training.run(2)  # sync: the first save waits for the gateway; async: attach's flush does
    assert failed, "no request met the frozen gateway"
    assert training.events == ["saved 1", "saved 2", "saved 3"], training.events
    assert training.live() == ["model_2.pt", "model_3.pt"]
    training.saver.close()
    assert_true_and_small(s3_output_uri, registry, settled=False)
    Training(s3_output_uri, registry).saver.close()  # start-up recovery
    assert_true_and_small(s3_output_uri, registry)
