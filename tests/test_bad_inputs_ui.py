"""Bad inputs at the web UI's door: requests a browser, another site or a script sends to ``tracker-saver ui``.

Each answer is an HTTP status with a detail that names the fix, and the registry is left as it was.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.bad_inputs import (
    RULE,
    Row,
    World,
    case,
    fit,
    row_of,
)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.under(tmp_path)


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Row:
    return row_of(request)


def _ui(world: World, base_url: str = "http://127.0.0.1:8765", **kwargs: Any) -> Any:
    """The UI's app over the world's registry, as ``tracker-saver ui --host 0.0.0.0`` serves it, and a client."""
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app
    from tracker_saver.ui.server import host_names

    app = create_app(world.db, allowed_hosts=host_names("0.0.0.0"), **kwargs)
    return TestClient(app, base_url=base_url, raise_server_exceptions=False)


REQUESTS = "Requests"


@case(
    group=REQUESTS,
    id="ui-rename-lone-surrogate",
    input='PATCH /api/models/ID {"name": "\\ud800"}',
    error="HTTP 422",
    message="new name for record …: '\\ud800' holds U+D800 at character 1, a lone surrogate: the text is not valid UTF-8 "
    "(bytes Python could not decode): pass it as UTF-8 text " + RULE,
    left="the record as it was (before the fix: 500)",
)
def test_a_lone_surrogate_in_a_rename_gets_422_and_keeps_the_name(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    body = b'{"name": "\\ud800"}'  # JSON's escape of a lone surrogate: what a client can send
    response = _ui(world).patch("/api/models/1", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and re.fullmatch(row.pattern(), response.json()["detail"]), response.text
    assert world.snapshot() == before


@case(
    group=REQUESTS,
    id="ui-rebinding-host",
    input="PATCH /api/models/ID with Host and Origin evil.example:8765  # a DNS-rebinding page; tracker-saver ui --host 0.0.0.0",
    error="HTTP 400",
    message="this server answers only its own host names: open it at the address it printed, or start it with "
    "--allow-host NAME for a name it should answer to (a reverse proxy's)",
    left="the record's name as it was (before the fix: renamed, 200)",
)
def test_a_request_for_a_foreign_host_name_gets_400_and_changes_nothing(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    client = _ui(world, base_url="http://evil.example:8765")
    response = client.patch("/api/models/1", json={"name": "owned"}, headers={"Origin": "http://evil.example:8765"})
    assert response.status_code == 400 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert world.snapshot() == before


@case(
    group=REQUESTS,
    id="ui-cross-site-download",
    input="GET /api/models/ID/download with only Referer: http://evil.example/  # a link on another site",
    error="HTTP 403",
    message="cross-origin request refused: a page of another site may not download records; use the UI itself",
    left="no byte sent (before the fix: served, with one verified copy in /tmp per request)",
)
def test_a_download_linked_from_another_site_gets_403(row: Row, world: World) -> None:
    fit(world.saver())
    client = _ui(world)
    response = client.get("/api/models/1/download", headers={"Referer": "http://evil.example/"})
    assert response.status_code == 403 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert client.get("/api/models/1/download").status_code == 200  # curl sends no Referer: answered


@case(
    group=REQUESTS,
    id="ui-large-body",
    input="PATCH /api/models/ID with a 50 MB body",
    error="HTTP 413",
    message="request body over 256 KiB refused: the API takes names and tags only",
    left="the record as it was; the body is never read past 256 KiB (before the fix: accepted, 210 MB of memory)",
)
def test_a_50_mb_request_body_gets_413_unread(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    body = b'{"name": "' + b"x" * (50 << 20) + b'"}'
    response = _ui(world).patch("/api/models/1", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert world.snapshot() == before


@case(
    group=REQUESTS,
    id="ui-too-many-downloads",
    input="a third GET /api/models/ID/download while two are being sent",
    error="HTTP 429",
    message="2 downloads are being sent, the most this server sends at once: retry when one ends",
    left="the two downloads go on; each streams from the verified object (locally the slot file itself), no copy per request",
)
def test_a_third_download_at_once_gets_429_while_the_rest_of_the_api_answers(row: Row, world: World) -> None:
    from tests.conftest_browser import UiServer

    torch.manual_seed(0)
    fit(world.saver(), {"model": torch.nn.Linear(2048, 4096)})  # 32 MB: more than the sockets buffer
    server = UiServer(str(world.db))
    host, port = server.url.removeprefix("http://").split(":")
    request = f"GET /api/models/1/download HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    held = [socket.create_connection((host, int(port))) for _ in range(2)]
    try:
        for sock in held:  # each download is under way: its status line came, its body waits for us
            sock.sendall(request)
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
        with urllib.request.urlopen(server.url + "/api/models/1", timeout=30) as shown:
            assert shown.status == 200  # the rest of the API is not held up
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url + "/api/models/1/download", timeout=30)
        assert refused.value.code == 429 and refused.value.headers["Retry-After"] == "5"
        assert re.fullmatch(row.pattern(), json.loads(refused.value.read())["detail"])
    finally:
        for sock in held:
            sock.close()
        server.close()
