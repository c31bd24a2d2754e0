"""Pytest fixtures for ClearML: the in-memory API stand-in, or a live server the user configured.

Load with ``pytest_plugins = ["tests.conftest_clearml"]`` in ``tests/conftest.py``.

* ``clearml_server`` (session): when ``CLEARML_API_HOST``, ``CLEARML_API_ACCESS_KEY`` and
  ``CLEARML_API_SECRET_KEY`` are all set before the tests start, that live server is used and
  nothing is started; otherwise :class:`tests.clearml_standin.ClearMLStandIn` is started on
  127.0.0.1. Either way the SDK gets a private ``CLEARML_CONFIG_FILE`` (no subprocess
  reporter, 2 HTTP retries with a 1 s back-off cap, no update check) and a private
  ``HOME``/cache folder, so a test can neither freeze for minutes nor touch the user's files.
* ``clearml_standin``: the stand-in itself; skips when a live server is in use.
* ``clearml_project``: a fresh project name per test (live servers keep their data).
* ``clearml_task``: a ``Task.init`` in that project, closed after the test.
* ``clearml_api``: raw requests to that server (:class:`ClearMLApi`), to send what the SDK would
  not: the web UI's calls, the requests the stand-in's rules are measured on.

Mark tests that need a server with ``@pytest.mark.clearml``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    from tests.clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn
except ImportError:  # tests/ is on sys.path but is not a package
    from clearml_standin import ACCESS_KEY, SECRET_KEY, ClearMLStandIn  # type: ignore[no-redef]

__all__ = ["VERSION", "ClearMLApi", "ClearMLServer", "clearml_config_text", "init_task", "live_server_configured"]

#: The API level clearml 2.1's SDK sends its requests at.
VERSION = "2.23"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clearml: needs a ClearML API server (the in-memory stand-in or a live one)")


#: What the tests' tasks list as their requirements (see ``detect_with_pip_freeze`` below).
REQUIREMENTS = Path(__file__).with_name("clearml_requirements.txt")

_LIVE_ENV = ("CLEARML_API_HOST", "CLEARML_API_ACCESS_KEY", "CLEARML_API_SECRET_KEY")


def clearml_config_text(cache_dir: Path) -> str:
    """A ``clearml.conf`` that keeps the SDK fast and in-process (no credentials: those come from env)."""
    return f"""
api {{
    http {{
        # SDK default is 240 retries with a 120 s back-off: an outage would hang a test for minutes.
        retries {{ total: 2, connect: 2, read: 2, redirect: 2, status: 2, backoff_factor: 0.1, backoff_max: 1.0 }}
        # a 503 would otherwise be retried forever ("server under maintenance")
        wait_on_maintenance_forever: false
    }}
}}
sdk {{
    storage.cache.default_base_dir: "{cache_dir.as_posix()}"
    development {{
        # the default reporter sub-process froze one run for ~300 s ("Event reporting sub-process lost")
        report_use_subprocess: false
        vcs_repo_detect_async: false
        store_uncommitted_code_diff: false
        # At each Task.init in a git checkout with a remote (a CI clone), the SDK parses every Python
        # file of the repository for its imports: 0.7 s of CPU a task, 45 s in one test file. The tasks
        # list this file as their requirements instead.
        detect_with_pip_freeze: "{REQUIREMENTS.as_posix()}"
        suppress_update_message: true
        support_stopping: false
        worker {{ report_period_sec: 600, ping_period_sec: 600, log_stdout: false }}
    }}
    network.file_upload_retries: 1
}}
"""


@dataclass
class ClearMLServer:
    """Where the SDK is pointed: the stand-in (``standin`` set) or a live server (``live``)."""

    api_host: str
    standin: ClearMLStandIn | None

    @property
    def live(self) -> bool:
        return self.standin is None


def _env_for(server_host: str, config: Path, home: Path, cache: Path) -> dict[str, str]:
    return {
        "CLEARML_API_HOST": server_host,
        "CLEARML_WEB_HOST": os.environ.get("CLEARML_WEB_HOST") or server_host,
        "CLEARML_FILES_HOST": os.environ.get("CLEARML_FILES_HOST") or server_host,
        "CLEARML_CONFIG_FILE": str(config),
        "CLEARML_CACHE_DIR": str(cache),
        "CLEARML_SUPPRESS_UPDATE_MESSAGE": "1",
        "CLEARML_DISABLE_VAULT_SUPPORT": "1",
        "CLEARML_LOG_ENVIRONMENT": "",
        "HOME": str(home),
    }


def live_server_configured(environ: Mapping[str, str]) -> bool:
    """Whether the user pointed the tests at a live server (host and both keys set)."""
    return all(environ.get(name) for name in _LIVE_ENV)


@pytest.fixture(scope="session")
def clearml_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClearMLServer]:
    """The ClearML API the SDK talks to in this test session (see the module docstring)."""
    pytest.importorskip(
        "clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
    )
    root = tmp_path_factory.mktemp("clearml")
    home, cache = root / "home", root / "cache"
    home.mkdir()
    cache.mkdir()
    config = root / "clearml.conf"
    config.write_text(clearml_config_text(cache))
    live = live_server_configured(os.environ)
    standin = None if live else ClearMLStandIn().start()
    host = os.environ["CLEARML_API_HOST"] if live else standin.api_host  # type: ignore[union-attr]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _env_for(host, config, home, cache).items():
            mp.setenv(key, value)
        if not live:
            mp.setenv("CLEARML_API_ACCESS_KEY", ACCESS_KEY)
            mp.setenv("CLEARML_API_SECRET_KEY", SECRET_KEY)
        # the SDK copies its session token into CLEARML_AUTH_TOKEN; don't let it outlive the session
        mp.delenv("CLEARML_AUTH_TOKEN", raising=False)
        mp.delenv("CLEARML_TASK_ID", raising=False)
        mp.delenv("CLEARML_OFFLINE_MODE", raising=False)
        try:
            yield ClearMLServer(api_host=host, standin=standin)
        finally:
            _close_current_task()
            _stop_reporters()
            if standin is not None:
                standin.stop()


def _close_current_task() -> None:
    try:
        from clearml import Task
    except ImportError:
        return
    task: Any = Task.current_task()
    if task is not None:
        task.close()


def _stop_reporters() -> None:
    """Send what every ClearML metrics reporter still holds while the server answers, then detach it.

    A reporter the SDK left running (a task some test or library did not close) would otherwise
    retry its events against the stopped stand-in at interpreter exit, with the SDK's back-off,
    for hours: measured, a CI run that passed every test and never exited.
    """
    import gc

    from clearml.backend_interface.metrics.reporter import Reporter

    def is_reporter(obj: object) -> bool:
        try:
            return isinstance(obj, Reporter)
        except ReferenceError:  # a weakref.proxy whose object is gone (seen at a session's end)
            return False

    for reporter in [obj for obj in gc.get_objects() if is_reporter(obj)]:
        with contextlib.suppress(Exception):
            reporter.flush()
            reporter.wait_for_events(timeout=10)
        # Its exit hook waits, with no time limit, on this service; its thread is a daemon.
        reporter._report_service = None


@pytest.fixture
def clearml_standin(clearml_server: ClearMLServer) -> ClearMLStandIn:
    """The in-memory stand-in, without faults and with no unknown call of an earlier test (the session
    shares it: ``test_clearml_standin_rules`` calls an unknown endpoint on purpose); tests that inspect
    its internals skip on a live server."""
    if clearml_server.standin is None:
        pytest.skip("inspects the in-memory ClearML stand-in, but a live server is configured (CLEARML_API_HOST)")
    clearml_server.standin.clear_faults()
    clearml_server.standin.unknown_calls.clear()
    return clearml_server.standin


@pytest.fixture
def clearml_project(clearml_server: ClearMLServer) -> str:
    """A project name no other test uses."""
    return f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"


def init_task(project: str, name: str, **kwargs: Any) -> Any:
    """``Task.init`` with the quiet defaults tests want (no stdout capture, no resource monitor)."""
    from clearml import Task

    options: dict[str, Any] = {
        "auto_connect_frameworks": False,
        "auto_resource_monitoring": False,
        "auto_connect_streams": False,
        "auto_connect_arg_parser": False,
        "reuse_last_task_id": False,
    }
    options.update(kwargs)
    return Task.init(project_name=project, task_name=name, **options)


@pytest.fixture
def clearml_task(clearml_project: str, tmp_path: Path) -> Iterator[Any]:
    """A ClearML task (the run ``run``) in ``clearml_project``, with a local-folder output_uri."""
    out = tmp_path / "clearml-output"
    out.mkdir()
    task = init_task(clearml_project, "run", output_uri=str(out))
    try:
        yield task
    finally:
        task.close()


class ClearMLApi:
    """Raw requests to the ClearML API the SDK is pointed at, as ``(code, subcode, message, data)``."""

    def __init__(self) -> None:
        import requests

        self._requests = requests
        self.host = os.environ["CLEARML_API_HOST"].rstrip("/")
        keys = (os.environ["CLEARML_API_ACCESS_KEY"], os.environ["CLEARML_API_SECRET_KEY"])
        answer = requests.post(f"{self.host}/auth.login", auth=keys, timeout=30).json()
        self.token = answer["data"]["token"]

    def __call__(self, endpoint: str, **data: Any) -> tuple[int, int, str, Any]:
        reply = self._requests.post(
            f"{self.host}/v{VERSION}/{endpoint}",
            json=data,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        ).json()
        meta = reply["meta"]
        return meta["result_code"], meta["result_subcode"], meta["result_msg"], reply.get("data")

    def ok(self, endpoint: str, **data: Any) -> Any:
        """The answer's data; fails the test unless the server answered 200."""
        code, subcode, msg, answer = self(endpoint, **data)
        assert (code, subcode) == (200, 0), f"{endpoint}: {code}/{subcode} {msg}"
        return answer


@pytest.fixture
def clearml_api(clearml_server: ClearMLServer) -> ClearMLApi:
    """Raw requests to the server of this test session (the stand-in or a live one)."""
    return ClearMLApi()
