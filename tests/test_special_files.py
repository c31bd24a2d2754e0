"""Only regular files at output_uri: a FIFO, symlink, device or folder at a slot path is refused
at once, never waited on nor followed; a UI download frees its place when its client goes, and
SIGTERM stops the UI server with a download in flight.

Everything runs the real thing: Ignite's ``Checkpoint`` through a saver, a real folder and SQLite
registry, the CLI's ``main``, the UI under uvicorn. A call that the code before this fix would
block forever (an open of a FIFO waits for a writer) runs in a thread with a bound: the test
fails instead of hanging the suite, and the FIFO is opened for writing to let the thread go.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import http.client
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from tests.conftest_browser import UiServer
from tests.helpers import ROOT, Target, attach, model, trainer_engine
from tests.waiting import when_reaching
from tracker_saver import models
from tracker_saver.cli.main import main
from tracker_saver.core.errors import IntegrityError
from tracker_saver.core.records import RecordState, StreamId
from tracker_saver.save.ownership import owner_key
from tracker_saver.storage.local import LocalWrite
from tracker_saver.ui.app import MAX_DOWNLOADS, create_app

#: The most a call may take before the test calls it hung (a bound, never asserted as a duration).
BOUND_S = 30
KEY0 = "p/r/model.slot0.pt"


class Run:
    """Two epochs of a real training, stream ``model`` with ``n_saved=2``: slots 0 and 1 hold
    ``model_1.pt`` and ``model_2.pt``; :meth:`epoch` trains one more through the same handler."""

    def __init__(self, root: Path, **saver_options: Any) -> None:
        self.target = Target(output_uri=str(root / "out"), registry=str(root / "registry.db"))
        self.root = root
        self.slot0 = root / "out" / KEY0
        self.net = model()
        self.trainer = trainer_engine(self.net)
        self.saver = self.target.saver(**saver_options)
        attach(self.trainer, self.saver, {"model": self.net}, n_saved=2)
        self.epoch(2)

    def epoch(self, n: int = 1) -> None:
        self.trainer.run([0], max_epochs=self.trainer.state.epoch + n)

    def record(self, filename: str) -> Any:
        return next(r for r in models.find_models(registry=self.target.registry) if r.filename == filename)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    made = Run(tmp_path)
    yield made
    made.saver.close()


def _let_readers_go(path: Path) -> None:
    """Open a FIFO for writing and close it: each reader waiting in ``open`` gets its end of file."""
    for _ in range(8):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader waits any more
                raise
            return


def _within(call: Callable[[], Any], fifo: Path | None = None) -> Any:
    """``call()``'s result, or the exception it raised (returned, not raised); a failure if it hangs."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 (returned to the test, which asserts on it)
            box["result"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        if fifo is not None and fifo.exists():
            _let_readers_go(fifo)
        thread.join(BOUND_S)
        pytest.fail(f"hung for {BOUND_S} s on a special file at output_uri")
    return box["result"]


def _make(kind: str, path: Path, outside: Path) -> str:
    """Put ``kind`` at ``path`` in place of its file (whose bytes a symlink's target keeps); how errors name it."""
    data = path.read_bytes()
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO"
    if kind == "symlink inside":
        copy = path.with_name("model_copy.bin")
        copy.write_bytes(data)  # the record's own bytes, inside the folder: still never followed
        path.symlink_to(copy)
        return "a symlink"
    if kind == "symlink outside":
        outside.write_bytes(data)
        path.symlink_to(outside)
        return "a symlink"
    if kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
        except PermissionError:
            path.symlink_to("/dev/null")  # not root: the path still never reaches the device
            return "a symlink"
        return "a device"
    path.mkdir()
    return "a folder"


KINDS = ["fifo", "symlink inside", "symlink outside", "device", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_at_a_slot_path_is_refused_by_stat_get_and_models_get(run, kind, capsys) -> None:
    named = _make(kind, run.slot0, run.root / "outside.pt")
    storage = run.target.storage()
    for call in (lambda: storage.stat(KEY0), lambda: storage.get(KEY0), lambda: storage.digest(KEY0)):
        refused = _within(call, run.slot0)
        assert isinstance(refused, IntegrityError), refused
        assert named in str(refused) and str(run.slot0) in str(refused) and "remove it" in str(refused)
    record = run.record("model_1.pt")
    status = _within(lambda: main(["models", "get", record.id, str(run.root / "got.pt"), "--registry", run.target.registry]), run.slot0)  # fmt: skip
    assert status != 0 and named in capsys.readouterr().err
    assert not (run.root / "got.pt").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_the_next_save_into_a_special_slot_refuses_and_leaves_it_as_found(run, kind) -> None:
    outside = run.root / "outside.pt"
    named = _make(kind, run.slot0, outside)
    before, kept = os.lstat(run.slot0), outside.read_bytes() if outside.exists() else None
    refused = _within(run.epoch, run.slot0)
    assert isinstance(refused, IntegrityError) and named in str(refused), refused
    after = os.lstat(run.slot0)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # not replaced
    assert (outside.read_bytes() if outside.exists() else None) == kept  # nor written through
    assert models.load_checkpoint(run.record("model_2.pt"), {"model": model()}).state is RecordState.LIVE


def test_a_fifo_put_at_the_slot_while_a_save_commits_never_holds_the_commit_up(run) -> None:
    """The window after the commit's check: the replace target is then only held open, never waited on."""

    def swap() -> None:
        run.slot0.unlink()
        os.mkfifo(run.slot0)

    at_commit = when_reaching(
        LocalWrite.commit, "old = hold(self._path)", swap, where=lambda f: f.f_locals["self"].key == KEY0
    )
    with at_commit as reached:
        outcome = _within(run.epoch, run.slot0)
    assert len(reached) == 1 and outcome is None, outcome
    assert stat.S_ISREG(os.lstat(run.slot0).st_mode)  # os.replace swapped the name: nothing was written through
    assert models.load_checkpoint(run.record("model_3.pt"), {"model": model()}).state is RecordState.LIVE


def test_a_fifo_at_a_slot_path_refuses_the_next_run_and_models_pin_at_once(run, capsys) -> None:
    run.saver.close()
    _make("fifo", run.slot0, run.root / "outside.pt")
    again = run.target.saver()  # the next run: a fresh Checkpoint reuses the oldest inherited slot, slot 0
    try:
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, again, {"model": net}, n_saved=2)
        refused = _within(lambda: trainer.run([0], max_epochs=1), run.slot0)
        assert isinstance(refused, IntegrityError) and "a FIFO" in str(refused), refused
    finally:
        again.close()
    record = run.record("model_1.pt")
    status = _within(lambda: main(["models", "pin", record.id, "--registry", run.target.registry]), run.slot0)
    assert status != 0 and "a FIFO" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(run.slot0).st_mode)


def test_fsck_reports_a_symlink_at_a_slot_path_even_to_the_records_own_bytes(run, capsys) -> None:
    _make("symlink outside", run.slot0, run.root / "outside.pt")
    run.saver.close()
    assert main(["fsck", "--registry", run.target.registry]) != 0
    assert KEY0 in capsys.readouterr().out


def test_a_run_folder_that_is_a_symlink_is_never_written_through(tmp_path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "p").symlink_to(outside, target_is_directory=True)
    target = Target(output_uri=str(tmp_path / "out"), registry=str(tmp_path / "registry.db"))
    saver = target.saver()
    try:
        net = model()
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=2)
        with pytest.raises(IntegrityError, match="is a symlink on the way to"):
            trainer.run([0], max_epochs=1)
    finally:
        saver.close()
    assert list(outside.rglob("*")) == []


def test_a_dirname_view_never_links_what_a_symlink_at_the_slot_names(tmp_path) -> None:
    made = Run(tmp_path, dirname=str(tmp_path / "named"))
    try:
        view = tmp_path / "named" / "model_1.pt"
        view.unlink()  # get_local_copy places it again, from the slot
        _make("symlink outside", made.slot0, tmp_path / "outside.pt")
        refused = _within(lambda: made.saver.get_local_copy("model_1.pt"))
        assert isinstance(refused, IntegrityError) and "a symlink" in str(refused), refused
        assert not view.exists()
        fifo = tmp_path / "named" / "model_2.pt"
        fifo.unlink()
        os.mkfifo(fifo)  # a FIFO in the view itself is never waited on either
        refused = _within(lambda: made.saver.get_local_copy("model_2.pt"), fifo)
        assert isinstance(refused, IntegrityError) and "a FIFO" in str(refused), refused
    finally:
        made.saver.close()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Target:
    """One live record of 8 MiB: more than loopback's socket buffers take, so a stalled client stalls its download."""
    root = tmp_path_factory.mktemp("big")
    target = Target(output_uri=str(root / "out"), registry=str(root / "registry.db"))
    saver = target.saver()
    try:
        net = torch.nn.Linear(1024, 2048)
        trainer = trainer_engine(net)
        attach(trainer, saver, {"model": net}, n_saved=1)
        trainer.run([0], max_epochs=1)
    finally:
        saver.close()
    return target


def _stalled_download(port: int, record_id: str) -> socket.socket:
    """A download whose client reads its status line, then nothing more (``curl --limit-rate`` at its slowest)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /api/models/{record_id}/download HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    sock.settimeout(BOUND_S)
    status = b""
    while len(status) < 12 and (more := sock.recv(12 - len(status))):
        status += more
    assert status == b"HTTP/1.1 200"
    return sock


def _abort(sock: socket.socket) -> None:
    """Go away as an aborted curl does: close at once, with a reset (unread bytes are dropped)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _is_a_download_place(frame: Any) -> bool:
    semaphore = frame.f_locals["self"]
    return isinstance(semaphore, threading.BoundedSemaphore) and semaphore._initial_value == MAX_DOWNLOADS


def test_two_aborted_downloads_free_their_places_and_the_next_download_is_sent(big) -> None:
    """Garbage collection is off meanwhile: a place must not wait for the collector (it did: 31 s
    of one request a second on the real server). The test waits for each place's release itself."""
    record = models.find_models(registry=big.registry)[0]
    freed = threading.Semaphore(0)
    gc.disable()
    try:
        # The release runs on the server's event loop, which then finishes it before it reads
        # the next request: once the action ran, the place is free for that request.
        with when_reaching(
            threading.BoundedSemaphore.release, "self._value += n", freed.release, where=_is_a_download_place
        ):
            server = UiServer(big.registry)  # the real app under uvicorn, MAX_DOWNLOADS at once
            port = int(server.url.rsplit(":", 1)[1])
            try:
                for sock in [_stalled_download(port, record.id) for _ in range(MAX_DOWNLOADS)]:
                    _abort(sock)
                released = [freed.acquire(timeout=BOUND_S) for _ in range(MAX_DOWNLOADS)]
                status, body = _get(port, f"/api/models/{record.id}/download")
            finally:
                server.close()
    finally:
        gc.enable()
    assert released == [True] * MAX_DOWNLOADS, "an aborted download kept its place"
    assert status == 200 and hashlib.sha256(body).hexdigest() == record.sha256


def _wait_for_url(proc: subprocess.Popen[str]) -> None:
    """Until the server says where it listens (it prints that once it does)."""
    assert proc.stderr is not None
    while True:
        ready, _, _ = select.select([proc.stderr], [], [], BOUND_S)
        assert ready, f"the UI printed nothing within {BOUND_S} s"
        line = proc.stderr.readline()
        assert line, "the UI exited"
        if line.startswith("tracker-saver UI at "):
            return


def test_sigterm_stops_the_ui_server_with_a_download_in_flight(big) -> None:
    record = models.find_models(registry=big.registry)[0]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracker_saver", "ui", "--registry", big.registry, "--port", str(port)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_url(proc)
        sock = _stalled_download(port, record.id)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the UI server was still up {BOUND_S} s after SIGTERM, with a download in flight")
        finally:
            sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM  # ended by the signal, as docs/ui.md says


def test_ui_downloads_of_a_fifo_slot_answer_409_at_once_and_free_their_places(run) -> None:
    _make("fifo", run.slot0, run.root / "outside.pt")
    fifo_record, other = run.record("model_1.pt"), run.record("model_2.pt")
    client = TestClient(create_app(run.target.registry), raise_server_exceptions=False)
    for _ in range(3):  # more than the 2 places: a refused download keeps none
        answer = _within(lambda: client.get(f"/api/models/{fifo_record.id}/download"), run.slot0)
        assert not isinstance(answer, BaseException), answer
        assert answer.status_code == 409 and "a FIFO" in answer.json()["detail"]
    sent = client.get(f"/api/models/{other.id}/download")
    assert sent.status_code == 200 and hashlib.sha256(sent.content).hexdigest() == other.sha256


def test_a_fifo_in_place_of_the_streams_owner_object_refuses_the_next_run_at_once(run) -> None:
    run.saver.close()
    owner = run.root / "out" / owner_key(StreamId(run.target.storage().uri, "p", "r", "model"))
    owner.unlink()
    os.mkfifo(owner)

    def next_run() -> None:
        saver = run.target.saver()
        try:
            net = model()
            trainer = trainer_engine(net)
            attach(trainer, saver, {"model": net}, n_saved=2)
            trainer.run([0], max_epochs=1)
        finally:
            saver.close()

    refused = _within(next_run, owner)
    assert isinstance(refused, IntegrityError) and "a FIFO" in str(refused) and str(owner) in str(refused), refused


def test_a_delete_through_a_symlinked_run_folder_never_removes_a_file_outside(tmp_path) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "r").mkdir(parents=True)
    victim = outside / "r" / "model.slot0.pt"
    victim.write_bytes(b"not ours")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "p").symlink_to(outside, target_is_directory=True)
    storage = Target(output_uri=str(tmp_path / "out"), registry=None).storage()
    with pytest.raises(IntegrityError, match="is a symlink on the way to"):
        storage.delete(KEY0)
    assert victim.read_bytes() == b"not ours"
