"""A bounded pipe and its upload thread: turn a writer's ``write`` calls into the stream s3transfer reads."""

# torch.save pushes bytes (write); s3transfer's upload_fileobj pulls them (read) and blocks until
# the upload is done. The pipe joins the two: the training thread writes, an upload thread runs
# upload_fileobj on the pipe's read side. docs/s3.md, "Why the writer has a pipe of its own",
# says why no library does this part (smart_open's writer was measured slower).

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast

__all__ = ["BLOCK_BYTES", "Pipe", "UploadAborted", "streamed"]

#: The writer hands data to the uploader in blocks of this size (fewer, larger handoffs than
#: torch's many small writes; a large tensor is split, never copied whole).
BLOCK_BYTES = 1024 * 1024


class UploadAborted(Exception):
    """Raised into s3transfer by the pipe's reader when the writer's body failed."""


class Pipe:
    """A bounded byte pipe: the training thread writes, the upload thread reads.

    ``write`` blocks while ``limit`` bytes wait for the uploader, so memory stays bounded
    whatever the checkpoint size. ``read(n)`` returns exactly ``n`` bytes until the end, as
    s3transfer expects of a file (a short read would end a part early).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._pending = bytearray()
        self._closed = False
        self._aborted = False
        self._failure: BaseException | None = None
        self._cond = threading.Condition()

    # -- the writer side (training thread) -------------------------------------------------
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        start = 0
        if self._pending:
            start = min(size, BLOCK_BYTES - len(self._pending))
            self._pending += view[:start]
            if len(self._pending) >= BLOCK_BYTES:
                self._put(bytes(self._pending))
                self._pending.clear()
        while size - start >= BLOCK_BYTES:
            self._put(bytes(view[start : start + BLOCK_BYTES]))
            start += BLOCK_BYTES
        if start < size:
            self._pending += view[start:]
        return size

    def flush(self) -> None:
        pass

    def _put(self, chunk: bytes) -> None:
        with self._cond:
            while self._buffered >= self._limit and self._failure is None:
                self._cond.wait()
            if self._failure is not None:
                # The uploader failed (e.g. the endpoint went away): stop serializing now.
                # streamed() raises the upload's own error in place of this one.
                raise self._failure
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            self._cond.notify_all()

    def close(self) -> None:
        """The end of the data: flush what is pending and let the reader see EOF."""
        if self._pending:
            self._put(bytes(self._pending))
            self._pending.clear()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def abort(self) -> None:
        """The writer's body failed: make the reader raise, so s3transfer aborts the upload."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        """The uploader failed: make the writer raise ``exc`` on its next block."""
        with self._cond:
            self._failure = exc
            self._chunks.clear()
            self._buffered = 0
            self._cond.notify_all()

    # -- the reader side (s3transfer's submission thread) ----------------------------------
    def readable(self) -> bool:
        return True

    def read(self, amount: int | None = -1) -> bytes:
        with self._cond:
            while True:
                if self._aborted:
                    raise UploadAborted("the checkpoint writer failed; upload abandoned")
                if self._closed or (amount is not None and amount >= 0 and self._buffered >= amount):
                    break
                self._cond.wait()
            if amount is None or amount < 0 or amount >= self._buffered:
                out = b"".join(self._chunks)
                self._chunks.clear()
            else:
                parts: list[bytes] = []
                need = amount
                while need:
                    chunk = self._chunks.popleft()
                    if len(chunk) > need:
                        parts.append(chunk[:need])
                        self._chunks.appendleft(chunk[need:])
                        need = 0
                    else:
                        parts.append(chunk)
                        need -= len(chunk)
                out = b"".join(parts)
            self._buffered -= len(out)
            self._cond.notify_all()
            return out


@contextlib.contextmanager
def streamed(upload: Callable[[BinaryIO], None], *, limit: int, name: str) -> Iterator[BinaryIO]:
    """Yield a file to write into while ``upload(reader)`` reads the same bytes on a thread named ``name``.

    At most about ``limit`` bytes wait between the two. A clean exit ends the data and waits for
    ``upload``, whose exception, if any, is raised here. If the body raises, ``upload``'s reads
    raise :class:`UploadAborted` (s3transfer then aborts a multipart upload) and the body's
    exception propagates, unless the body failed because ``upload`` did first: then that error.

    Examples:
        >>> got = []
        >>> with streamed(lambda src: got.append(src.read()), limit=4, name="demo") as f:
        ...     _ = f.write(b"hello")
        >>> got
        [b'hello']

    Note:
        The body runs on the caller's thread; ``upload`` on the new thread.
    """
    pipe = Pipe(limit)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            upload(cast(BinaryIO, pipe))  # a Pipe has the read/readable a reader of a BinaryIO uses
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.append(exc)
            pipe.fail(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield cast(BinaryIO, pipe)  # and the write/flush a writer uses
        pipe.close()
    except BaseException:
        pipe.abort()
        thread.join()
        failure = outcome[0] if outcome else None
        if failure is not None and not isinstance(failure, UploadAborted):
            # The body failed because the upload did (its write raised): report the cause.
            raise failure from failure.__cause__
        raise
    thread.join()
    if outcome:
        raise outcome[0] from outcome[0].__cause__
