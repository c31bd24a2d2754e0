"""Local file chores kept off the training thread: early writeback, blocks freed in the pool.

Every path the project opens at a local output_uri (a slot, a pin, an archive keep, an owner
object, a dirname view's file) is opened by :func:`open_regular`: a symlink there is never
followed, a FIFO or device never waited on, and each is refused with an ``IntegrityError``
that names the path, what it is and the fix (:func:`check_regular` says the same from a stat).

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
import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tracker_saver.core.errors import IntegrityError
from tracker_saver.core.pools import shared_pool

__all__ = [
    "WRITEBACK_BYTES",
    "WritebackFile",
    "check_regular",
    "close_later",
    "drop_cached",
    "fsync_dir",
    "hold",
    "open_regular",
    "unlink_soon",
]

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


#: What a file that is not a regular one is, by its ``stat`` type, as an error names it.
_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISSOCK, "a socket"),
)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: An open that follows no symlink at the path and never waits (POSIX; elsewhere a plain read-only open).
_READ_REGULAR = (
    os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
)


def _refusal(path: Path, mode: int, key: str | None) -> IntegrityError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return IntegrityError(
        f"{str(path)!r} is {kind}, not a checkpoint file: tracker_saver reads and replaces only regular files "
        "it wrote, and follows no symlink and waits on no pipe or device there; remove it "
        "(`tracker-saver fsck` reports it), then save again",
        key=key,
    )


def check_regular(path: Path, *, key: str | None = None) -> os.stat_result | None:
    """``path``'s own stat (a symlink is not followed), ``None`` if nothing is there.

    Raises:
        IntegrityError: something other than a regular file is there (a symlink, FIFO, device, folder).

    Examples:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> check_regular(folder / "missing.pt") is None
        True
        >>> check_regular(folder)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.IntegrityError: '...' is a folder, not a checkpoint file: ...
    """
    try:
        found = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a file on the way where a folder should be: nothing here
        return None
    if not stat.S_ISREG(found.st_mode):
        raise _refusal(path, found.st_mode, key)
    return found


def open_regular(path: Path, *, key: str | None = None) -> int:
    """A read-only descriptor of the regular file ``path``; nothing else is opened, and nothing blocks.

    ``O_NOFOLLOW`` refuses a symlink at ``path`` and ``O_NONBLOCK`` returns at once from a FIFO
    (an open for reading would wait for a writer forever); the descriptor's own ``fstat`` then
    decides, so a file swapped in after any earlier check is refused too. ``OSError`` (a missing
    file) is the caller's to map.

    Raises:
        IntegrityError: ``path`` is not a regular file.

    Examples:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "m.slot0.pt"
        >>> _ = f.write_bytes(b"x")
        >>> fd = open_regular(f); os.read(fd, 1); os.close(fd)
        b'x'
    """
    check_regular(path, key=key)  # a device is refused before it is opened (an open may rewind a tape)
    try:
        fd = os.open(path, _READ_REGULAR)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink put there after the check
            raise _refusal(path, stat.S_IFLNK, key) from exc
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refusal(path, mode, key)
    if _NONBLOCK:
        os.set_blocking(fd, True)  # reads of a regular file never wait anyway; the caller gets a plain descriptor
    return fd


def drop_cached(path: Path) -> None:
    """Let the kernel drop ``path``'s cached pages now (a missing file is no error); the file is untouched.

    A slot's file was fsynced at its commit, so its pages are clean and go at once. A save that
    replaces it then writes into memory just freed instead of taking more: on a training node
    whose page cache is full that spares reclaim, and on a VM that hands free memory back to its
    host (virtio-balloon free page reporting) it spares a host fault per page, 0.4 s of kernel
    CPU per 256 MiB on the test machines (measured: benchmarks/bench_save.py). Anything but a
    regular file there is left alone: only advice is lost, and the write's commit refuses it.
    """
    try:
        fd = open_regular(path)
    except (OSError, IntegrityError):
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):  # only advice: without it the write takes other pages
        pass
    finally:
        os.close(fd)


def hold(path: Path) -> int | None:
    """An open descriptor of the regular file ``path`` (``None`` when it is not one, or cannot be
    opened), so that a rename over it or its unlink does not free its blocks until :func:`close_later`."""
    try:
        return open_regular(path)
    except (OSError, IntegrityError):  # a FIFO or device is never waited on: there are no blocks to keep
        return None


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a rename, a new name, a removal) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # a FIFO put in the folder's place is refused, never waited on
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
