"""Local file chores kept off the training thread: early writeback, blocks freed in the pool.

A rename over a file or its unlink frees its blocks at once unless a descriptor still holds
them; this module holds one and closes it in the pool. A large write starts the disk's
writeback as it goes (:class:`WritebackFile`), so the fsync at its end waits for little, and
first lets the kernel drop the cached pages of the file it replaces (:func:`drop_cached`), so
it writes into those pages. It also makes a folder's entries durable.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> f = Path(tempfile.mkdtemp()) / "old.pt"
    >>> _ = f.write_bytes(b"x" * 1024)
    >>> unlink_soon(f); f.exists()
    False
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tracker_saver.core.pools import shared_pool

__all__ = ["WRITEBACK_BYTES", "WritebackFile", "close_later", "drop_cached", "fsync_dir", "hold", "unlink_soon"]

#: A write starts the writeback of each span this long as soon as it is written.
WRITEBACK_BYTES = 32 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the range's dirty pages, do not wait for it


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range`` from the C library (not in :mod:`os`); ``None`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    return call


_START_WRITEBACK = _sync_file_range()


class WritebackFile:
    """``file`` whose written bytes start going to disk every :data:`WRITEBACK_BYTES` (Linux), so
    the fsync that ends the write waits for the last span only (measured: benchmarks/bench_save.py).

    Elsewhere it is ``file`` unchanged: the fsync writes everything.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as raw:
        ...     f = WritebackFile(raw)
        ...     f.write(b"x" * 10), f.tell()
        (10, 10)
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._fd = file.fileno()
        self._started = 0  # bytes whose writeback has started
        self._written = 0

    def write(self, data: bytes | memoryview) -> int:
        n = self._file.write(data)
        self._written += n
        if _START_WRITEBACK is not None and self._written - self._started >= WRITEBACK_BYTES:
            self._file.flush()
            # A failure here only means the fsync does all the work, as it would without this.
            _START_WRITEBACK(self._fd, self._started, self._written - self._started, _SYNC_FILE_RANGE_WRITE)
            self._started = self._written
        return n

    def tell(self) -> int:
        return self._file.tell()

    def flush(self) -> None:
        self._file.flush()


def drop_cached(path: Path) -> None:
    """Let the kernel drop ``path``'s cached pages now (a missing file is no error); the file is untouched.

    A slot's file was fsynced at its commit, so its pages are clean and go at once. A save that
    replaces it then writes into memory just freed instead of taking more: on a training node
    whose page cache is full that spares reclaim, and on a VM that hands free memory back to its
    host (virtio-balloon free page reporting) it spares a host fault per page, 0.4 s of kernel
    CPU per 256 MiB on the test machines (measured: benchmarks/bench_save.py).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):  # only advice: without it the write takes other pages
        pass
    finally:
        os.close(fd)


def hold(path: Path) -> int | None:
    """An open descriptor of ``path`` (``None`` when it cannot be opened), so that a rename over it
    or its unlink does not free its blocks until :func:`close_later`."""
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a rename, a new name, a removal) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def close_later(fd: int) -> None:
    """Close ``fd`` off the caller's thread: freeing a large replaced file's blocks takes a while
    (about 0.1 s per 256 MiB on ext4), and the rename needs none of it."""
    try:
        shared_pool("tracker-saver-close").submit(os.close, fd)
    except RuntimeError:  # the interpreter is shutting down (an atexit flush)
        os.close(fd)


def unlink_soon(path: Path) -> None:
    """Remove ``path`` now and free its blocks later, off the caller's thread (a missing file is no error).

    An open descriptor keeps the file's blocks while the name goes: the unlink is a metadata
    change, and the freeing (about 0.05-0.1 s per 256 MiB on ext4) happens at the close, in the pool.
    """
    held = hold(path)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    finally:
        if held is not None:
            close_later(held)
