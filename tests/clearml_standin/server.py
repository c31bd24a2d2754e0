"""The stand-in's HTTP side: :class:`ClearMLStandIn` (start, stop, outages, faults, counting) and the request handler."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.clearml_standin.common import (
    ACCESS_KEY,
    API_VERSION,
    COMPANY_ID,
    COMPANY_NAME,
    SECRET_KEY,
    SERVER_VERSION,
    USER_ID,
    USER_NAME,
    Call,
    StandInError,
    _Fault,
    _new_id,
)
from tests.clearml_standin.store import Store

log = logging.getLogger("tests.clearml_standin")


class ClearMLStandIn:
    """An in-memory ClearML API server stand-in on ``127.0.0.1:<free port>`` (tests only).

    Attributes:
        projects, tasks, models: the entities, ``id -> dict`` as the server would return them.
        calls: every request received, in order (``Call(endpoint, data, at, status)``).
        unknown_calls: requests to endpoints the stand-in does not implement (answered, as the real
            server answers an endpoint it lacks, ``404/0 Unable to find endpoint``).

    Examples:
        >>> with ClearMLStandIn() as server:
        ...     with server.count() as calls:
        ...         pass
        ...     len(calls)
        0
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, latency: float = 0.0) -> None:
        self.host, self.port, self.latency = host, port, latency
        self._store = Store()
        self._handlers = self._store.handlers()
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self.calls: list[Call] = []
        self.unknown_calls: list[Call] = []
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._bound_port: int | None = None  # kept across pause()/resume()
        self._connections: set[socket.socket] = set()  # open client connections (keep-alive ones too)
        self._hang: re.Pattern[str] | None = None  # requests to these endpoints wait for _released
        self._released = threading.Event()
        self._hang_after = 0  # matching requests hang() still answers before it freezes
        self.hung: list[Call] = []  # requests held by hang(), never answered

    # -- entities ----------------------------------------------------------------------------
    @property
    def projects(self) -> dict[str, dict[str, Any]]:
        return self._store.projects

    @property
    def tasks(self) -> dict[str, dict[str, Any]]:
        return self._store.tasks

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        return self._store.models

    @property
    def events(self) -> dict[str, int]:
        """Number of events received per task id (their content is dropped)."""
        return self._store.events

    def project_id(self, name: str) -> str | None:
        """The id of the project called ``name``, if any."""
        return next((p["id"] for p in self.projects.values() if p["name"] == name), None)

    def models_in(self, project: str) -> list[dict[str, Any]]:
        """The models of project ``name``, oldest first."""
        pid = self.project_id(project)
        return sorted((m for m in self.models.values() if m.get("project") == pid and pid), key=lambda m: m["created"])

    def edit_model(self, model_id: str, **fields: Any) -> None:
        """Change a model as another client (the web UI) would, bypassing the SDK."""
        with self._lock:
            self._store.models_edit({"model": model_id, **fields})

    # -- control -----------------------------------------------------------------------------
    @property
    def api_host(self) -> str:
        """``http://127.0.0.1:<port>``: the value for ``CLEARML_API_HOST`` (also while paused)."""
        if self._bound_port is None:
            raise RuntimeError("the ClearML stand-in is not started: call start() first")
        return f"http://{self.host}:{self._bound_port}"

    @property
    def listening(self) -> bool:
        """Whether it accepts connections (started and not paused)."""
        return self._httpd is not None

    def start(self) -> ClearMLStandIn:
        """Listen on a free port (``port`` if given) in a daemon thread; returns ``self``."""
        self._listen(self.port)
        return self

    def _listen(self, port: int) -> None:
        standin = self

        class Handler(_Handler):
            server_ref = standin

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True  # resume() binds the port again while old connections sit in TIME_WAIT
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # a connection that pause() or stop() closed under a request: the client sees it dropped
                log.debug("ClearML stand-in: request from %s ended by an error", client_address, exc_info=True)

        self._httpd = Server((self.host, port), Handler)
        self._bound_port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="clearml-standin", daemon=True
        )  # pause() and stop() wait up to one poll interval
        self._thread.start()

    def stop(self) -> None:
        """Stop listening, release held requests and close every connection (keep-alive ones too)."""
        self._close()
        self._bound_port = None

    def pause(self) -> None:
        """Go away: stop listening and close every connection; entities are kept for :meth:`resume`.

        Clients get ``connection refused``; a request being answered or held by :meth:`hang` is
        dropped unanswered, and a kept-alive connection is closed, so its next request is refused too.
        """
        if self._httpd is None:
            raise RuntimeError("the ClearML stand-in is not listening: nothing to pause")
        self._close()

    def resume(self) -> ClearMLStandIn:
        """Listen again on the port it had before :meth:`pause`, with every entity kept; returns ``self``."""
        if self._bound_port is None:
            raise RuntimeError("the ClearML stand-in was never started (or was stopped): call start()")
        if self._httpd is None:
            self._listen(self._bound_port)
        return self

    def _close(self) -> None:
        self.unhang()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # the client sees it closed; its handler reads EOF and ends
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def hang(self, endpoint: str = "", *, after: int = 0) -> contextlib.AbstractContextManager[None]:
        """Freeze: accept connections and read requests (matching the regex ``endpoint``; all by
        default, ``auth.login`` included) but answer none of them until :meth:`unhang`.

        ``after=n`` answers the first ``n`` matching requests as usual and freezes from the next
        one: a client then stops at an exact point (``tests/test_clearml_offline.py`` kills a
        sync there).

        Returns a context manager that unhangs on exit, so both ``server.hang(); ...;
        server.unhang()`` and ``with server.hang(): ...`` work. The held requests are never
        processed: on release their connections are closed without an answer.
        """
        with self._lock:
            self._released = threading.Event()
            self._hang = re.compile(endpoint)
            self._hang_after = after

        @contextlib.contextmanager
        def hanging() -> Iterator[None]:
            try:
                yield
            finally:
                self.unhang()

        return hanging()

    def unhang(self) -> None:
        """Answer requests again; the ones held by :meth:`hang` are dropped (their connections closed)."""
        with self._lock:
            self._hang = None
            self._released.set()

    def _hold(self, endpoint: str, data: Any) -> bool:
        """Hold a request while :meth:`hang` says so; ``True`` when it was held (and is never answered)."""
        with self._lock:
            pattern, released = self._hang, self._released
            if pattern is None or not pattern.search(endpoint):
                return False
            if self._hang_after > 0:
                self._hang_after -= 1
                return False
            self.hung.append(Call(endpoint, data, time.time(), status=0))
        released.wait()
        return True

    def __enter__(self) -> ClearMLStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail(
        self,
        endpoint: str,
        *,
        code: int = 500,
        subcode: int = 0,
        msg: str = "stand-in injected fault",
        times: int | None = 1,
    ) -> None:
        """Answer the next ``times`` calls whose endpoint matches the regex ``endpoint`` with an error.

        ``times=None`` fails until :meth:`clear_faults`. Codes the SDK retries (429, 502, 503, 504)
        make it back off, so tests should use 4xx/500.
        """
        with self._lock:
            self._faults.append(_Fault(re.compile(endpoint), code, subcode, msg, times))

    def clear_faults(self) -> None:
        """Remove the injected faults and every read-only mark."""
        with self._lock:
            self._faults.clear()
            self._store.read_only.clear()

    def read_only(self, project: str) -> str:
        """Make ``project`` (created if missing, as its owner would) readable but not writable; its id.

        Until :meth:`clear_faults`, creating, changing or deleting anything in it answers
        ``403/21 Forbidden (modification not allowed)``, like a real server for a user without
        write permission.
        """
        with self._lock:
            pid = self.project_id(project) or self._store.projects_create({"name": project})["id"]
            self._store.read_only.add(project)
            return str(pid)

    @contextlib.contextmanager
    def count(self, endpoint: str = "") -> Iterator[list[Call]]:
        """Collect the calls made inside the ``with`` block (those matching the regex ``endpoint``).

        Calls to ``auth.login`` and ``events.*`` are left out: they are the SDK's background noise.
        """
        seen: list[Call] = []
        start = len(self.calls)
        try:
            yield seen
        finally:
            pattern = re.compile(endpoint)
            seen.extend(
                c
                for c in self.calls[start:]
                if pattern.search(c.endpoint) and not c.endpoint.startswith(("auth.", "events."))
            )

    # -- dispatch ----------------------------------------------------------------------------
    def _dispatch(self, endpoint: str, data: Any, version: str | None = None) -> tuple[int, int, str, Any]:
        with self._lock:
            call = Call(endpoint, data, time.time())
            self.calls.append(call)
            for fault in self._faults:
                if fault.pattern.search(endpoint):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    call.status = fault.code
                    return fault.code, fault.subcode, fault.msg, {}
            handler = self._handlers.get(endpoint)
            if handler is None:
                # Never an empty success: a request the stand-in cannot answer as the server would fails.
                self.unknown_calls.append(call)
                call.status = 404
                log.info("ClearML stand-in: unknown endpoint %s answered 404", endpoint)
                return 404, 0, f"Unable to find endpoint for name {endpoint} and version {version or API_VERSION}", {}
            try:
                return 200, 0, "OK", handler(data if data is not None else {})
            except StandInError as exc:
                call.status = exc.code
                return exc.code, exc.subcode, exc.msg, {}


def _make_token(expires_in: int = 30 * 24 * 3600) -> str:
    import jwt  # a dependency of the clearml SDK

    now = int(time.time())
    payload = {
        "identity": {
            "user": USER_ID,
            "company": COMPANY_ID,
            "role": "admin",
            "user_name": USER_NAME,
            "company_name": COMPANY_NAME,
        },
        "api_version": API_VERSION,
        "server_version": SERVER_VERSION,
        "server_build": "standin",
        "feature_set": "basic",
        "env": "standin",
        "iat": now,
        "exp": now + expires_in,
    }
    return jwt.encode(payload, "stand-in signing key: tests only, signs nothing real", algorithm="HS256")


class _Handler(http.server.BaseHTTPRequestHandler):
    server_ref: ClearMLStandIn
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read .calls instead
        log.debug("ClearML stand-in: " + format, *args)

    def setup(self) -> None:
        super().setup()
        with self.server_ref._lock:
            self.server_ref._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:  # the client went away (it gave up on a held request)
            pass
        finally:
            with self.server_ref._lock:
                self.server_ref._connections.discard(self.connection)

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_GET

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        text = raw.decode("utf-8")
        try:
            return json.loads(text)
        except ValueError:
            # events.add_batch sends newline-separated JSON documents
            return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _handle(self) -> None:
        standin = self.server_ref
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        version = parts[0][1:] if parts and re.fullmatch(r"v\d+(\.\d+)*", parts[0]) else None
        endpoint = parts[-1] if parts else ""
        try:
            body = self._read_body()
        except ValueError:
            self._reply(endpoint, version, 400, 12, "Validation error: malformed JSON body", {})
            return
        if standin.latency:
            time.sleep(standin.latency)
        if standin._hold(endpoint, body):
            self.close_connection = True  # frozen, then gone: the request is dropped unanswered
            return
        if endpoint == "auth.login":
            self._login(endpoint, version)
            return
        if not (self.headers.get("Authorization") or "").startswith("Bearer "):
            self._reply(endpoint, version, 401, 20, "Unauthorized (missing credentials)", {})
            return
        if body is None and url.query:
            body = {k: v if len(v) > 1 else v[0] for k, v in parse_qs(url.query).items()}
        code, subcode, msg, data = standin._dispatch(endpoint, body, version)
        self._reply(endpoint, version, code, subcode, msg, data)

    def _login(self, endpoint: str, version: str | None) -> None:
        standin = self.server_ref
        with standin._lock:
            standin.calls.append(Call(endpoint, None, time.time()))
        header = self.headers.get("Authorization") or ""
        if header.startswith("Basic "):
            try:
                key, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                key, secret = "", ""
            if (key, secret) != (ACCESS_KEY, SECRET_KEY):
                self._reply(endpoint, version, 401, 22, "Unauthorized (invalid credentials)", {})
                return
        elif not header.startswith("Bearer "):
            self._reply(endpoint, version, 401, 20, "Unauthorized (missing credentials)", {})
            return
        self._reply(endpoint, version, 200, 0, "OK", {"token": _make_token()})

    def _reply(self, endpoint: str, version: str | None, code: int, subcode: int, msg: str, data: Any) -> None:
        meta = {
            "id": _new_id(),
            "trx": _new_id(),
            "endpoint": {"name": endpoint, "requested_version": version or "1.5", "actual_version": version or "1.5"},
            "result_code": code,
            "result_subcode": subcode,
            "result_msg": msg,
            "error_stack": None,
            "error_data": {},
        }
        payload = json.dumps({"meta": meta, "data": data}, default=str).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
