"""Follow a client's uploads by botocore events: multipart uploads left open, and what each commit request sent."""

from __future__ import annotations

import logging
import threading
from typing import Any

import botocore.exceptions

from tracker_saver.core.outage import OutageError

__all__ = ["NOT_SENT", "CommitAttempts", "UploadTracker"]

log = logging.getLogger(__name__)

#: Failures of one HTTP attempt that prove its request never reached the server: the
#: connection was refused or never made (DNS, a connect timeout, the proxy), or the outage
#: clock refused to send it. A read timeout or a reset after the body went out proves nothing.
NOT_SENT: tuple[type[BaseException], ...] = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ProxyConnectionError,
    OutageError,
)

_CONTEXT_KEY = "tracker_saver_commit"


class CommitAttempts:
    """What the attempts of one key's commit request (PutObject, CompleteMultipartUpload) ended in.

    Examples:
        >>> attempts = CommitAttempts()
        >>> attempts.may_have_reached()
        False
        >>> attempts.ended(botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
        >>> attempts.may_have_reached()
        False
        >>> attempts.ended(None)  # an answer (even an error status) came back
        >>> attempts.may_have_reached()
        True
    """

    def __init__(self) -> None:
        self._outcomes: list[BaseException | None] = []

    def ended(self, exception: BaseException | None) -> None:
        """One attempt ended: with ``exception``, or ``None`` when the server answered."""
        self._outcomes.append(exception)

    def may_have_reached(self) -> bool:
        """Whether any attempt may have reached the server (none was made: ``False``)."""
        return any(e is None or not isinstance(e, NOT_SENT) for e in self._outcomes)


class UploadTracker:
    """The multipart uploads a client started that are neither completed nor aborted, and commit attempts.

    It registers on ``client``'s events: ``after-call`` of CreateMultipartUpload (an upload is
    open); ``before-parameter-build`` of PutObject and CompleteMultipartUpload (a commit request
    for a watched key is about to be built: its context carries the key's
    :class:`CommitAttempts`) and their ``response-received`` (once per HTTP attempt, with the
    exception it ended in, if any).

    Note:
        The event handlers run on s3transfer's threads; every table is guarded by one lock.
    """

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket
        # Multipart uploads started and neither completed nor aborted, upload id -> S3 key;
        # see forget and abort_leftovers.
        self._uploads: dict[str, str] = {}
        self._leftovers: dict[str, str] = {}
        # S3 key -> the attempts of its commit requests, while a staged write watches it.
        self._watched: dict[str, CommitAttempts] = {}
        self._lock = threading.Lock()
        events = client.meta.events
        events.register("after-call.s3.CreateMultipartUpload", self._on_multipart_created)
        for operation in ("PutObject", "CompleteMultipartUpload"):
            events.register(f"before-parameter-build.s3.{operation}", self._on_commit_request)
            events.register(f"response-received.s3.{operation}", self._on_commit_response)

    def _on_multipart_created(self, http_response: Any, parsed: Any, **_: Any) -> None:
        if http_response is not None and http_response.status_code < 300 and parsed.get("UploadId"):
            with self._lock:
                self._uploads[parsed["UploadId"]] = parsed["Key"]

    def _on_commit_request(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        with self._lock:
            attempts = self._watched.get(params.get("Key", ""))
        if attempts is not None:
            context[_CONTEXT_KEY] = attempts

    def _on_commit_response(self, context: dict[str, Any], exception: BaseException | None, **_: Any) -> None:
        attempts = context.get(_CONTEXT_KEY)
        if isinstance(attempts, CommitAttempts):
            attempts.ended(exception)

    def watch(self, s3_key: str) -> CommitAttempts:
        """Follow the commit requests for ``s3_key`` from now until :meth:`forget`."""
        attempts = CommitAttempts()
        with self._lock:
            self._watched[s3_key] = attempts
        return attempts

    def forget(self, s3_key: str) -> dict[str, str]:
        """Stop following the uploads and commit requests to ``s3_key``; return its uploads, upload id -> S3 key."""
        with self._lock:
            self._watched.pop(s3_key, None)
            mine = {uid: k for uid, k in self._uploads.items() if k == s3_key}
            for uid in mine:
                del self._uploads[uid]
        return mine

    def abort_leftovers(self, uploads: dict[str, str] | None = None) -> None:
        """Abort ``uploads`` and those an earlier call could not abort (best effort).

        s3transfer aborts a failed multipart upload itself; but when the failure is the endpoint
        going away, that abort fails too. Those uploads are kept and retried on every later call
        (their parts would otherwise cost storage until a lifecycle rule removes them).
        """
        with self._lock:
            todo = {**self._leftovers, **(uploads or {})}
            self._leftovers.clear()
        for upload_id, s3_key in todo.items():
            try:
                self._client.abort_multipart_upload(Bucket=self._bucket, Key=s3_key, UploadId=upload_id)
                log.debug("aborted leftover multipart upload of s3://%s/%s", self._bucket, s3_key)
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":  # s3transfer aborted it
                    self._keep_leftover(upload_id, s3_key, exc)
            except (botocore.exceptions.BotoCoreError, OutageError) as exc:  # retried on the next call
                self._keep_leftover(upload_id, s3_key, exc)

    def _keep_leftover(self, upload_id: str, s3_key: str, exc: Exception) -> None:
        log.debug("could not abort multipart upload of s3://%s/%s yet (%s)", self._bucket, s3_key, type(exc).__name__)
        with self._lock:
            self._leftovers[upload_id] = s3_key
