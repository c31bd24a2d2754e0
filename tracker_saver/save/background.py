"""One worker thread that runs a saver's operations in the order they were issued, bounded.

``reserve`` waits until fewer than ``max_pending`` heavy operations (saves holding a
snapshot) are queued or running, then lets the caller take its snapshot and queue it;
``submit`` queues a light one (a remove). Both return at once after that. An
operation's error is kept and raised in the caller's thread by the next ``submit`` or by
``flush``, so nothing fails silently (DESIGN invariant 5). The thread is a daemon, and an
``atexit`` hook flushes with a time limit, so interpreter shutdown never hangs forever. On Linux the
thread runs at a lower CPU priority (``WORKER_NICENESS``), so it takes the CPU training leaves, and
each heavy operation runs off the CPU the training thread was on when it queued it (``keep_off``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tracker_saver.core.errors import ClosedError, ConfigError, FlushTimeoutError

__all__ = ["ATEXIT_TIMEOUT_S", "WORKER_NICENESS", "Background"]

log = logging.getLogger(__name__)

#: The worker thread's nice value (Linux: per thread; threads it starts inherit it), so a background
#: save takes the CPU training leaves rather than competing with it (benchmarks/bench_drag.py).
WORKER_NICENESS = 10

#: How long the ``atexit`` flush waits for background saves before giving up and logging what
#: was not made durable.
ATEXIT_TIMEOUT_S = 300.0


@dataclass
class _Op:
    run: Callable[[], object]
    what: str
    heavy: bool
    done: Callable[[], None] | None
    cpu: int | None = None  # the CPU the queuing thread was on (heavy operations)


class Background:
    """Run operations on one thread, in order; at most ``max_pending`` heavy ones at once.

    Args:
        max_pending: heavy operations (those holding a snapshot) queued or running before
            ``reserve`` waits (``submit`` never waits).
        name: the thread's name.

    Examples:
        >>> seen = []
        >>> bg = Background(max_pending=1)
        >>> with bg.reserve() as enqueue:
        ...     enqueue(lambda: seen.append("save"), what="model_1.pt")
        >>> bg.submit(lambda: seen.append("remove"), what="remove model_1.pt")
        >>> bg.flush(); seen
        ['save', 'remove']
        >>> bg.close()
    """

    def __init__(self, *, max_pending: int = 1, name: str = "tracker-saver") -> None:
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
            raise ConfigError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self._slots = threading.BoundedSemaphore(max_pending)
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._pending: list[str] = []  # what is queued or running, oldest first
        self._errors: list[BaseException] = []
        self._idle = threading.Condition()
        self._closed = False
        #: The creating (training) thread's CPUs: a save may use them all but the one it was queued from.
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()
        self._atexit = _flush_at_exit(self)
        atexit.register(self._atexit)

    def submit(self, run: Callable[[], object], *, what: str) -> None:
        """Queue a light operation (one that holds no snapshot), then raise an earlier error.

        It is queued even then: the caller (Ignite's ``Checkpoint``) already acted on it, e.g.
        dropped the file it removes from the ones it keeps, and will not ask again.
        """
        self._check_open()
        self._enqueue(_Op(run, what, False, None))
        self.raise_error()

    @contextlib.contextmanager
    def reserve(self) -> Iterator[Callable[..., None]]:
        """Wait for room for one heavy operation, then yield the function that queues it.

        The caller prepares the operation (takes its snapshot) inside the block, so at most
        ``max_pending`` snapshots ever exist; if the block raises first, the room is freed.
        The queue function takes ``run``, ``what`` and ``done`` (runs on the worker after
        ``run``, whatever its outcome, e.g. to release the snapshot's buffers).
        """
        self._check_open()
        self.raise_error()
        self._slots.acquire()  # the oldest heavy operation ends: an outage bounds it by its timeout
        try:
            self.raise_error()  # and if it failed, this save says so now rather than one save later
        except BaseException:
            self._slots.release()
            raise
        queued = False

        def enqueue(run: Callable[[], object], *, what: str, done: Callable[[], None] | None = None) -> None:
            nonlocal queued
            self._enqueue(_Op(run, what, True, done, current_cpu()))
            queued = True

        try:
            yield enqueue
        finally:
            if not queued:
                self._slots.release()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this saver is closed: create a new TrackerSaver to save again")

    def _enqueue(self, op: _Op) -> None:
        with self._idle:
            self._pending.append(op.what)
        self._queue.put(op)

    def raise_error(self) -> None:
        """Raise the oldest error a background operation met and has not raised yet.

        When several failed, a note on it names the others (they are not raised again).
        """
        with self._idle:
            errors, self._errors = self._errors, []
        if errors:
            if len(errors) > 1:
                errors[0].add_note(f"{len(errors) - 1} later background operations failed too:")
                for other in errors[1:]:
                    errors[0].add_note(f"  {type(other).__name__}: {other}")
            raise errors[0]

    def pending(self) -> list[str]:
        """What is queued or running, oldest first."""
        with self._idle:
            return list(self._pending)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every operation is done, then raise the first error any of them met.

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed first; it lists what is not durable.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise FlushTimeoutError(
                        f"{len(self._pending)} background saves not done after {timeout:.0f} s, so not "
                        f"durable: {', '.join(self._pending)}",
                        pending=list(self._pending),
                    )
                self._idle.wait(left)
        self.raise_error()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the thread (idempotent)."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._queue.put(None)
            atexit.unregister(self._atexit)
            if not self._pending and self._thread is not threading.current_thread():
                # Let the thread end before the interpreter does: one killed at shutdown while
                # torch's thread-local state is torn down aborts the process ("terminate called").
                self._thread.join()

    def _work(self) -> None:
        _lower_priority()
        while (op := self._queue.get()) is not None:
            try:
                if op.heavy:
                    keep_off(op.cpu, self.cpus)
                op.run()
            except BaseException as exc:  # kept for the training thread: never only logged
                log.debug("background %s failed", op.what, exc_info=True)
                exc.add_note(f"in the background: {op.what}")
                with self._idle:
                    self._errors.append(exc)
            finally:
                if op.done is not None:
                    op.done()
                if op.heavy:
                    self._slots.release()
                with self._idle:
                    self._pending.remove(op.what)
                    self._idle.notify_all()


def _lower_priority() -> None:
    """Lower the calling thread's CPU priority by ``WORKER_NICENESS`` where the OS allows it per thread."""
    if sys.platform != "linux":  # elsewhere PRIO_PROCESS would lower the whole process, training included
        return
    try:
        me = threading.get_native_id()  # relative to the training's own nice value (a `nice` run's too)
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + WORKER_NICENESS))
    except OSError as exc:  # a sandbox may forbid it: the save still runs, only at normal priority
        log.debug("background thread keeps its priority: %s", exc)


def _sched_getcpu() -> Callable[[], int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):  # no such libc function (macOS, Windows)
        return None


_getcpu = _sched_getcpu() if sys.platform == "linux" else None


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now, or ``None`` where the OS does not say.

    Examples:
        >>> cpu = current_cpu()
        >>> cpu is None or cpu in os.sched_getaffinity(0)
        True
    """
    cpu = _getcpu() if _getcpu is not None else -1
    return cpu if cpu >= 0 else None


def keep_off(cpu: int | None, cpus: set[int]) -> None:
    """Let the calling thread run on every CPU of ``cpus`` but ``cpu`` (all of them if that leaves none).

    ``cpu`` is where the training thread ran when it queued a save. Left alone, the worker is
    often woken on training's CPU (a GIL hand-over wakes the waiting thread near the waker), where
    at nice 10 it gets little time while training runs. Kept off it, saves were durable 2-3x sooner
    with the second core busy, at about the same cost to training (benchmarks/bench_drag.py
    ``--busy --keep-off-ab``). Threads this thread starts (S3 part uploads) inherit the set.

    Examples:
        >>> keep_off(None, {0, 1})  # nothing known: nothing changes
    """
    others = cpus - {cpu}
    if cpu is None or not others or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, others)
    except OSError as exc:  # a sandbox may forbid it: the save still runs, anywhere
        log.debug("background thread keeps its CPUs: %s", exc)


def _flush_at_exit(background: Background) -> Callable[[], None]:
    """An ``atexit`` hook that flushes ``background`` (if still alive) with a time limit."""
    ref = weakref.ref(background)

    def hook() -> None:
        found = ref()
        if found is None or found._closed:
            return
        try:
            found.close(ATEXIT_TIMEOUT_S)
        except FlushTimeoutError as exc:
            log.error("tracker_saver at exit: NOT durable: %s", exc)
        except Exception as exc:
            log.error("tracker_saver at exit: NOT durable: %s", "\n".join([str(exc), *getattr(exc, "__notes__", ())]))

    return hook
