"""The background worker: order, bounded pending operations, errors raised in the caller, flush limits."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tracker_saver.core.errors import FlushTimeoutError, StorageError
from tracker_saver.save.background import WORKER_NICENESS, Background


def test_operations_run_in_the_order_they_were_submitted() -> None:
    seen: list[int] = []
    bg = Background(max_pending=2)
    for i in range(50):
        if i % 3:
            bg.submit(lambda i=i: seen.append(i), what=f"remove {i}")
        else:
            with bg.reserve() as enqueue:
                enqueue(lambda i=i: seen.append(i), what=f"save {i}")
    bg.flush()
    assert seen == list(range(50))
    bg.close()


def test_submit_waits_while_max_pending_heavy_operations_are_pending() -> None:
    gate = threading.Event()
    bg = Background(max_pending=1)
    with bg.reserve() as enqueue:
        enqueue(gate.wait, what="first save")
    submitted = threading.Event()
    snapshots: list[str] = []

    def second() -> None:
        with bg.reserve() as enqueue:
            snapshots.append("taken")  # the snapshot is taken only once there is room
            enqueue(lambda: None, what="second save")
        submitted.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    assert not submitted.wait(0.3) and snapshots == [], "a second snapshot was taken past max_pending"
    bg.submit(lambda: None, what="a remove")  # light operations never wait
    gate.set()
    assert submitted.wait(10)
    waiter.join()
    bg.close()


def test_an_error_is_raised_in_the_caller_by_the_next_submit_with_its_cause() -> None:
    bg = Background()

    def fail() -> None:
        try:
            raise OSError(28, "No space left on device")
        except OSError as exc:
            raise StorageError("writing file:///out/p/r/model.slot0.pt failed") from exc

    bg.submit(fail, what="model_1.pt")
    while bg.pending():
        time.sleep(0.01)
    with pytest.raises(StorageError, match="model.slot0.pt") as raised:
        bg.submit(lambda: None, what="model_2.pt")
    assert isinstance(raised.value.__cause__, OSError)
    bg.flush()  # raised once, then gone
    bg.close()


def test_flush_raises_the_error_and_done_runs_whatever_the_outcome() -> None:
    released: list[str] = []
    gate = threading.Event()
    bg = Background(max_pending=2)
    for what, run in (("bad", lambda: (gate.wait(), 1 / 0)), ("good", lambda: None)):
        with bg.reserve() as enqueue:
            enqueue(run, what=what, done=lambda what=what: released.append(what))
    gate.set()
    with pytest.raises(ZeroDivisionError) as caught:
        bg.flush()
    assert released == ["bad", "good"]
    assert caught.value.__notes__ == ["in the background: bad"]
    bg.close()


def test_a_save_that_waits_for_room_raises_the_error_of_the_one_it_waited_for() -> None:
    """During an outage the save that waited learns of the failure at once, not one save later."""
    gate = threading.Event()
    bg = Background(max_pending=1)
    with bg.reserve() as enqueue:
        enqueue(lambda: (gate.wait(), 1 / 0), what="model_1.pt")
    threading.Timer(0.2, gate.set).start()
    with pytest.raises(ZeroDivisionError), bg.reserve():
        pytest.fail("the block must not run: the save it would queue follows a failed one")
    with bg.reserve() as enqueue:  # the room was given back
        enqueue(lambda: None, what="model_2.pt")
    bg.close()


def test_every_failure_is_named_when_several_failed() -> None:
    bg = Background(max_pending=3)
    gate = threading.Event()
    for name in ("a.pt", "b.pt"):
        with bg.reserve() as enqueue:
            enqueue(lambda name=name: (gate.wait(), (_ for _ in ()).throw(OSError(f"{name} lost"))), what=name)
    gate.set()
    with pytest.raises(OSError, match="a.pt lost") as caught:
        bg.flush()
    assert "1 later background operations failed too:" in caught.value.__notes__
    assert "  OSError: b.pt lost" in caught.value.__notes__
    bg.close()


def test_flush_with_a_timeout_names_what_is_not_durable() -> None:
    gate = threading.Event()
    bg = Background()
    with bg.reserve() as enqueue:
        enqueue(gate.wait, what="best_model_3_acc=0.9.pt")
    with pytest.raises(FlushTimeoutError, match=r"1 background saves not done after 0 s.*best_model_3_acc=0.9.pt") as e:
        bg.flush(timeout=0.2)
    assert e.value.pending == ["best_model_3_acc=0.9.pt"]
    gate.set()
    bg.close()
    with pytest.raises(RuntimeError, match="closed"):
        bg.submit(lambda: None, what="late")


def test_a_snapshot_that_fails_frees_its_room() -> None:
    bg = Background(max_pending=1)
    with pytest.raises(TypeError), bg.reserve():
        raise TypeError("cannot pickle '_thread.lock' object")
    with bg.reserve() as enqueue:  # would wait forever if the room were lost
        enqueue(lambda: None, what="next save")
    bg.close()


def test_max_pending_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="max_pending must be an int >= 1, got 0"):
        Background(max_pending=0)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux only (elsewhere it is left alone)")
def test_worker_thread_runs_at_lower_priority_than_training() -> None:
    bg = Background()
    try:
        bg.submit(lambda: None, what="noop")
        bg.flush()  # the worker has started and lowered itself
        native_id = bg._thread.native_id
        assert native_id is not None
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert os.getpriority(os.PRIO_PROCESS, native_id) == min(19, own + WORKER_NICENESS)
    finally:
        bg.close()
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # training keeps its priority


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs (CI has 2)"
)
def test_a_save_runs_off_the_cpu_the_training_thread_queued_it_from_and_training_keeps_its_own() -> None:
    everywhere = os.sched_getaffinity(0)
    bg = Background()  # its thread starts with every CPU, as the training thread had
    seen: list[set[int]] = []
    try:
        for cpu in sorted(everywhere)[:2]:
            os.sched_setaffinity(0, {cpu})  # this (training) thread now runs on `cpu` only
            with bg.reserve() as enqueue:
                enqueue(lambda: seen.append(os.sched_getaffinity(0)), what=f"save from CPU {cpu}")
            bg.submit(lambda: seen.append(os.sched_getaffinity(0)), what="a remove keeps the save's set")
            bg.flush()
            assert os.sched_getaffinity(0) == {cpu}  # the training thread's own set is untouched
    finally:
        os.sched_setaffinity(0, everywhere)
        bg.close()
    first, second = sorted(everywhere)[:2]
    assert seen == [everywhere - {first}] * 2 + [everywhere - {second}] * 2
