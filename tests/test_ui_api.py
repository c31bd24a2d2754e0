"""The UI's JSON API over a registry filled by a real Ignite training: filters, sorting, pages,
edits, downloads, errors, security headers, the server's warning, and a schema-driven fuzz."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest_browser import Training
from tests.helpers import ROOT
from tracker_saver import models
from tracker_saver.cli.main import main as cli_main
from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.ui.app import create_app
from tracker_saver.ui.server import LOOPBACK_HOSTS, serve


@pytest.fixture
def client(ui_training: Training) -> TestClient:
    return TestClient(create_app(ui_training.registry), raise_server_exceptions=False)


def names(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["name"] for item in response.json()["items"]]


def test_models_page_lists_every_record_with_its_semantic_name_and_total(client, ui_training):
    body = client.get("/api/models", params={"order_by": "created_at"}).json()
    expected = models.find_models(order_by="created_at", registry=ui_training.registry)
    assert body["total"] == len(expected) == 8
    assert [i["name"] for i in body["items"]] == [r.name for r in expected]
    first = body["items"][0]
    assert first["name"] == "best_model_1_val_acc=0.5000.pt"
    assert (first["step"], first["score"], first["score_name"], first["state"]) == (1, 0.5, "val_acc", "evicted")
    assert {i["state"] for i in body["items"]} == {"live", "evicted"}


def test_ids_and_created_at_are_the_same_values_of_the_same_types_as_in_the_cli_json(client, ui_training, capsys):
    assert cli_main(["models", "list", "--registry", ui_training.registry, "--sort", "id", "--json"]) == 0
    cli = [(r["id"], r["created_at"]) for r in json.loads(capsys.readouterr().out)]
    api = [(i["id"], i["created_at"]) for i in client.get("/api/models", params={"order_by": "id"}).json()["items"]]
    assert api == cli and len(cli) == 8
    assert all(isinstance(i, str) and isinstance(c, float) for i, c in api)
    detail = client.get(f"/api/models/{api[0][0]}").json()["record"]
    assert (detail["id"], detail["created_at"]) == cli[0]


def test_where_expressions_joined_by_and_filter_like_the_cli(client, ui_training):
    got = names(client.get("/api/models", params={"where": "score>0.55 and global_step<=3", "order_by": "id"}))
    expected = models.find_models(where=["score>0.55", "global_step<=3"], order_by="id", registry=ui_training.registry)
    assert got == [r.name for r in expected] == ["best_model_2_val_acc=0.7000.pt", "best_model_3_val_acc=0.6000.pt"]


def test_project_run_stream_and_state_filters_narrow_the_records(client, ui_training):
    params = {"project": "p", "run": "r", "stream": "model", "state": "live"}
    body = client.get("/api/models", params=params).json()
    assert body["total"] == 2
    assert {(i["stream"], i["state"]) for i in body["items"]} == {("model", "live")}
    assert client.get("/api/models", params={"run": "other"}).json()["total"] == 0


@pytest.mark.parametrize(
    "key", ["name", "project", "run", "stream", "global_step", "score", "state", "size", "created_at"]
)
def test_every_column_sorts_on_the_server_both_ways(client, ui_training, key):
    for order in (key, "-" + key):
        got = names(client.get("/api/models", params={"order_by": order}))
        assert got == [r.name for r in models.find_models(order_by=order, registry=ui_training.registry)]


def test_pages_cover_every_record_exactly_once(client, ui_training):
    seen: list[str] = []
    for offset in range(0, 9, 3):
        body = client.get("/api/models", params={"offset": offset, "limit": 3, "order_by": "id"}).json()
        assert body["total"] == 8 and body["offset"] == offset and body["limit"] == 3
        seen += [i["id"] for i in body["items"]]
    assert seen == [r.id for r in models.find_models(order_by="id", registry=ui_training.registry)]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": 0}, "limit: Input should be greater than or equal to 1"),
        ({"limit": 501}, "limit: Input should be less than or equal to 500"),
        ({"offset": -1}, "offset: Input should be greater than or equal to 0"),
        ({"order_by": "score; DROP TABLE records"}, "order_by: String should match pattern"),
        ({"state": "gone"}, "state: Input should be"),
        ({"where": "score>abc"}, "'abc' is not a number"),
        ({"where": "score"}, "is not 'KEY OP VALUE'"),
    ],
)
def test_bad_input_is_422_with_a_one_line_message(client, params, message):
    response = client.get("/api/models", params=params)
    assert response.status_code == 422
    assert message in response.json()["detail"]


def test_unknown_record_is_404_and_the_message_shows_no_path(client, ui_training):
    response = client.get("/api/models/999")
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert "record 999 does not exist" in detail
    assert str(Path(ui_training.registry).parent) not in detail and "sqlite:" not in detail


def test_rename_persists_and_rejects_empty_and_long_names_with_their_message(client, ui_training):
    record = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    response = client.patch(f"/api/models/{record.id}", json={"name": "the one we ship"})
    assert response.status_code == 200 and response.json()["name"] == "the one we ship"
    assert models.get_model(record.id, registry=ui_training.registry).name == "the one we ship"
    for bad, message in [("", "is empty"), ("   ", "is empty"), ("x" * 256, "give a name of at most 255")]:
        response = client.patch(f"/api/models/{record.id}", json={"name": bad})
        assert response.status_code == 422 and message in response.json()["detail"]
    assert client.patch(f"/api/models/{record.id}", json={"name": "x" * 255}).status_code == 200
    assert client.patch(f"/api/models/{record.id}", json={}).status_code == 422


def test_details_show_the_record_and_the_history_of_its_slot_oldest_first(client, ui_training):
    live = models.find_models(
        stream="best_model", states=["live"], order_by="created_at", registry=ui_training.registry
    )
    body = client.get(f"/api/models/{live[-1].id}").json()
    assert body["record"]["sha256"] == live[-1].sha256 and body["record"]["uri"] == live[-1].uri
    assert body["record"]["metadata"]["global_step"] == live[-1].global_step
    history = models.slot_history(live[-1], registry=ui_training.registry)
    assert [h["id"] for h in body["history"]] == [r.id for r in history]
    assert len(history) >= 2 and [h["state"] for h in body["history"]] == ["evicted"] * (len(history) - 1) + ["live"]


def test_tags_are_added_and_removed(client, ui_training):
    rid = models.find_models(registry=ui_training.registry)[0].id
    assert client.post(f"/api/models/{rid}/tags", json={"tags": ["keep", "paper"]}).json()["tags"] == ["keep", "paper"]
    assert client.delete(f"/api/models/{rid}/tags", params={"tag": "keep"}).json()["tags"] == ["paper"]
    assert models.get_model(rid, registry=ui_training.registry).tags == ("paper",)
    assert client.post(f"/api/models/{rid}/tags", json={"tags": []}).status_code == 422


def test_user_alias_is_set_and_removed_and_derived_ones_show(client, ui_training):
    best = models.resolve_model("p/r/best_model@best", registry=ui_training.registry)
    assert {"best"} <= set(client.get(f"/api/models/{best.id}").json()["record"]["aliases"])
    named = client.post(f"/api/models/{best.id}/aliases", json={"alias": "production"}).json()
    assert "production" in named["aliases"] and named["state"] == "pinned"  # a slot record's alias goes on a pin
    assert models.resolve_model("p@production", registry=ui_training.registry).id == named["id"]
    assert "production" not in client.delete(f"/api/models/{named['id']}/aliases/production").json()["aliases"]
    assert client.delete(f"/api/models/{named['id']}/aliases/production").status_code == 404
    assert client.post(f"/api/models/{best.id}/aliases", json={"alias": "no spaces"}).status_code == 422


def test_pin_copies_the_record_and_unpin_deletes_the_copy(client, ui_training):
    live = models.find_models(stream="model", states=["live"], registry=ui_training.registry)[0]
    pinned = client.post(f"/api/models/{live.id}/pin").json()
    assert (
        pinned["state"] == "pinned" and pinned["sha256"] == live.sha256 and pinned["metadata"]["pinned_from"] == live.id
    )
    assert client.delete(f"/api/models/{pinned['id']}/pin").status_code == 204
    assert client.get(f"/api/models/{pinned['id']}").status_code == 404
    assert client.delete(f"/api/models/{live.id}/pin").status_code == 409  # only pinned records unpin


def test_download_streams_the_bytes_the_record_names(client, ui_training):
    live = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    response = client.get(f"/api/models/{live.id}/download")
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == live.sha256 == response.headers["x-checkpoint-sha256"]
    assert live.name.replace("=", "%3D") in response.headers["content-disposition"]


def test_download_of_a_corrupted_object_is_409_and_delivers_no_bytes(client, ui_training):
    live = models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]
    assert live.uri is not None
    path = Path(live.uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # one flipped bit pattern, same size: only the sha256 can tell
    path.write_bytes(bytes(data))
    response = client.get(f"/api/models/{live.id}/download")
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert "overwritten or corrupted" in detail and str(path.parent) not in detail
    evicted = models.find_models(stream="best_model", states=["evicted"], registry=ui_training.registry)[0]
    assert client.get(f"/api/models/{evicted.id}/download").status_code == 409


def test_chart_has_one_point_per_saved_checkpoint_with_a_score(client, ui_training):
    series = client.get("/api/chart").json()["series"]
    assert [s["stream"] for s in series] == ["best_model"]
    scored = models.find_models(stream="best_model", order_by="global_step", registry=ui_training.registry)
    assert [(p["step"], p["score"], p["state"]) for p in series[0]["points"]] == [
        (r.global_step, r.score, r.state.value) for r in scored
    ]
    assert client.get("/api/chart", params={"state": "live"}).json()["series"][0]["points"][0]["state"] == "live"


def test_records_and_chart_points_carry_what_each_save_cost(client, ui_training):
    scored = models.find_models(stream="best_model", order_by="global_step", registry=ui_training.registry)
    detail = client.get(f"/api/models/{scored[0].id}").json()
    timings = detail["record"]["timings"]
    meta = scored[0].metadata
    assert timings == {
        "blocked_s": meta["save_blocked_s"],
        "durable_s": meta["save_durable_s"],
        "bytes": scored[0].size,
        "mb_s": meta["save_mb_s"],
        "background": False,
    }
    assert timings["blocked_s"] > 0 and all(h["timings"] is not None for h in detail["history"])
    points = client.get("/api/chart").json()["series"][0]["points"]
    assert [(p["blocked_s"], p["durable_s"]) for p in points] == [
        (r.metadata["save_blocked_s"], r.metadata["save_durable_s"]) for r in scored
    ]
    page = client.get("/api/models", params={"where": "save_durable_s>0"}).json()
    assert page["total"] == 8 and all(i["timings"]["durable_s"] > 0 for i in page["items"])


def test_a_record_without_timings_has_none_rather_than_made_up_ones(client, ui_training):
    import sqlite3

    record = models.find_models(stream="model", states=["live"], registry=ui_training.registry)[0]
    with sqlite3.connect(ui_training.registry) as conn:  # as an older tracker_saver wrote it
        conn.execute("DELETE FROM metadata WHERE record_id = ? AND key = 'save_mb_s'", (int(record.id),))
    assert client.get(f"/api/models/{record.id}").json()["record"]["timings"] is None


def test_every_response_has_the_security_headers(client):
    for response in (
        client.get("/"),
        client.get("/static/app.js"),
        client.get("/api/models"),
        client.get("/api/models/x"),
    ):
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/..%2f..%2fui%2fapp.py").status_code == 404
    assert client.get("/static/nothing.js").json() == {"detail": "Not Found"}
    assert "<script" not in client.get("/").text.replace('<script src="/static/app.js" defer></script>', "")


def test_a_write_from_another_origin_is_refused(client, ui_training):
    rid = models.find_models(registry=ui_training.registry)[0].id
    response = client.post(f"/api/models/{rid}/pin", headers={"Origin": "http://evil.example"})
    assert response.status_code == 403 and "cross-origin" in response.json()["detail"]
    assert models.count_models(states=["pinned"], registry=ui_training.registry) == 0


def test_a_loopback_server_refuses_other_host_names(ui_training):
    app = create_app(ui_training.registry, allowed_hosts=LOOPBACK_HOSTS)
    refused = TestClient(app, base_url="http://evil.example").get("/api/models")
    assert refused.status_code == 400 and "own host name" in refused.json()["detail"]
    assert TestClient(app, base_url="http://localhost:1234").get("/api/models").status_code == 200
    assert TestClient(app, base_url="http://127.0.0.1:8765").get("/api/models").status_code == 200


def test_an_unexpected_error_is_a_500_without_trace_or_path(client, monkeypatch, capsys):
    def broken(**kwargs):
        raise RuntimeError("boom in /srv/secret/registry.db with password=hunter2")

    monkeypatch.setattr(models, "count_models", broken)
    response = client.get("/api/models")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error: the server log has the details"}
    assert "boom" in capsys.readouterr().err  # the log has it, the page does not


def test_a_missing_registry_is_an_error_not_a_new_file(tmp_path):
    path = tmp_path / "nothing.db"
    response = TestClient(create_app(str(path))).get("/api/models")
    assert response.status_code == 409 and "no registry at" in response.json()["detail"]
    assert str(tmp_path) not in response.json()["detail"] and not path.exists()


def test_serve_refuses_a_missing_registry_before_it_listens(tmp_path):
    with pytest.raises(RegistryError, match="no registry at"):
        serve(str(tmp_path / "nothing.db"), port=_free_port())
    assert not (tmp_path / "nothing.db").exists()
    with pytest.raises(ConfigError, match="is not a TCP port"):
        serve(str(tmp_path / "nothing.db"), port=70000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_ui_command_says_its_url_and_how_to_stop_it_once_it_listens(ui_training):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracker_saver", "ui", "--registry", ui_training.registry, "--port", str(port)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stdout is not None
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        assert ready, "the UI printed nothing within 60 s"
        line = proc.stderr.readline()
        assert line == f"tracker-saver UI at http://127.0.0.1:{port}/ (press Ctrl+C to stop it)\n"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:  # it listens when it says so
            assert page.status == 200
        proc.send_signal(signal.SIGINT)  # what Ctrl+C sends
        assert proc.wait(20) == 0
        assert proc.stdout.read() == "" and proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait(20)


@pytest.mark.parametrize(("host", "warns"), [("127.0.0.1", False), ("0.0.0.0", True)])
def test_serve_warns_that_there_is_no_authentication_unless_on_loopback(ui_training, tmp_path, host, warns):
    port = _free_port()
    code = f"from tracker_saver.ui import serve; serve({ui_training.registry!r}, host={host!r}, port={port})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    said: list[str] = []
    try:
        assert proc.stderr is not None
        while not (said and said[-1].startswith("tracker-saver UI at ")):  # once it listens it says so
            line = proc.stderr.readline()
            assert line, "".join(said)  # it exited instead
            said.append(line)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models?limit=1", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(20)
    assert ("no authentication" in "".join(said[:-1])) is warns


def test_api_answers_generated_requests_as_its_schema_says(ui_training):
    """Schema-driven fuzzing of every operation: no 5xx, and every answer is one the schema documents."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(ui_training.registry))
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=25, deadline=None, database=None, suppress_health_check=list(hypothesis.HealthCheck)
        )
        def answers_as_documented(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=checks)

        answers_as_documented()


def test_bench_ui_times_the_page_and_the_first_requests(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_ui.py"), "--records", "400", "--repeats", "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "ui" and result["records"] == 400 and result["open_cold_ms"] > 0
    assert "first page (/api/models)" in done.stdout
