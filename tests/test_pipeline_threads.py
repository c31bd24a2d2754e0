"""``Pipeline.open`` from two threads at once (``TrackerSaver.adopt`` on the caller's thread while
the async worker saves): a stream is claimed, settled and loaded once, and nothing raises."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tracker_saver import TrackerSaver
from tracker_saver.core.records import RecordState, UploadInfo
from tracker_saver.registry import Query
from tracker_saver.registry.sqlite import SQLiteRegistry


class SlowRecovery(SQLiteRegistry):
    """A real SQLite registry whose query for pending records takes 0.2 s: both threads are
    inside start-of-stream recovery at once unless ``open`` keeps them apart."""

    def query(self, query: Query) -> list[Any]:
        found = super().query(query)
        if query.states == (RecordState.PENDING,):
            time.sleep(0.2)
        return found


def test_two_threads_opening_a_stream_settle_a_dead_writers_record_once(tmp_path: Path) -> None:
    output = tmp_path / "ckpts"
    registry = SlowRecovery(tmp_path / "registry.db")
    key = "p/r/checkpoint.slot0.pt"
    info = UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", slot=0, key=key, output_uri=output.resolve().as_uri())
    saver = TrackerSaver(str(output), project="p", run="r", registry=registry, async_upload=True)
    # After start-up recovery: a save whose last step failed left its record pending (the
    # stream's next open settles it).
    dead = registry.create_pending(info, uri=f"{output.resolve().as_uri()}/{key}")
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def adopt() -> None:
        start.wait()
        try:
            saver.adopt("checkpoint", [])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=adopt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [], errors  # without the lock: RegistryError, the record is no longer pending
    assert registry.get(dead.id).state is RecordState.FAILED
    saver.close()
