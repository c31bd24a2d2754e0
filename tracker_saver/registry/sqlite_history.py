"""The SQLite registry's history: events written with each change, gated alias moves, old records deleted.

:func:`add_event` is called by :class:`~tracker_saver.registry.sqlite.SQLiteRegistry` inside the
transaction of the change it describes, so an event exists exactly when its change does.
:class:`SQLiteHistory` reads events, moves an alias past a gate in one transaction, and prunes:
the candidates chosen in one query, deleted in batches, each batch one transaction that checks
every record again.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from typing import Any

from tracker_saver.core.jsonout import as_float, dumps
from tracker_saver.core.records import Record, RecordState, StreamId
from tracker_saver.core.text import check_filters
from tracker_saver.registry.base import Query, Registry
from tracker_saver.registry.events import Check, DeadEvent, Event, Outbox, Pruned, PruneRule, refused
from tracker_saver.registry.sqlite_connection import SQLiteConnection

__all__ = ["SQLiteHistory", "add_event", "view"]

#: What :func:`view` reads of a record: enough for a reader to act without asking the registry.
_VIEW = (
    "SELECT r.id, r.run, r.stream, r.filename, r.name, r.state, m.num FROM records r LEFT JOIN metadata m"
    " ON m.record_id = r.id AND m.key = 'score' AND m.type IN ('int', 'float') WHERE r.id = ?"
)
#: Still history, never renamed, named by no alias: what a prune deletes (checked again at the delete).
_DELETABLE = (
    "state IN ('evicted', 'failed') AND renamed_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM aliases a WHERE a.record_id = records.id)"
)


def view(conn: sqlite3.Connection, record_id: int | None) -> dict[str, Any] | None:
    """A record as an event's ``before`` or ``after`` shows it: id, run, stream, filename, name, state, score."""
    row = conn.execute(_VIEW, (record_id,)).fetchone() if record_id is not None else None
    if row is None:
        return None
    keys = ("record_id", "run", "stream", "filename", "name", "state", "score")
    return dict(zip(keys, (str(row[0]), *row[1:]), strict=True))


def add_event(
    conn: sqlite3.Connection,
    kind: str,
    project: str,
    record_id: int | None,
    *,
    alias: str | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Record an event in the caller's transaction (``kind``: one of ``events.EVENT_TYPES``)."""
    conn.execute(
        "INSERT INTO events (id, time, type, project, record_id, alias, before, after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            "evt_" + secrets.token_hex(16),
            time.time(),
            kind,
            project,
            record_id,
            alias,
            None if before is None else dumps(before),
            None if after is None else dumps(after),
        ),
    )


def _side(text: str | None) -> dict[str, Any] | None:
    """An event's ``before`` or ``after`` as stored: standard JSON, its score a float again (``"Infinity"``).

    Rows written before issue 51 hold a bare ``Infinity``, which Python's json reads as well.
    """
    if text is None:
        return None
    side: dict[str, Any] = json.loads(text)
    if "score" in side:
        side["score"] = as_float(side["score"])
    return side


def _event(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        seq=row["seq"],
        type=row["type"],
        time=row["time"],
        project=row["project"],
        record_id=None if row["record_id"] is None else str(row["record_id"]),
        alias=row["alias"],
        before=_side(row["before"]),
        after=_side(row["after"]),
    )


class SQLiteHistory:
    """A SQLite registry's events, gated alias moves and history deletion, over its connection.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> open_registry(":memory:").history.events()
        []
    """

    def __init__(self, db: SQLiteConnection, registry: Registry) -> None:
        self._db = db
        self._registry = registry

    def events(self, *, after: int = 0, project: str | None = None, limit: int | None = None) -> list[Event]:
        """Events with ``seq`` above ``after``, oldest first (of ``project`` only, when given).

        Raises:
            ConfigError: ``project`` breaks the text rule (:func:`~tracker_saver.core.text.check_filters`).
        """
        check_filters(project=project)
        where, args = ("seq > ? AND project = ?", [after, project]) if project is not None else ("seq > ?", [after])
        rows = self._db.read(
            f"SELECT * FROM events WHERE {where} ORDER BY seq LIMIT ?", [*args, -1 if limit is None else limit]
        )
        return [_event(row) for row in rows]

    def outbox(self, endpoint: str, shown: str, *, limit: int = 100) -> Outbox:
        """``endpoint``'s outbox (made, from the next event on, the first time): its events, in order."""
        with self._db.atomic() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO webhooks (endpoint, shown, delivered, created_at)"
                " SELECT ?, ?, COALESCE(MAX(seq), 0), ? FROM events",
                (endpoint, shown, time.time()),
            )
            row = conn.execute("SELECT delivered, attempts, due, error FROM webhooks WHERE endpoint = ?", (endpoint,))
            delivered, attempts, due, error = row.fetchone()
        return Outbox(self.events(after=delivered, limit=limit), attempts, due, error)

    def delivered(self, endpoint: str, seq: int) -> None:
        """Events up to ``seq`` reached ``endpoint``: out of its outbox, its attempts back to 0."""
        with self._db.atomic() as conn:
            conn.execute(
                "UPDATE webhooks SET delivered = MAX(delivered, ?), attempts = 0, due = 0, error = NULL"
                " WHERE endpoint = ?",
                (seq, endpoint),
            )

    def failed(self, endpoint: str, *, due: float, error: str) -> None:
        """The first event of ``endpoint``'s outbox did not get through: one more attempt, the next at ``due``."""
        with self._db.atomic() as conn:
            conn.execute(
                "UPDATE webhooks SET attempts = attempts + 1, due = ?, error = ? WHERE endpoint = ?",
                (due, error, endpoint),
            )

    def set_aside(self, endpoint: str, seq: int, *, error: str, attempts: int) -> None:
        """``endpoint``'s receiver refused event ``seq``: into its dead letters and out of its outbox, in
        one transaction (the outbox's cursor passes it, its attempts back to 0)."""
        with self._db.atomic() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO webhook_dead (endpoint, seq, error, attempts, dead_at) VALUES (?, ?, ?, ?, ?)",
                (endpoint, seq, error, attempts, time.time()),
            )
            conn.execute(
                "UPDATE webhooks SET delivered = MAX(delivered, ?), attempts = 0, due = 0, error = NULL"
                " WHERE endpoint = ?",
                (seq, endpoint),
            )

    def dead(self, endpoint: str | None = None) -> list[DeadEvent]:
        """Events set aside (for ``endpoint`` only, when given), oldest first."""
        where, args = ("WHERE d.endpoint = ?", [endpoint]) if endpoint is not None else ("", [])
        rows = self._db.read(
            "SELECT e.*, d.endpoint AS d_endpoint, w.shown AS d_shown, d.error AS d_error, d.attempts AS d_attempts,"
            " d.dead_at AS d_time FROM webhook_dead d JOIN events e ON e.seq = d.seq"
            f" LEFT JOIN webhooks w ON w.endpoint = d.endpoint {where} ORDER BY d.seq, d.endpoint",
            args,
        )
        return [
            DeadEvent(
                _event(row), row["d_endpoint"], row["d_shown"] or "", row["d_error"], row["d_attempts"], row["d_time"]
            )
            for row in rows
        ]

    def resent(self, endpoint: str, seq: int) -> None:
        """Dead event ``seq`` reached ``endpoint`` when sent again: out of its dead letters."""
        with self._db.atomic() as conn:
            conn.execute("DELETE FROM webhook_dead WHERE endpoint = ? AND seq = ?", (endpoint, seq))

    def move_alias(self, record_id: str, alias: str, *, check: Check) -> Record:
        """Read the record and the alias's holder, check, and move the alias, in one write transaction
        (``BEGIN IMMEDIATE``: no other writer can move the alias between the check and the move)."""
        with self._db.atomic():
            record = self._registry.records.get(record_id)
            found = self._registry.records.query(Query(project=record.project, alias=alias, limit=1))
            holder = found[0] if found else None
            if holder is not None and holder.id == record.id:
                return record
            reason = check(record, holder)
            if reason is not None:
                raise refused(record, alias, reason)
            return self._registry.labels.set_alias(record_id, alias)

    def prune(self, scope: Query, rule: PruneRule, *, dry_run: bool = False, batch: int = 500) -> list[Pruned]:
        """Delete the history records of ``scope``'s streams that ``rule`` names, ``batch`` records a
        transaction (each checked again there: one renamed or aliased meanwhile stays), with their
        metadata, tags and ``record.live`` events (those every webhook took); the records deleted (``dry_run``: that would be),
        oldest first. Only ``scope``'s output_uri, project, run and stream count; each is checked
        by the text rule first (``ConfigError``)."""
        check_filters(output_uri=scope.output_uri, project=scope.project, run=scope.run, stream=scope.stream)
        chosen = self._candidates(scope, rule)
        if dry_run:
            return chosen
        gone: set[str] = set()
        for start in range(0, len(chosen), batch):
            ids = [int(p.record_id) for p in chosen[start : start + batch]]
            marks = ",".join("?" * len(ids))
            with self._db.atomic() as conn:
                done = conn.execute(f"DELETE FROM records WHERE id IN ({marks}) AND {_DELETABLE} RETURNING id", ids)
                deleted = [row[0] for row in done.fetchall()]
                marks = ",".join("?" * len(deleted))
                conn.execute(
                    f"DELETE FROM events WHERE type = 'record.live' AND record_id IN ({marks})"
                    " AND seq <= (SELECT COALESCE(MIN(delivered), 1e18) FROM webhooks)"  # none still in an outbox
                    " AND seq NOT IN (SELECT seq FROM webhook_dead)",  # nor set aside, to be sent again
                    deleted,
                )
            gone.update(str(i) for i in deleted)
        return [p for p in chosen if p.record_id in gone]

    def _candidates(self, scope: Query, rule: PruneRule) -> list[Pruned]:
        fields = [(k, getattr(scope, k)) for k in ("output_uri", "project", "run", "stream")]
        where = "".join(f" AND {k} = ?" for k, v in fields if v is not None)
        rows = self._db.read(
            "SELECT id, output_uri, project, run, stream, state, created_at, filename FROM ("
            " SELECT *, ROW_NUMBER() OVER (PARTITION BY output_uri, project, run, stream"
            "   ORDER BY created_at DESC, id DESC) AS nth,"
            " ROW_NUMBER() OVER (PARTITION BY output_uri, project, run, stream, state, slot"
            "   ORDER BY created_at DESC, id DESC) AS in_slot"
            f" FROM records WHERE state IN ('evicted', 'failed'){where}) AS records"
            f" WHERE nth > ? AND created_at < ? AND NOT (state = 'evicted' AND in_slot = 1) AND {_DELETABLE}"
            " ORDER BY created_at, id",
            [v for _, v in fields if v is not None] + [rule.keep_last or 0, min(rule.cutoff, 1e300)],
        )
        return [
            Pruned(
                str(row["id"]),
                StreamId(row["output_uri"] or "", row["project"], row["run"], row["stream"]),
                RecordState(row["state"]),
                row["created_at"],
                row["filename"],
            )
            for row in rows
        ]
