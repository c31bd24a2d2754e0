"""A webhook receiver for tracker-saver's events, standard library only: verify the signature, skip duplicates.

tracker-saver POSTs each event as JSON with ``Tracker-Saver-Signature: t=<unix time>,v1=<hex>``,
the HMAC-SHA256 of ``"<t>.<body>"`` keyed by the shared secret. Delivery is at least once (an
event is sent again until a 2xx answer comes back), so a receiver keeps the ids it has seen.

    python examples/webhook_receiver.py --port 8000 --secret "$WEBHOOK_SECRET"
    tracker-saver events --follow --webhook http://127.0.0.1:8000/events --secret "$WEBHOOK_SECRET"

``--self-test`` (the default without ``--port``) serves on a free port, sends itself a signed
event twice and a forged one, prints what it did and exits.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: How old a signature may be, in seconds: an older request is refused (a replay).
TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value tracker-saver sends: ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>">``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret``, less than TOLERANCE_S seconds ago (compared in constant time)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > TOLERANCE_S:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), f"t={timestamp},v1={fields.get('v1', '')}")


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
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not verify(self.server.secret, self.headers.get("Tracker-Saver-Signature", ""), body):
            self._answer(401, b"bad signature")
            return
        event = json.loads(body)
        with self.server.lock:  # one event at a time: dedup and hand-over are one step
            if event["id"] in self.server.seen:
                self.server.duplicates += 1
            else:
                self.server.seen.add(event["id"])
                self.server.on_event(event)
        self._answer(200, b"ok")

    def _answer(self, status: int, text: bytes) -> None:
        self.send_response(status)
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
    server.shutdown()
    print(f"verified and took event {got[0]['id']} ({got[0]['type']}): HTTP {first}")
    print(f"duplicate ignored: HTTP {again}, {server.duplicates} duplicate, {len(got)} event taken")
    print(f"forged signature refused: HTTP {forged}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="serve on this port of 127.0.0.1 until Ctrl-C")
    parser.add_argument("--secret", help="the secret tracker-saver signs with (--secret of tracker-saver events)")
    parser.add_argument("--self-test", action="store_true", help="send itself three events and exit (the default)")
    args = parser.parse_args()
    if args.port is None or args.self_test:
        self_test()
        return
    if not args.secret:
        parser.error("--secret is needed with --port")
    server = Receiver(("127.0.0.1", args.port), args.secret, lambda e: print(json.dumps(e), flush=True))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
