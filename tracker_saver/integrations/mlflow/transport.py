"""The MLflow registry's calls to the tracking server: one place that bounds waits and maps errors.

MLflow's REST client retries a failed request 7 times with a growing back-off and waits 120 s
per request by default, so a stopped server would hold a save for many minutes. Each call here
runs with ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0`` and a per-request timeout from
:func:`tracker_saver.core.outage.request_timeouts`, retried under a :class:`tracker_saver.core.outage.Outage`
bounded by ``timeout``. (MLflow reads those settings from the environment on every request, so
they are set around the call under a lock and put back afterwards.)

MLflow's exceptions carry the tracking URI as given, ``user:password@`` included: the cause is
chained as a masked copy (:func:`tracker_saver.core.masking.raise_masked`), never the original.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tracker_saver.core.errors import RecordNotFoundError, RegistryError
from tracker_saver.core.masking import raise_masked, strip_userinfo
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S, Outage, OutageError, request_timeouts

__all__ = ["MLflowTransport", "safe_uri"]

T = TypeVar("T")
_ENV_LOCK = threading.RLock()
#: Where MLflow finds credentials besides the tracking URI's userinfo: masked in every error.
_SECRET_ENV = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def safe_uri(uri: str) -> str:
    """``uri`` without a ``user:password@`` part (never shown in errors or reprs).

    Examples:
        >>> safe_uri("http://bob:secret@host:5000")
        'http://host:5000'
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


@contextmanager
def _bounded_env(read_s: float) -> Iterator[None]:
    keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, int(read_s)))}
    with _ENV_LOCK:
        old = {k: os.environ.get(k) for k in keys}
        os.environ.update(keys)
        try:
            yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class MLflowTransport:
    """An ``MlflowClient`` for one tracking URI, every call bounded by ``timeout`` and checked."""

    def __init__(self, tracking_uri: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        from mlflow import MlflowClient

        self.tracking_uri = tracking_uri
        self.uri = f"mlflow:{safe_uri(tracking_uri)}"
        self._outage = Outage(timeout)
        #: The MLflow client every call goes through (:meth:`call`).
        self.client = MlflowClient(tracking_uri)

    def call(self, fn: Callable[..., T], what: str, *args: Any, record_id: str | None = None, **kw: Any) -> T:
        """``fn(*args, **kw)`` on the client; every failure a ``RegistryError`` naming ``what``."""
        from mlflow.exceptions import MlflowException

        _, read_s = request_timeouts(self._outage.timeout)
        while True:
            try:
                started = self._outage.attempt()
            except OutageError as exc:
                raise self._down(what, str(exc), record_id) from exc
            try:
                with _bounded_env(read_s):
                    result = fn(*args, **kw)
            except MlflowException as exc:
                # MlflowClient's tag and param writes first read the model and turn *any* failure of
                # that read (a reset connection, a 5xx, a deleted model) into INVALID_PARAMETER_VALUE
                # "Failed to get logged model", the real failure chained: judge by the whole chain.
                causes = _chain(exc)
                codes = [str(getattr(c, "error_code", "")) for c in causes]
                if "RESOURCE_DOES_NOT_EXIST" in codes and record_id is not None:
                    self._outage.succeeded()
                    missing = RecordNotFoundError(
                        f"record {record_id} does not exist in {self.uri} (no such MLflow logged model; "
                        "deleted in the UI?): see `tracker-saver models list` for ids",
                        record_id=record_id,
                    )
                    raise_masked(missing, exc, self._clean)
                if any(_unreachable(c) for c in causes):
                    self._outage.failed(started, type(exc).__name__)
                    if self._outage.exhausted():
                        raise_masked(self._down(what, self._outage.describe(), record_id), exc, self._clean)
                    time.sleep(min(1.0, self._outage.timeout / 10))
                    continue
                self._outage.succeeded()
                root = causes[-1]  # the failure itself, not the client's wrapper around it
                code = next((c for c in reversed(codes) if c), type(root).__name__)
                failed = RegistryError(
                    f"MLflow registry {self.uri}: {what} failed ({code}: "
                    f"{self._clean(str(getattr(root, 'message', root)))[:300]})",
                    record_id=record_id,
                )
                raise_masked(failed, exc, self._clean)
            self._outage.succeeded()
            return result

    def _clean(self, text: str) -> str:
        """``text`` without any URL's ``user:password@`` or a credential MLflow was given."""
        password = urlsplit(self.tracking_uri).password
        secrets = [password, *(os.environ.get(name) for name in _SECRET_ENV)]
        text = strip_userinfo(text)
        for secret in filter(None, secrets):
            text = text.replace(secret, "***")
        return text

    def _down(self, what: str, why: str, record_id: str | None) -> RegistryError:
        return RegistryError(
            f"MLflow registry {self.uri}: {what} failed: the tracking server does not answer ({why}); check "
            "that `mlflow server` runs at that URI (MLFLOW_TRACKING_URI), or allow a longer wait with "
            "TrackerSaver(timeout=...)",
            record_id=record_id,
        )


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    return chain


def _unreachable(exc: BaseException) -> bool:
    """Whether MLflow gave up on a request that got no answer (connection refused, timeout, 5xx)."""
    text = str(exc)
    return any(s in text for s in ("Max retries exceeded", "Connection", "timed out", "Read timed out"))
