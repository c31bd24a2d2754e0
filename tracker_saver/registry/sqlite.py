"""The SQLite registry: records, states, tags, aliases, pins and claims, every query parametrized.

The file and its transactions are :mod:`tracker_saver.registry.sqlite_connection`'s (WAL, busy
timeout, numbered migrations); a ``Query`` as SQL is :mod:`tracker_saver.registry.sqlite_query`'s, its
records read by :mod:`tracker_saver.registry.sqlite_read`;
the checks of a registry path before anything is created are
:mod:`tracker_saver.registry.sqlite_check`'s (re-exported here); its events, gated alias moves and
pruning are :mod:`tracker_saver.registry.sqlite_history`'s (``history``): each change here writes
its event in its own transaction.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tracker_saver.core.claims import Holder, is_alive
from tracker_saver.core.errors import RecordNotFoundError, RegistryError
from tracker_saver.core.records import (
    MetaValue,
    Record,
    RecordState,
    StreamId,
    UploadInfo,
    check_alias,
    check_display_name,
    clean_metadata,
)
from tracker_saver.registry.base import Labels, Query, RecordStore, Registry, StreamClaims, busy
from tracker_saver.registry.sqlite_check import check_registry_path
from tracker_saver.registry.sqlite_connection import SQLiteConnection
from tracker_saver.registry.sqlite_history import SQLiteHistory, add_event, view
from tracker_saver.registry.sqlite_query import (
    COLUMNS,
    encode_row,
)
from tracker_saver.registry.sqlite_read import count_records, load_records, query_records

__all__ = [
    "PAGE_FIRST",
    "PAGE_MAX",
    "SQLiteClaims",
    "SQLiteLabels",
    "SQLiteRecords",
    "SQLiteRegistry",
    "check_registry_path",
    "from_spec",
]

#: :meth:`SQLiteRecords.pages` reads this many records first, then twice as many each time up to ``PAGE_MAX``.
PAGE_FIRST, PAGE_MAX = 100, 10_000


class SQLiteRegistry(Registry):
    """Records in one SQLite file, safe for several processes writing at once.

    Its parts share the file's one connection: :class:`SQLiteRecords`, :class:`SQLiteLabels`
    and :class:`SQLiteClaims`.

    Args:
        path: the database file (created with its folder), or ``":memory:"``.
        timeout: seconds a writer waits for another process's lock (SQLite busy timeout).

    Examples:
        >>> reg = SQLiteRegistry(":memory:")
        >>> reg.records.query(Query(project="mnist"))
        []
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self._db = SQLiteConnection(path, timeout=timeout)
        self.path = self._db.path
        self.uri = self._db.uri
        self.records: RecordStore = SQLiteRecords(self._db)
        self.labels: Labels = SQLiteLabels(self._db, self.records)
        self.claims: StreamClaims = SQLiteClaims(self._db)
        #: Events, gated alias moves and pruning (:class:`~tracker_saver.registry.events.HistoryLog`).
        self.history = SQLiteHistory(self._db, self)

    def atomic(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One transaction around several writes (a bulk import): all of them, or none."""
        return self._db.atomic()

    def close(self) -> None:
        self._db.close()


class SQLiteRecords(RecordStore):
    """A SQLite registry's records and their states: each change one transaction, with its event.

    Args:
        db: the registry's connection.

    Examples:
        >>> SQLiteRegistry(":memory:").records.count(Query())
        0
    """

    def __init__(self, db: SQLiteConnection) -> None:
        self._db = db

    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        now = time.time()
        with self._db.atomic(durable=False) as conn:  # synced by supersede, the durable step after it
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
            _set_metadata(conn, rid, info.metadata)
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, t) for t in info.tags])
        return self.get(str(rid))

    def make_live(
        self,
        record_id: str,
        *,
        sha256: str,
        size: int,
        metadata: dict[str, MetaValue] | None = None,
        fingerprint: str | None = None,
    ) -> Record:
        rid = _record_id(record_id)
        with self._db.atomic(durable=False) as conn:  # lost to a power cut: recovery promotes it
            row = conn.execute("SELECT state, uri FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise _missing(record_id, self._db.uri)
            if row[0] != RecordState.PENDING.value:
                raise RegistryError(
                    f"record {record_id} is {row[0]}, not pending: it cannot become live", record_id=str(record_id)
                )
            conn.execute(
                "UPDATE records SET state = 'live', sha256 = ?, size = ?, fingerprint = ?, updated_at = ? WHERE id = ?",
                (sha256, size, fingerprint, time.time(), rid),
            )
            _set_metadata(conn, rid, metadata or {})
            _event(conn, "record.live", rid, before={"state": "pending"})
        return self.get(record_id)

    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        rid = _record_id(record_id)
        with self._db.atomic() as conn:
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
                    (time.time(), _record_id(replaces)),
                )
                if done.rowcount == 0:
                    raise RegistryError(
                        f"record {replaces}, which record {record_id} replaces in its slot, is no longer live: "
                        "another writer changed the slot",
                        record_id=str(replaces),
                    )

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        rid = _record_id(record_id)
        with self._db.atomic() as conn:
            row = conn.execute("SELECT state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise _missing(record_id, self._db.uri)
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
            if state in (RecordState.LIVE, RecordState.REVIVED):
                _event(conn, "record.live", rid, before={"state": row[0]})
        return self.get(record_id)

    def get(self, record_id: str) -> Record:
        records = load_records(self._db, self._db.read("SELECT * FROM records WHERE id = ?", (_record_id(record_id),)))
        if not records:
            raise _missing(record_id, self._db.uri)
        return records[0]

    def query(self, query: Query) -> list[Record]:
        return query_records(self._db, query)

    def pages(self, query: Query) -> Iterator[list[Record]]:
        """:meth:`query`'s records in pages of 100, then twice as many each time up to 10,000: the first
        rows of 100,000 records come in milliseconds, and all of them take 16 queries."""
        size, shown = PAGE_FIRST, 0
        while query.limit is None or shown < query.limit:
            want = size if query.limit is None else min(size, query.limit - shown)
            page = self.query(replace(query, limit=want, offset=query.offset + shown))
            if page:
                yield page
            if len(page) < want:
                return
            shown, size = shown + want, min(2 * size, PAGE_MAX)

    def count(self, query: Query) -> int:
        return count_records(self._db, query)

    def metadata_keys(self) -> set[str]:
        # One pass over the metadata index (key first), reading no record; the keys kept as
        # columns are every record's.
        keys = {row[0] for row in self._db.read("SELECT DISTINCT key FROM metadata", ())}
        return keys | set(COLUMNS) if self._db.read("SELECT 1 FROM records LIMIT 1", ()) else keys


class SQLiteLabels(Labels):
    """A SQLite registry's names, tags, user aliases and pins: each change one transaction, with its event.

    Args:
        db: the registry's connection.
        records: the registry's records, which read a changed record back.

    Examples:
        >>> reg = SQLiteRegistry(":memory:")
        >>> reg.labels.remove_alias("mnist", "prod")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.RecordNotFoundError: project 'mnist' has no alias 'prod' in sqlite://:memory:: see `tracker-saver models list --project mnist` for its aliases
    """

    def __init__(self, db: SQLiteConnection, records: RecordStore) -> None:
        self._db = db
        self._records = records

    def rename(self, record_id: str, name: str) -> Record:
        check_display_name(record_id, name)
        rid = _record_id(record_id)
        with self._db.atomic() as conn:
            before = view(conn, rid)
            if before is None:
                raise _missing(record_id, self._db.uri)
            now = time.time()
            conn.execute(
                "UPDATE records SET name = ?, updated_at = ?, renamed_at = ? WHERE id = ?", (name, now, now, rid)
            )
            _event(conn, "record.renamed", rid, before=before)
        return self._records.get(record_id)

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        rid = _record_id(record_id)
        self._records.get(record_id)
        with self._db.atomic() as conn:
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, str(t)) for t in tags])
        return self._records.get(record_id)

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        rid = _record_id(record_id)
        self._records.get(record_id)
        with self._db.atomic() as conn:
            conn.executemany("DELETE FROM tags WHERE record_id = ? AND tag = ?", [(rid, str(t)) for t in tags])
        return self._records.get(record_id)

    def set_alias(self, record_id: str, alias: str) -> Record:
        check_alias(alias)
        rid = _record_id(record_id)
        with self._db.atomic() as conn:
            row = conn.execute("SELECT project, state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise _missing(record_id, self._db.uri)
            if not RecordState(row[1]).loadable:
                raise RegistryError(
                    f"record {record_id} is {row[1]}: an alias names a loadable record (live, revived or pinned); "
                    "pick a live record (tracker-saver models list --live)",
                    record_id=str(record_id),
                )
            held = conn.execute("SELECT record_id FROM aliases WHERE project = ? AND alias = ?", (row[0], alias))
            holder = (held.fetchone() or (None,))[0]
            conn.execute(
                "INSERT OR REPLACE INTO aliases (project, alias, record_id, created_at) VALUES (?, ?, ?, ?)",
                (row[0], alias, rid, time.time()),
            )
            if holder != rid:
                add_event(
                    conn, "alias.moved", row[0], rid, alias=alias, before=view(conn, holder), after=view(conn, rid)
                )
        return self._records.get(record_id)

    def remove_alias(self, project: str, alias: str) -> None:
        with self._db.atomic() as conn:
            done = conn.execute(
                "DELETE FROM aliases WHERE project = ? AND alias = ? RETURNING record_id", (project, alias)
            ).fetchone()
            if done is not None:
                add_event(conn, "alias.removed", project, done[0], alias=alias, before=view(conn, done[0]))
        if done is None:
            raise RecordNotFoundError(
                f"project {project!r} has no alias {alias!r} in {self._db.uri}: see `tracker-saver models list "
                f"--project {project}` for its aliases"
            )

    def create_pinned(
        self, info: UploadInfo, *, uri: str, sha256: str, size: int, fingerprint: str | None = None, once: bool = False
    ) -> Record:
        now = time.time()
        with self._db.atomic() as conn:
            # BEGIN IMMEDIATE holds the write lock: the check and the insert are one compare-and-set.
            first = _pin_of(conn, info) if once else None
            if first is not None:
                return self._records.get(str(first))
            cur = conn.execute(
                "INSERT INTO records (project, run, stream, filename, name, state, slot, key, uri, output_uri,"
                " sha256, size, fingerprint, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 'pinned', NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.project,
                    info.run,
                    info.stream,
                    info.filename,
                    info.name,
                    info.key,
                    uri,
                    info.output_uri,
                    sha256,
                    size,
                    fingerprint,
                    now,
                    now,
                ),
            )
            rid = int(cur.lastrowid or 0)
            _set_metadata(conn, rid, info.metadata)
            conn.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(rid, t) for t in info.tags])
            _event(conn, "record.pinned", rid)
        return self._records.get(str(rid))

    def delete_pinned(self, record_id: str, *, unless_aliased: bool = False) -> bool:
        rid = _record_id(record_id)
        with self._db.atomic() as conn:
            row = conn.execute("SELECT state FROM records WHERE id = ?", (rid,)).fetchone()
            if row is None:
                raise _missing(record_id, self._db.uri)
            if row[0] != RecordState.PINNED.value:
                raise RegistryError(
                    f"record {record_id} is {row[0]}, not pinned: only a pinned record can be deleted "
                    "(slot records stay as history)",
                    record_id=str(record_id),
                )
            project, _ = _project(conn, rid)
            aliases = conn.execute("SELECT alias FROM aliases WHERE record_id = ?", (rid,)).fetchall()
            if unless_aliased and aliases:
                return False
            for (alias,) in aliases:
                add_event(conn, "alias.removed", project, rid, alias=alias, before=view(conn, rid))  # with the pin
            add_event(conn, "record.unpinned", project, rid, before=view(conn, rid))
            conn.execute("DELETE FROM records WHERE id = ? AND state = 'pinned'", (rid,))
        return True

    def user_aliases(self, record: Record) -> tuple[str, ...]:
        rows = self._db.read("SELECT alias FROM aliases WHERE record_id = ? ORDER BY alias", (_record_id(record.id),))
        return tuple(str(row["alias"]) for row in rows)


class SQLiteClaims(StreamClaims):
    """A SQLite registry's stream claims: one row per stream, checked and written in one transaction.

    Args:
        db: the registry's connection.

    Examples:
        >>> from tracker_saver.core.records import StreamId
        >>> SQLiteRegistry(":memory:").claims.holder(StreamId("file:///c", "p", "r", "best_model")) is None
        True
    """

    def __init__(self, db: SQLiteConnection) -> None:
        self._db = db

    def registry_id(self, project: str) -> str:
        """This file's random id (migration 6 made it), whatever the project."""
        return str(self._db.read("SELECT value FROM registry_meta WHERE key = 'id'", ())[0]["value"])

    def holder(self, stream: StreamId) -> Holder | None:
        with self._db.atomic() as conn:
            found = _claim_row(conn, stream)
        return found[0] if found is not None and is_alive(found[0], heartbeat=found[1]) else None

    def claim(self, stream: StreamId, holder: Holder) -> None:
        key = (stream.output_uri, stream.project, stream.run, stream.stream)
        with self._db.atomic() as conn:
            found = _claim_row(conn, stream)
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
        with self._db.atomic() as conn:
            conn.execute(
                "DELETE FROM claims WHERE output_uri = ? AND project = ? AND run = ? AND stream = ? AND token = ?",
                (stream.output_uri, stream.project, stream.run, stream.stream, holder.token),
            )


def _record_id(record_id: str | int) -> int:
    try:
        value = int(record_id)
    except (TypeError, ValueError):
        value = None
    if value is None or not -(2**63) <= value < 2**63:  # a SQLite INTEGER has 64 bits
        kind = "an integer" if value is None else "a 64-bit integer"
        raise RecordNotFoundError(
            f"record id {record_id!r} is not a SQLite record id ({kind}): see `tracker-saver models list` for ids",
            record_id=str(record_id),
        )
    return value


def _missing(record_id: str, uri: str) -> RecordNotFoundError:
    return RecordNotFoundError(
        f"record {record_id} does not exist in {uri}: see `tracker-saver models list` for ids",
        record_id=str(record_id),
    )


def _set_metadata(conn: sqlite3.Connection, rid: int, metadata: dict[str, MetaValue]) -> None:
    # slot, created_at, sha256, size and uri are columns of the record: never stored twice.
    conn.executemany(
        "INSERT OR REPLACE INTO metadata (record_id, key, type, num, text) VALUES (?, ?, ?, ?, ?)",
        [(rid, k, *encode_row(v)) for k, v in clean_metadata(metadata).items() if k not in COLUMNS],
    )


def _project(conn: sqlite3.Connection, rid: int) -> tuple[str, int]:
    return str(conn.execute("SELECT project FROM records WHERE id = ?", (rid,)).fetchone()[0]), rid


def _event(conn: sqlite3.Connection, kind: str, rid: int, *, before: dict[str, Any] | None = None) -> None:
    """Record that record ``rid`` changed (``kind``), showing it as it is now, in ``conn``'s transaction."""
    add_event(conn, kind, *_project(conn, rid), before=before, after=view(conn, rid))


def _pin_of(conn: sqlite3.Connection, info: UploadInfo) -> int | None:
    """The id of a pinned record at ``info``'s output_uri with its ``pinned_from`` and ``kept_by``, if any."""
    keys = {k: clean_metadata({k: info.metadata.get(k)}).get(k) for k in ("pinned_from", "kept_by")}
    sql = "SELECT r.id FROM records r WHERE r.state = 'pinned' AND r.output_uri IS ? AND r.project = ?"
    args: list[Any] = [info.output_uri, info.project]
    for key, value in keys.items():
        if value is None:
            sql += (
                " AND NOT EXISTS (SELECT 1 FROM metadata m WHERE m.record_id = r.id AND m.key = ? AND m.type != 'none')"
            )
            args.append(key)
        else:
            # pinned_from is the source's id as a string; pins made before it was hold it as an int
            forms = [value, *([int(value)] if key == "pinned_from" and str(value).isdigit() else [])]
            either = " OR ".join(["(m.type = ? AND m.num IS ? AND m.text IS ?)"] * len(forms))
            sql += f" AND EXISTS (SELECT 1 FROM metadata m WHERE m.record_id = r.id AND m.key = ? AND ({either}))"
            args += [key, *(part for form in forms for part in encode_row(form))]
    row = conn.execute(sql + " ORDER BY r.id LIMIT 1", args).fetchone()
    return int(row[0]) if row is not None else None


def _claim_row(conn: sqlite3.Connection, stream: StreamId) -> tuple[Holder, float] | None:
    row = conn.execute(
        "SELECT token, host, pid, started, since, command, heartbeat FROM claims"
        " WHERE output_uri = ? AND project = ? AND run = ? AND stream = ?",
        (stream.output_uri, stream.project, stream.run, stream.stream),
    ).fetchone()
    if row is None:
        return None
    return Holder(token=row[0], host=row[1], pid=row[2], started=row[3], since=row[4], command=row[5]), row[6]


def from_spec(path: str | None, *, timeout: float) -> SQLiteRegistry:
    """``registry=PATH``: the SQLite file (``timeout`` bounds a network wait; SQLite keeps its own busy timeout)."""
    return SQLiteRegistry(path or ":memory:")
