"""Follow a client's uploads by botocore events: multipart uploads left open, hooks at the commit point."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import botocore.exceptions

from tracker_saver.outage import OutageError

__all__ = ["UploadTracker"]

log = logging.getLogger(__name__)


class UploadTracker:
    """The multipart uploads a client started that are neither completed nor aborted, and commit hooks.

    It registers on ``client``'s events: ``after-call`` of CreateMultipartUpload (an upload is
    open) and ``before-parameter-build`` of PutObject and CompleteMultipartUpload (the commit
    point: the request that makes an upload's bytes the key's is about to be built).

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
        # S3 key -> the hook to run at that key's commit point (see commit_hook).
        self._commit_hooks: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()
        events = client.meta.events
        events.register("after-call.s3.CreateMultipartUpload", self._on_multipart_created)
        events.register("before-parameter-build.s3.PutObject", self._on_commit)
        events.register("before-parameter-build.s3.CompleteMultipartUpload", self._on_commit)

    def _on_multipart_created(self, http_response: Any, parsed: Any, **_: Any) -> None:
        if http_response is not None and http_response.status_code < 300 and parsed.get("UploadId"):
            with self._lock:
                self._uploads[parsed["UploadId"]] = parsed["Key"]

    def _on_commit(self, params: dict[str, Any], **_: Any) -> None:
        # The request that makes an upload's bytes the key's (a PUT, or CompleteMultipartUpload
        # once every part is up) is about to be built: run the writer's before_commit now.
        # Raising here stops the request, and s3transfer aborts the multipart upload.
        with self._lock:
            hook = self._commit_hooks.pop(params.get("Key", ""), None)
        if hook is not None:
            hook()

    @contextlib.contextmanager
    def commit_hook(self, s3_key: str, hook: Callable[[], None] | None) -> Iterator[None]:
        """Run ``hook`` (once) right before the request that commits ``s3_key``, while inside."""
        if hook is not None:
            with self._lock:
                self._commit_hooks[s3_key] = hook
        try:
            yield
        finally:
            with self._lock:
                self._commit_hooks.pop(s3_key, None)

    def forget(self, s3_key: str) -> dict[str, str]:
        """Stop following the uploads to ``s3_key``; return them, upload id -> S3 key."""
        with self._lock:
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
