"""fsck's look at a local path before anything reads it: a symlink, FIFO, device or folder, found by lstat.

Anyone who can write the output folder can put a named pipe where a slot was: opening it
for reading waits for a writer that never comes, and a symlink leads out of the folder. So
fsck asks ``lstat`` (which opens and follows nothing) about every path it would read, and
reports what is not a regular file instead of reading it. Objects on S3 are never such things.

Examples:
    >>> import os, tempfile
    >>> from tracker_saver.storage.local import LocalStorage
    >>> store = LocalStorage(tempfile.mkdtemp())
    >>> os.makedirs(store.root / "p" / "r")
    >>> os.mkfifo(store.root / "p" / "r" / "m.slot0.pt")
    >>> not_regular(store, "p/r/m.slot0.pt").rsplit("' ", 1)[1]
    'is a named pipe (FIFO)'
    >>> not_regular(store, "p/r/m.slot1.pt") is None  # nothing there: the caller reports it missing
    True
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from tracker_saver.fsck.report import Finding
from tracker_saver.storage import Storage

__all__ = ["not_regular", "not_regular_finding"]

#: What a path that is not a regular file is, for a message: the first test that holds names it.
_WHAT: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_regular(storage: Storage, key: str, folders: dict[str, str | None] | None = None) -> str | None:
    """What is at ``key`` when it is not a regular file, or a symlink is on its way there; ``None`` otherwise.

    ``None`` also when nothing is there (the caller finds the object missing) and for every
    key of a storage that is not on this machine. ``folders`` keeps what each folder on the
    way was found to be, for the next key: the keys of one run share all but their last one or two.
    """
    root = storage.local_root
    if root is None:
        return None
    folders = {} if folders is None else folders
    parts = key.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if folder not in folders:
            folders[folder] = _examine(root / folder, folder=True)
        if (why := folders[folder]) is not None:
            return f"{why} on the way to {key!r}" if why else None  # "": nothing there, the object is missing
    return _examine(root / key, folder=False) or None


def _examine(path: Path, *, folder: bool) -> str | None:
    """``None`` when ``path`` is what is expected there (a real folder, or a regular file), ``""`` when
    nothing is (or a file where a folder should be), else what it is: one ``lstat``, nothing opened."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:  # e.g. a folder we may not search: nothing tracker_saver wrote
        return f"{str(path)!r} cannot be examined ({exc.strerror})"
    if stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode):
        return None
    if folder and not stat.S_ISLNK(mode):
        return ""
    return f"{str(path)!r} is " + next((name for test, name in _WHAT if test(mode)), "not a regular file")


def not_regular_finding(label: str, key: str | None, why: str, holders: Iterable[str]) -> Finding:
    """A ``not-regular`` finding at ``key`` for the records (``holders``, described) that point at it."""
    held = ", ".join(holders)
    detail = f"{why}, not a file tracker_saver wrote: it is not read" + (
        f"; records at its key: {held}" if held else ""
    )
    fix = (
        "none: see who put it there, remove it by hand (it holds no checkpoint of ours), "
        "then run `tracker-saver repair` to settle the records that pointed at it"
    )
    return Finding("not-regular", label, detail, fix, key)
