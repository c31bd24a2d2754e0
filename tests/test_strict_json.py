"""Standard JSON out (issue 51, case 4): ±inf scores as typed strings that read back exactly, and a webhook's
dead letters.

A real Ignite training whose score_function returns +inf, -inf and NaN fills a SQLite registry; the
CLI's ``--json``, ``events --json``, the UI's API (the real app through its test client) and webhook
bodies (received by a real HTTP server on 127.0.0.1) are each parsed with a strict parser, which
refuses Python's bare ``Infinity``/``NaN`` as JavaScript's ``JSON.parse`` does.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers import Target, attach, model, trainer_engine
from tracker_saver.cli.main import main
from tracker_saver.core.jsonout import as_float, dumps
from tracker_saver.core.records import RecordState, UploadInfo
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.lifecycle.webhooks import DEAD_AFTER, Relay, Webhook
from tracker_saver.registry import Query, open_registry
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.ui.app import create_app

#: What the training's score_function returns, epoch by epoch.
SCORES = [math.inf, -math.inf, math.nan]
#: The score each record keeps: NaN is recorded as absent.
KEPT = [math.inf, -math.inf, None]
SECRET = "whsec_strict_0123456789"


def strict(text: str) -> Any:
    """``text`` parsed as a standard parser reads JSON: a bare ``Infinity``, ``-Infinity`` or ``NaN`` is an error."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not standard JSON")

    return json.loads(text, parse_constant=refuse)


def train(target: Target, run: str = "r") -> None:
    """Three epochs of a real Checkpoint whose score_function returns +inf, -inf, then NaN; all kept."""
    saver = target.saver(run)
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=None, scores=SCORES)
    trainer.run([0], max_epochs=len(SCORES))
    saver.close()


@pytest.fixture
def trained(local_target: Target) -> Target:
    train(local_target)
    return local_target


def cli(capsys: Any, *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return str(capsys.readouterr().out)


class Receiver(ThreadingHTTPServer):
    """A webhook receiver on 127.0.0.1: keeps each raw body, answers the next of ``answers`` (then 200)."""

    def __init__(self, answers: list[int]) -> None:
        self.answers, self.bodies = list(answers), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                code = receiver.answers.pop(0) if receiver.answers else 200
                if code == 200:
                    receiver.bodies.append(body)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/events"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver([])
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SQLiteRegistry]:
    reg = open_registry(str(tmp_path / "registry.db"))
    assert isinstance(reg, SQLiteRegistry)
    yield reg
    reg.close()


def make_live(registry: SQLiteRegistry, n: int, slot: int | None = None) -> str:
    """A record made live (one ``record.live`` event), as a save makes it; in slot ``n`` unless given."""
    slot = n if slot is None else slot
    info = UploadInfo("p", "r", "s", f"s_{n}.pt", slot=slot, key=f"p/r/s.slot{slot}.pt", metadata={"score": float(n)})
    return registry.records.make_live(
        registry.records.create_pending(info, uri=f"file:///o/{info.key}").id, sha256="0" * 64, size=1
    ).id


# -- the CLI, events, the UI's API ----------------------------------------------------------------------------


def test_models_list_json_is_standard_json_and_reads_infinite_scores_back_exactly(trained, capsys) -> None:
    out = cli(capsys, "models", "list", "--registry", trained.registry, "--sort", "id", "--json")
    items = strict(out)
    assert [as_float(i["metadata"]["score"]) for i in items] == KEPT
    assert [as_float(i["metadata"]["priority"]) for i in items] == KEPT
    assert {i["metadata_types"]["score"] for i in items} == {"float", "none"}
    assert items[0]["metadata"]["score"] == "Infinity" and items[1]["metadata"]["score"] == "-Infinity"


def test_models_show_and_history_json_are_standard_json(trained, capsys) -> None:
    shown = strict(cli(capsys, "models", "show", "1", "--registry", trained.registry, "--json"))
    assert as_float(shown["metadata"]["score"]) == math.inf and shown["metadata_types"]["score"] == "float"
    history = strict(cli(capsys, "models", "history", "2", "--registry", trained.registry, "--json"))
    assert [as_float(r["metadata"]["score"]) for r in history] == [-math.inf]


def test_events_json_lines_are_standard_json_and_carry_the_exact_score(trained, capsys) -> None:
    lines = cli(capsys, "events", "--registry", trained.registry, "--json").splitlines()
    live = [e for e in map(strict, lines) if e["type"] == "record.live"]
    assert [as_float(e["after"]["score"]) for e in live] == KEPT
    registry = open_registry(trained.registry)
    try:  # stored as standard JSON too, and read back by the Python API as the float it was
        assert [e.after["score"] for e in registry.history.events() if e.type == "record.live" and e.after] == KEPT
    finally:
        registry.close()


def test_the_ui_api_carries_infinite_scores_as_typed_strings(trained) -> None:
    client = TestClient(create_app(trained.registry), raise_server_exceptions=False)
    page = client.get("/api/models", params={"order_by": "id"})
    assert page.status_code == 200, page.text
    items = strict(page.text)["items"]
    assert [i["score"] for i in items] == ["Infinity", "-Infinity", None]
    assert [as_float(i["metadata"]["score"]) for i in items] == KEPT
    assert [i["metadata_types"]["score"] for i in items] == ["float", "float", "none"]
    detail = client.get(f"/api/models/{items[1]['id']}")
    assert as_float(strict(detail.text)["record"]["score"]) == -math.inf
    schema = client.get("/openapi.json").json()["components"]["schemas"]["RecordOut"]["properties"]["score"]
    assert {"enum": ["Infinity", "-Infinity"]} in schema["anyOf"]  # the schema says what the API writes
    chart = client.get("/api/chart")
    assert chart.status_code == 200 and strict(chart.text) == {"series": []}  # no finite point to draw


def test_a_text_value_that_reads_infinity_keeps_its_type(tmp_path, capsys) -> None:
    path = str(tmp_path / "registry.db")
    registry = open_registry(path)
    try:
        info = UploadInfo("p", "r", "s", "s_1.pt", slot=0, key="p/r/s.slot0.pt", metadata={"note": "Infinity"})
        registry.records.create_pending(info, uri="file:///o/p/r/s.slot0.pt")
    finally:
        registry.close()
    (item,) = strict(cli(capsys, "models", "list", "--registry", path, "--json"))
    assert (item["metadata"]["note"], item["metadata_types"]["note"]) == ("Infinity", "str")
    (item,) = strict(TestClient(create_app(path)).get("/api/models").text)["items"]
    assert (item["metadata"]["note"], item["metadata_types"]["note"]) == ("Infinity", "str")


def test_dumps_writes_each_non_finite_float_as_a_string_that_reads_back() -> None:
    value = {"a": [math.inf, {"b": -math.inf}], "c": (math.nan, 1.5), "d": "x"}
    parsed = strict(dumps(value))
    assert parsed == {"a": ["Infinity", {"b": "-Infinity"}], "c": ["NaN", 1.5], "d": "x"}
    assert [as_float(v) for v in (parsed["a"][0], parsed["a"][1]["b"], parsed["c"][1])] == [math.inf, -math.inf, 1.5]
    assert math.isnan(as_float(parsed["c"][0]))


def test_an_event_stored_by_an_earlier_release_with_a_bare_infinity_still_reads(registry) -> None:
    with registry.history._db.atomic() as conn:
        conn.execute(
            "INSERT INTO events (id, time, type, project, record_id, after) VALUES ('evt_old', 0, 'record.live', 'p', 1,"
            " '{\"score\": Infinity}')"
        )
    (event,) = registry.history.events()
    assert event.after == {"score": math.inf}
    assert strict(event.body().decode())["after"] == {"score": "Infinity"}


# -- webhooks: standard bodies, dead letters -------------------------------------------------------------------


def test_a_webhook_body_is_standard_json_and_a_refused_event_lets_later_ones_through(
    local_target, receiver, caplog
) -> None:
    receiver.answers = [400]  # the receiver refuses the first event (as one would refuse bad JSON)
    registry = open_registry(local_target.registry)
    relay = Relay(registry.history, Webhook(receiver.url, SECRET))
    train(local_target)
    with caplog.at_level(logging.WARNING, logger="tracker_saver.lifecycle.webhooks"):
        assert relay.pump() == 2
        assert relay.pump() == 0  # nothing left, and the set-aside event is not warned about again
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "tracker_saver.lifecycle.webhooks"]
    assert "seq 1, record.live) set aside after HTTP 400" in warning and "/events" not in warning
    bodies = [strict(b.decode()) for b in receiver.bodies]
    assert [as_float(b["after"]["score"]) for b in bodies] == KEPT[1:]
    (dead,) = registry.history.dead()
    assert (dead.event.seq, dead.error, dead.attempts, dead.shown) == (1, "HTTP 400", 1, relay.webhook.shown)
    assert registry.history.outbox(relay.webhook.endpoint, "").events == []
    assert relay.resend_dead() == 1  # the receiver takes it now: out of the dead letters
    assert as_float(strict(receiver.bodies[-1].decode())["after"]["score"]) == math.inf
    assert registry.history.dead() == []
    registry.close()


def test_events_dead_lists_a_set_aside_event_and_sends_it_again(registry, receiver, capsys) -> None:
    receiver.answers = [422]
    argv = ["events", "--webhook", receiver.url, "--secret", SECRET, "--registry", registry.path]
    assert main(argv) == 0  # the first time: the outbox starts here
    ids = [make_live(registry, n) for n in range(2)]
    assert main(argv) == 0
    assert "sent 1 event" in capsys.readouterr().out.splitlines()[-1]
    listed = strict(cli(capsys, "events", "--dead", "--registry", registry.path, "--json"))
    assert [(d["event"]["record_id"], d["error"], d["attempts"]) for d in listed] == [(ids[0], "HTTP 422", 1)]
    text = cli(capsys, "events", "--dead", "--registry", registry.path)
    assert f"record {ids[0]}" in text and "HTTP 422 after 1 try" in text
    out = cli(capsys, "events", "--dead", "--webhook", receiver.url, "--secret", SECRET, "--registry", registry.path)
    assert out.strip().endswith("0 still set aside") and registry.history.dead() == []
    assert [strict(b.decode())["record_id"] for b in receiver.bodies] == [ids[1], ids[0]]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_receiver_error_sets_an_event_aside_after_the_tenth_try_in_a_row(registry, receiver) -> None:
    clock = Clock()
    relay = Relay(registry.history, Webhook(receiver.url, SECRET), clock=clock, cap=1.0)
    ids = [make_live(registry, n) for n in range(2)]
    receiver.answers = [500] * DEAD_AFTER
    for _ in range(DEAD_AFTER - 1):
        assert relay.pump() == 0
        clock.now += 1
    assert registry.history.dead() == [] and len(registry.history.outbox(relay.webhook.endpoint, "").events) == 2
    assert relay.pump() == 1  # the tenth 500: set aside, and the next event goes
    assert [d.event.record_id for d in registry.history.dead()] == [ids[0]]
    assert [strict(b.decode())["record_id"] for b in receiver.bodies] == [ids[1]]


def test_a_receiver_that_is_away_is_waited_for_and_nothing_is_set_aside(registry, receiver) -> None:
    clock = Clock()
    relay = Relay(registry.history, Webhook(receiver.url, SECRET), clock=clock, cap=1.0)
    ids = [make_live(registry, n) for n in range(2)]
    receiver.answers = [503, 429, 401] * 4  # a gateway without its receiver, a busy one, a wrong secret
    for _ in range(12):
        assert relay.pump() == 0
        clock.now += 1
    assert relay.pump() == 2
    assert registry.history.dead() == []
    assert [strict(b.decode())["record_id"] for b in receiver.bodies] == ids


def test_a_prune_keeps_the_event_of_a_set_aside_record(registry, receiver) -> None:
    relay = Relay(registry.history, Webhook(receiver.url, SECRET))
    receiver.answers = [400]
    older, newer = (make_live(registry, n, slot=0) for n in range(2))
    for record_id in (older, newer):
        registry.records.set_state(record_id, RecordState.EVICTED, expected=[RecordState.LIVE])
    assert relay.pump() == 1
    assert [p.record_id for p in registry.history.prune(Query(project="p"), Retention(keep_last=0))] == [older]
    assert [d.event.record_id for d in registry.history.dead()] == [older]  # still there, to be sent again
