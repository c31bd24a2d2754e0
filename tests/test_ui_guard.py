"""The UI off loopback: the Host allow-list, cross-site refusals, the body limit, and downloads that hold no copy.

The rules themselves are pure (``cross_site``, ``host_names``); the rest runs the real app, and
the allow-list runs against the real server started by ``tracker-saver ui --host 0.0.0.0``, asked
with a real HTTP client as curl would ask it.
"""

from __future__ import annotations

import http.client
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest_browser import Training
from tests.helpers import ROOT
from tracker_saver import models
from tracker_saver.ui.app import create_app
from tracker_saver.ui.guard import MAX_BODY_BYTES, cross_site, host_name
from tracker_saver.ui.server import LOOPBACK_HOSTS, host_names

HOST = "127.0.0.1:8765"


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, False),  # curl, scripts: no browser, no cross-site request
        ({"origin": "http://127.0.0.1:8765"}, False),
        ({"origin": "http://evil.example"}, True),
        ({"origin": "http://127.0.0.1:9999"}, True),  # another port is another origin
        ({"origin": "null"}, True),  # a sandboxed frame or a data: page
        ({"origin": "http://127.0.0.1:8765", "sec-fetch-site": "cross-site"}, False),  # Origin decides first
        ({"sec-fetch-site": "same-origin"}, False),
        ({"sec-fetch-site": "none"}, False),  # the user typed the address or used a bookmark
        ({"sec-fetch-site": "same-site"}, True),
        ({"sec-fetch-site": "cross-site", "referer": "http://127.0.0.1:8765/"}, True),  # then Sec-Fetch-Site
        ({"referer": "http://127.0.0.1:8765/?record=3"}, False),
        ({"referer": "http://evil.example/page"}, True),
    ],
)
def test_a_request_is_cross_site_by_origin_else_sec_fetch_site_else_referer(headers, refused) -> None:
    assert cross_site(headers, HOST) is refused


def test_host_names_are_the_bound_names_and_the_allowed_ones() -> None:
    assert host_names("127.0.0.1") == list(LOOPBACK_HOSTS) == host_names("localhost")
    assert host_names("10.0.0.5", ["Models.Team.Example"]) == ["10.0.0.5", "models.team.example"]
    everywhere = host_names("0.0.0.0")
    assert set(LOOPBACK_HOSTS) < set(everywhere) and socket.gethostname().lower() in map(str.lower, everywhere)
    assert "evil.example" not in everywhere
    assert host_name("[::1]:8765") == "::1" and host_name("Models.Team.Example:443") == "models.team.example"


@pytest.fixture
def client(ui_training: Training) -> TestClient:
    app = create_app(ui_training.registry, allowed_hosts=host_names("0.0.0.0"))
    return TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False)


def _live(ui_training: Training) -> models.Record:
    return models.find_models(stream="best_model", states=["live"], registry=ui_training.registry)[0]


def test_every_refusal_is_one_json_line_with_the_security_headers(client, ui_training) -> None:
    record = _live(ui_training)
    refusals = [
        client.get("/api/models", headers={"Host": "evil.example:8765"}),
        client.post(f"/api/models/{record.id}/pin", headers={"Origin": "http://evil.example"}),
        client.get(f"/api/models/{record.id}/download", headers={"Sec-Fetch-Site": "cross-site"}),
        client.patch(f"/api/models/{record.id}", content=b"x" * (MAX_BODY_BYTES + 1)),
    ]
    assert [r.status_code for r in refusals] == [400, 403, 403, 413]
    for response in refusals:
        assert response.headers["content-type"] == "application/json"
        assert (
            response.headers["x-frame-options"] == "DENY"
            and "default-src 'none'" in response.headers["content-security-policy"]
        )
        assert "\n" not in response.json()["detail"]


def test_a_body_sent_in_chunks_is_cut_off_at_the_limit_too(client, ui_training) -> None:
    record = _live(ui_training)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts what arrives
        yield b'{"name": "'
        for _ in range(MAX_BODY_BYTES // 4096 + 1):
            yield b"x" * 4096
        yield b'"}'

    response = client.patch(f"/api/models/{record.id}", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and "over 256 KiB" in response.json()["detail"]
    assert models.get_model(record.id, registry=ui_training.registry).name == record.name


def test_the_ui_itself_and_curl_still_rename_and_download(client, ui_training) -> None:
    record = _live(ui_training)
    own = {"Origin": "http://127.0.0.1:8765", "Sec-Fetch-Site": "same-origin"}
    assert client.patch(f"/api/models/{record.id}", json={"name": "kept"}, headers=own).json()["name"] == "kept"
    assert client.patch(f"/api/models/{record.id}", json={"name": "by curl"}).json()["name"] == "by curl"
    fetched = client.get(f"/api/models/{record.id}/download", headers={"Sec-Fetch-Site": "same-origin"})
    assert fetched.status_code == 200 and int(fetched.headers["content-length"]) == record.size == len(fetched.content)


def test_a_download_makes_no_copy_of_a_local_object(client, ui_training, tmp_path, monkeypatch) -> None:
    temp = tmp_path / "temp"  # where the UI used to put one verified copy per request
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    record = _live(ui_training)
    for _ in range(3):
        assert client.get(f"/api/models/{record.id}/download").status_code == 200
    assert list(temp.iterdir()) == []


def test_a_download_frees_its_place_once_sent(ui_training) -> None:
    client = TestClient(create_app(ui_training.registry, max_downloads=1), raise_server_exceptions=False)
    record = _live(ui_training)
    assert [client.get(f"/api/models/{record.id}/download").status_code for _ in range(3)] == [200, 200, 200]


def test_a_download_of_an_object_that_changed_sends_nothing_and_frees_its_place(ui_training) -> None:
    app = create_app(ui_training.registry, max_downloads=1)
    client = TestClient(app, raise_server_exceptions=False)
    record = _live(ui_training)
    path = Path((record.uri or "").removeprefix("file://"))
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    for _ in range(2):  # a refused download does not keep the one place
        refused = client.get(f"/api/models/{record.id}/download")
        assert refused.status_code == 409 and "overwritten or corrupted" in refused.json()["detail"]


def _wait_for_url(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    while True:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        assert ready, "the UI printed nothing within 60 s"
        line = proc.stderr.readline()
        assert line, "the UI exited"
        if line.startswith("tracker-saver UI at "):
            return


def _ask(port: int, method: str, path: str, host: str, **headers: str) -> tuple[int, bytes]:
    """One request as curl sends it, with the given ``Host``; its status and body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = b'{"name": "renamed by a rebinding page"}' if method == "PATCH" else None
        conn.request(method, path, body=body, headers={"Host": host, "Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_server_on_every_interface_refuses_a_rebinding_host_name(ui_training: Training) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    record = _live(ui_training)
    argv = ["ui", "--registry", ui_training.registry, "--host", "0.0.0.0", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracker_saver", *argv, "--allow-host", "models.team.example"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_url(proc)
        evil = f"evil.example:{port}"
        status, body = _ask(port, "PATCH", f"/api/models/{record.id}", evil, Origin=f"http://{evil}")
        assert status == 400 and b"answers only its own host names" in body
        assert _ask(port, "GET", f"/api/models/{record.id}/download", evil)[0] == 400
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"{socket.gethostname()}:{port}", "models.team.example"):
            assert _ask(port, "GET", "/api/models?limit=1", host)[0] == 200, host
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert models.get_model(record.id, registry=ui_training.registry).name == record.name


def test_the_ui_command_documents_allow_host(capsys: Any) -> None:
    from tracker_saver.cli.main import main

    with pytest.raises(SystemExit):
        main(["ui", "--help"])
    assert "--allow-host NAME" in capsys.readouterr().out
