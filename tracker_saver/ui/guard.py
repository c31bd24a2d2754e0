"""What the UI refuses before any endpoint runs: other host names, cross-site writes and downloads, large bodies.

The UI has no authentication (docs/security.md, "The web UI"). So, for every request:

- **Host allow-list.** Only the names the server was bound to (and ``--allow-host`` names), and
  the address the request's connection arrived at, are answered: a DNS-rebinding page, whose
  requests carry its own name in ``Host``, gets 400.
- **No cross-site writes or downloads.** A state-changing request (anything but GET, HEAD and
  OPTIONS) or a download is refused with 403 when the browser says another site made it: by
  ``Origin`` when it is sent, else by ``Sec-Fetch-Site``, else by ``Referer``. A request with
  none of them (curl, scripts) is not a browser's cross-site request and is answered.
- **A body limit.** A request body over :data:`MAX_BODY_BYTES` gets 413 before the app reads it.

Every response, refusals included, carries :data:`SECURITY_HEADERS`.

Examples:
    >>> cross_site({"origin": "http://evil.example"}, "127.0.0.1:8765"), cross_site({}, "127.0.0.1:8765")
    (True, False)
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CSP", "MAX_BODY_BYTES", "SECURITY_HEADERS", "Guard", "cross_site", "host_name"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Scripts, styles and requests only from this origin; no plugins, frames or inline script.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: The largest request body answered: 100 tags of 200 characters, each as a 6-byte JSON escape, fit.
MAX_BODY_BYTES = 256 * 1024
#: Requests that change nothing: the only ones a browser may send cross-site (downloads aside).
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
#: A download: its bytes are what a cross-site page must not make a browser fetch.
_DOWNLOAD = re.compile(r"/api/models/[^/]+/download")
#: ``Sec-Fetch-Site`` values of a request this site made, or the user typed.
_OWN_FETCH = ("same-origin", "none")


def host_name(host: str) -> str:
    """The name in a ``Host`` header, without port or IPv6 brackets, lower case.

    Examples:
        >>> host_name("LocalHost:8765"), host_name("[::1]:8765"), host_name("127.0.0.1")
        ('localhost', '::1', '127.0.0.1')
    """
    if host.startswith("["):
        return host[1:].partition("]")[0].lower()
    return host.rpartition(":")[0].lower() if host.count(":") == 1 else host.lower()


def cross_site(headers: Mapping[str, str], host: str) -> bool:
    """Whether a browser says another site made this request: ``Origin``, else ``Sec-Fetch-Site``, else ``Referer``.

    ``host`` is the request's ``Host`` header; a request with none of the three is not cross-site.

    Examples:
        >>> cross_site({"sec-fetch-site": "cross-site"}, "h:1"), cross_site({"referer": "http://h:1/"}, "h:1")
        (True, False)
    """
    origin = headers.get("origin")
    if origin is not None:
        return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.lower() not in _OWN_FETCH
    referer = headers.get("referer")
    if referer is not None:
        return urlsplit(referer).netloc.lower() != host.lower()
    return False


class Guard:
    """ASGI middleware: the Host allow-list, cross-site refusals, the body limit and the security headers.

    Args:
        app: the app it guards.
        hosts: the host names to answer (any port); ``None`` answers any.
        max_body: the largest request body, in bytes.
    """

    def __init__(self, app: App, *, hosts: Collection[str] | None, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.hosts = None if hosts is None else {h.strip("[]").lower() for h in hosts}
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope, headers)
        body: list[Message] = []
        if refused is None:
            body, refused = await self._body(receive, headers)
        if refused is not None:
            await _answer(send, *refused)
            return
        replay = iter(body)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.decode("latin-1").lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.lower() not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, replayed, with_headers)

    def _refusal(self, scope: Scope, headers: Mapping[str, str]) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if self.hosts is not None and host_name(host) not in {*self.hosts, *_arrived_at(scope)}:
            return 400, (
                "this server answers only its own host names: open it at the address it printed, or start it "
                "with --allow-host NAME for a name it should answer to (a reverse proxy's)"
            )
        writes = scope["method"] not in _SAFE_METHODS
        if (writes or _DOWNLOAD.fullmatch(scope["path"])) and cross_site(headers, host):
            what = "change" if writes else "download"
            return (
                403,
                f"cross-origin request refused: a page of another site may not {what} records; use the UI itself",
            )
        return None

    async def _body(self, receive: Receive, headers: Mapping[str, str]) -> tuple[list[Message], tuple[int, str] | None]:
        """The request's body messages, read up to the limit, or the refusal of a larger one."""
        too_large = 413, f"request body over {self.max_body // 1024} KiB refused: the API takes names and tags only"
        length = headers.get("content-length", "0")
        if not length.isdigit() or int(length) > self.max_body:
            return [], too_large
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages, None  # the client went away: the app sees it
            size += len(message.get("body", b""))
            if size > self.max_body:
                return [], too_large
            if not message.get("more_body", False):
                return messages, None


def _arrived_at(scope: Scope) -> list[str]:
    """The IP address this connection arrived at (a server on 0.0.0.0 reached by its LAN address), if known."""
    server = scope.get("server") or ("",)
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(str(server[0])))]
    return []


async def _answer(send: Send, status: int, detail: str) -> None:
    """Send ``{"detail": ...}`` with ``status`` and the security headers."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
