"""Numbered schema migrations of the SQLite registry, each applied once and recorded."""

from __future__ import annotations

import sqlite3
import time

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.wording import plural

__all__ = ["MIGRATIONS", "migrate", "statements", "stored_version"]

#: (version, SQL). Append only: never edit a migration that has shipped.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE records (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            project     TEXT NOT NULL,
            run         TEXT NOT NULL,
            stream      TEXT NOT NULL,
            filename    TEXT NOT NULL,
            name        TEXT NOT NULL,
            state       TEXT NOT NULL CHECK (state IN ('pending', 'live', 'evicted', 'revived', 'failed')),
            slot        INTEGER,
            key         TEXT,
            uri         TEXT,
            sha256      TEXT,
            size        INTEGER,
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL,
            error       TEXT
        );
        CREATE INDEX records_stream ON records (project, run, stream, state);
        CREATE INDEX records_filename ON records (project, run, filename);
        CREATE TABLE metadata (
            record_id  INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
            key        TEXT NOT NULL,
            type       TEXT NOT NULL CHECK (type IN ('int', 'float', 'str', 'bool', 'none')),
            num        REAL,
            text       TEXT,
            PRIMARY KEY (record_id, key)
        );
        CREATE INDEX metadata_num ON metadata (key, num);
        CREATE INDEX metadata_text ON metadata (key, text);
        CREATE TABLE tags (
            record_id  INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
            tag        TEXT NOT NULL,
            PRIMARY KEY (record_id, tag)
        );
        CREATE INDEX tags_tag ON tags (tag);
        """,
    ),
    (
        2,
        """
        ALTER TABLE records ADD COLUMN output_uri TEXT;
        UPDATE records SET output_uri = substr(uri, 1, length(uri) - length(key) - 1)
            WHERE uri IS NOT NULL AND key IS NOT NULL;
        CREATE INDEX records_output_uri ON records (output_uri, project, run, stream, state);
        CREATE TABLE claims (
            output_uri  TEXT NOT NULL,
            project     TEXT NOT NULL,
            run         TEXT NOT NULL,
            stream      TEXT NOT NULL,
            token       TEXT NOT NULL,
            host        TEXT NOT NULL,
            pid         INTEGER NOT NULL,
            started     INTEGER NOT NULL,
            since       REAL NOT NULL,
            command     TEXT NOT NULL,
            heartbeat   REAL NOT NULL,
            PRIMARY KEY (output_uri, project, run, stream)
        );
        """,
    ),
    (
        3,
        """
        UPDATE metadata SET key = 'ignite_name' WHERE key = 'name';
        """,
    ),
    (
        4,
        """
        DELETE FROM metadata WHERE key IN ('slot', 'created_at', 'sha256', 'size', 'uri');
        """,
    ),
    (
        5,
        # 'pinned' joins the state CHECK, which SQLite cannot alter: rebuild the table (SQLite's
        # 12-step procedure; migrate() runs with foreign keys off, so metadata and tags that
        # reference records survive the DROP and point at the same ids afterwards).
        """
        CREATE TABLE records_new (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            project     TEXT NOT NULL,
            run         TEXT NOT NULL,
            stream      TEXT NOT NULL,
            filename    TEXT NOT NULL,
            name        TEXT NOT NULL,
            state       TEXT NOT NULL
                        CHECK (state IN ('pending', 'live', 'evicted', 'revived', 'failed', 'pinned')),
            slot        INTEGER,
            key         TEXT,
            uri         TEXT,
            sha256      TEXT,
            size        INTEGER,
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL,
            error       TEXT,
            output_uri  TEXT
        );
        INSERT INTO records_new (id, project, run, stream, filename, name, state, slot, key, uri, sha256, size,
                                 created_at, updated_at, error, output_uri)
            SELECT id, project, run, stream, filename, name, state, slot, key, uri, sha256, size,
                   created_at, updated_at, error, output_uri FROM records;
        DROP TABLE records;
        ALTER TABLE records_new RENAME TO records;
        CREATE INDEX records_stream ON records (project, run, stream, state);
        CREATE INDEX records_filename ON records (project, run, filename);
        CREATE INDEX records_output_uri ON records (output_uri, project, run, stream, state);
        CREATE INDEX records_created ON records (created_at, id);
        CREATE TABLE aliases (
            project    TEXT NOT NULL,
            alias      TEXT NOT NULL,
            record_id  INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
            created_at REAL NOT NULL,
            PRIMARY KEY (project, alias)
        );
        CREATE INDEX aliases_record ON aliases (record_id);
        """,
    ),
    (
        6,
        # Who this registry is, for the owner objects at output_uri: a random id made here, never
        # its path (two machines' default registries share one). And what the store said
        # identifies each committed object (ETag; size:mtime_ns:inode), for a cheap fsck.
        """
        CREATE TABLE registry_meta (
            key    TEXT PRIMARY KEY,
            value  TEXT NOT NULL
        );
        INSERT INTO registry_meta VALUES ('id', lower(hex(randomblob(16))));
        ALTER TABLE records ADD COLUMN fingerprint TEXT;
        """,
    ),
    (
        7,
        # A sort on a metadata key walks this index in order and stops at the page's end, rather
        # than sorting every record (100,000 records: 141 ms a page before). Its terms are the
        # ORDER BY's of sqlite_query: the key, numbers before the rest, then the value. And a run
        # named without its project (`models list --run R`) is found without reading every record.
        """
        CREATE INDEX metadata_order ON metadata (key, (CASE WHEN type IN ('int', 'float') THEN 0 ELSE 1 END), num, text);
        CREATE INDEX records_run ON records (run, stream, state);
        """,
    ),
    (
        8,
        # Events (issue 46): every alias move, pin, unpin, rename and record becoming live, written in
        # the transaction of the change; each webhook's outbox, as a cursor (the events after the last
        # one it took, in order; known by a hash of its URL: the file holds no URL, which may carry a
        # token, and no secret); and when a record was renamed, so a prune keeps renames and
        # not names a pre-upload callback gave (records renamed before this migration: their name
        # differs from their filename, and they are kept as renamed). Only new tables and a column:
        # it applies after any migration 7.
        """
        CREATE TABLE IF NOT EXISTS events (
            seq        INTEGER PRIMARY KEY AUTOINCREMENT,
            id         TEXT NOT NULL UNIQUE,
            time       REAL NOT NULL,
            type       TEXT NOT NULL,
            project    TEXT NOT NULL,
            record_id  INTEGER,
            alias      TEXT,
            before     TEXT,
            after      TEXT
        );
        CREATE INDEX IF NOT EXISTS events_project ON events (project, seq);
        CREATE INDEX IF NOT EXISTS events_record ON events (record_id);
        CREATE TABLE IF NOT EXISTS webhooks (
            endpoint    TEXT PRIMARY KEY,
            shown       TEXT NOT NULL,
            delivered   INTEGER NOT NULL,
            attempts    INTEGER NOT NULL DEFAULT 0,
            due         REAL NOT NULL DEFAULT 0,
            error       TEXT,
            created_at  REAL NOT NULL
        );
        ALTER TABLE records ADD COLUMN renamed_at REAL;
        UPDATE records SET renamed_at = updated_at WHERE name != filename;
        """,
    ),
    (
        9,
        # A webhook's dead letters (issue 51): an event its receiver refused leaves the outbox's
        # cursor for this table, so the events behind it flow; kept until it is sent again (a
        # prune keeps its event too). Only a new table: it applies after any migration 8.
        """
        CREATE TABLE IF NOT EXISTS webhook_dead (
            endpoint  TEXT NOT NULL,
            seq       INTEGER NOT NULL,
            error     TEXT NOT NULL,
            attempts  INTEGER NOT NULL,
            dead_at   REAL NOT NULL,
            PRIMARY KEY (endpoint, seq)
        );
        """,
    ),
)


def statements(script: str) -> list[str]:
    """Split a migration into complete SQL statements (a ``;`` inside a string stays in it).

    Examples:
        >>> statements("INSERT INTO t VALUES ('a;b'); DELETE FROM t;")
        ["INSERT INTO t VALUES ('a;b');", 'DELETE FROM t;']
    """
    out: list[str] = []
    current = ""
    for part in script.split(";"):
        current += part + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n;"):
                out.append(current.strip())
            current = ""
    return out


def stored_version(conn: sqlite3.Connection, where: str = "") -> int:
    """The schema version the database records (0 for a new one); reads only, creates nothing.

    Raises:
        ConfigError: the version is newer than this tracker_saver knows (``where`` names the file).
    """
    table = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    if table.fetchone() is None:
        return 0
    current = int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])
    newest = MIGRATIONS[-1][0]
    if current > newest:
        raise ConfigError(
            f"registry {where or 'file'}: schema version {current} is newer than this tracker_saver knows "
            f"({newest}): upgrade tracker-saver (git pull in its clone, then pip install -e . there), or use another registry file"
        )
    return current


def migrate(conn: sqlite3.Connection, where: str = "") -> int:
    """Apply every migration newer than the database's version; return the version reached.

    Call it with foreign keys off (``PRAGMA foreign_keys`` cannot change inside a transaction):
    a migration that rebuilds a table drops the old one, which would cascade to the rows that
    reference it. ``PRAGMA foreign_key_check`` runs before each commit instead.
    """
    stored_version(conn, where)  # a newer schema is refused before anything is written
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    current = stored_version(conn, where)
    for version, sql in MIGRATIONS:
        if version <= current:
            continue
        # BEGIN IMMEDIATE takes the write lock first, so two processes opening a new
        # database at once cannot both apply the same migration.
        conn.execute("BEGIN IMMEDIATE")
        try:
            again = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
            if version > again:
                for statement in statements(sql):
                    conn.execute(statement)
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise ConfigError(
                        f"registry {where or 'file'}: migration {version} would leave {plural(len(broken), 'row')} that "
                        f"reference missing rows (e.g. {tuple(broken[0])}): nothing was changed; "
                        "run `tracker-saver fsck` on a copy, or report this registry file"
                    )
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = version
    return current
