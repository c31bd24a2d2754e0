"""Reading the SQLite registry: a ``Query``'s records, page by page, with their metadata, tags and aliases.

:class:`~tracker_saver.registry.sqlite.SQLiteRegistry` answers ``get``, ``query`` and ``count``
with these; the SQL of a query is :mod:`tracker_saver.registry.sqlite_query`'s. A few statements
per 500 records, never one per record.

Examples:
    >>> query_records(SQLiteConnection(":memory:"), Query(project="none"))
    []
"""

from __future__ import annotations

import sqlite3

from tracker_saver.core.query import Condition
from tracker_saver.core.records import MetaValue, Record, RecordState, StreamId, decode_value
from tracker_saver.registry.base import Candidate, Query, derived_aliases
from tracker_saver.registry.sqlite_connection import SQLiteConnection
from tracker_saver.registry.sqlite_query import (
    FEW,
    LOADABLE_SQL,
    count_sql,
    few_records_sql,
    few_sql,
    metadata_conditions,
    page_sql,
    select_sql,
)

__all__ = ["count_records", "load_records", "query_records"]

#: A state by its stored value, without an Enum call per record (fsck reads 100,000 of them).
_STATES = {state.value: state for state in RecordState}


def query_records(db: SQLiteConnection, query: Query) -> list[Record]:
    """The records ``query`` selects, in its order, its page only (``limit``/``offset``)."""
    rows: list[sqlite3.Row] = []
    limit, offset = query.limit, query.offset
    few_records = few_records_sql(query)
    walk = few_records is None or db.read(*few_records)[0][0] >= FEW
    for sql, args in select_sql(query, _driver(db, query), walk=walk):
        if limit is not None and len(rows) >= limit:
            break
        page = db.read(*page_sql(sql, args, None if limit is None else limit - len(rows), offset))
        if not page and offset:  # the offset reaches past this statement's rows: skip them all
            offset -= int(db.read(f"SELECT count(*) FROM ({sql})", args)[0][0])
        else:
            offset = 0
        rows += page
    return load_records(db, rows, query.details)


def count_records(db: SQLiteConnection, query: Query) -> int:
    """How many records ``query`` selects (its ``limit`` and ``offset`` aside)."""
    return int(db.read(*count_sql(query, _driver(db, query)))[0][0])


def _driver(db: SQLiteConnection, query: Query) -> Condition | None:
    """A metadata condition of ``query`` that fewer than ``FEW`` rows meet: the query starts from its rows."""
    for cond in metadata_conditions(query):
        if db.read(*few_sql(cond))[0][0] < FEW:
            return cond
    return None


def load_records(db: SQLiteConnection, rows: list[sqlite3.Row], details: bool = True) -> list[Record]:
    """Records of ``rows`` with metadata, tags and aliases (unless not ``details``): a few queries per 500 rows, never one per row."""
    if not rows:
        return []
    ids = [row["id"] for row in rows]
    meta: dict[int, dict[str, MetaValue]] = {i: {} for i in ids}
    tags: dict[int, list[str]] = {i: [] for i in ids}
    user: dict[str, list[str]] = {}
    for start in range(0, len(ids) if details else 0, 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for m in db.read(f"SELECT record_id, key, type, text FROM metadata WHERE record_id IN ({marks})", chunk):
            meta[m["record_id"]][m["key"]] = decode_value(m["type"], m["text"])
        for t in db.read(f"SELECT record_id, tag FROM tags WHERE record_id IN ({marks}) ORDER BY tag", chunk):
            tags[t["record_id"]].append(t["tag"])
        for a in db.read(f"SELECT record_id, alias FROM aliases WHERE record_id IN ({marks})", chunk):
            user.setdefault(str(a["record_id"]), []).append(a["alias"])
    for row in rows if details else ():
        columns = {"slot": row["slot"], "created_at": row["created_at"]}
        if row["state"] in ("live", "revived", "evicted", "pinned"):
            columns.update(sha256=row["sha256"], size=row["size"], uri=row["uri"])
        meta[row["id"]].update({k: v for k, v in columns.items() if v is not None})
    streams = {(row["project"], row["run"], row["stream"]) for row in rows}
    derived = derived_aliases(_candidates(db, streams)) if details else {}
    return [
        Record(
            id=str(row["id"]),
            project=row["project"],
            run=row["run"],
            stream=row["stream"],
            filename=row["filename"],
            name=row["name"],
            state=_STATES[row["state"]],
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
            fingerprint=row["fingerprint"],
        )
        for row in rows
    ]


def _candidates(db: SQLiteConnection, streams_of_rows: set[tuple[str, str, str]]) -> list[Candidate]:
    """The loadable records of every ``(project, run, stream)``: one query per 300 streams."""
    streams = sorted(streams_of_rows)
    out: list[Candidate] = []
    for start in range(0, len(streams), 300):
        chunk = streams[start : start + 300]
        values = ",".join("(?, ?, ?)" for _ in chunk)
        rows = db.read(  # each stream looked up in the index records_stream, not a scan of every record
            f"WITH s (project, run, stream) AS (VALUES {values})"
            " SELECT r.id, r.output_uri, r.project, r.run, r.stream, r.created_at, m.num AS score"
            " FROM s CROSS JOIN records r ON r.project = s.project AND r.run = s.run AND r.stream = s.stream"
            " LEFT JOIN metadata m ON m.record_id = r.id AND m.key = 'score' AND m.type IN ('int', 'float')"
            f" WHERE r.state IN {LOADABLE_SQL}",
            [part for stream in chunk for part in stream],
        )
        out.extend(
            (
                str(row["id"]),
                StreamId(row["output_uri"] or "", row["project"], row["run"], row["stream"]),
                row["created_at"],
                row["score"],
            )
            for row in rows
        )
    return out
