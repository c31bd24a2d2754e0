"""Pytest fixtures for MLflow: one real ``mlflow server`` on 127.0.0.1 for the whole test run.

Load with ``pytest_plugins = ["tests.conftest_mlflow"]`` in ``tests/conftest.py``.

* ``mlflow_server`` (session): the URI of a ``mlflow server`` with a SQLite backend store and an
  artifact root in a folder of this run, served by gunicorn with one worker, and no job runner (MLflow's job runner
  and its 7 consumer processes serve features these tests never use; measured, they cost a
  server about 15 s of CPU to start). Every process of the run shares it, as the Ceph gateway
  is shared (:class:`SharedServer`): the first pytest-xdist worker that needs it starts it, the
  last one out stops it. A test that stops, freezes or breaks a server starts its own with
  :func:`start_mlflow_server` (tests/test_mlflow_postgres.py) or cuts it off behind a
  ``tests.tcp_gate.Gate`` of its own. Skips when mlflow is not installed (CI fails instead).
* ``mlflow_uri``: the server's URI, with ``MLFLOW_TRACKING_URI`` set to it for the test.
* ``mlflow_registry``: an ``MLflowRegistry`` on that server, in experiments of its own; closed after.

Mark tests that need the server with ``@pytest.mark.mlflow``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.waiting import wait_gone

if TYPE_CHECKING:
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

__all__ = ["SharedServer", "free_port", "own_registry", "start_mlflow_server", "stop_server"]

#: Seconds a fresh server may take to answer ``/health`` (a few on 2 cores; gunicorn imports mlflow).
START_TIMEOUT_S = 90.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def start_mlflow_server(root: Path, backend_store_uri: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``mlflow server`` with its files under ``root``; return the process and its URI.

    The backend store is ``backend_store_uri`` (e.g. ``postgresql+psycopg2://postgres@127.0.0.1:PORT/mlflow``,
    see tests/test_mlflow_postgres.py), by default a SQLite file in ``root``; artifacts and the
    server's log are in ``root`` either way.
    """
    exe = Path(sys.executable).with_name("mlflow")
    if not exe.exists():
        found = shutil.which("mlflow")
        if found is None:
            raise FileNotFoundError("no mlflow executable: pip install -e '.[mlflow]' -c constraints.txt")
        exe = Path(found)
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    # No job runner: it starts 7 huey consumer processes for features no test uses.
    env = {**os.environ, "TMPDIR": str(root), "MLFLOW_TRACKING_URI": "", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = (root / "server.log").open("wb")
    store = backend_store_uri or f"sqlite:///{root / 'mlflow.db'}"
    # gunicorn serves MLflow's Flask app alone, the same handlers as the default uvicorn, which wraps
    # that app in FastAPI: half the server's CPU per request (measured: 5.9 against 10.0 s for 100
    # saves in 20 runs), and the server was the costliest process of a test run.
    proc = subprocess.Popen(
        [str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--gunicorn-opts", "--log-level=warning",
         "--backend-store-uri", store, "--default-artifact-root", str(root / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(uri):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            tail = (root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"mlflow server at {uri} did not answer /health; its log ends:\n{tail}")
        time.sleep(0.25)
    return proc, uri


def stop_server(proc: subprocess.Popen[bytes], sig: int = 15) -> None:
    """Stop a server started in its own session: ``sig`` to its process group, SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)  # the server's own process group: gunicorn and its worker
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


class SharedServer:
    """One ``mlflow server`` for every process of a test run, in ``folder``: started by the first
    process that asks for it, stopped by the last one that used it.

    Each process that uses the server holds a shared flock on ``users.lock`` until its session
    ends; ``turn.lock`` serialises starting and stopping. A process that leaves takes ``users.lock``
    exclusively if it can: then no one else uses the server, and it stops it. ``server.json`` says
    which server runs; the run's first process (xdist's controller, or the only one) stops a server
    left behind by workers that died (:func:`pytest_unconfigure`).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.state = folder / "server.json"
        self._proc: subprocess.Popen[bytes] | None = None  # the server, when this process started it
        self._turn = os.open(folder / "turn.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._users = os.open(folder / "users.lock", os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def _turn_held(self) -> Iterator[None]:
        fcntl.flock(self._turn, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._turn, fcntl.LOCK_UN)

    def acquire(self) -> str:
        """The running server's URI (started now when none runs); this process uses it until :meth:`release`."""
        with self._turn_held():
            fcntl.flock(self._users, fcntl.LOCK_SH)
            if self.state.exists():
                uri = str(json.loads(self.state.read_text())["uri"])
                if _healthy(uri):
                    return uri
                self._stop()  # it died: start another
            root = Path(tempfile.mkdtemp(prefix="server-", dir=self.folder))
            self._proc, uri = start_mlflow_server(root)
            self.state.write_text(json.dumps({"pid": self._proc.pid, "uri": uri}))
            return uri

    def release(self) -> None:
        """This process no longer uses the server; the last one out stops it."""
        with self._turn_held():
            fcntl.flock(self._users, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process uses it
            try:
                self._stop()
            finally:
                fcntl.flock(self._users, fcntl.LOCK_UN)

    def _stop(self) -> None:
        if not self.state.exists():
            return
        pid = int(json.loads(self.state.read_text())["pid"])
        if self._proc is not None and self._proc.pid == pid:
            stop_server(self._proc)  # this process's child: reaped here
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
                if not wait_gone(pid, 15):
                    os.killpg(pid, signal.SIGKILL)
        self.state.unlink()

    def close(self) -> None:
        """Stop a server still running (its users died), and close the lock files."""
        with self._turn_held():
            self._stop()
        os.close(self._users)
        os.close(self._turn)


_FOLDER_ENV = "TRACKER_SAVER_TESTS_MLFLOW"
_owned: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """The run's first process makes the shared server's folder; its xdist workers inherit the name."""
    if _FOLDER_ENV not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="tracker-saver-mlflow-"))
        os.environ[_FOLDER_ENV] = str(folder)
        _owned.append(folder)


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _owned:
        SharedServer(folder).close()
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_FOLDER_ENV, None)
    _owned.clear()


@pytest.fixture(scope="session")
def mlflow_server() -> Iterator[str]:
    """The URI of the run's real ``mlflow server`` (shared by every xdist worker, see :class:`SharedServer`)."""
    try:
        import mlflow  # noqa: F401
    except ModuleNotFoundError:
        if os.environ.get("CI"):
            raise
        pytest.skip("MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")
    shared = SharedServer(Path(os.environ[_FOLDER_ENV]))
    uri = shared.acquire()
    try:
        yield uri
    finally:
        shared.release()


@pytest.fixture
def mlflow_uri(mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session server's URI, also in ``MLFLOW_TRACKING_URI`` for this test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    return mlflow_server


def own_registry(uri: str, timeout: float = 10) -> MLflowRegistry:
    """An ``MLflowRegistry`` on ``uri`` whose experiments are its own (a prefix no other test uses)."""
    from tracker_saver.integrations.mlflow.registry import MLflowRegistry

    return MLflowRegistry(uri, experiment_prefix=f"t{uuid.uuid4().hex[:10]}-", timeout=timeout)


@pytest.fixture
def mlflow_registry(mlflow_server: str) -> Iterator[MLflowRegistry]:
    """An ``MLflowRegistry`` on the session's server, in experiments of its own; closed after."""
    registry = own_registry(mlflow_server)
    try:
        yield registry
    finally:
        registry.close()
