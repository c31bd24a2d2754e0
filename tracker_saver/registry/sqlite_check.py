"""Check a SQLite registry file without writing to it: before anything is created, and for damage (fsck)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.registry.migrations import stored_version

__all__ = ["check_registry_path", "damage", "sqlite_file"]

#: How many problems ``damage`` lists at most: the first ones say enough, and a wrecked file has thousands.
MOST_PROBLEMS = 10


def _refusal(path: Path) -> str:
    """Why ``path`` cannot be written, in the words of ``strerror``."""
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "Read-only file system"
    return "Permission denied"


def _peek(target: Path) -> sqlite3.Connection:
    """A read-only connection to ``target``, which exists.

    Without a -wal file the main file holds everything, and immutable=1 reads it without
    creating the -wal and -shm files that mode=ro would leave behind. With one (a registry open
    somewhere, this process's included), mode=ro reads through it, in one snapshot.
    """
    peek = "mode=ro" if target.with_name(target.name + "-wal").exists() else "immutable=1"
    return sqlite3.connect(f"{target.resolve().as_uri()}?{peek}", uri=True)


def check_registry_path(path: str | os.PathLike[str]) -> None:
    """Raise ``ConfigError`` now if ``path`` cannot hold a registry; creates and changes nothing.

    A new registry needs a folder it can create or write; an existing file must be a writable
    SQLite database whose schema this version knows. ``TrackerSaver`` calls this before it
    creates output_uri, so a bad registry argument leaves no folder behind.

    Examples:
        >>> check_registry_path("/dev/null/registry.db")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: registry folder '/dev/null' cannot be created ('/dev/null' is not a folder): pass a registry path in a writable folder
    """
    text = os.fspath(path)
    if text == ":memory:":
        return
    if "\x00" in text:
        raise ConfigError(
            f"registry path {text!r} contains NUL: pass a file path such as '~/.tracker_saver/registry.db'"
        )
    target = Path(text).expanduser()
    if target.is_dir():
        raise ConfigError(
            f"registry path {str(target)!r} is a folder: pass a file path such as {str(target / 'registry.db')!r}"
        )
    if not target.exists():
        # Its folders are created at any depth, as output_uri's are: what must be writable is the
        # nearest one that exists.
        folder = next(p for p in target.parents if p.exists())
        if not folder.is_dir():
            raise ConfigError(
                f"registry folder {str(target.parent)!r} cannot be created ({str(folder)!r} is not a folder): "
                "pass a registry path in a writable folder"
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(
                f"registry folder {str(folder)!r} is not writable ({_refusal(folder)}): "
                "pass a registry path in a writable folder"
            )
        return
    for what, item in (("registry", target), ("the folder of registry", target.parent)):
        if not os.access(item, os.R_OK | os.W_OK):
            raise ConfigError(
                f"{what} {str(item)!r} is read-only ({_refusal(item)}): SQLite writes the registry and its "
                "-wal and -shm files there; pass a registry path you can write to"
            )
    try:
        conn = _peek(target)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            stored_version(conn, repr(str(target)))
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(
            f"registry {str(target)!r} is not a SQLite database ({exc}): pass the path of a registry file, "
            "or move this file away to start a new registry there"
        ) from exc


def sqlite_file(uri: str) -> str | None:
    """The file of a SQLite registry's ``uri`` (``sqlite:///PATH``); ``None`` for ``:memory:`` or another registry.

    Examples:
        >>> sqlite_file("sqlite:////home/me/registry.db"), sqlite_file("sqlite://:memory:"), sqlite_file("mlflow:")
        ('/home/me/registry.db', None, None)
    """
    return uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else None


def damage(path: str | os.PathLike[str], *, deep: bool = False) -> list[str]:
    """What SQLite finds wrong with the registry file at ``path``, at most ``MOST_PROBLEMS`` lines; ``[]``: nothing.

    Reads only, never writes: a damaged file must be kept as it is for ``.recover`` or a
    restore. ``PRAGMA quick_check`` reads every page and checks each b-tree (what a query would
    trip on); ``deep`` runs ``PRAGMA integrity_check``, which also checks every index against
    its table. A file SQLite cannot read at all (a destroyed header page) is one line saying why.

    Raises:
        RegistryError: the file cannot be opened or read now (say, a lock): that says nothing of damage.

    Examples:
        >>> import os, tempfile
        >>> junk = os.path.join(tempfile.mkdtemp(), "registry.db")
        >>> _ = open(junk, "wb").write(b"not a database" * 512)
        >>> damage(junk)
        ['file is not a database']
    """
    pragma = "integrity_check" if deep else "quick_check"
    try:
        conn = _peek(Path(path).expanduser())
        try:
            rows = conn.execute(f"PRAGMA {pragma}({MOST_PROBLEMS})").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:  # cannot be opened or read now (a lock, a missing -shm): no verdict
        raise RegistryError(
            f"registry {str(path)!r} cannot be checked now ({exc}): run the check again from an account that can "
            "read the file and its folder"
        ) from exc
    except sqlite3.DatabaseError as exc:  # corrupt or not a database: the header or the schema cannot be read
        return [str(exc)]
    lines = [str(row[0]) for row in rows]
    return [] if lines == ["ok"] else lines
