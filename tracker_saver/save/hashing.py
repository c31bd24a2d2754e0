"""Hash and count a checkpoint's bytes in the one pass that writes them (``HashingWriter``)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
from typing import BinaryIO

import torch

from tracker_saver.core.pools import shared_pool
from tracker_saver.save.memory import StableMemory

__all__ = ["HASHER", "PARALLEL_HASH_BYTES", "HashingWriter", "hash_alongside"]

#: Writes at least this big are hashed on a second thread; hashlib and file or socket writes
#: release the GIL, so the sha256 runs while the bytes are written.
PARALLEL_HASH_BYTES = 1 << 20

#: The pool of the one thread that hashes for every writer: a writer's updates run in the order it wrote.
HASHER = "tracker-saver-sha256"


class HashingWriter:
    """A write-only file that hashes and counts what passes through to ``target``.

    Large writes are hashed on a second thread while ``target`` writes them (unless
    ``parallel`` is false: then every write is hashed inline, before it is written). A write of
    ``stable`` memory (a checkpoint's CPU tensor storage, see :class:`StableMemory`) returns
    without waiting for its hash (``sha256`` waits instead), so the hash also overlaps whatever
    the caller does next; any other large write waits for its hash before it returns, as the
    caller may reuse the buffer then. Small writes are hashed inline, or copied and queued
    behind a pending hash.

    It has no ``name`` attribute on purpose: ClearML's ``torch.save`` binding registers only
    files it can name, so our writes never become a second, untracked upload.

    Examples:
        >>> import io
        >>> writer = HashingWriter(io.BytesIO())
        >>> writer.write(b"abc"), writer.sha256[:12]
        (3, 'ba7816bf8f01')
    """

    def __init__(
        self, target: BinaryIO | None = None, *, stable: StableMemory | None = None, parallel: bool = True
    ) -> None:
        self.target = target
        self.parallel = parallel
        self.stable = stable if stable is not None else StableMemory()
        self._sha = hashlib.sha256()
        self._hashing: list[concurrent.futures.Future[None]] = []
        self.size = 0
        self.error: Exception | None = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        assert self.target is not None
        large = self.parallel and view.nbytes >= PARALLEL_HASH_BYTES
        queued = (large or bool(self._hashing)) and self._queue_hash(view if large else bytes(view))
        wait = queued and large and view not in self.stable
        if not queued:
            self._wait()  # an earlier write's hash comes first
            self._sha.update(view)
        try:
            self.target.write(view)
        except Exception as exc:
            self.error = exc  # torch.save re-wraps it in a RuntimeError: keep the original
            raise
        finally:
            if wait:
                self._wait()
        self.size += view.nbytes
        return view.nbytes

    def _queue_hash(self, data: memoryview | bytes) -> bool:
        """Hash ``data`` on the hashing thread; ``False`` once the interpreter shuts down (an atexit flush)."""
        try:
            future = shared_pool(HASHER).submit(self._sha.update, data)
        except RuntimeError:  # concurrent.futures takes no new work at interpreter shutdown
            return False
        self._hashing = [f for f in self._hashing if not f.done()] + [future]
        return True

    def _wait(self) -> None:
        for future in self._hashing:
            future.result()
        self._hashing.clear()

    def flush(self) -> None:
        if self.target is not None:
            self.target.flush()

    @property
    def sha256(self) -> str:
        """The hex digest of everything written so far (waits for pending hashes)."""
        self._wait()
        return self._sha.hexdigest()


def hash_alongside(*, background: bool) -> bool:
    """Whether a save's sha256 may run on its own thread beside the write.

    A save on the training thread: yes, the training thread waits for it anyway. A background
    save: only when two cores are left over beyond torch's threads, so that a background save
    never runs more threads than the cores training leaves idle; otherwise its one worker thread
    hashes each write before writing it (the same bytes, one pass, a longer save).

    Examples:
        >>> hash_alongside(background=False)
        True
    """
    if not background:
        return True
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores - torch.get_num_threads() >= 2
