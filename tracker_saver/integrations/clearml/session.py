"""The ClearML registry's own API session: every call bounded by ``timeout``, retried by us.

The SDK's process-wide session retries 240 times with backoff up to 120 s, and waits forever
on a 503 ("maintenance"), holding a lock: a save could block training for many minutes
(``../shared/notes/clearml.md``). The registry therefore logs in with a session of its own,
built from the same configuration (``clearml.conf``, ``CLEARML_*``) but with:

* no retries inside the SDK (urllib3 ``total=0``) and no waiting on maintenance;
* connect and read timeouts of ``timeout/6`` and ``timeout/3`` (instead of 10 s and 300 s);
* our retry loop in :func:`send` (network errors, 502/503/504), which an :class:`~tracker_saver.core.outage.Outage` stops once
  the server has failed for half of ``timeout``.

Nothing global changes: the user's ``Task`` and the SDK's own calls keep their settings.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tracker_saver.core.outage import Outage, OutageError, request_timeouts
from tracker_saver.integrations.clearml.internals import bounded_session_class, request_action, sdk_config

__all__ = ["open_session", "send"]

#: Answers that mean the server (or the proxy before it) is not serving right now. A 500 is an
#: answer (clearml-server's own error, e.g. its database failed): raised at once, not retried.
_UNAVAILABLE = (502, 503, 504)
#: Actions that must not run twice: a retry after an unclear failure could repeat them.
_NOT_IDEMPOTENT = ("create", "delete")


class _Config:
    """The SDK's configuration, read-only, except that a 503 is an answer rather than a wait."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def get(self, key: str, default: Any = None) -> Any:
        if key == "api.http.wait_on_maintenance_forever":
            return False
        return self._config.get(key, default)

    def set_overrides(self, *_: Any, **__: Any) -> None:
        """Vault overrides are the SDK session's business: never applied through this one."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def open_session(host: str | None, timeout: float) -> Any:
    """Log in to ClearML with the user's configuration; calls wait at most ``timeout`` in all.

    Args:
        host: the API server; ``None`` takes it from the configuration.
        timeout: the bound for one call, retries included (see module docstring).

    Examples:
        Needs a ClearML server (``tests/test_clearml_outages.py`` runs it against the stand-in)::

            session = open_session(None, 60.0)
            send(session, services.models.GetAllRequest(name="x"), Outage(60.0))
    """
    from clearml.debugging import get_logger

    connect, read = request_timeouts(timeout)
    bounded = bounded_session_class(connect, read)
    config: Any = _Config(sdk_config())
    # The logger the SDK gives a session, named here: left to the SDK, get_logger() names it after
    # its caller's file, found by inspect.stack(), which reads the source of every frame on the
    # stack (about a tenth of the ClearML tests' CPU: their stacks are deep).
    logger = get_logger(path="session", level=logging.INFO)
    return bounded(host=host, config=config, http_retries_config={"total": 0}, logger=logger)


def send(session: Any, request: Any, outage: Outage) -> Any:
    """``session.send(request)``, retried while ``outage`` allows; so is a 502, 503 or 504 answer.

    A request is retried only when repeating it is harmless: always if it never reached the
    server (connection refused, connect timeout) or was refused unprocessed (503); after an
    unclear failure (read timeout, a dropped connection, a 502 or 504) unless it creates or
    deletes something.

    Raises:
        OutageError: the server has not answered for half the timeout (chained to the last error).
        Exception: the SDK's or ``requests``' own error, when a retry would not be harmless.
    """
    retry_unclear = request_action(request) not in _NOT_IDEMPOTENT
    tries = 0
    error: BaseException | None = None
    while True:
        try:
            started = outage.attempt()
        except OutageError as refused:
            raise refused from error
        try:
            result = session.send(request)
        except Exception as exc:
            if not _is_network(exc):
                raise
            outage.failed(started, type(exc).__name__)
            if not (_never_sent(exc) or retry_unclear):
                raise
            error = exc
        else:
            code = getattr(getattr(result, "meta", None), "result_code", 200)
            if code not in _UNAVAILABLE:
                outage.succeeded()
                return result
            outage.failed(started, f"HTTP {code}")
            if not (code == 503 or retry_unclear):  # a 503 was not processed; a 502/504 may have been
                return result
            error = None
        if outage.exhausted():
            raise OutageError(outage.describe()) from error
        tries += 1
        time.sleep(min(0.25 * 2**tries, 4.0, outage.timeout / 4))


def _is_network(exc: BaseException) -> bool:
    import requests

    return isinstance(exc, requests.RequestException)


def _never_sent(exc: BaseException) -> bool:
    """Whether ``exc`` proves the request never reached the server (so any retry is harmless)."""
    import requests
    import urllib3

    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(reason, urllib3.exceptions.NewConnectionError)
