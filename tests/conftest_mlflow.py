"""Pytest fixtures for MLflow: a real ``mlflow server`` on 127.0.0.1, one per test session.

Load with ``pytest_plugins = ["tests.conftest_mlflow"]`` in ``tests/conftest.py``.

* ``mlflow_server`` (session): starts ``mlflow server`` with a SQLite backend store and an
  artifact root in pytest's session tmp dir, on a free port with one worker, waits on
  ``GET /health`` and stops it at the end. Under pytest-xdist each worker starts its own
  (a few seconds; no file lock to share). Skips when mlflow is not installed, except in CI
  (``CI=true``), where a missing server fails.
* ``mlflow_uri``: the server's URI, with ``MLFLOW_TRACKING_URI`` set to it for the test.

Mark tests that need the server with ``@pytest.mark.mlflow``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["free_port", "start_mlflow_server", "stop_server"]

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
    env = {**os.environ, "TMPDIR": str(root), "MLFLOW_TRACKING_URI": ""}
    log = (root / "server.log").open("wb")
    store = backend_store_uri or f"sqlite:///{root / 'mlflow.db'}"
    proc = subprocess.Popen(
        [str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
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


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a real ``mlflow server`` for this session (this xdist worker)."""
    try:
        import mlflow  # noqa: F401
    except ModuleNotFoundError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")
    proc, uri = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield uri
    finally:
        stop_server(proc)


@pytest.fixture
def mlflow_uri(mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session server's URI, also in ``MLFLOW_TRACKING_URI`` for this test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    return mlflow_server
