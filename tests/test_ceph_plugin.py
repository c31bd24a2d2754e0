"""The Ceph plugin's gateway lock (tests/conftest_ceph.py), without a gateway: real flocks, real processes.

ci27 failed once because an xdist worker restarted radosgw in the middle of another worker's outage
test: a module's bucket was removed (after ``ensure_up``) in the teardown of a test without the
``ceph`` mark, which holds no lock. These tests pin the rule that every restart waits for the lock.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest_ceph import CephS3, _GatewayUse
from tests.waiting import when_reaching

ROOT = Path(__file__).resolve().parent.parent

#: A second process that holds the gateway exclusively (as an outage test does) until its stdin closes.
HOLDER = """
import sys
from tests.conftest_ceph import _GatewayUse
use = _GatewayUse()
assert use.exclusive(timeout=10)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A gateway state dir of our own: its lock files, no ceph.conf (so nothing can be restarted)."""
    monkeypatch.setenv("CEPH_S3_DIR", str(tmp_path / "ceph"))
    return tmp_path / "ceph"


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server standing in for the gateway's port: it notes each request in the list (``"probed"``)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append("probed")
            self.send_response(403)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def _holder(state_dir: Path) -> subprocess.Popen[str]:
    env = {"CEPH_S3_DIR": str(state_dir), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_ensure_up_waits_while_another_process_has_the_gateway_stopped(
    state_dir: Path, endpoint: tuple[str, list[str]]
) -> None:
    url, seen = endpoint
    gw = CephS3(endpoint_url=url, access_key="k", secret_key="s", region="us-east-1", lock=_GatewayUse())
    holder = _holder(state_dir)
    waiting = threading.Event()
    # ensure_up's thread is about to wait for the gateway lock, which the holder has: it waits there.
    with when_reaching(_GatewayUse.shared, "fcntl.flock(self._gate, fcntl.LOCK_SH)", waiting.set):
        probe = threading.Thread(target=gw.ensure_up)
        probe.start()
        assert waiting.wait(60), "ensure_up never went for the gateway lock"
    assert seen == [], "ensure_up probed (and could restart) the gateway during an outage"
    seen.append("released")
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(10)
    probe.join()
    assert seen == ["released", "probed"]
    assert not gw.lock.held  # type: ignore[union-attr]  # it gave back the hold it took


def test_ensure_up_inside_a_ceph_test_keeps_the_test_s_own_hold(
    state_dir: Path, endpoint: tuple[str, list[str]]
) -> None:
    url, seen = endpoint
    use = _GatewayUse()
    use.shared()  # what pytest_runtest_protocol holds for a test marked ceph
    gw = CephS3(endpoint_url=url, access_key="k", secret_key="s", region="us-east-1", lock=use)
    gw.ensure_up()
    assert len(seen) == 1 and use.held
    # ...and still holds it: another process cannot take the gateway away from the running test.
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.conftest_ceph import _GatewayUse; print(_GatewayUse().exclusive(0.5))"],
        capture_output=True, text=True, cwd=ROOT, env={"CEPH_S3_DIR": str(state_dir), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout.strip() == "False", proc.stderr
    use.release()
