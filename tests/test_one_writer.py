"""One writer per stream, on SQLite: a recorded holder whose pid was recycled holds nothing."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from ignite.engine import Engine

from tests.helpers import Worker, model, train
from tracker_saver import StreamBusyError


def test_a_holder_whose_pid_now_names_another_process_holds_nothing(local_target) -> None:
    worker = Worker(local_target)
    worker.epoch(0.5)
    worker.proc.kill()
    worker.proc.wait()
    # The kernel gives the dead writer's pid to an unrelated process: same pid, other start time.
    recycled = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with sqlite3.connect(local_target.registry) as conn:
            conn.execute("UPDATE claims SET pid = ?", (recycled.pid,))
        train(local_target.saver(), {"model": model(), "trainer": Engine(lambda e, b: None)})
    finally:
        recycled.kill()
        recycled.wait()
    assert local_target.counts() == {"best_checkpoint": 1, "checkpoint": 1}


def test_a_live_holder_in_another_process_is_named_in_the_error(local_target) -> None:
    with Worker(local_target) as worker:
        worker.epoch(0.5)
        with pytest.raises(
            StreamBusyError, match=rf"pid {worker.proc.pid} on .*'worker\.py'.*another run or filename_prefix"
        ) as caught:
            train(local_target.saver(), {"model": model(), "trainer": Engine(lambda e, b: None)})
        assert str(worker.proc.pid) in caught.value.holder
