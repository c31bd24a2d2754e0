"""The SQLite registry: WAL, busy timeout, numbered migrations, every query parametrized."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tracker_saver.claims import Holder, is_alive
from tracker_saver.errors import ConfigError, RecordNotFoundError, RegistryError
from tracker_saver.query import RECORD_FIELDS, Condition, is_number
from tracker_saver.records import (
    DERIVED_ALIASES,
    MetaValue,
    Record,
    RecordState,
    StreamId,
    UploadInfo,
    check_alias,
    check_display_name,
    clean_metadata,
    decode_value,
    encode_value,
)
from tracker_saver.registry.base import Candidate, Query, Registry, busy, derived_aliases
from tracker_saver.registry.migrations import migrate, stored_version

__all__ = ["SQLiteRegistry", "check_registry_path"]

_OPS_SQL = {">": ">", ">=": ">=", "<": "<", "<=": "<="}


def _encode(value: MetaValue) -> tuple[str, float | None, str | None]:
    """A metadata row's (type, num, text): the shared encoding plus a number column for ranges."""
    kind, text = encode_value(value)
    return kind, float(value) if kind in ("int", "float", "bool") else None, text  # type: ignore[arg-type]


#: Where a metadata value lives: (type, num, text) SQL expressions.
_Value = tuple[str, str, str]
_ROW: _Value = ("m.type", "m.num", "m.text")
_COMMITTED = "r.state IN ('live', 'revived', 'evicted')"
#: Metadata keys whose value is a column of ``records``: stored once, shown in
#: ``Record.metadata`` (sha256, size and uri once the record was committed), queried alike.
_COLUMNS: dict[str, _Value] = {
    "slot": ("CASE WHEN r.slot IS NULL THEN 'none' ELSE 'int' END", "r.slot", "CAST(r.slot AS TEXT)"),
    "created_at": ("'float'", "r.created_at", "CAST(r.created_at AS TEXT)"),
    "size": (f"CASE WHEN r.size IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'int' END", "r.size", "NULL"),
    "sha256": (f"CASE WHEN r.sha256 IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'str' END", "NULL", "r.sha256"),
    "uri": (f"CASE WHEN r.uri IS NULL OR NOT {_COMMITTED} THEN 'none' ELSE 'str' END", "NULL", "r.uri"),
}


def _value_sql(value_of: _Value, op: str, value: Any) -> tuple[str, list[Any]]:
    """SQL that is true when the metadata value ``value_of`` compares to ``value`` as ``Condition.test`` does."""
    kind_sql, num_sql, text_sql = value_of
    arg: float | str
    if isinstance(value, bool):
        kind, col, arg = f"{kind_sql} = 'bool'", num_sql, float(value)
    elif is_number(value):
        kind, col, arg = f"{kind_sql} IN ('int', 'float')", num_sql, float(value)
    else:
        kind, col, arg = f"{kind_sql} = 'str'", text_sql, str(value)
    sql_op = "=" if op == "==" else _OPS_SQL[op]
    return f"({kind} AND {col} {sql_op} ?)", [arg]


#: Record fields as (type, num, text) SQL expressions, for where-conditions on them.
_FIELDS: dict[str, _Value] = {
    "id": ("'int'", "r.id", "CAST(r.id AS TEXT)"),
    "output_uri": ("CASE WHEN r.output_uri IS NULL THEN 'none' ELSE 'str' END", "NULL", "r.output_uri"),
    **{key: ("'str'", "NULL", f"r.{key}") for key in ("name", "filename", "state", "stream", "run", "project")},
}
_LOADABLE_SQL = "('live', 'revived')"
#: Another loadable record ``o`` of ``r``'s stream.
_SAME_STREAM = (
    "o.output_uri IS r.output_uri AND o.project = r.project AND o.run = r.run AND o.stream = r.stream"
    f" AND o.state IN {_LOADABLE_SQL}"
)
_LATER = "(o.created_at > r.created_at OR (o.created_at = r.created_at AND o.id > r.id))"
_SCORE = "SELECT num FROM metadata WHERE record_id = {0}.id AND key = 'score' AND type IN ('int', 'float')"
#: SQL that is true when ``r`` holds a derived alias: the same rule as ``base.derived_aliases``.
_DERIVED_SQL = {
    "latest": f"(r.state IN {_LOADABLE_SQL} AND NOT EXISTS (SELECT 1 FROM records o WHERE {_SAME_STREAM} AND {_LATER}))",
    "best": (
        f"(r.state IN {_LOADABLE_SQL} AND ({_SCORE.format('r')}) IS NOT NULL AND NOT EXISTS ("
        f"SELECT 1 FROM records o WHERE {_SAME_STREAM} AND (({_SCORE.format('o')}) > ({_SCORE.format('r')})"
        f" OR (({_SCORE.format('o')}) = ({_SCORE.format('r')}) AND {_LATER}))))"
    ),
}


def _condition_sql(cond: Condition) -> tuple[str, list[Any]]:
    value_of = _FIELDS.get(cond.key) or _COLUMNS.get(cond.key, _ROW)
    if cond.op == "in":
        parts = [_value_sql(value_of, "==", v) for v in cond.value] or [("0", [])]
        test = "(" + " OR ".join(p for p, _ in parts) + ")"
        args = [a for _, arg in parts for a in arg]
    elif cond.op == "!=":
        eq, args = _value_sql(value_of, "==", cond.value)
        test = f"({value_of[0]} != 'none' AND NOT {eq})"
    else:
        test, args = _value_sql(value_of, cond.op, cond.value)
    if cond.key in _COLUMNS or cond.key in _FIELDS:
        return test, args
    sql = f"EXISTS (SELECT 1 FROM metadata m WHERE m.record_id = r.id AND m.key = ? AND {test})"
    return sql, [cond.key, *args]


def _refusal(path: Path) -> str:
    """Why ``path`` cannot be written, in the words of ``strerror``."""
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "Read-only file system"
    return "Permission denied"


def check_registry_path(path: str | os.PathLike[str]) -> None:
    """Raise ``ConfigError`` now if ``path`` cannot hold a registry; creates and changes nothing.

    A new registry needs a folder it can create or write; an existing file must be a writable
    SQLite database whose schema this version knows. ``TrackerSaver`` calls this before it
    creates output_uri, so a bad registry argument leaves no folder behind.

    Examples:
        >>> check_registry_path("/dev/null/registry.db")
        Traceback (most recent call last):
        ...
        tracker_saver.errors.ConfigError: registry folder '/dev/null' cannot be created ('/dev/null' is not a folder): pass a registry path in a writable folder
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
        folder = target.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
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
    # A read-only peek. Without a -wal file the main file holds everything, and immutable=1
    # reads it without creating the -wal and -shm files that mode=ro would leave behind.
    peek = "mode=ro" if target.with_name(target.name + "-wal").exists() else "immutable=1"
    try:
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?{peek}", uri=True)
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


class SQLiteRegistry(Registry):
    """Records in one SQLite file, safe for several processes writing at once.

    Args:
        path: the database file (created with its folder), or ``":memory:"``.
        timeout: seconds a writer waits for another process's lock (SQLite busy timeout).

    Examples:
        >>> reg = SQLiteRegistry(":memory:")
        >>> reg.query(Query(project="mnist"))
        []
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        text = os.fspath(path)
        check_registry_path(text)
        if text != ":memory:":
            target = Path(text).expanduser()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
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
            if text != ":memory:":
                _wal(self._conn, timeout)
                self._conn.execute("PRAGMA synchronous = FULL")
            # Foreign keys on only after the migrations: one rebuilds ``records`` (see migrate()).
            migrate(self._conn, repr(text))
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise ConfigError(f"registry {self.uri!r} cannot be opened ({exc}): pass a path to a SQLite file") from exc

    @contextlib.contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; a nested call is a savepoint. Errors roll back and raise ``RegistryError``.

        ``BEGIN IMMEDIATE`` takes the write lock up front, so the busy timeout applies instead
        of a deadlock between two processes that both read first.
        """
        with self._lock:
            try:
                begin, commit, rollback = (
                    ("SAVEPOINT atomic", "RELEASE atomic", "ROLLBACK TO atomic; RELEASE atomic")
                    if self._conn.in_transaction
                    else ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
                )
                self._conn.execute(begin)
                try:
                    yield self._conn
                except BaseException:
                    for statement in rollback.split("; "):
                        self._conn.execute(statement)
                    raise
                self._conn.execute(commit)
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

    def _read(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, args)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _load(self, rows: list[sqlite3.Row]) -> list[Record]:
        """Records of ``rows`` with metadata, tags and aliases: a few queries per 500 rows, never one per row."""
        if not rows:
            return []
        ids = [row["id"] for row in rows]
        meta: dict[int, dict[str, MetaValue]] = {i: {} for i in ids}
        tags: dict[int, list[str]] = {i: [] for i in ids}
        user: dict[str, list[str]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for m in self._read(f"SELECT record_id, key, type, text FROM metadata WHERE record_id IN ({marks})", chunk):
                meta[m["record_id"]][m["key"]] = decode_value(m["type"], m["text"])
            for t in self._read(f"SELECT record_id, tag FROM tags WHERE record_id IN ({marks}) ORDER BY tag", chunk):
                tags[t["record_id"]].append(t["tag"])
            for a in self._read(f"SELECT record_id, alias FROM aliases WHERE record_id IN ({marks})", chunk):
                user.setdefault(str(a["record_id"]), []).append(a["alias"])
        for row in rows:
            columns = {"slot": row["slot"], "created_at": row["created_at"]}
            if row["state"] in ("live", "revived", "evicted", "pinned"):
                columns.update(sha256=row["sha256"], size=row["size"], uri=row["uri"])
            meta[row["id"]].update({k: v for k, v in columns.items() if v is not None})
        derived = derived_aliases(self._candidates({(row["project"], row["run"], row["stream"]) for row in rows}))
        return [
            Record(
                id=str(row["id"]),
                project=row["project"],
                run=row["run"],
                stream=row["stream"],
                filename=row["filename"],
                name=row["name"],
                state=RecordState(row["state"]),
                slot=row["slot"],
                key=row["key"],
                uri=row["uri"],
                sha256=row["sha256"],
                size=row["size"],
                metadata=meta[row["id"]],
                tags=tuple(tags[row["id"]]),
                created_at=row["created_at"],
                error=row["error"],
                output_uri=row["output_uri"],
                aliases=tuple(sorted({*derived.get(str(row["id"]), ()), *user.get(str(row["id"]), ())})),
            )
            for row in rows
        ]

    def _candidates(self, streams_of_rows: set[tuple[str, str, str]]) -> list[Candidate]:
        """The loadable records of every ``(project, run, stream)``: one query per 300 streams."""
        streams = sorted(streams_of_rows)
        out: list[Candidate] = []
        for start in range(0, len(streams), 300):
            chunk = streams[start : start + 300]
            values = ",".join("(?, ?, ?)" for _ in chunk)
            rows = self._read(
                "SELECT r.id, r.output_uri, r.project, r.run, r.stream, r.created_at, m.num AS score"
                " FROM records r LEFT JOIN metadata m ON m.record_id = r.id AND m.key = 'score'"
                " AND m.type IN ('int', 'float')"
                f" WHERE r.state IN {_LOADABLE_SQL} AND (r.project, r.run, r.stream) IN (VALUES {values})",
                [part for stream in chunk for part in stream],
            )
            out.extend(
                (str(row["id"]), StreamId(row["output_uri"] or "", row["project"], row["run"], row["stream"]),
                 row["created_at"], row["score"])
                for row in rows
            )  # fmt: skip
        return out

    @staticmethod
    def _id(record_id: str | int) -> int:
        try:
            return int(record_id)
        except (TypeError, ValueError):
            raise RecordNotFoundError(
                f"record id {record_id!r} is not a SQLite record id (an integer): "
                "see `tracker-saver models list` for ids",
                record_id=str(record_id),
            ) from None

    def _set_metadata(self, conn: sqlite3.Connection, rid: int, metadata: dict[str, MetaValue]) -> None:
        # slot, created_at, sha256, size and uri are columns of the record: never stored twice.
        conn.executemany(
            "INSERT OR REPLACE INTO metadata (record_id, key, type, num, text) VALUES (?, ?, ?, ?, ?)",
            [(rid, k, *_encode(v)) for k, v in clean_metadata(metadata).items() if k not in _COLUMNS],
        )

    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        now = time.time()
        with self.atomic() as conn:
            cur = conn.execute(
                "INSERT INTO records (project, run, stream, filename, name, state, slot, key, uri, output_uri,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
                (
                    info.project,
                    info.run,
                    info.stream,
                    info.filename,
                    info.name,
                    info.slot,
                    info.key,
                    uri,
                    info.output_uri,
                    now,
                    now,
                ),
            )
            rid = int(cur.lastrowid or 0)
            self._set_metadata(conn, rid, info.metadata)
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, t) for t in info.tags])
        return self.get(str(rid))

    def commit(self, record_id: str, *, sha256: str, size: int, metadata: dict[str, MetaValue] | None = None) -> Record:
        rid = self._id(record_id)
        with self.atomic() as conn:
            row = conn.execute("SELECT state, uri FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise self._missing(record_id)
            if row[0] != RecordState.PENDING.value:
                raise RegistryError(
                    f"record {record_id} is {row[0]}, not pending: it cannot become live", record_id=str(record_id)
                )
            conn.execute(
                "UPDATE records SET state = 'live', sha256 = ?, size = ?, updated_at = ? WHERE id = ?",
                (sha256, size, time.time(), rid),
            )
            self._set_metadata(conn, rid, metadata or {})
        return self.get(record_id)

    def stage(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        rid = self._id(record_id)
        with self.atomic() as conn:
            done = conn.execute(
                "UPDATE records SET sha256 = ?, size = ?, updated_at = ? WHERE id = ? AND state = 'pending'",
                (sha256, size, time.time(), rid),
            )
            if done.rowcount == 0:
                raise RegistryError(
                    f"record {record_id} is no longer pending: its save cannot commit", record_id=str(record_id)
                )
            if replaces is not None:
                done = conn.execute(
                    "UPDATE records SET state = 'evicted', updated_at = ? WHERE id = ? AND state IN ('live', 'revived')",
                    (time.time(), self._id(replaces)),
                )
                if done.rowcount == 0:
                    raise RegistryError(
                        f"record {replaces}, which record {record_id} replaces in its slot, is no longer live: "
                        "another writer changed the slot",
                        record_id=str(replaces),
                    )

    @staticmethod
    def _claim_row(conn: sqlite3.Connection, stream: StreamId) -> tuple[Holder, float] | None:
        row = conn.execute(
            "SELECT token, host, pid, started, since, command, heartbeat FROM claims"
            " WHERE output_uri = ? AND project = ? AND run = ? AND stream = ?",
            (stream.output_uri, stream.project, stream.run, stream.stream),
        ).fetchone()
        if row is None:
            return None
        return Holder(token=row[0], host=row[1], pid=row[2], started=row[3], since=row[4], command=row[5]), row[6]

    def holder(self, stream: StreamId) -> Holder | None:
        with self.atomic() as conn:
            found = self._claim_row(conn, stream)
        return found[0] if found is not None and is_alive(found[0], heartbeat=found[1]) else None

    def claim(self, stream: StreamId, holder: Holder) -> None:
        key = (stream.output_uri, stream.project, stream.run, stream.stream)
        with self.atomic() as conn:
            found = self._claim_row(conn, stream)
            if found is not None and found[0].token != holder.token and is_alive(found[0], heartbeat=found[1]):
                raise busy(stream, found[0])
            conn.execute(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *key,
                    holder.token,
                    holder.host,
                    holder.pid,
                    holder.started,
                    holder.since,
                    holder.command,
                    time.time(),
                ),
            )

    def release(self, stream: StreamId, holder: Holder) -> None:
        with self.atomic() as conn:
            conn.execute(
                "DELETE FROM claims WHERE output_uri = ? AND project = ? AND run = ? AND stream = ? AND token = ?",
                (stream.output_uri, stream.project, stream.run, stream.stream, holder.token),
            )

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        rid = self._id(record_id)
        with self.atomic() as conn:
            row = conn.execute("SELECT state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise self._missing(record_id)
            if RecordState(row[0]) not in expected:
                raise RegistryError(
                    f"record {record_id} is {row[0]}: it can become {state.value} only from "
                    f"{', '.join(s.value for s in expected)}",
                    record_id=str(record_id),
                )
            conn.execute(
                "UPDATE records SET state = ?, error = COALESCE(?, error), updated_at = ? WHERE id = ?",
                (state.value, error, time.time(), rid),
            )
        return self.get(record_id)

    def rename(self, record_id: str, name: str) -> Record:
        check_display_name(record_id, name)
        with self.atomic() as conn:
            if (
                conn.execute(
                    "UPDATE records SET name = ?, updated_at = ? WHERE id = ?", (name, time.time(), self._id(record_id))
                ).rowcount
                == 0
            ):
                raise self._missing(record_id)
        return self.get(record_id)

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        rid = self._id(record_id)
        self.get(record_id)
        with self.atomic() as conn:
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, str(t)) for t in tags])
        return self.get(record_id)

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        rid = self._id(record_id)
        self.get(record_id)
        with self.atomic() as conn:
            conn.executemany("DELETE FROM tags WHERE record_id = ? AND tag = ?", [(rid, str(t)) for t in tags])
        return self.get(record_id)

    def set_alias(self, record_id: str, alias: str) -> Record:
        check_alias(alias)
        rid = self._id(record_id)
        with self.atomic() as conn:
            row = conn.execute("SELECT project, state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise self._missing(record_id)
            if not RecordState(row[1]).loadable:
                raise RegistryError(
                    f"record {record_id} is {row[1]}: an alias names a loadable record (live, revived or pinned); "
                    "pick a live record (tracker-saver models list --live)",
                    record_id=str(record_id),
                )
            conn.execute(
                "INSERT OR REPLACE INTO aliases (project, alias, record_id, created_at) VALUES (?, ?, ?, ?)",
                (row[0], alias, rid, time.time()),
            )
        return self.get(record_id)

    def remove_alias(self, project: str, alias: str) -> None:
        with self.atomic() as conn:
            done = conn.execute("DELETE FROM aliases WHERE project = ? AND alias = ?", (project, alias))
        if done.rowcount == 0:
            raise RecordNotFoundError(
                f"project {project!r} has no alias {alias!r} in {self.uri}: see `tracker-saver models list "
                f"--project {project}` for its aliases"
            )

    def create_pinned(self, info: UploadInfo, *, uri: str, sha256: str, size: int) -> Record:
        now = time.time()
        with self.atomic() as conn:
            cur = conn.execute(
                "INSERT INTO records (project, run, stream, filename, name, state, slot, key, uri, output_uri,"
                " sha256, size, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pinned', NULL, ?, ?, ?, ?, ?, ?, ?)",
                (info.project, info.run, info.stream, info.filename, info.name, info.key, uri, info.output_uri,
                 sha256, size, now, now),
            )  # fmt: skip
            rid = int(cur.lastrowid or 0)
            self._set_metadata(conn, rid, info.metadata)
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, t) for t in info.tags])
        return self.get(str(rid))

    def delete_pinned(self, record_id: str) -> None:
        rid = self._id(record_id)
        with self.atomic() as conn:
            row = conn.execute("SELECT state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise self._missing(record_id)
            if row[0] != RecordState.PINNED.value:
                raise RegistryError(
                    f"record {record_id} is {row[0]}, not pinned: only a pinned record can be deleted "
                    "(slot records stay as history)",
                    record_id=str(record_id),
                )
            conn.execute("DELETE FROM records WHERE id = ? AND state = 'pinned'", (rid,))

    def get(self, record_id: str) -> Record:
        records = self._load(self._read("SELECT * FROM records WHERE id = ?", (self._id(record_id),)))
        if not records:
            raise self._missing(record_id)
        return records[0]

    def _missing(self, record_id: str) -> RecordNotFoundError:
        return RecordNotFoundError(
            f"record {record_id} does not exist in {self.uri}: see `tracker-saver models list` for ids",
            record_id=str(record_id),
        )

    def _where(self, query: Query) -> tuple[list[str], list[Any]]:
        """The WHERE terms of ``query`` and their arguments."""
        where: list[str] = []
        args: list[Any] = []
        for column in ("project", "run", "stream", "filename", "output_uri", "slot", "name"):
            value = getattr(query, column)
            if value is not None:
                where.append(f"r.{column} = ?")
                args.append(value)
        if query.states is not None:
            where.append(f"r.state IN ({','.join('?' * len(query.states)) or 'NULL'})")
            args.extend(s.value for s in query.states)
        if query.tag is not None:
            where.append("EXISTS (SELECT 1 FROM tags t WHERE t.record_id = r.id AND t.tag = ?)")
            args.append(query.tag)
        if query.alias in DERIVED_ALIASES:
            where.append(_DERIVED_SQL[query.alias])
        elif query.alias is not None:
            where.append("EXISTS (SELECT 1 FROM aliases a WHERE a.record_id = r.id AND a.alias = ?)")
            args.append(query.alias)
        for cond in query.where:
            text, cond_args = _condition_sql(cond)
            where.append(text)
            args.extend(cond_args)
        return where, args

    def query(self, query: Query) -> list[Record]:
        sql = ["SELECT r.* FROM records r"]
        where, args = self._where(query)
        order_sql: list[str] = []
        join_args: list[Any] = []
        for i, order in enumerate(query.order_by):
            direction = "DESC" if order.desc else "ASC"
            if order.key in RECORD_FIELDS:
                column = "CAST(r.id AS INTEGER)" if order.key == "id" else f"r.{order.key}"
                order_sql += [f"({column} IS NULL)", f"{column} {direction}"]
                continue
            kind, num, text = _COLUMNS.get(order.key, (f"o{i}.type", f"o{i}.num", f"o{i}.text"))
            if order.key not in _COLUMNS:
                sql.append(f"LEFT JOIN metadata o{i} ON o{i}.record_id = r.id AND o{i}.key = ?")
                join_args.append(order.key)
            order_sql += [
                f"({kind} IS NULL OR {kind} = 'none')",
                f"(CASE WHEN {kind} IN ('int', 'float') THEN 0 ELSE 1 END) {direction}",
                f"{num} {direction}",
                f"{text} {direction}",
            ]
        if where:
            sql.append("WHERE " + " AND ".join(where))
        sql.append("ORDER BY " + ", ".join([*order_sql, "r.created_at", "r.id"]))
        if query.limit is not None or query.offset:
            sql.append("LIMIT ? OFFSET ?")
            args += [-1 if query.limit is None else int(query.limit), int(query.offset)]
        return self._load(self._read(" ".join(sql), join_args + args))

    def count(self, query: Query) -> int:
        where, args = self._where(query)
        sql = "SELECT count(*) FROM records r" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self._read(sql, args)[0][0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
