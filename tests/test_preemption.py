"""Preemption: a real SIGTERM to a training subprocess, locally and on Ceph, with and without an outage.

``saver.attach(trainer, save_on_sigterm=checkpoint)`` (``tracker_saver.save.preemption``): the run
stops after the iteration in progress, the checkpoint handler saves once, the saver flushes,
stderr says what is durable, and the process exits with status 143 within the grace period.
During an outage it exits within the saver's ``timeout`` instead, saying what is not durable.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

from tests.helpers import ROOT, process_env
from tracker_saver import RecordState, find_models
from tracker_saver.models import open_verified
from tracker_saver.save.preemption import EXIT_STATUS
from tracker_saver.storage import open_storage

GRACE = 20.0
#: Interpreter start-up and exit on a loaded 2-core machine, on top of the bounds under test.
MARGIN = 5.0
T = 6.0


class Child:
    """``tests.preempt_trainer`` in a subprocess, read line by line."""

    def __init__(
        self, output_uri: str, registry: str, *, extra: dict[str, Any] | None = None, **saver_options: Any
    ) -> None:
        config = {"output_uri": output_uri, "registry": registry, "saver_options": saver_options,
                  "grace": GRACE, "every": 25, **(extra or {})}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.preempt_trainer", json.dumps(config)],
            cwd=ROOT,
            env=process_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.iteration = 0

    def wait_for_iteration(self, n: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while self.iteration < n:
            line = self.proc.stdout.readline()
            if not line:
                pytest.fail(f"the trainer ended early: {self.proc.wait()} {self.proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
            self.iteration = json.loads(line)["iteration"]
            assert time.monotonic() < deadline, "the trainer is too slow"

    def terminate(self, limit: float) -> tuple[int, float, str]:
        """SIGTERM; return (status, seconds until it exited, stderr); SIGKILL after ``limit`` s."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"still running {limit:.0f} s after SIGTERM; stderr:\n{err[-3000:]}")
        for line in out.splitlines():
            self.iteration = json.loads(line)["iteration"]
        return self.proc.returncode, time.monotonic() - started, err


def _wait_live(registry: str, name: str, timeout: float = 60.0) -> None:
    """Until the record ``name`` is live (an async save's upload may still be running)."""
    deadline = time.monotonic() + timeout
    while name not in {r.name for r in find_models(project="p", run="r", registry=registry, live=True)}:
        assert time.monotonic() < deadline, f"{name} never became live"
        time.sleep(0.05)


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
    status, seconds, err = child.terminate(GRACE + MARGIN)
    assert status == EXIT_STATUS, err[-3000:]
    assert (
        f"SIGTERM: stopping after iteration {child.iteration}, saving once" in err
        and "SIGTERM: saved; durable: " in err
    ), err[-3000:]
    assert f"checkpoint_{child.iteration}.pt" in err.rsplit("durable: ", 1)[1]
    _check_final_checkpoint(output_uri, registry, child.iteration)
    assert seconds <= GRACE + MARGIN


@pytest.mark.ceph
@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_sigterm_saves_once_flushes_and_exits_143_on_ceph(
    tmp_path: Any, s3_output_uri: str, async_upload: bool
) -> None:
    registry = str(tmp_path / "registry.db")
    child = Child(s3_output_uri, registry, async_upload=async_upload)
    child.wait_for_iteration(40)
    status, seconds, err = child.terminate(GRACE + MARGIN)
    assert status == EXIT_STATUS, err[-3000:]
    assert "SIGTERM: saved; durable: " in err, err[-3000:]
    _check_final_checkpoint(s3_output_uri, registry, child.iteration)
    assert seconds <= GRACE + MARGIN


@pytest.mark.ceph
@pytest.mark.parametrize("async_upload", [False, True], ids=["sync", "async"])
def test_sigterm_during_an_outage_exits_within_the_bound_saying_what_is_not_durable(
    tmp_path: Any, s3_output_uri: str, ceph_s3: Any, async_upload: bool
) -> None:
    """radosgw stopped by its pid, then SIGTERM: the exit comes within ``timeout`` (6 s), well
    before the 20 s grace, and stderr names what is not durable and what still is."""
    registry = str(tmp_path / "registry.db")
    go_on = tmp_path / "go-on"
    # The gateway is ours before the child starts: taking it may wait for other processes' tests.
    with ceph_s3.gateway_stopped():
        child = Child(s3_output_uri, registry, extra={"hold": {"iteration": 30, "until": str(go_on)}},
                      async_upload=async_upload, timeout=T)  # fmt: skip
        child.wait_for_iteration(30)  # the child waits for go_on
        _wait_live(registry, "checkpoint_25.pt")
        ceph_s3.kill_rgw()
        go_on.touch()
        status, seconds, err = child.terminate(GRACE + MARGIN)
    assert seconds <= T + MARGIN, f"exit took {seconds:.1f} s after SIGTERM (bound {T} s)\n{err[-3000:]}"
    assert "NOT durable" in err and "StorageError" in err, err[-3000:]
    assert "durable: checkpoint_25.pt" in err, err[-3000:]
    assert status in (EXIT_STATUS, 1), err[-3000:]  # 1: a periodic save raised first (its traceback follows)
    live = [r.name for r in find_models(project="p", run="r", registry=registry, live=True)]
    assert "checkpoint_25.pt" in live  # the last good checkpoint survived the outage
    storage = open_storage(s3_output_uri)
    for record in find_models(project="p", run="r", registry=registry, live=True):
        assert storage.digest(record.key) == (record.size, record.sha256)


@pytest.mark.ceph
def test_exit_without_close_during_an_outage_ends_within_the_bound_saying_what_is_not_durable(
    tmp_path: Any, s3_output_uri: str, ceph_s3: Any
) -> None:
    """No attach, no close: the ``atexit`` flush meets the outage, gives up within ``timeout``
    and logs which saves are not durable; the interpreter exits."""
    registry = str(tmp_path / "registry.db")
    go_on, debug_log = tmp_path / "go-on", tmp_path / "debug.log"
    with ceph_s3.gateway_stopped():  # ours before the child starts (taking it may wait)
        hold = {"iteration": 30, "until": str(go_on)}  # the save at 50 must meet the outage, not race it
        extra = {"attach": False, "iterations": 60, "hold": hold, "debug_log": str(debug_log)}
        child = Child(s3_output_uri, registry, extra=extra,
                      async_upload=True, timeout=T)  # fmt: skip
        child.wait_for_iteration(30)
        _wait_live(registry, "checkpoint_25.pt")
        ceph_s3.kill_rgw()
        go_on.touch()
        child.wait_for_iteration(60)  # the save at 50 is queued behind the outage
        ended = time.monotonic()
        try:
            _, err = child.proc.communicate(timeout=T + MARGIN + 10)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            pytest.fail(f"the process did not exit: {child.proc.communicate()[1][-3000:]}")
        seconds = time.monotonic() - ended
        seen = _seen(child, debug_log, ceph_s3)
    assert seconds <= T + MARGIN, (
        f"exit took {seconds:.1f} s after the last iteration (bound {T} s)\n{err[-3000:]}\n{seen}"
    )
    assert "tracker_saver at exit: NOT durable" in err and "checkpoint_50.pt" in err, f"{err[-3000:]}\n{seen}"
    live = [r.name for r in find_models(project="p", run="r", registry=registry, live=True)]
    assert live == ["checkpoint_25.pt"]
