"""The SQLite registry's connection: WAL, busy timeout, numbered migrations, ``atomic()`` transactions.

:class:`tracker_saver.registry.sqlite.SQLiteRegistry` holds one :class:`SQLiteConnection`:
it opens the file, runs the migrations, and is the one place where ``sqlite3`` errors become
``RegistryError``. The records, their states, tags, aliases and claims are the registry's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.registry.migrations import migrate
from tracker_saver.registry.sqlite_check import check_registry_path

__all__ = ["SQLiteConnection"]


def _wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL. Two processes opening a new file at once (DDP ranks) can get "database
    is locked" from this pragma without SQLite's busy handler waiting: retry until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


class SQLiteConnection:
    """One SQLite file opened for a registry, safe for several processes writing at once.

    ``path`` and ``timeout`` are :class:`~tracker_saver.registry.sqlite.SQLiteRegistry`'s.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        text = os.fspath(path)
        check_registry_path(text)
        if text != ":memory:":
            target = Path(text).expanduser()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)  # at any depth, as output_uri's folders
            except OSError as exc:
                raise ConfigError(
                    f"registry folder {str(target.parent)!r} cannot be created ({exc.strerror}): "
                    "pass a registry path in a writable folder"
                ) from exc
            text = str(target.resolve())
        self.path = text
        self.uri = f"sqlite:///{text}" if text != ":memory:" else "sqlite://:memory:"
        self.timeout = timeout
        self._lock = threading.RLock()
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a transaction takes
            # the write lock up front and the busy timeout applies instead of a deadlock.
            self._conn = sqlite3.connect(text, timeout=timeout, isolation_level=None, check_same_thread=False)
            # Another program may have stored bytes that are not UTF-8: read them shown escaped
            # (``\xff``, as core.text.escape shows other refused text) rather than fail every query.
            self._conn.text_factory = _text
            if text != ":memory:":
                _wal(self._conn, timeout)
                self._conn.execute("PRAGMA synchronous = FULL")
            # Foreign keys on only after the migrations: one rebuilds ``records`` (see migrate()).
            migrate(self._conn, repr(text))
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise ConfigError(f"registry {self.uri!r} cannot be opened ({exc}): pass a path to a SQLite file") from exc

    @contextlib.contextmanager
    def atomic(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; a nested call is a savepoint. Errors roll back and raise ``RegistryError``.

        ``BEGIN IMMEDIATE`` takes the write lock up front, so the busy timeout applies instead
        of a deadlock between two processes that both read first. A transaction is on disk when it
        commits (``synchronous = FULL``) unless ``durable=False``: then (``NORMAL``, still safe from
        corruption in WAL mode) a power cut may roll it back, and the next durable commit of this
        file syncs it. A save's pending and live steps are that kind: the durable step between
        them (supersede, before the storage commit point) syncs the first, and recovery promotes a
        pending record whose bytes are committed, so the second needs no sync of its own.
        """
        with self._lock:
            try:
                nested = self._conn.in_transaction
                begin, commit, rollback = (
                    ("SAVEPOINT atomic", "RELEASE atomic", "ROLLBACK TO atomic; RELEASE atomic")
                    if nested
                    else ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
                )
                relaxed = not durable and not nested and self.path != ":memory:"
                if relaxed:
                    self._conn.execute("PRAGMA synchronous = NORMAL")
                try:
                    self._conn.execute(begin)
                    try:
                        yield self._conn
                    except BaseException:
                        for statement in rollback.split("; "):
                            self._conn.execute(statement)
                        raise
                    self._conn.execute(commit)
                finally:
                    if relaxed:
                        self._conn.execute("PRAGMA synchronous = FULL")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> RegistryError:
        """The ``RegistryError`` for a failed statement, with the fix when SQLite says what is wrong."""
        text = str(exc)
        if "locked" in text or "busy" in text:
            return RegistryError(
                f"registry {self.uri!r} is locked by another process for longer than the busy timeout "
                f"({self.timeout:g} s): let that process finish (`fuser {self.path}` names it), or wait longer "
                "with registry=SQLiteRegistry(path, timeout=SECONDS)"
            )
        if "readonly" in text:
            return RegistryError(
                f"registry {self.uri!r} can no longer be written ({text}): make the file and its folder "
                "writable again, or pass another registry"
            )
        return RegistryError(f"registry {self.uri!r}: {text}")

    def read(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        """The rows of one read-only statement (outside any transaction of another thread)."""
        with self._lock:
            try:
                cur = self._conn.execute(sql, args)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()
