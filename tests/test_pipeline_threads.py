"""``Pipeline.open`` from two threads at once (``TrackerSaver.adopt`` on the caller's thread while
the async worker saves): a stream is claimed, settled and loaded once, and nothing raises."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.waiting import when_reaching
from tracker_saver import TrackerSaver
from tracker_saver.core.records import RecordState, UploadInfo
from tracker_saver.registry import Query
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.save.pipeline import Pipeline


class HeldRecovery(SQLiteRegistry):
    """A real SQLite registry whose query for pending records inside ``Pipeline.open`` (once a
    thread reached it: ``opening``) waits until the other thread is about to take open's lock
    (``other_opens``): both threads are inside recovery at once unless ``open`` keeps them apart."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.opening, self.other_opens = threading.Event(), threading.Event()
        read = self.records.query

        def query(query: Query) -> list[Any]:
            found = read(query)
            if query.states == (RecordState.PENDING,) and self.opening.is_set():
                self.other_opens.wait()
            return found

        self.records.query = query  # type: ignore[method-assign]


def test_two_threads_opening_a_stream_settle_a_dead_writers_record_once(tmp_path: Path) -> None:
    output = tmp_path / "ckpts"
    registry = HeldRecovery(tmp_path / "registry.db")
    key = "p/r/checkpoint.slot0.pt"
    info = UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0, key=key, output_uri=output.resolve().as_uri())
    saver = TrackerSaver(str(output), project="p", run="r", registry=registry, async_upload=True)
    # After start-up recovery: a save whose last step failed left its record pending (the
    # stream's next open settles it).
    dead = registry.records.create_pending(info, uri=f"{output.resolve().as_uri()}/{key}")
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def adopt() -> None:
        start.wait()
        try:
            saver.adopt("checkpoint", [])
        except BaseException as exc:
            errors.append(exc)

    inside: list[int] = []

    def reaching_open() -> None:  # in each thread, right before it takes open's lock
        inside.append(threading.get_ident())
        (registry.opening if len(inside) == 1 else registry.other_opens).set()

    with when_reaching(Pipeline.open, "with self._lock:", reaching_open):
        threads = [threading.Thread(target=adopt) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [], errors  # without the lock: RegistryError, the record is no longer pending
    assert registry.records.get(dead.id).state is RecordState.FAILED
    saver.close()
