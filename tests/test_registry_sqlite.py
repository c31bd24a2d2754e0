"""The SQLite registry: the contract, plus WAL, migrations, paths and two writers at once."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import subprocess
import sys

import pytest

from tests.contracts.claims import StreamClaimsContract
from tests.contracts.labels import LabelsContract
from tests.contracts.records import RecordStoreContract, live
from tracker_saver.core.errors import ConfigError
from tracker_saver.core.query import parse_order, parse_where
from tracker_saver.registry import DEFAULT_REGISTRY, Query, open_registry
from tracker_saver.registry.migrations import MIGRATIONS
from tracker_saver.registry.sqlite import SQLiteRegistry


class TestSQLiteRegistry(RecordStoreContract, LabelsContract, StreamClaimsContract):
    @pytest.fixture
    def registry(self, tmp_path):
        reg = SQLiteRegistry(tmp_path / "registry.db")
        yield reg
        reg.close()


def test_database_uses_wal_and_records_its_schema_version(tmp_path) -> None:
    SQLiteRegistry(tmp_path / "r.db").close()
    conn = sqlite3.connect(tmp_path / "r.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == MIGRATIONS[-1][0]
    indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"metadata_num", "metadata_text"} <= indexes


def test_reopening_does_not_migrate_again(tmp_path) -> None:
    live(SQLiteRegistry(tmp_path / "r.db"), "a_1.pt")
    again = SQLiteRegistry(tmp_path / "r.db")
    assert len(again.records.query(Query(project="p"))) == 1
    rows = sqlite3.connect(tmp_path / "r.db").execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0]
    assert rows == len(MIGRATIONS)


def test_a_folder_as_registry_path_is_a_config_error_with_the_fix(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"is a folder: pass a file path such as .*registry.db"):
        SQLiteRegistry(tmp_path)


def test_default_location_and_environment_override(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRACKER_SAVER_REGISTRY", raising=False)
    assert open_registry().uri == f"sqlite:///{tmp_path}/.tracker_saver/registry.db"
    assert DEFAULT_REGISTRY == "~/.tracker_saver/registry.db"
    monkeypatch.setenv("TRACKER_SAVER_REGISTRY", str(tmp_path / "env.db"))
    assert open_registry().uri == f"sqlite:///{tmp_path}/env.db"
    assert open_registry(tmp_path / "arg.db").uri == f"sqlite:///{tmp_path}/arg.db"
    assert open_registry(f"sqlite:///{tmp_path}/url.db").uri == f"sqlite:///{tmp_path}/url.db"


def test_an_unknown_registry_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match="'sqlite', a file path"):
        open_registry("postgres://db/x")


WRITER = """
import sys
from tests.contracts.records import live
from tracker_saver.registry.sqlite import SQLiteRegistry
reg = SQLiteRegistry(sys.argv[1])
for i in range(40):
    live(reg, f"{sys.argv[2]}_{i}.pt", stream=sys.argv[2], slot=i)
"""


def test_two_processes_can_write_at_once(tmp_path) -> None:
    db = str(tmp_path / "shared.db")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db, name]) for name in ("alpha", "beta")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    records = SQLiteRegistry(db).records.query(Query(project="p"))
    assert len(records) == 80
    assert {r.stream for r in records} == {"alpha", "beta"}


def test_slot_size_sha256_uri_and_created_at_are_stored_once_and_still_queried_as_metadata(tmp_path) -> None:
    from tests.contracts.records import SHA, pending

    registry = SQLiteRegistry(tmp_path / "r.db")
    first = live(registry, "a_1.pt", slot=0)
    second = live(registry, "a_2.pt", slot=1)
    staged = pending(registry, "a_3.pt", slot=2)
    registry.records.supersede(staged.id, sha256=SHA, size=99, replaces=None)
    with sqlite3.connect(registry.path) as conn:
        keys = {k for (k,) in conn.execute("SELECT DISTINCT key FROM metadata")}
    assert not keys & {"slot", "size", "sha256", "uri", "created_at"}
    got = registry.records.get(second.id).metadata
    assert (got["slot"], got["size"], got["sha256"]) == (1, 10, SHA) and type(got["slot"]) is int
    assert "sha256" not in registry.records.get(staged.id).metadata  # staged, not committed
    assert [r.id for r in registry.records.query(Query(where=parse_where("slot==1")))] == [second.id]
    assert [r.id for r in registry.records.query(Query(where=parse_where(["size>5", "slot in 0,2"])))] == [first.id]
    assert [r.id for r in registry.records.query(Query(where=parse_where(f"sha256=={SHA}")))] == [first.id, second.id]
    assert [r.id for r in registry.records.query(Query(order_by=parse_order("-slot")))] == [
        staged.id,
        second.id,
        first.id,
    ]


def test_a_registry_from_a_newer_version_is_refused_with_the_fix(tmp_path) -> None:
    path = tmp_path / "r.db"
    SQLiteRegistry(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (999, 0)")
    with pytest.raises(ConfigError, match="schema version 999 is newer .* upgrade tracker-saver"):
        SQLiteRegistry(path)


def test_migrating_a_version_4_registry_keeps_records_metadata_and_tags_and_admits_pinned(tmp_path) -> None:
    from tracker_saver.core.records import RecordState, UploadInfo
    from tracker_saver.registry.migrations import statements

    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")  # as tracker_saver up to version 4 ran
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    for version, sql in MIGRATIONS[:4]:
        for statement in statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (version,))
    conn.execute(
        "INSERT INTO records (id, project, run, stream, filename, name, state, slot, key, uri, sha256, size,"
        " created_at, updated_at, output_uri) VALUES (7, 'p', 'r', 'best_model', 'best_model_1.pt', 'renamed',"
        " 'live', 0, 'p/r/best_model.slot0.pt', 'file:///o/p/r/best_model.slot0.pt', ?, 10, 1, 1, 'file:///o')",
        ("ab" * 32,),
    )
    conn.execute("INSERT INTO metadata VALUES (7, 'score', 'float', 0.5, '0.5')")
    conn.execute("INSERT INTO tags VALUES (7, 'keep')")
    conn.commit()
    conn.close()
    reg = SQLiteRegistry(path)
    (record,) = reg.records.query(Query(project="p"))
    assert (record.id, record.name, record.state, record.metadata["score"], record.tags) == (
        "7", "renamed", RecordState.LIVE, 0.5, ("keep",)
    )  # fmt: skip
    assert record.aliases == ("best", "latest")
    info = UploadInfo("p", "r", "best_model", "best_model_1.pt", slot=None, key="p/r/pinned/best_model_1.pt")
    pinned = reg.labels.create_pinned(info, uri="file:///o/p/r/pinned/best_model_1.pt", sha256="ab" * 32, size=10)
    assert reg.records.get(pinned.id).state is RecordState.PINNED
    reg.labels.set_alias(record.id, "production")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0  # a new connection: only ours turns them on
    indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"records_stream", "records_filename", "records_output_uri", "aliases_record"} <= indexes
    conn.close()
    assert reg._db._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    reg.labels.delete_pinned(pinned.id)
    with reg.atomic() as c:  # deleting a record takes its metadata, tags and aliases with it
        c.execute("DELETE FROM records WHERE id = 7")
    counts = [reg._db._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("metadata", "tags", "aliases")]
    assert counts == [0, 0, 0]
    reg.close()


@pytest.mark.parametrize("few", [0, 1000], ids=["walking-the-sort", "from-the-fewest-rows"])
def test_every_page_of_a_sort_on_a_metadata_key_is_the_reference_page_across_holders_and_lackers(
    tmp_path, monkeypatch, few
) -> None:
    from tracker_saver.registry.base import select

    # 0: no condition or run is rare enough to start from; 1000: the where-condition and the run are
    monkeypatch.setattr("tracker_saver.registry.sqlite_read.FEW", few)
    registry = SQLiteRegistry(tmp_path / "r.db")
    values = [3, None, "b", 0.5, True, "a", 3, None, 2.5, False]
    for i, value in enumerate(values):
        live(registry, f"a_{i}.pt", slot=i, **({} if i % 4 == 1 else {"v": value}), step=i % 3)
    records = registry.records.query(Query())
    for order, run in itertools.product(("v", "-v", "-v,step", "step,-v"), (None, "r")):
        query = Query(order_by=parse_order(order.split(",")), where=parse_where("step<2"), run=run)
        everything = select(records, query)
        assert len(registry.records.query(query)) == len(everything) == registry.records.count(query) == 7
        for offset, limit in itertools.product(range(len(everything) + 2), (None, 1, 3)):
            page = registry.records.query(dataclasses.replace(query, offset=offset, limit=limit))
            end = None if limit is None else offset + limit
            assert [r.id for r in page] == [r.id for r in everything[offset:end]], (order, run, offset, limit)


def test_a_page_sorted_by_a_metadata_key_walks_its_index_or_starts_from_a_rare_conditions_rows(tmp_path) -> None:
    from tracker_saver.registry.sqlite_query import page_sql, select_sql

    registry = SQLiteRegistry(tmp_path / "r.db")
    query = Query(order_by=parse_order("-val_acc"), where=parse_where("optimizer=sgd"))

    def plan(driver=None) -> str:
        sql, args = page_sql(*select_sql(query, driver)[0], 50, 0)
        with sqlite3.connect(registry.path) as conn:
            return " / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))

    assert plan().startswith("SEARCH o0 USING INDEX metadata_order (key=?)") and "RIGHT PART OF ORDER BY" in plan()
    assert plan(query.where[0]).startswith("SEARCH d USING INDEX metadata_text (key=? AND text=?)")


def test_a_flat_registry_call_of_0_1_0_still_answers_and_warns_which_part_to_name(tmp_path) -> None:
    registry = SQLiteRegistry(tmp_path / "r.db")
    record = live(registry, "a_1.pt")
    with pytest.warns(DeprecationWarning, match=r"Registry.get\(\) is deprecated: use registry.records.get\(\)"):
        assert registry.get(record.id) == registry.records.get(record.id)
    with pytest.warns(DeprecationWarning, match=r"use registry.labels.rename\(\); it goes in 0.3.0"):
        assert registry.rename(record.id, "first").name == "first"
    with pytest.raises(AttributeError, match="has no attribute 'gte'"):
        registry.gte(record.id)
