"""The ``Storage`` seam: where checkpoint objects live, addressed by key under one root URI."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from tracker_saver.naming import check_key

if TYPE_CHECKING:
    from tracker_saver.memory import StableMemory

__all__ = ["ObjectStat", "Staged", "Storage", "sha256_of"]

#: Checkpoints up to this size are buffered in memory before upload; larger ones spill to a
#: temp file. Backends that write in place (local) ignore it.
DEFAULT_SPOOL_BYTES = 256 * 1024 * 1024


def sha256_of(stream: BinaryIO) -> tuple[int, str]:
    """``(size, sha256 hex)`` of what is left to read in ``stream``, read in 1 MiB chunks.

    Examples:
        >>> import io
        >>> sha256_of(io.BytesIO(b"abc"))[0]
        3
    """
    sha = hashlib.sha256()
    size = 0
    while chunk := stream.read(1 << 20):
        sha.update(chunk)
        size += len(chunk)
    return size, sha.hexdigest()


@dataclass(frozen=True)
class ObjectStat:
    """The size of one object, and when it was last written (seconds since the epoch), as the storage reports them."""

    key: str
    size: int
    modified: float | None = None


@dataclass(frozen=True)
class Staged:
    """An unfinished write to ``key``: a temp file or a multipart upload, never an object.

    ``ref`` tells the backend which one (the temp file's path, the upload id); ``started`` is
    when it began (seconds since the epoch), so a repair can leave young ones alone.
    """

    key: str
    ref: str
    started: float


class Storage(ABC):
    """Objects under one root (``/abs/folder`` or ``s3://bucket/prefix``), addressed by key.

    A storage never sees records: it moves bytes for keys. Every write is atomic per key:
    a reader sees the previous object or the new one, never a mix (DESIGN invariant 6).

    Subclasses implement the six abstract methods; ``writer`` has a default that buffers
    (in memory, spilling to a temp file past ``spool_bytes``) and calls ``put_stream``.

    Examples:
        >>> from tracker_saver.storage import open_storage
        >>> import tempfile
        >>> store = open_storage(tempfile.mkdtemp())
        >>> with store.writer("p/r/best_model.slot0.pt") as f:
        ...     _ = f.write(b"bytes")
        >>> store.stat("p/r/best_model.slot0.pt").size
        5
    """

    #: URI of the root, without a trailing slash.
    uri: str
    spool_bytes: int = DEFAULT_SPOOL_BYTES

    def url(self, key: str) -> str:
        """The full URI of ``key``."""
        return f"{self.uri}/{check_key(key)}"

    def check(self) -> None:  # noqa: B027 (an optional hook: nothing to check by default)
        """Raise a clear error now if the root cannot be written (default: nothing to check)."""

    @contextlib.contextmanager
    def writer(
        self, key: str, *, before_commit: Callable[[], None] | None = None, stable: StableMemory | None = None
    ) -> Iterator[BinaryIO]:
        """Yield a binary file; on a clean exit its bytes replace ``key`` atomically.

        ``before_commit`` runs once every byte is written and staged, right before the commit
        point (the rename, the PUT or the CompleteMultipartUpload); if it raises, nothing is
        committed. On an exception the previous object stays intact. ``stable`` is memory the
        caller leaves unchanged until the writer exits: a backend may send writes of it later
        instead of copying them (this default copies everything).
        """
        check_key(key)
        with tempfile.SpooledTemporaryFile(max_size=self.spool_bytes) as spool:
            yield spool  # type: ignore[misc]
            spool.seek(0)
            if before_commit is not None:
                before_commit()
            self.put_stream(key, spool)  # type: ignore[arg-type]

    def staged(self, prefix: str = "") -> list[Staged]:
        """Unfinished writes to keys starting with ``prefix`` (default: the backend stages nothing)."""
        return []

    def abort_staged(self, item: Staged) -> None:  # noqa: B027 (an optional hook: nothing staged by default)
        """Remove one unfinished write (a missing one is not an error)."""

    @abstractmethod
    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Write the file at ``path`` to ``key`` atomically, without reading it all into memory."""

    @abstractmethod
    def put_stream(self, key: str, stream: BinaryIO) -> None:
        """Write the rest of ``stream`` to ``key`` atomically."""

    @abstractmethod
    def get(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]:
        """Open ``key`` for reading; raise ``StorageError`` if it does not exist."""

    @abstractmethod
    def stat(self, key: str) -> ObjectStat | None:
        """The object's size, or ``None`` if ``key`` does not exist."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectStat]:
        """All objects whose key starts with ``prefix``, sorted by key (temp files excluded)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy the object at ``src_key`` to ``dst_key`` atomically, inside the store (server-side on S3).

        Raises ``StorageError`` if ``src_key`` does not exist; ``dst_key`` then stays as it was.
        """

    def digest(self, key: str) -> tuple[int, str]:
        """``(size, sha256 hex)`` of the object at ``key``."""
        with self.get(key) as src:
            return sha256_of(src)

    def discard_staged(self, key: str) -> None:
        """Remove what unfinished writes to ``key`` left behind (temp files, multipart uploads).

        Only call it while no write to ``key`` is under way (the stream's claim is held).
        """
        for item in self.staged(key):
            if item.key == key:
                self.abort_staged(item)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"
