"""A webhook receiver for tracker-saver's events, standard library only: verify the signature, skip duplicates.

tracker-saver POSTs each event as JSON with ``Tracker-Saver-Signature: t=<unix time>,v1=<hex>``,
the HMAC-SHA256 of ``"<t>.<body>"`` keyed by the shared secret. Delivery is at least once (an
event is sent again until a 2xx answer comes back), so a receiver keeps the ids it has seen.
A request is judged by its headers before its body is read: a malformed signature gets 400, an
old one 401, a body over MAX_BODY bytes 413, unread; then the body is read, exactly its
Content-Length, and its signature compared in constant time.

    export TRACKER_SAVER_WEBHOOK_SECRET=...   # the secret, out of ps: both sides read it from here
    python examples/webhook_receiver.py --port 8000
    tracker-saver events --follow --webhook http://127.0.0.1:8000/events

``--self-test`` (the default without ``--port``) serves on a free port, sends itself a signed
event twice, a forged one, a malformed signature and a claim of a huge body, prints what it did
and exits.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: How old a signature may be, in seconds: an older request is refused (a replay).
TOLERANCE_S = 300
#: The largest body taken, in bytes (an event is well under 10 KB): a larger one is refused unread.
MAX_BODY = 1024 * 1024
#: What ``v1`` holds: a hex SHA-256 digest, lowercase, as tracker-saver writes it.
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value tracker-saver sends: ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>">``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def parse_signature(header: str) -> tuple[int, str] | None:
    """``(t, v1)`` of a signature header; None when it is malformed (no ``t`` number, no 64-hex-digit ``v1``).

    A header is text from anyone: a non-ASCII ``v1`` must be a refusal, never an exception.
    """
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part)
    timestamp, v1 = fields.get("t", ""), fields.get("v1", "")
    if not (timestamp.isascii() and timestamp.isdigit()) or _HEX_DIGEST.fullmatch(v1) is None:
        return None
    return int(timestamp), v1


def is_recent(timestamp: int, *, now: float | None = None) -> bool:
    """Whether ``timestamp`` is within TOLERANCE_S seconds of now (an older one is a replay)."""
    return abs((time.time() if now is None else now) - timestamp) <= TOLERANCE_S


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret``, less than TOLERANCE_S seconds ago (compared in constant time)."""
    parsed = parse_signature(header)
    if parsed is None or not is_recent(parsed[0], now=now):
        return False
    expected = signature(secret, parsed[0], body).rsplit("v1=", 1)[1]
    return hmac.compare_digest(expected.encode("ascii"), parsed[1].encode("ascii"))


class Receiver(ThreadingHTTPServer):
    """An HTTP server that takes signed events: each new id goes to ``on_event`` once, in arrival order."""

    def __init__(self, address: tuple[str, int], secret: str, on_event: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(address, _Handler)
        self.secret, self.on_event = secret, on_event
        self.seen: set[str] = set()
        self.duplicates = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        # The headers decide first, so a forged request never makes the server read a body.
        parsed = parse_signature(self.headers.get("Tracker-Saver-Signature", ""))
        if parsed is None:
            self._answer(400, b"malformed signature header")
            return
        if not is_recent(parsed[0]):
            self._answer(401, b"signature too old")
            return
        length = self.headers.get("Content-Length", "")
        if not (length.isascii() and length.isdigit()):
            self._answer(411, b"Content-Length needed")
            return
        if int(length) > MAX_BODY:
            self._answer(413, b"body too large")
            return
        body = self.rfile.read(int(length))
        if not verify(self.server.secret, self.headers["Tracker-Saver-Signature"], body):
            self._answer(401, b"bad signature")
            return
        try:
            event = json.loads(body)
            event_id = str(event["id"])
        except (ValueError, TypeError, KeyError):  # signed, yet not an event: the sender's bug
            self._answer(400, b"not an event")
            return
        with self.server.lock:  # one event at a time: dedup and hand-over are one step
            if event_id in self.server.seen:
                self.server.duplicates += 1
            else:
                self.server.seen.add(event_id)
                self.server.on_event(event)
        self._answer(200, b"ok")

    def _answer(self, status: int, text: bytes) -> None:
        self.send_response(status)
        self.send_header("Connection", "close")  # a refused body may be left unread: never read as a request
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass  # the events are printed instead


def _send(url: str, secret: str, body: bytes, *, forged: bool = False) -> int:
    header = signature("not the secret" if forged else secret, int(time.time()), body)
    request = urllib.request.Request(url, body, {"Tracker-Saver-Signature": header}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _claim(url: str, headers: dict[str, str]) -> int:
    """POST only ``headers`` (a Content-Length may claim a body that never comes); the answer's status."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.putrequest("POST", parts.path)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        return connection.getresponse().status
    finally:
        connection.close()


def self_test() -> None:
    got: list[dict[str, Any]] = []
    server = Receiver(("127.0.0.1", 0), "s3cret", got.append)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    body = json.dumps({"id": "evt_example", "type": "alias.moved", "alias": "production"}).encode()
    first, again, forged = (
        _send(url, "s3cret", body),
        _send(url, "s3cret", body),
        _send(url, "s3cret", body, forged=True),
    )
    now = int(time.time())
    malformed = _claim(url, {"Tracker-Saver-Signature": f"t={now},v1=\u00e9" + "0" * 63, "Content-Length": "2"})
    huge = _claim(url, {"Tracker-Saver-Signature": signature("s3cret", now, b""), "Content-Length": str(1 << 40)})
    server.shutdown()
    print(f"verified and took event {got[0]['id']} ({got[0]['type']}): HTTP {first}")
    print(f"duplicate ignored: HTTP {again}, {server.duplicates} duplicate, {len(got)} event taken")
    print(f"forged signature refused: HTTP {forged}")
    print(f"non-ASCII signature refused: HTTP {malformed}")
    print(f"a 1 TiB body refused unread: HTTP {huge}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="serve on this port of 127.0.0.1 until Ctrl-C")
    parser.add_argument(
        "--secret-file", help="read the secret from this file (else $TRACKER_SAVER_WEBHOOK_SECRET; never argv: ps)"
    )
    parser.add_argument("--self-test", action="store_true", help="send itself five requests and exit (the default)")
    args = parser.parse_args()
    if args.port is None or args.self_test:
        self_test()
        return
    secret = os.environ.get("TRACKER_SAVER_WEBHOOK_SECRET", "")
    if args.secret_file:
        with open(args.secret_file, encoding="utf-8") as file:
            secret = file.read().rstrip("\r\n")
    if not secret:
        parser.error("--port needs the secret: set TRACKER_SAVER_WEBHOOK_SECRET or pass --secret-file PATH")
    server = Receiver(("127.0.0.1", args.port), secret, lambda e: print(json.dumps(e), flush=True))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
