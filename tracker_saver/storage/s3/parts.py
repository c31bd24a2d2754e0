"""The streaming writer's uploader: ``torch.save``'s writes go up as one PUT, or as parts in parallel."""

# torch.save pushes bytes (write); boto3's managed transfers only pull them from a file. This
# writer cuts what it is given into parts and uploads each part on a small thread pool while the
# caller goes on serializing. docs/s3.md, "How the writer uploads", has the measurements behind
# the part size, the concurrency and the zero-copy path.

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracker_saver.storage.base import Stable

__all__ = ["KEEP_BYTES", "PartWriter", "Segments"]

#: A write of stable memory at least this big is sent from where it is; smaller ones are copied.
KEEP_BYTES = 64 * 1024


class Segments:
    """A read-only, seekable file over a list of memoryviews: one request body, read without copying.

    ``read`` returns memoryview slices, never more than asked for nor past a segment's end;
    botocore reads the body once to sign it and again to send it, and seeks back to retry.

    Examples:
        >>> body = Segments([memoryview(b"hello "), memoryview(b"world")])
        >>> len(body), bytes(body.read(8)), bytes(body.read(2)), bytes(body.read())
        (11, b'hello ', b'wo', b'rld')
        >>> body.seek(3), bytes(body.read(4)), bytes(body.read(4))
        (3, b'lo ', b'worl')
    """

    def __init__(self, segments: list[memoryview]) -> None:
        self._segments = [s for s in segments if s.nbytes]
        self._size = sum(s.nbytes for s in self._segments)
        self._pos = 0
        self._index = 0  # the segment holding _pos ...
        self._offset = 0  # ... and where in it

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, min(self._size, base + offset))
        self._index, self._offset, left = 0, 0, self._pos
        while self._index < len(self._segments) and left >= self._segments[self._index].nbytes:
            left -= self._segments[self._index].nbytes
            self._index += 1
        self._offset = left
        return self._pos

    def read(self, amount: int | None = -1) -> memoryview | bytes:
        if self._index >= len(self._segments) or amount == 0:
            return b""
        segment = self._segments[self._index]
        end = segment.nbytes if amount is None or amount < 0 else min(segment.nbytes, self._offset + amount)
        out = segment[self._offset : end]
        self._pos += out.nbytes
        self._offset = end
        if end == segment.nbytes:
            self._index, self._offset = self._index + 1, 0
        return out


class PartWriter:
    """A write-only file whose bytes become ``s3_key``: one PUT, or a multipart upload of parallel parts.

    Each ``part_size`` bytes written become a part, uploaded by one of ``concurrency`` threads
    while the caller goes on writing; once ``concurrency`` parts are in flight, ``write`` waits
    for one to finish. A write of ``stable`` memory (see :data:`~tracker_saver.storage.base.Stable`) is sent from
    where it is; anything else is copied, so at most ``concurrency + 1`` parts of copies are held.
    Less than one part in all goes up as one PUT. :meth:`finish` waits for every part; the
    object exists only once :meth:`commit` returns. After an upload failed, the next ``write``
    or ``finish`` raises its error, so the caller stops serializing at once.

    Args:
        client: a boto3 S3 client (thread-safe; every request goes through its events).
        bucket, s3_key: where the object goes.
        part_size: bytes per part (at least S3's 5 MiB minimum).
        concurrency: parts in flight at once.
        stable: memory the caller keeps unchanged until this writer is done.
        progress: called with each part's size once it is up.

    Note:
        ``write``, ``finish`` and ``commit`` run on the caller's thread; parts are uploaded on the pool's.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        s3_key: str,
        *,
        part_size: int,
        concurrency: int,
        stable: Stable | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._key = s3_key
        self._part_size = part_size
        self._stable = stable
        self._progress = progress or (lambda nbytes: None)
        self._slots = threading.Semaphore(concurrency)
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="tracker-saver-s3-part")
        self._futures: list[concurrent.futures.Future[dict[str, Any]]] = []
        self._segments: list[memoryview] = []  # the part being filled ...
        self._small = bytearray()  # ... and the small writes at its end, not yet a segment
        self._filled = 0
        self._upload_id: str | None = None
        self._failure: BaseException | None = None

    # ---------------------------------------------------------------- the caller's side
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._raise_failure()
        view = memoryview(data).cast("B")
        size = view.nbytes
        keep = size >= KEEP_BYTES and self._stable is not None and view in self._stable
        pos = 0
        while pos < size:
            take = min(size - pos, self._part_size - self._filled)
            piece = view[pos : pos + take]
            if keep or take >= KEEP_BYTES:
                self._cut()
                self._segments.append(piece if keep else memoryview(bytes(piece)))
            else:
                self._small += piece
            self._filled += take
            pos += take
            if self._filled == self._part_size:
                self._send_part()
        return size

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        """Upload what is left of a multipart upload and wait for every part (nothing for one PUT)."""
        self._raise_failure()
        if self._upload_id is None:
            self._cut()
            return
        if self._filled:
            self._send_part()
        concurrent.futures.wait(self._futures)
        self._raise_failure()

    def commit(self) -> None:
        """Make the bytes the object: the PUT, or CompleteMultipartUpload (after :meth:`finish`)."""
        if self._upload_id is None:
            body = Segments(self._segments)
            self._client.put_object(Bucket=self._bucket, Key=self._key, Body=body if len(body) else b"")
            self._progress(len(body))
            return
        parts = [future.result() for future in self._futures]
        self._client.complete_multipart_upload(
            Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, MultipartUpload={"Parts": parts}
        )

    def close(self) -> None:
        """Wait for the parts in flight (they may read the caller's memory) and stop the threads.

        An unfinished multipart upload is left to the caller to abort (the storage follows it).
        """
        concurrent.futures.wait(self._futures)
        self._pool.shutdown(wait=True)
        self._segments.clear()

    # ---------------------------------------------------------------- parts
    def _cut(self) -> None:
        if self._small:
            self._segments.append(memoryview(bytes(self._small)))
            self._small.clear()

    def _send_part(self) -> None:
        self._cut()
        segments, self._segments, self._filled = self._segments, [], 0
        if self._upload_id is None:
            try:
                created = self._client.create_multipart_upload(Bucket=self._bucket, Key=self._key)
            except BaseException as exc:
                self._record(exc)  # torch.save turns an exception from write into its own RuntimeError
                raise
            self._upload_id = str(created["UploadId"])
        self._slots.acquire()  # at most `concurrency` parts in flight: memory stays bounded
        if self._failure is not None:
            self._slots.release()
            self._raise_failure()
        number = len(self._futures) + 1
        try:
            future = self._pool.submit(self._upload_part, number, segments)
        except RuntimeError:  # concurrent.futures takes no new work at interpreter shutdown (an atexit flush)
            future = concurrent.futures.Future()
            try:
                future.set_result(self._upload_part(number, segments))
            except Exception as exc:  # recorded as the failure: the next write or finish raises it
                future.set_exception(exc)
        self._futures.append(future)

    def _upload_part(self, number: int, segments: list[memoryview]) -> dict[str, Any]:
        try:
            body = Segments(segments)
            answer = self._client.upload_part(
                Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number, Body=body
            )
            self._progress(len(body))
            return {"PartNumber": number, "ETag": answer["ETag"]}
        except BaseException as exc:
            self._record(exc)
            raise
        finally:
            self._slots.release()

    def _record(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc

    @property
    def error(self) -> BaseException | None:
        """The first failed request's error (what ``write`` and ``finish`` raise), if any.

        ``torch.save`` replaces an exception raised by ``write`` with a ``RuntimeError`` of its
        own, so the writer's caller raises this one instead.
        """
        return self._failure

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
