"""The S3 staged write: parts go up while it is written; the commit point is the PUT or Complete."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tracker_saver.storage.base import Stable, StagedWrite
from tracker_saver.storage.s3.parts import PartWriter
from tracker_saver.storage.s3.progress import Progress
from tracker_saver.storage.s3.uploads import UploadTracker


def etag_fingerprint(etag: str) -> str | None:
    """An object's fingerprint on S3: its ETag without the quotes (a PUT's MD5, or a multipart ETag).

    The version id is left out: ListObjectsV2 does not give it, and fsck compares what a listing says.
    """
    return etag.strip('"') or None


__all__ = ["S3Write"]


class _Writes:
    """The file the caller writes: :class:`PartWriter`'s writes, with a failed upload's error mapped."""

    def __init__(self, staged: S3Write) -> None:
        self._staged = staged

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            with self._staged.boundary():
                return self._staged.parts.write(data)
        except BaseException as exc:
            self._staged.failure = exc
            raise

    def flush(self) -> None:
        pass


class S3Write(StagedWrite):
    """A staged write to S3 (``stream_writes``): see :class:`PartWriter` for how the bytes go up.

    :meth:`finish` waits for every part of a multipart upload; :meth:`commit` sends the PUT (less
    than one part in all) or CompleteMultipartUpload. :meth:`abort` aborts the upload (or keeps it
    to abort on the storage's next call, when the endpoint is down) and reads the commit
    request's attempts: only one that provably never reached the server leaves ``False``.
    Every error is a ``StorageError`` that names the object and the fix.

    Args:
        key: the storage key the bytes become, ``s3_key`` its key in ``bucket``.
        client: the storage's boto3 client; ``uploads`` the tracker registered on it.
        boundary: the storage's ``ErrorBoundary``.
        part_size, concurrency, progress, stable: as the storage's ``writer_part_size``,
            ``writer_concurrency``, ``progress`` and ``Storage.stage``'s ``stable``.
    """

    def __init__(
        self,
        key: str,
        *,
        s3_key: str,
        bucket: str,
        client: Any,
        uploads: UploadTracker,
        boundary: Callable[[str, str], contextlib.AbstractContextManager[None]],
        part_size: int,
        concurrency: int,
        progress: bool | None,
        stable: Stable | None = None,
    ) -> None:
        self.key = key
        self._s3_key = s3_key
        self._uploads = uploads
        self._boundary = boundary
        uploads.abort_leftovers()
        self._progress = Progress(f"upload {key}", None, progress)
        self.parts = PartWriter(
            client, bucket, s3_key, part_size=part_size, concurrency=concurrency, stable=stable, progress=self._progress
        )
        self._attempts = uploads.watch(s3_key)
        self._committing = False
        self._done = False
        self.file = _Writes(self)  # type: ignore[assignment]

    def boundary(self) -> contextlib.AbstractContextManager[None]:
        """Map what a request raises here to ``StorageError`` (see ``ErrorBoundary``)."""
        return self._boundary("uploading to", self.key)

    def finish(self) -> None:
        with self.boundary():
            self.parts.finish()

    def commit(self) -> None:
        self._committing = True
        with self.boundary():
            self.parts.commit()
        self._done = True
        self._close()
        self._uploads.forget(self._s3_key)

    def abort(self) -> bool:
        self._close()
        if not self._done:
            self._uploads.abort_leftovers(self._uploads.forget(self._s3_key))
        return self._done or (self._committing and self._attempts.may_have_reached())

    def _close(self) -> None:
        self.parts.close()  # no part in flight may outlive the caller's memory
        self._progress.close()
