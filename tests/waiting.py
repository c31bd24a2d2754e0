"""Act on the event a test means, never after a sleep: a thread reaching the line where it waits, a back end's first failure.

A sleep says "by now it has probably happened"; on a loaded machine it has not, and the test fails
or passes without testing anything. These helpers give the moment itself:

* :func:`when_reaching` runs an action in a thread right before it executes a given line (the
  ``acquire`` of a lock someone else holds, say): the test knows that thread is about to wait.
* :func:`when_waiting` is that for a ``threading.Semaphore``: the action runs only when the
  semaphore is exhausted and the thread really waits.
* :func:`on_first_failure` runs an action right after an :class:`~tracker_saver.core.outage.Outage`
  noted its first failed request (the server is back "after the save met it down").
* :func:`until_idle` waits until a saver's background worker has run everything queued (and kept
  any error for the next call), as ``flush`` does, without raising it.
* :func:`wait_gone` waits until a process (a child or not) has exited, on its pidfd.
* :func:`let_time_pass` moves an ``Outage``'s clock past the half timeout in which it refuses
  requests after an outage: what a later save meets, without sleeping through it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import select
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from tracker_saver.core.outage import Outage

__all__ = ["let_time_pass", "on_first_failure", "until_idle", "wait_gone", "when_reaching", "when_waiting"]


def _line_of(function: Callable[..., Any], text: str) -> int:
    lines, first = inspect.getsourcelines(inspect.unwrap(function))
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise AssertionError(f"{function.__qualname__} has no line with {text!r}: the test must follow the code")


@contextlib.contextmanager
def when_reaching(
    function: Callable[..., Any],
    text: str,
    action: Callable[[], object],
    *,
    where: Callable[[FrameType], bool] = lambda frame: True,
) -> Iterator[list[int]]:
    """Inside the block, run ``action`` in any thread about to execute ``function``'s first line that
    contains ``text`` (and ``where(frame)`` holds): this thread, and the threads started inside the block.

    Yields a list that gets one entry (the thread's ident) each time the action ran.

    Examples:
        >>> lock, seen = threading.Lock(), []
        >>> def take():
        ...     with lock:
        ...         seen.append("took")
        >>> with when_reaching(take, "with lock:", lambda: seen.append("about to take")) as reached:
        ...     take()
        >>> seen, len(reached)
        (['about to take', 'took'], 1)
    """
    code = inspect.unwrap(function).__code__
    line = _line_of(function, text)
    reached: list[int] = []
    active = [True]

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not (active[0] and event == "call" and frame.f_code is code):
            return None
        last = [0]

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            # Coming to the line from below is leaving it (a with-statement's exit is traced as its line).
            if active[0] and event == "line" and frame.f_lineno == line and last[0] < line and where(frame):
                reached.append(threading.get_ident())
                action()
            if event == "line":
                last[0] = frame.f_lineno
            return local

        return local

    before, threads_before = sys.gettrace(), threading.gettrace()
    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        yield reached
    finally:
        active[0] = False  # threads started inside keep the tracer: it stops acting
        sys.settrace(before)
        threading.settrace(threads_before)  # type: ignore[arg-type]


def when_waiting(
    semaphore: threading.Semaphore, action: Callable[[], object]
) -> contextlib.AbstractContextManager[list[int]]:
    """:func:`when_reaching` the wait inside ``semaphore.acquire()``: only a thread that found it
    exhausted gets there, so the action runs exactly when a thread waits for room."""
    return when_reaching(
        threading.Semaphore.acquire, "self._cond.wait(", action, where=lambda frame: frame.f_locals["self"] is semaphore
    )


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` (a child of this process or not) has exited; whether it did within
    ``timeout`` (a guard against a hang, not a bound under test)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])  # a pidfd is readable once the process exited
    finally:
        os.close(fd)


def until_idle(background: Any) -> None:
    """Wait until ``background`` (a :class:`~tracker_saver.save.background.Background`) has nothing
    queued or running; an error it met stays kept for the next call (white-box: its own condition)."""
    with background._idle:
        background._idle.wait_for(lambda: not background._pending)


def on_first_failure(outage: Outage, action: Callable[[], object]) -> list[str]:
    """Run ``action`` right after ``outage`` notes its first failed request, in the thread that made it.

    Returns the failures noted since (their error names), for the test to count.
    """
    noted: list[str] = []
    failed = outage.failed

    def spy(started: float, error: str = "") -> None:
        failed(started, error)
        noted.append(error)
        if len(noted) == 1:
            action()

    outage.failed = spy  # type: ignore[method-assign]
    return noted


def let_time_pass(outage: Outage) -> None:
    """Move ``outage``'s clock past the window in which it refuses requests after an outage.

    Once a back end failed for half the timeout, its :class:`~tracker_saver.core.outage.Outage`
    refuses every request at once for the next half (``retry_in()`` seconds), then tries again: a
    save right after the outage fails although the server is back, one made later succeeds. This
    is "later", without a sleep.
    """
    skip = outage.retry_in()
    clock = outage._clock
    outage._clock = lambda: clock() + skip
