"""UI fixtures: a registry filled by a real Ignite training, the real server, headless Chromium.

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright's Python package; nothing
is downloaded (never ``playwright install``). Without it the browser tests skip locally and
fail in CI.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCORES, Target, attach, model, trainer_engine

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Training:
    """A real short Ignite training through one TrackerSaver: a scored stream ``best_model`` and a
    plain stream ``model``, both ``n_saved=2``, so the registry holds live and evicted records.

    Calling :meth:`epochs` again continues the same engine, saver and ``Checkpoint`` handlers.
    """

    def __init__(self, root: Path) -> None:
        self.target = Target(output_uri=str(root / "output"), registry=str(root / "registry.db"))
        self.registry: str = self.target.registry
        self.net = model()
        self.trainer = trainer_engine(self.net)
        self.saver = self.target.saver()
        attach(self.trainer, self.saver, {"model": self.net}, n_saved=2, prefix="best", scores=SCORES)
        attach(self.trainer, self.saver, {"model": self.net}, n_saved=2)

    def epochs(self, n: int) -> None:
        """Train ``n`` more epochs; their saves are durable on return."""
        self.trainer.run([0], max_epochs=self.trainer.state.epoch + n)
        self.saver.flush()

    def close(self) -> None:
        self.saver.close()


@pytest.fixture
def ui_training(tmp_path: Path) -> Iterator[Training]:
    """Four epochs trained: best_model keeps 2 of 4 scored checkpoints, model 2 of 4."""
    run = Training(tmp_path)
    run.epochs(4)
    yield run
    run.close()


class UiServer:
    """The real app under uvicorn, in a thread, on a free loopback port."""

    def __init__(self, registry: Any) -> None:
        import uvicorn

        from tracker_saver.ui.app import create_app
        from tracker_saver.ui.server import LOOPBACK_HOSTS

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        app = create_app(registry, allowed_hosts=LOOPBACK_HOSTS)
        listening = threading.Event()

        class Listening(uvicorn.Server):  # type: ignore[misc]
            """uvicorn's server, which sets ``listening`` once it listens."""

            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                listening.set()

        self.server = Listening(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        if not listening.wait(60):  # a guard: it exits at once if it cannot start
            raise RuntimeError("the UI server did not start")

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


@pytest.fixture
def ui_server(ui_training: Training) -> Iterator[UiServer]:
    server = UiServer(ui_training.registry)
    yield server
    server.close()


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Chromium is required in CI but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Chromium unavailable: {reason} (apt-get install chromium; see docs/ui.md)")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the session."""
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} does not exist")
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError as exc:
        _unavailable(f"the playwright package is not installed ({exc})")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    except Exception as exc:
        pw.stop()
        _unavailable(f"{CHROMIUM} did not start: {exc}")
    yield browser
    browser.close()
    pw.stop()


class Page:
    """A fresh browser page that records dialogs, script errors (CSP violations included) and failed requests."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1440, "height": 900}, accept_downloads=True)
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.failed_requests: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("console", self._console)

    def _console(self, message: Any) -> None:
        if message.type != "error":
            return
        if message.text.startswith("Failed to load resource"):  # a 4xx the page shows as a message
            self.failed_requests.append(message.text)
        else:  # a script error or a Content-Security-Policy violation
            self.errors.append(f"console: {message.text}")

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def browser_page(chromium: Any) -> Iterator[Page]:
    page = Page(chromium)
    yield page
    page.context.close()
