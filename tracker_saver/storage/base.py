"""The ``Storage`` seam: where checkpoint objects live, addressed by key under one root URI."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tracker_saver.core.naming import check_key
from tracker_saver.storage.verify import Digest, digest

__all__ = ["RESERVED", "ObjectStat", "SpooledWrite", "Stable", "Staged", "StagedWrite", "Storage", "listed"]

#: Memory the caller keeps unchanged until a write is committed or aborted: ``view in stable``
#: says whether a written buffer may be sent later instead of copied (the pipeline passes a
#: checkpoint's CPU tensor storages, :class:`tracker_saver.save.memory.StableMemory`).
Stable = Container[memoryview]

#: Checkpoints up to this size are buffered in memory before upload; larger ones spill to a
#: temp file. Backends that write in place (local) ignore it.
DEFAULT_SPOOL_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ObjectStat:
    """One object as the storage reports it: size, when last written (seconds since the epoch), and fingerprint.

    ``fingerprint`` is what the store says identifies this version of the object, cheaply (S3:
    the ETag, and the version id where the bucket keeps versions; local: size, mtime_ns and
    inode). Every checkpoint of a model has the same size, so a record keeps the fingerprint its
    commit produced, and ``fsck`` finds bytes someone else wrote with a stat or a HEAD per object.
    """

    key: str
    size: int
    modified: float | None = None
    fingerprint: str | None = None


#: Keys that say who owns each stream (:mod:`tracker_saver.save.ownership`): never a checkpoint or a log.
RESERVED = ".tracker_saver/"


def listed(key: str, prefix: str) -> bool:
    """Whether ``list(prefix)`` shows ``key``: one under :data:`RESERVED` only when ``prefix`` is under it too.

    Examples:
        >>> listed(".tracker_saver/owners/p/r/s.json", ""), listed(".tracker_saver/owners/p/r/s.json", ".tracker_saver/")
        (False, True)
    """
    return key.startswith(prefix) and (not key.startswith(RESERVED) or prefix.startswith(RESERVED))


@dataclass(frozen=True)
class Staged:
    """An unfinished write to ``key``: a temp file or a multipart upload, never an object.

    ``ref`` tells the backend which one (the temp file's path, the upload id); ``started`` is
    when it began (seconds since the epoch), so a repair can leave young ones alone.
    """

    key: str
    ref: str
    started: float


class StagedWrite(ABC):
    """One write to :attr:`key`, driven by its caller: DESIGN's step 5, then the commit point (step 7).

    Write the bytes into :attr:`file`; :meth:`finish` once the last is written (every byte is
    staged: a temp file fsynced, every part uploaded; the key's object is still untouched);
    then :meth:`commit`, the commit point: once it returns, the key holds the new bytes. After
    a failure anywhere, :meth:`abort` removes what was staged and says whether the key's object
    may have changed. A storage never calls back into its caller.

    Examples:
        >>> import tempfile
        >>> from tracker_saver.storage import open_storage
        >>> store = open_storage(tempfile.mkdtemp())
        >>> staged = store.stage("p/r/best_model.slot0.pt")
        >>> staged.file.write(b"bytes")
        5
        >>> staged.finish(); store.stat("p/r/best_model.slot0.pt") is None
        True
        >>> staged.commit(); store.stat("p/r/best_model.slot0.pt").size
        5
    """

    #: The key the bytes become.
    key: str
    #: Where the caller writes the bytes (write-only; no ``name``).
    file: BinaryIO
    #: The storage's error that a write into :attr:`file` raised, if any: code between the
    #: caller and the file (``torch.save``) may re-wrap it, and the caller raises this instead.
    failure: BaseException | None = None

    @abstractmethod
    def finish(self) -> None:
        """Every byte is written: stage the rest (fsync, the last parts), leaving the key as it was."""

    @abstractmethod
    def commit(self) -> None:
        """The commit point: make the staged bytes the key's object, atomically."""

    @abstractmethod
    def abort(self) -> bool:
        """Remove what was staged (best effort); return whether the key's object may have changed.

        ``False`` proves that the key still holds its previous object: the commit was never
        attempted, or it failed in a way that shows nothing reached the store (a refused
        connection, say). ``True`` after a commit that returned, or one whose outcome is unclear.
        """


class SpooledWrite(StagedWrite):
    """The default staged write: a spool (memory, then a temp file past ``spool_bytes``) sent by ``put_stream``.

    Args:
        storage: the storage whose ``put_stream`` commits the bytes.
        key: the key they become.
        sent: after a failed commit, whether its request may have reached the store (default:
            assume it may have).
    """

    def __init__(self, storage: Storage, key: str, *, sent: Callable[[], bool] | None = None) -> None:
        self.key = key
        self._storage = storage
        self._sent = sent
        self._spool = tempfile.SpooledTemporaryFile(max_size=storage.spool_bytes)
        self.file = self._spool  # type: ignore[assignment]
        self._committing = False

    def finish(self) -> None:
        self._spool.seek(0)

    def commit(self) -> None:
        self._committing = True
        try:
            self._storage.put_stream(self.key, self._spool)  # type: ignore[arg-type]
        finally:
            self._spool.close()
        self._sent = None

    def abort(self) -> bool:
        self._spool.close()
        if not self._committing:
            return False
        return self._sent() if self._sent is not None else True


class Storage(ABC):
    """Objects under one root (``/abs/folder`` or ``s3://bucket/prefix``), addressed by key.

    A storage never sees records: it moves bytes for keys. Every write is atomic per key:
    a reader sees the previous object or the new one, never a mix (DESIGN invariant 6).

    Subclasses implement the seven abstract methods; ``stage`` has a default that buffers
    (in memory, spilling to a temp file past ``spool_bytes``) and calls ``put_stream`` at the
    commit point. A backend that can stage in place (a temp file, a multipart upload) overrides it.

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

    @property
    def local_root(self) -> Path | None:
        """The local folder that holds the objects, or ``None`` when they are not on this machine."""
        return None

    def check(self) -> None:  # noqa: B027 (an optional hook: nothing to check by default)
        """Raise a clear error now if the root cannot be written (default: nothing to check)."""

    def stage(self, key: str, *, stable: Stable | None = None) -> StagedWrite:
        """Begin a write to ``key`` that the caller drives: see :class:`StagedWrite`.

        ``stable`` is memory the caller leaves unchanged until the write is committed or
        aborted: a backend may send writes of it later instead of copying them (this default,
        a spool that :meth:`put_stream` sends at the commit point, copies everything).
        """
        return SpooledWrite(self, check_key(key))

    @contextlib.contextmanager
    def writer(self, key: str, *, stable: Stable | None = None) -> Iterator[BinaryIO]:
        """Yield a binary file; on a clean exit its bytes replace ``key`` atomically.

        On an exception the previous object stays intact. A shorthand for :meth:`stage`, then
        ``finish`` and ``commit`` (``abort`` on an exception).
        """
        staged = self.stage(key, stable=stable)
        try:
            yield staged.file
            staged.finish()
            staged.commit()
        except BaseException as exc:
            staged.abort()
            if staged.failure is not None and staged.failure is not exc:
                raise staged.failure from staged.failure.__cause__
            raise

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
        """All objects whose key starts with ``prefix``, sorted by key (temp files excluded, and the
        reserved ``.tracker_saver/`` prefix unless ``prefix`` asks for it: :func:`listed`)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy the object at ``src_key`` to a new object ``dst_key`` atomically, inside the store (server-side on S3).

        It never replaces an object: ``StorageError`` if ``dst_key`` exists (a pin key is new for
        each pin). A local folder makes sure of it atomically (a hard link); on S3 the check comes
        before the copy, as Ceph RGW 16 ignores ``If-None-Match`` on CopyObject (it honours it on
        PutObject), so only a key nobody else chooses is safe there. Raises ``StorageError`` if
        ``src_key`` does not exist; ``dst_key`` then stays as it was.
        """

    def read_small(self, key: str, limit: int = 1 << 16) -> bytes | None:
        """The first ``limit`` bytes of a small object (an owner object), or ``None`` if ``key`` does not exist.

        This default stats, then reads; a backend overrides it with one request (S3: one plain
        GetObject, no transfer machinery, so it also works while the interpreter exits).
        """
        if self.stat(key) is None:
            return None
        with self.get(key) as f:
            return f.read(limit)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write ``data`` to ``key`` only if no object is there; ``False`` (nothing written) if one is.

        This default checks, then writes: two writers at once may both write. A backend with an
        atomic create (a hard link, S3's ``If-None-Match: *``) overrides it; a caller that must
        be sure reads the object back.
        """
        if self.stat(key) is not None:
            return False
        self.put_stream(key, io.BytesIO(data))
        return True

    def digest(self, key: str) -> Digest:
        """Size and sha256 of the object at ``key``, read once."""
        with self.get(key) as src:
            return digest(src)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"
