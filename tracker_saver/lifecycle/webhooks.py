"""Deliver a registry's events to a webhook: signed JSON POSTs from its outbox, in order, retried with backoff.

Each event is POSTed as its JSON body (:meth:`~tracker_saver.registry.events.Event.body`) with
the header ``Tracker-Saver-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (as
Stripe signs its webhooks) and ``Tracker-Saver-Event: <event id>``. The outbox is the registry's
(``HistoryLog.outbox``): an event waits there until the receiver answers 2xx, across processes
and restarts, so delivery is at least once and a receiver deduplicates by event id
(``examples/webhook_receiver.py``). A failed try waits ``base * 2**attempts`` seconds (at most
``cap``) before the next, and the events behind it wait too: they arrive in order.

The dead-letter rule: one event never stops the outbox for good. An answer that refuses the event
itself (:data:`REFUSED`: 400, 409, 413, 415, 422; the same bytes would get the same answer) sets
it aside at once; so does a receiver's error (another 5xx) on the :data:`DEAD_AFTER`-th failed
try in a row. A set-aside event is recorded (``HistoryLog.dead``, ``tracker-saver events --dead``),
logged once as a warning, and may be sent again (:meth:`Relay.resend_dead`); the events behind it
flow. A receiver that is away, busy or set up wrongly (no connection, a timeout, 401, 403, 404,
408, 429, 502, 503, 504) is waited for, for as long as it takes: those say nothing about the event.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from tracker_saver.core.errors import ConfigError
from tracker_saver.registry.events import Event, HistoryLog

__all__ = ["DEAD_AFTER", "REFUSED", "SIGNATURE_HEADER", "Relay", "Webhook", "sign"]

log = logging.getLogger(__name__)

#: The header that carries the timestamp and the signature.
SIGNATURE_HEADER = "Tracker-Saver-Signature"
#: Sends one body to a URL with headers, within a timeout; raises on anything but a 2xx answer.
Post = Callable[[str, bytes, dict[str, str], float], None]
#: Answers that refuse the event itself: it is set aside at once (sending it again gets the same).
REFUSED = frozenset({400, 409, 413, 415, 422})
#: Answers of a gateway whose receiver is away: waited for, never a reason to set an event aside.
_AWAY = frozenset({502, 503, 504})
#: Failed tries in a row after which a receiver's own error (a 5xx not in ``_AWAY``) sets the event
#: aside: about 8.5 minutes of backoff at the default ``base`` of 1 s.
DEAD_AFTER = 10


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed by secret>``.

    Examples:
        >>> sign("s3cret", 1700000000, b"{}")
        't=1700000000,v1=97926816e98fbb41ccb1673225ff29a2f35369099990e1b1561651e7bd097ebf'
    """
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


@dataclass(frozen=True)
class Webhook:
    """Where to send events and the secret that signs them; neither is ever shown (a URL may carry a token).

    Either left out comes from the environment: ``TRACKER_SAVER_WEBHOOK_URL``, ``TRACKER_SAVER_WEBHOOK_SECRET``.
    A saver's ``webhook=`` sends the events from the saver's start on; ``backlog=True`` sends those
    that waited in the URL's outbox before it too (events of other runs and earlier processes).

    Examples:
        >>> hook = Webhook("https://hooks.example.com/ts?token=abc", "s3cret")
        >>> hook, hook.shown
        (Webhook('https://hooks.example.com'), 'https://hooks.example.com')
    """

    url: str = field(default="", repr=False)  # "": $TRACKER_SAVER_WEBHOOK_URL (out of ps and source code)
    secret: str = field(default="", repr=False)  # "": $TRACKER_SAVER_WEBHOOK_SECRET
    backlog: bool = False  # a saver's relay: also send what waited in the outbox before it started

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", self.url or os.environ.get("TRACKER_SAVER_WEBHOOK_URL", ""))
        object.__setattr__(self, "secret", self.secret or os.environ.get("TRACKER_SAVER_WEBHOOK_SECRET", ""))
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or _port(parts) is None:
            raise ConfigError(
                f"webhook URL {self.shown!r}… is not an http(s) URL with a host and, if any, a numeric port: pass e.g. "
                "https://hooks.example.com/path, or set TRACKER_SAVER_WEBHOOK_URL"
            )
        if not self.secret:
            raise ConfigError(
                "a webhook needs a secret to sign its events (any long random string): set TRACKER_SAVER_WEBHOOK_SECRET "
                "or pass --secret-file PATH (in Python: Webhook(url, secret))"
            )

    @property
    def shown(self) -> str:
        """The scheme, host and port only: what messages and the registry show of the URL."""
        parts = urlsplit(self.url)
        port = _port(parts)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{port}' if port else ''}"

    @property
    def endpoint(self) -> str:
        """The key of its outbox in the registry: a hash of the URL (the registry never holds the URL)."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:32]

    def __repr__(self) -> str:
        return f"Webhook({self.shown!r})"


def _port(parts: SplitResult) -> int | None:
    """The port of the URL ``parts``; ``0`` for none given, ``None`` for one that is not a port (``h:abc``).

    Examples:
        >>> [_port(urlsplit(u)) for u in ("https://u:pw@h.example.com:8443/p", "https://h.example.com", "http://h:abc")]
        [8443, 0, None]
    """
    try:
        return parts.port or 0
    except ValueError:
        return None


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
    parts = urlsplit(url)
    if parts.username is not None:  # user:password@ is HTTP Basic auth, as curl sends it; urllib takes it for the host
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers = {**headers, "Authorization": f"Basic {base64.b64encode(login).decode('ascii')}"}
        url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (http(s) only: Webhook checks)
        answer.read()


class Relay:
    """Sends a webhook's outbox, oldest first; :meth:`pump` once, or :meth:`start` a background thread.

    Args:
        log: the registry's events and outboxes (``history_of(registry, ...)``).
        webhook: where to, and the secret.
        clock: seconds since the epoch that backoff is measured on (tests inject one); a signature
            carries the wall time of its request.
        post: sends one request (tests may inject one; the default is urllib's, with ``timeout``).
        base, cap: the backoff: ``base * 2**attempts`` seconds after a failure, at most ``cap``.
        dead_after: failed tries in a row after which a receiver's error (a 5xx but 502, 503,
            504) sets the event aside (the module's dead-letter rule).

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> relay = Relay(open_registry(":memory:").history, Webhook("http://127.0.0.1:9/h", "s"))
        >>> relay.pump()
        0
    """

    def __init__(
        self,
        log: HistoryLog,
        webhook: Webhook,
        *,
        clock: Callable[[], float] = time.time,
        post: Post = _post,
        timeout: float = 10.0,
        base: float = 1.0,
        cap: float = 300.0,
        dead_after: int = DEAD_AFTER,
    ) -> None:
        self.log, self.webhook, self.clock, self._post = log, webhook, clock, post
        self.timeout, self.base, self.cap, self.dead_after = timeout, base, cap, dead_after
        self.log.outbox(webhook.endpoint, webhook.shown, limit=0)  # its outbox starts with the next event
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None

    def pump(self) -> int:
        """Send every due event in order until the outbox is empty or one fails; how many got through.

        A failure is noted in the registry (attempts, the next try's time, why) and never raised;
        an event the dead-letter rule sets aside is recorded, logged once, and passed.
        """
        sent = 0
        while True:
            box = self.log.outbox(self.webhook.endpoint, self.webhook.shown)
            if not box.events or box.due > self.clock():
                return sent
            attempts = box.attempts
            for event in box.events:
                try:
                    self._send(event)
                except Exception as exc:  # noqa: BLE001 (a dead webhook never fails anything: noted, retried)
                    if self._refused(exc, attempts + 1):
                        self._set_aside(event, _why(exc), attempts + 1)
                        attempts = 0
                        continue
                    wait = min(self.cap, self.base * 2**attempts)
                    self.log.failed(self.webhook.endpoint, due=self.clock() + wait, error=_why(exc))
                    return sent
                self.log.delivered(self.webhook.endpoint, event.seq)
                sent, attempts = sent + 1, 0

    def _refused(self, exc: Exception, attempts: int) -> bool:
        """Whether the dead-letter rule sets the event aside after this failure, its ``attempts``-th."""
        if not isinstance(exc, urllib.error.HTTPError):
            return False
        code = exc.code
        return code in REFUSED or (code >= 500 and code not in _AWAY and attempts >= self.dead_after)

    def _set_aside(self, event: Event, error: str, attempts: int) -> None:
        self.log.set_aside(self.webhook.endpoint, event.seq, error=error, attempts=attempts)
        log.warning(
            "webhook %s: event %s (seq %d, %s) set aside after %s; later events go on: "
            "see `tracker-saver events --dead`, and send it again with --dead --webhook",
            self.webhook.shown,
            event.id,
            event.seq,
            event.type,
            error,
        )

    def pass_backlog(self) -> int:
        """Move the outbox past the events waiting in it now, unsent; how many it passed.

        A saver's relay starts from its own start: without this, a URL used before would get every
        event written since it was last used, other runs' included. They stay in the registry's
        events (``tracker-saver events``).
        """
        passed = 0
        while box := self.log.outbox(self.webhook.endpoint, self.webhook.shown, limit=1000).events:
            self.log.delivered(self.webhook.endpoint, box[-1].seq)
            passed += len(box)
        return passed

    def resend_dead(self) -> int:
        """Send this webhook's set-aside events again, oldest first; how many got through (now out of its dead letters).

        A failure leaves the event set aside and is never raised.
        """
        sent = 0
        for dead in self.log.dead(self.webhook.endpoint):
            try:
                self._send(dead.event)
            except Exception:  # noqa: BLE001, S112 (it stays set aside: `events --dead` shows it)
                continue
            self.log.resent(self.webhook.endpoint, dead.event.seq)
            sent += 1
        return sent

    def _send(self, event: Event) -> None:
        body = event.body()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "tracker-saver-webhook",
            "Tracker-Saver-Event": event.id,
            SIGNATURE_HEADER: sign(self.webhook.secret, int(time.time()), body),  # when sent: wall time
        }
        self._post(self.webhook.url, body, headers, self.timeout)

    def start(self, interval: float = 1.0) -> None:
        """Pump every ``interval`` seconds (or at once after :meth:`poke`) in a daemon thread until :meth:`stop`.

        Nothing it meets stops it: a registry it cannot read is logged, and tried again.
        """

        def loop() -> None:
            while True:
                try:
                    self.pump()
                except Exception as exc:  # noqa: BLE001 (the thread outlives a locked or lost registry)
                    log.warning("webhook %s: events not sent this time (%s); trying again", self.webhook.shown, exc)
                if self._stop.is_set():  # this pump began after the stop: what was written before it is tried
                    return
                self._wake.wait(interval)
                self._wake.clear()

        self._thread = threading.Thread(target=loop, name=f"tracker-saver webhook {self.webhook.shown}", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Wake the thread now: an event was just written (a save, an alias move)."""
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread after one last pump (a save's event written just before is tried, not left
        for later); what that pump cannot deliver within ``timeout`` stays in the outbox."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)


def _why(exc: Exception) -> str:
    """A failed try in a few words, never the URL (it may carry a token)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot connect: {exc.reason}"
    return type(exc).__name__
