"""A bounded wait on a back end that stopped answering: the clock behind every ``timeout``.

One :class:`Outage` per connection (an S3 client, a ClearML session) watches its requests.
The first failed request (refused, timed out, or a 5xx answer) starts the clock; any answer
stops it. Retries go on while the clock is under half the ``timeout``; after that the back end
is down: requests are refused at once with :class:`OutageError` for half the ``timeout``, then
one may try again, so a back end that comes back is used again. Each request's own connect
and read timeouts (:func:`request_timeouts`) fit in the other half, so no call waits longer
than ``timeout`` after the back end went away, and a retry or an abort that follows a failed
save fails at once instead of waiting again (docs/outages.md).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator

from tracker_saver.core.errors import ConfigError

__all__ = ["DEFAULT_TIMEOUT_S", "Outage", "OutageError", "check_timeout", "request_timeouts"]

#: How long a save may wait on an S3 endpoint or a ClearML server that stopped answering.
DEFAULT_TIMEOUT_S = 60.0


class OutageError(Exception):
    """A request was refused because its back end has not answered for longer than allowed."""


def check_timeout(name: str, value: object) -> float:
    """``value`` as seconds; ``ConfigError`` naming ``name`` unless it is a number > 0.

    Examples:
        >>> check_timeout("timeout", 5)
        5.0
        >>> check_timeout("timeout", 0)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: timeout=0: pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"{name}={value!r}: pass the seconds a save may wait on a back end that stopped answering, "
            f"a number > 0 (default {DEFAULT_TIMEOUT_S:.0f})"
        )
    return float(value)


def request_timeouts(timeout: float) -> tuple[float, float]:
    """``(connect, read)`` seconds for one request under ``timeout``: together half of it.

    Examples:
        >>> request_timeouts(60.0)
        (10.0, 20.0)
    """
    return timeout / 6, timeout / 3


class Outage:
    """How long one back end has been failing, and whether to try it again.

    Once it has failed for half the timeout it is *down*: for the next half of the timeout no
    request is tried (each is refused at once), then one request may try it; any answer ends
    the outage. So the requests that follow a failure (an abort, the next queued save) fail at
    once, and a new request finds out within half the timeout whether the server is back.

    Args:
        timeout: the bound, in seconds; retries stop once the back end has failed for half of it.
        clock: monotonic seconds (tests pass a fake one).

    Examples:
        >>> now = [0.0]
        >>> outage = Outage(10.0, clock=lambda: now[0])
        >>> outage.failed(outage.attempt())
        >>> now[0] = 6.0; outage.failed(outage.attempt())  # down now: no try for 5 s
        >>> now[0] = 7.0; outage.attempt()
        Traceback (most recent call last):
        ...
        tracker_saver.core.outage.OutageError: no answer for 7.0 s (timeout 10 s); next try in 4.0 s
        >>> now[0] = 11.5; outage.attempt()  # one try; it gets an answer: back to normal
        11.5
        >>> outage.succeeded(); outage.retry_in()
        0.0
    """

    def __init__(self, timeout: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = check_timeout("timeout", timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # start of the first failed request since the last answer
        self._closed_until = -math.inf  # while down, nothing is tried before this
        self._impatient = threading.local()
        self.last_error = ""

    def attempt(self) -> float:
        """Before a request: its start time, or ``OutageError`` when it must not be tried."""
        with self._lock:
            now = self._clock()
            if self._down(now):
                if now < self._closed_until:
                    raise OutageError(self.describe(now) + f"; next try in {self._closed_until - now:.1f} s")
                self._closed_until = now + self.timeout / 2  # this try may take that long: others wait
            return now

    def failed(self, started: float, error: str = "") -> None:
        """After a request that got no answer (or a 5xx one) and started at ``started``."""
        with self._lock:
            if self._since is None or started < self._since:
                self._since = started
            if error:
                self.last_error = error
            now = self._clock()
            if self._down(now):
                self._closed_until = max(self._closed_until, now + self.timeout / 2)

    def succeeded(self) -> None:
        """After any answer but a 5xx: the back end is up."""
        with self._lock:
            self._since = None
            self._closed_until = -math.inf

    def retry_in(self) -> float:
        """Seconds until a request will be tried again (0 unless the back end is down)."""
        with self._lock:
            now = self._clock()
            return max(0.0, self._closed_until - now) if self._down(now) else 0.0

    def exhausted(self) -> bool:
        """Whether to stop retrying: the back end failed for over half the timeout (or at all,
        inside :meth:`impatient`)."""
        with self._lock:
            return self._exhausted(self._clock())

    def _exhausted(self, now: float) -> bool:
        return self._since is not None and (self.is_impatient() or self._down(now))

    def _down(self, now: float) -> bool:
        return self._since is not None and now - self._since > self.timeout / 2

    def is_impatient(self) -> bool:
        """Whether this thread is inside :meth:`impatient`."""
        return bool(getattr(self._impatient, "on", False))

    @contextlib.contextmanager
    def impatient(self) -> Iterator[None]:
        """In this thread, stop at the first failure: for set-up checks, where a refused
        connection is far likelier a wrong endpoint than an outage worth waiting out."""
        self._impatient.on = True
        try:
            yield
        finally:
            self._impatient.on = False

    def describe(self, now: float | None = None) -> str:
        """``"no answer for N.N s (timeout T s)"``, plus the last failure when one was noted."""
        now = self._clock() if now is None else now
        down = 0.0 if self._since is None else now - self._since
        last = f"; last error: {self.last_error}" if self.last_error else ""
        return f"no answer for {down:.1f} s (timeout {self.timeout:g} s){last}"
