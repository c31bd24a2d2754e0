"""Webhooks (issue 46): a registry's events POSTed, signed, in order, at least once, to a real local HTTP receiver.

The receiver is ``examples/webhook_receiver.py``'s, on 127.0.0.1 port 0 in a thread; the relay's
clock is injected, so backoff is driven without sleeping, and the background thread's deliveries
are awaited on the queue the receiver fills.
"""

from __future__ import annotations

import importlib.util
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import attach, model, trainer_engine
from tracker_saver import ConfigError, RecordState
from tracker_saver.cli.main import main
from tracker_saver.core.records import UploadInfo
from tracker_saver.lifecycle.webhooks import Relay, Webhook, _post
from tracker_saver.registry import Query, open_registry
from tracker_saver.registry.sqlite import SQLiteRegistry

SECRET = "whsec_test_0123456789"
_spec = importlib.util.spec_from_file_location(
    "webhook_receiver", Path(__file__).resolve().parents[1] / "examples" / "webhook_receiver.py"
)
assert _spec is not None and _spec.loader is not None
receiver_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(receiver_example)


class Clock:
    """The relay's backoff clock: moves only when the test says."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def serve(port: int, got: Callable[[dict[str, Any]], None]) -> Any:
    server = receiver_example.Receiver(("127.0.0.1", port), SECRET, got)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: Any) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SQLiteRegistry]:
    reg = open_registry(str(tmp_path / "registry.db"))
    assert isinstance(reg, SQLiteRegistry)
    yield reg
    reg.close()


def save(registry: SQLiteRegistry, n: int) -> str:
    """A record made live (one ``record.live`` event), as a save makes it."""
    info = UploadInfo("p", "r", "s", f"s_{n}.pt", slot=n % 2, key=f"p/r/s.slot{n % 2}.pt", metadata={"score": n})
    record = registry.records.create_pending(info, uri=f"file:///o/{info.key}")
    return registry.records.make_live(record.id, sha256="0" * 64, size=1).id


def test_events_arrive_in_order_signed_once_each_after_the_receiver_comes_back(registry) -> None:
    got: list[dict[str, Any]] = []
    server = serve(0, got.append)
    port = server.server_address[1]
    stop(server)  # the receiver is down
    clock = Clock()
    relay = Relay(registry.history, Webhook(f"http://127.0.0.1:{port}/events", SECRET), clock=clock, base=2.0)
    ids = [save(registry, n) for n in range(3)]
    registry.labels.set_alias(ids[2], "production")

    assert relay.pump() == 0
    box = registry.history.outbox(relay.webhook.endpoint, relay.webhook.shown)
    assert (len(box.events), box.attempts, box.due, box.error[:15]) == (4, 1, clock.now + 2, "cannot connect:")
    assert relay.pump() == 0  # not due yet: no request made
    clock.now += 2
    assert relay.pump() == 0
    assert registry.history.outbox(relay.webhook.endpoint, "").due == clock.now + 4  # 2 * 2**1: backoff grows

    server = serve(port, got.append)  # the receiver comes back on the same port
    try:
        clock.now += 4
        assert relay.pump() == 4
    finally:
        stop(server)
    events = registry.history.events()
    assert [e["id"] for e in got] == [e.id for e in events]  # in order, each once, every one verified
    assert [e["type"] for e in got] == ["record.live"] * 3 + ["alias.moved"] and server.duplicates == 0
    box = registry.history.outbox(relay.webhook.endpoint, "")
    assert (box.events, box.attempts, box.error) == ([], 0, None)


def test_an_event_sent_again_after_a_lost_acknowledgement_is_taken_once(registry) -> None:
    got: list[dict[str, Any]] = []
    server = serve(0, got.append)
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    posts: list[str] = []

    def post_then_die_once(url: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
        _post(url, body, headers, timeout)  # the real request: the receiver takes it
        posts.append(headers["Tracker-Saver-Event"])
        if len(posts) == 2:
            raise ConnectionResetError("the answer was lost")  # as if the process died before noting it

    clock = Clock()
    relay = Relay(registry.history, Webhook(url, SECRET), clock=clock, post=post_then_die_once, base=1.0)
    for n in range(3):
        save(registry, n)
    try:
        assert relay.pump() == 1
        clock.now += 1
        assert relay.pump() == 2
    finally:
        stop(server)
    ids = [e.id for e in registry.history.events()]
    assert posts == [ids[0], ids[1], ids[1], ids[2]]  # at least once: the second went twice
    assert [e["id"] for e in got] == ids and server.duplicates == 1  # the receiver deduplicated it


def test_a_receiver_refuses_a_wrong_signature_and_the_relay_keeps_the_event(registry) -> None:
    got: list[dict[str, Any]] = []
    server = serve(0, got.append)
    relay = Relay(registry.history, Webhook(f"http://127.0.0.1:{server.server_address[1]}/e", "not the secret"))
    save(registry, 0)
    try:
        assert relay.pump() == 0
    finally:
        stop(server)
    box = registry.history.outbox(relay.webhook.endpoint, "")
    assert got == [] and len(box.events) == 1 and box.error == "HTTP 401"


def test_the_background_thread_delivers_new_events_while_the_registry_is_written(registry) -> None:
    arrived: queue.Queue[dict[str, Any]] = queue.Queue()
    server = serve(0, arrived.put)
    relay = Relay(registry.history, Webhook(f"http://127.0.0.1:{server.server_address[1]}/events", SECRET))
    relay.start(interval=0.01)
    try:
        ids = [save(registry, n) for n in range(3)]
        taken = [arrived.get(timeout=30)["record_id"] for _ in ids]
    finally:
        relay.stop()
        stop(server)
    assert taken == ids


def test_a_webhook_is_shown_without_its_path_token_or_secret() -> None:
    hook = Webhook("https://hooks.example.com/t/abc?token=xyz", "s3cret")
    assert repr(hook) == "Webhook('https://hooks.example.com')" and "s3cret" not in f"{hook!r}{hook.shown}"
    with pytest.raises(ConfigError, match="webhook URL 'ftp://x.example'… is not an http"):
        Webhook("ftp://x.example/a", "s")
    with pytest.raises(ConfigError, match="'http://hooks.example.com'… is not .* a numeric port"):
        Webhook("http://user:pw@hooks.example.com:80a/x", "s")  # a port that is none: no ValueError
    assert repr(Webhook("https://user:pw@hooks.example.com:8443/x", "s")) == "Webhook('https://hooks.example.com:8443')"
    with pytest.raises(ConfigError, match="a webhook needs a secret .* pass --secret"):
        Webhook("https://hooks.example.com", "")


def test_the_events_command_delivers_what_is_due_and_never_prints_the_secret(registry, capsys) -> None:
    got: list[dict[str, Any]] = []
    server = serve(0, got.append)
    url = f"http://127.0.0.1:{server.server_address[1]}/events?token=t0k3n"
    argv = ["events", "--webhook", url, "--secret", SECRET, "--registry", registry.path]
    try:
        assert main(argv) == 0  # the first time: the outbox starts here
        save(registry, 0)
        assert main(argv) == 0
    finally:
        stop(server)
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == f"sent 1 event to http://127.0.0.1:{server.server_address[1]}; 0 events left"
    assert SECRET not in out + err and "t0k3n" not in out + err and len(got) == 1


# -- TrackerSaver(webhook=...) ---------------------------------------------------------------------


def test_a_saver_with_a_webhook_sends_each_save_from_its_own_thread(local_target) -> None:
    arrived: queue.Queue[dict[str, Any]] = queue.Queue()
    server = serve(0, arrived.put)
    webhook = Webhook(f"http://127.0.0.1:{server.server_address[1]}/events", SECRET)
    try:
        train(local_target, 2, webhook=webhook)
        names = [arrived.get(timeout=30)["after"]["filename"] for _ in range(2)]
    finally:
        stop(server)
    assert names == ["model_1.pt", "model_2.pt"]


def test_a_dead_webhook_never_fails_a_save_and_its_events_wait_for_the_next_process(local_target) -> None:
    got: list[dict[str, Any]] = []
    server = serve(0, got.append)
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    stop(server)  # nothing listens there
    train(local_target, 3, webhook=Webhook(url, SECRET))
    registry = open_registry(local_target.registry)
    assert len(registry.records.query(Query(project="p", states=(RecordState.LIVE,)))) == 2
    server = serve(server.server_address[1], got.append)  # back, for the next process's relay
    try:
        later = Relay(registry.history, Webhook(url, SECRET), clock=lambda: time.time() + 3600)  # past the backoff
        assert later.pump() == 3
    finally:
        stop(server)
    assert [e["type"] for e in got] == ["record.live"] * 3


def train(target: Any, epochs: int, **options: Any) -> None:
    """``epochs`` saves of a two-slot ``model`` stream through a real Checkpoint, the saver closed after."""
    saver = target.saver(**options)
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=2)
    trainer.run([0], max_epochs=epochs)
    saver.close()
