"""shared_registry under threads: one registry per location, opened once; never closed under a holder."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

from tracker_saver.registry import Query, Registry
from tracker_saver.registry.shared import MAX_OPEN, shared_registry

THREADS = 8


def _race(path: str) -> list[Registry]:
    """What THREADS threads, released at once, get from ``shared_registry(path)``."""
    start = threading.Barrier(THREADS)
    got: list[Registry] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            start.wait()
            got.append(shared_registry(path))
        except BaseException as exc:  # noqa: BLE001 (reported below, with the thread's error)
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(got) == THREADS
    return got


def test_threads_racing_for_one_location_get_one_registry(tmp_path: Path) -> None:
    for attempt in range(5):  # the race is a window: several rounds on fresh files widen it
        got = _race(str(tmp_path / f"race{attempt}.db"))
        assert len({id(r) for r in got}) == 1, f"round {attempt}: {len({id(r) for r in got})} registries, not 1"
        assert got[0].records.query(Query()) == []


def test_a_registry_a_caller_holds_stays_open_past_the_lru(tmp_path: Path) -> None:
    held = shared_registry(str(tmp_path / "held.db"))
    others = [shared_registry(str(tmp_path / f"other{i}.db")) for i in range(MAX_OPEN + 2)]
    assert held.records.query(Query()) == []  # the old LRU closed it here: "Cannot operate on a closed database"
    assert shared_registry(str(tmp_path / "held.db")) is held  # handed out again, not a second connection
    assert all(r.records.query(Query()) == [] for r in others)


def test_a_registry_nobody_holds_is_let_go(tmp_path: Path) -> None:
    gone = weakref.ref(shared_registry(str(tmp_path / "dropped.db")))
    for i in range(MAX_OPEN + 1):
        shared_registry(str(tmp_path / f"newer{i}.db"))
    gc.collect()
    assert gone() is None, "the cache still holds a registry that left its MAX_OPEN most recent"
