"""Preemption: a real SIGTERM to a training subprocess, locally and on Ceph, with and without an outage.

``saver.attach(trainer, save_on_sigterm=checkpoint)`` (``tracker_saver.save.preemption``): the run
stops after the iteration in progress, the checkpoint handler saves once, the saver flushes,
stderr says what is durable, and the process exits with status 143 within the grace period.
During an outage it exits by the saver's ``timeout`` instead, saying what is not durable.

No test reads the clock. That the exit came within the grace is shown by how it came: the final
save and flush finished ("saved; durable"), or failed with the outage's own ``StorageError``,
never with the grace's ``FlushTimeoutError``. The waits below only guard against a hang.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
from typing import Any

import pytest
import torch

from tests import forkserver
from tests.helpers import process_env
from tracker_saver import RecordState, find_models
from tracker_saver.models import open_verified
from tracker_saver.save.preemption import EXIT_STATUS
from tracker_saver.storage import open_storage

GRACE = 20.0
T = 6.0
#: How long a test waits on the trainer before it calls it hung (no bound under test).
HUNG = 300.0


class Child:
    """``tests.preempt_trainer`` in a subprocess, read line by line."""

    def __init__(
        self, output_uri: str, registry: str, *, extra: dict[str, Any] | None = None, **saver_options: Any
    ) -> None:
        config = {"output_uri": output_uri, "registry": registry, "saver_options": saver_options,
                  "grace": GRACE, "every": 25, **(extra or {})}  # fmt: skip
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (read at exit, closed with the test)
        self.proc = forkserver.spawn(  # a new process, forked from the tests' fork server (torch imported once)
            "tests.preempt_trainer", [json.dumps(config)], env=process_env(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        self.iteration = 0
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def next(self) -> dict[str, Any]:
        """The trainer's next line; the test fails when it ended early or printed nothing for ``HUNG`` s."""
        try:
            line = self._lines.get(timeout=HUNG)
        except queue.Empty:
            self.proc.kill()
            pytest.fail(f"the trainer printed nothing for {HUNG:.0f} s: hung")
        if not line:
            pytest.fail(f"the trainer ended early: {self.proc.wait()} {self.stderr()[-3000:]}")
        event: dict[str, Any] = json.loads(line)
        self.iteration = event.get("iteration", self.iteration)
        return event

    def wait_for_iteration(self, n: int) -> None:
        while self.iteration < n:
            self.next()

    def wait_held(self) -> None:
        """Until the trainer stopped at its ``hold`` iteration, every save before it durable."""
        while "held" not in self.next():
            pass

    def go_on(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def terminate(self) -> tuple[int, str]:
        """SIGTERM; return (status, stderr) once it exited."""
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait_exit()

    def wait_exit(self) -> tuple[int, str]:
        """(status, stderr) once the trainer exited by itself (SIGKILL and fail when hung)."""
        try:
            self.proc.wait(timeout=HUNG)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {HUNG:.0f} s later: hung; stderr:\n{self.stderr()[-3000:]}")
        while (line := self._lines.get()) != "":
            self.iteration = json.loads(line).get("iteration", self.iteration)
        assert self.proc.returncode is not None
        return self.proc.returncode, self.stderr()

    def stderr(self) -> str:
        """What the trainer wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read()


def _seen(child: Child, debug_log: Any, ceph_s3: Any) -> str:
    """What a failure's message needs: the child's status, its debug log, the gateway's processes."""
    from tests.conftest_ceph import _refused, _rgw_pids

    log = debug_log.read_text()[-4000:] if debug_log.exists() else "(no debug log)"
    return (
        f"child status {child.proc.returncode}; radosgw pids {_rgw_pids()}, port refused: "
        f"{_refused(ceph_s3.endpoint_url)}\nchild's debug log:\n{log}"
    )


def _check_final_checkpoint(output_uri: str, registry: str, iteration: int) -> None:
    """The checkpoint of the iteration training stopped at is live, verified, and holds that state."""
    live = {r.name: r for r in find_models(project="p", run="r", registry=registry, live=True)}
    name = f"checkpoint_{iteration}.pt"
    assert name in live, f"{name} is not live: {sorted(live)}"
    with open_verified(live[name]) as f:
        state = torch.load(f, weights_only=True)
    assert state["trainer"]["iteration"] == iteration
    storage = open_storage(output_uri)
    assert len(storage.list("p/r/")) <= 2 and storage.staged("p/r") == []
    assert find_models(project="p", run="r", registry=registry, states=(RecordState.PENDING,)) == []


@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_sigterm_saves_once_flushes_and_exits_143_locally(tmp_path: Any, async_upload: bool) -> None:
    output_uri, registry = str(tmp_path / "ckpt"), str(tmp_path / "registry.db")
    child = Child(output_uri, registry, async_upload=async_upload)
    child.wait_for_iteration(40)  # one periodic save (iteration 25) is behind it
    status, err = child.terminate()
    assert status == EXIT_STATUS, err[-3000:]
    assert (
        f"SIGTERM: stopping after iteration {child.iteration}, saving once" in err
        and "SIGTERM: saved; durable: " in err
    ), err[-3000:]
    assert f"checkpoint_{child.iteration}.pt" in err.rsplit("durable: ", 1)[1]
    _check_final_checkpoint(output_uri, registry, child.iteration)
    assert "FlushTimeoutError" not in err, err[-3000:]  # the flush ended well within the grace


@pytest.mark.ceph
@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_sigterm_saves_once_flushes_and_exits_143_on_ceph(
    tmp_path: Any, s3_output_uri: str, async_upload: bool
) -> None:
    registry = str(tmp_path / "registry.db")
    child = Child(s3_output_uri, registry, async_upload=async_upload)
    child.wait_for_iteration(40)
    status, err = child.terminate()
    assert status == EXIT_STATUS, err[-3000:]
    assert "SIGTERM: saved; durable: " in err and "FlushTimeoutError" not in err, err[-3000:]
    _check_final_checkpoint(s3_output_uri, registry, child.iteration)


@pytest.mark.ceph
@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_sigterm_during_an_outage_exits_by_the_bound_saying_what_is_not_durable(
    tmp_path: Any, s3_output_uri: str, ceph_s3: Any, async_upload: bool
) -> None:
    """radosgw stopped by its pid, then SIGTERM: the final save gives up by the saver's ``timeout``
    (6 s, the outage's own error), not by the 20 s grace, and stderr names what is not durable and
    what still is."""
    registry = str(tmp_path / "registry.db")
    # The gateway is ours before the child starts: taking it may wait for other processes' tests.
    with ceph_s3.gateway_stopped():
        child = Child(s3_output_uri, registry, extra={"hold": {"iteration": 30}}, async_upload=async_upload, timeout=T)
        child.wait_held()  # checkpoint_25.pt is durable; the child waits for a line
        ceph_s3.kill_rgw()
        child.go_on()
        status, err = child.terminate()
    assert "NOT durable" in err and "StorageError" in err and "FlushTimeoutError" not in err, err[-3000:]
    assert "durable: checkpoint_25.pt" in err, err[-3000:]
    assert status in (EXIT_STATUS, 1), err[-3000:]  # 1: a periodic save raised first (its traceback follows)
    live = [r.name for r in find_models(project="p", run="r", registry=registry, live=True)]
    assert "checkpoint_25.pt" in live  # the last good checkpoint survived the outage
    storage = open_storage(s3_output_uri)
    for record in find_models(project="p", run="r", registry=registry, live=True):
        assert storage.digest(record.key) == (record.size, record.sha256)


@pytest.mark.ceph
def test_exit_without_close_during_an_outage_ends_by_the_bound_saying_what_is_not_durable(
    tmp_path: Any, s3_output_uri: str, ceph_s3: Any
) -> None:
    """No attach, no close: the ``atexit`` flush meets the outage, gives up by the saver's
    ``timeout`` (the outage's error, not the at-exit flush's own 300 s limit) and logs which saves
    are not durable; the interpreter exits."""
    registry = str(tmp_path / "registry.db")
    debug_log = tmp_path / "debug.log"
    with ceph_s3.gateway_stopped():  # ours before the child starts (taking it may wait)
        hold = {"iteration": 30}  # the save at 50 must meet the outage, not race it
        extra = {"attach": False, "iterations": 60, "hold": hold, "debug_log": str(debug_log)}
        child = Child(s3_output_uri, registry, extra=extra, async_upload=True, timeout=T)
        child.wait_held()  # checkpoint_25.pt is durable
        ceph_s3.kill_rgw()
        child.go_on()
        _, err = child.wait_exit()  # the save at 50 was queued behind the outage
        seen = _seen(child, debug_log, ceph_s3)
    assert "tracker_saver at exit: NOT durable" in err and "checkpoint_50.pt" in err, f"{err[-3000:]}\n{seen}"
    assert "cannot reach" in err and "FlushTimeoutError" not in err, f"{err[-3000:]}\n{seen}"
    live = [r.name for r in find_models(project="p", run="r", registry=registry, live=True)]
    assert live == ["checkpoint_25.pt"]
