"""pytest plugin: a real Ceph RADOS Gateway for ``@pytest.mark.ceph`` tests (never a mock).

Loaded from ``tests/conftest.py`` with ``pytest_plugins = ["tests.conftest_ceph"]``.

Where the gateway comes from, in this order:

1. ``TRACKER_SAVER_CEPH=1``: one is running and the environment says where
   (``eval "$(scripts/ceph-s3.sh start)"`` exports ``AWS_ENDPOINT_URL``, the keys and this flag).
2. Running as root with ``radosgw`` on PATH: the session uses the script's gateway if it is
   up, else starts it with ``scripts/ceph-s3.sh start``. Sessions on one machine share it
   (a flock on ``<CEPH_S3_DIR>.lock``); the last session out stops a gateway that a session
   started, never one that the developer started.

However it came, the tests of several processes (pytest-xdist workers, other sessions) share it:
a test that stops radosgw waits until the others' Ceph tests are done (:class:`_GatewayUse`).
3. Otherwise the Ceph tests are skipped, with the reason; but when ``CI`` is set they FAIL:
   CI always runs them.

Fixtures:

* ``ceph_s3`` (session): the gateway: endpoint, keys, ``client()``, ``gateway_stopped()``.
* ``s3_bucket`` (module): a fresh bucket, emptied and removed after the module.
* ``s3_env`` (function): the process environment pointed at the gateway, and only at it
  (no profile, no ``~/.aws`` files, no instance metadata), so boto3's chain finds these keys.
* ``s3_output_uri`` (function): ``s3://<bucket>/<unique prefix>`` with ``s3_env`` applied:
  ``open_storage(s3_output_uri)`` is an empty storage on the gateway.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_gone

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ceph-s3.sh"
#: How long a test that stops the gateway waits for the Ceph tests running in other processes.
STOP_WAIT_S = 900


def _state_dir() -> Path:
    return Path(os.environ.get("CEPH_S3_DIR", "/tmp/tracker-saver-ceph"))


def _started_marker() -> Path:
    return Path(f"{_state_dir()}.started-by-pytest")


class _SessionLock:
    """Several pytest sessions on one machine share the one gateway the script can run.

    Each holds a shared flock on ``<state dir>.lock`` for its lifetime; starting the gateway
    holds it exclusively (so two sessions never start it at once, which would make the second
    wipe the first's half-started cluster). Stopping the gateway, at the end or in a test, needs
    the lock exclusively: a session never stops a gateway that another session is using.
    """

    def __init__(self) -> None:
        path = Path(f"{_state_dir()}.lock")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def exclusive(self, timeout: float = 0.0) -> bool:
        """Try for ``timeout`` seconds to hold the lock alone; on failure hold it shared again."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                # A failed conversion may have dropped our shared lock (flock(2)): take it again.
                fcntl.flock(self._fd, fcntl.LOCK_SH)
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.2)

    def shared(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def close(self) -> None:
        os.close(self._fd)  # releases the lock


class _GatewayUse:
    """Which tests use the gateway right now, so that a test (or the soak) stops it only between them.

    Tests run in several processes at once (pytest-xdist workers, other sessions, the soak). Each
    Ceph test holds a shared flock on ``<state dir>.use.lock`` while it runs (:func:`pytest_runtest_protocol`);
    a test that stops or freezes radosgw takes it exclusively for that time, waiting until the tests
    in other processes have finished theirs. A second lock, ``<state dir>.gate.lock``, is the
    turnstile: the stopper holds it exclusively while it waits, so new tests wait behind it instead of
    starving it (flock(2) gives no preference to a waiting exclusive lock).
    """

    def __init__(self) -> None:
        self._use = os.open(f"{_state_dir()}.use.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._gate = os.open(f"{_state_dir()}.gate.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.held = False  # whether this process holds the use lock (shared or exclusive)

    def shared(self) -> None:
        """Use the gateway (waiting while another process has it stopped); ends an exclusive hold."""
        fcntl.flock(self._use, fcntl.LOCK_UN)  # an exclusive hold first, or a waiting stopper deadlocks
        fcntl.flock(self._gate, fcntl.LOCK_SH)
        fcntl.flock(self._use, fcntl.LOCK_SH)
        fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.held = True

    def release(self) -> None:
        fcntl.flock(self._use, fcntl.LOCK_UN)
        self.held = False

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        """Use the gateway inside the block, unless this process already does.

        For gateway work outside a Ceph test's own hold: a module's bucket is removed in the
        teardown of the module's last test on this worker, which may be a test without the mark.
        Unheld, it once restarted radosgw in the middle of another worker's outage test (ci27).
        """
        if self.held:
            yield
            return
        self.shared()
        try:
            yield
        finally:
            self.release()

    def exclusive(self, timeout: float) -> bool:
        """Hold the gateway alone within ``timeout`` seconds; on failure, use it shared again."""
        fcntl.flock(self._use, fcntl.LOCK_UN)  # this test's own use must not block it
        deadline = time.monotonic() + timeout
        for fd in (self._gate, self._use):
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        self.shared()
                        return False
                    time.sleep(0.1)
        self.held = True
        return True


_gateway_use: list[_GatewayUse] = []


def gateway_use() -> _GatewayUse:
    """This process's :class:`_GatewayUse` (made on first use: only Ceph tests make its lock files)."""
    if not _gateway_use:
        _gateway_use.append(_GatewayUse())
    return _gateway_use[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A Ceph test uses the gateway from its set-up to its teardown (module buckets included)."""
    if item.get_closest_marker("ceph") is None:
        yield
        return
    use = gateway_use()
    use.shared()
    try:
        yield
    finally:
        use.release()


def _parse_exports(text: str) -> dict[str, str]:
    """The ``export NAME=value`` lines printed by ``ceph-s3.sh`` (values are shell-quoted by %q)."""
    import shlex

    env = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export ") :].partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    return env


def _answers(endpoint: str, timeout: float = 2.0) -> bool:
    try:
        urllib.request.urlopen(endpoint, timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the gateway is up
    except OSError:
        return False
    return True


def _script(command: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), command], capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class CephS3:
    """A running S3 gateway and how to reach it."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str
    started_here: bool = False
    script_env: dict[str, str] = field(default_factory=dict)
    lock: _GatewayUse | None = None
    _plain: tuple[int, Any] | None = field(default=None, repr=False, compare=False)

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def storage_options(self) -> dict[str, str]:
        """Explicit options for ``open_storage`` / ``S3Storage``, independent of the environment."""
        return {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
        }

    def client(self, **config: Any) -> Any:
        """A plain boto3 client for the gateway (for test setup and for checking what S3 holds).

        Without ``config`` it is one client for the process: each new boto3 session re-reads
        botocore's service data (0.3 s of CPU), and a client is safe to share between threads (not
        with a forked child, which would share its pooled connections: a child makes its own).
        """
        if not config and self._plain is not None and self._plain[0] == os.getpid():
            return self._plain[1]
        import boto3
        from botocore.config import Config

        made = boto3.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, region_name=self.region
        ).client("s3", endpoint_url=self.endpoint_url, config=Config(s3={"addressing_style": "path"}, **config))
        if not config:
            self._plain = (os.getpid(), made)
        return made

    def create_user(self, uid: str) -> tuple[str, str]:
        """A second S3 user with its own keys (for permission tests); needs the script's cluster."""
        if not self.can_restart:
            pytest.skip("creating an S3 user needs a gateway started by scripts/ceph-s3.sh")
        conf = _state_dir() / "ceph.conf"
        access, secret = f"{uid}-access", f"{uid}-secret-{uuid.uuid4().hex[:8]}"
        result = subprocess.run(
            [
                "timeout",
                "20",
                "radosgw-admin",
                "-c",
                str(conf),
                "user",
                "create",
                f"--uid={uid}",
                f"--display-name={uid}",
                f"--access-key={access}",
                f"--secret-key={secret}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            # Right after radosgw restarted (another process's outage test), the old gateway's watch
            # on the user object has not expired, so the cache notify times out after the user was
            # written: the user is there all the same.
            info = subprocess.run(["timeout", "20", "radosgw-admin", "-c", str(conf), "user", "info", f"--uid={uid}"],
                                  capture_output=True, text=True, check=False)  # fmt: skip
            if info.returncode != 0 or access not in info.stdout:
                raise RuntimeError(f"radosgw-admin user create failed:\n{result.stderr[-2000:]}")
        return access, secret

    # -- stopping and starting the gateway (mon and osd keep running) ------------------------
    @property
    def can_restart(self) -> bool:
        """Whether ``scripts/ceph-s3.sh`` controls this gateway, so a test may stop it."""
        state = _state_dir()
        port = os.environ.get("CEPH_S3_PORT", "7480")
        return SCRIPT.exists() and (state / "ceph.conf").exists() and self.endpoint_url.endswith(f":{port}")

    def stop_rgw(self) -> None:
        result = _script("stop-rgw", timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"ceph-s3.sh stop-rgw failed:\n{result.stderr}")

    def start_rgw(self) -> None:
        result = _script("start-rgw", timeout=90)
        if result.returncode != 0 or not _answers(self.endpoint_url):
            raise RuntimeError(f"ceph-s3.sh start-rgw failed:\n{result.stderr}")

    def ensure_up(self) -> None:
        """Restart the gateway if a test left it stopped, so later tests have one.

        Never while another process has it stopped on purpose: it waits for that test to end.
        """
        with self.lock.using() if self.lock is not None else contextlib.nullcontext():
            if not _answers(self.endpoint_url) and self.can_restart:
                self.start_rgw()

    @contextlib.contextmanager
    def gateway_stopped(self) -> Iterator[None]:
        """Stop radosgw inside the block; it is always running again after it."""
        if not self.can_restart:
            _unavailable("this test stops the gateway: it needs one started by scripts/ceph-s3.sh")
        if self.lock is not None and not self.lock.exclusive(timeout=STOP_WAIT_S):
            _unavailable(f"this test stops the gateway, and tests in other processes used it for {STOP_WAIT_S} s")
        try:
            yield
        finally:
            try:
                self.start_rgw()
            finally:
                if self.lock is not None:
                    self.lock.shared()

    def rgw_pid(self) -> int:
        """The pid of the radosgw the script started (from its pid file)."""
        return int((_state_dir() / "run" / "client.rgw.a.pid").read_text().strip())

    def kill_rgw(self) -> None:
        """SIGTERM every radosgw of this cluster and wait until they are gone and the port refuses
        connections (call it inside :meth:`gateway_stopped`, which starts it again).

        Every one, not only the pid file's: one the pid file does not name would go on answering
        (a warning says so). And a refused connection, not an unanswered request: on a loaded
        machine a request can time out while radosgw still runs and completes the save meant to
        meet the outage.
        """
        named = self.rgw_pid()
        pids = set(_rgw_pids()) | {named}
        if pids != {named}:
            warnings.warn(f"radosgw pids {sorted(pids)} run; its pid file names {named}", stacklevel=2)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not all(wait_gone(pid, 30) for pid in pids):
            raise RuntimeError(f"radosgw (pids {sorted(pids)}) still runs 30 s after SIGTERM")
        if not _refused(self.endpoint_url):  # its listening socket went with it
            raise RuntimeError(
                f"radosgw (pids {sorted(pids)}) exited, but {self.endpoint_url} still accepts connections"
            )

    def rgw_report(self) -> str:
        """The radosgw processes of this cluster and how long each has run, and whether the port refuses.

        For a failure message: a gateway that answered during an outage a test made was restarted
        by someone, and its age says when.
        """
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ages = []
        for pid in _rgw_pids():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])
                ages.append(f"{pid} (running for {uptime - ticks / os.sysconf('SC_CLK_TCK'):.1f} s)")
        return f"radosgw: {', '.join(ages) or 'none'}; port refuses: {_refused(self.endpoint_url)}"

    @contextlib.contextmanager
    def gateway_frozen(self) -> Iterator[None]:
        """SIGSTOP radosgw inside the block (connections open, no answer); SIGCONT after it."""
        with self.gateway_stopped():  # the same exclusive hold; it restarts radosgw if it died
            pid = self.rgw_pid()
            os.kill(pid, signal.SIGSTOP)
            try:
                yield
            finally:
                os.kill(pid, signal.SIGCONT)


def _rgw_pids() -> list[int]:
    """The radosgw processes started with this cluster's configuration (a /proc scan)."""
    conf = str(_state_dir() / "ceph.conf")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"radosgw") and conf.encode() in argv and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _refused(endpoint: str) -> bool:
    """Whether a TCP connection to ``endpoint``'s port is refused (a timeout proves nothing)."""
    url = urllib.parse.urlsplit(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or 80), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Ceph RGW is required in CI but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Ceph RGW unavailable: {reason} (see docs/s3.md, 'Running the Ceph tests')")


@pytest.fixture(scope="session")
def ceph_s3() -> Iterator[CephS3]:
    """The S3 gateway for this session (see the module docstring for where it comes from)."""
    lock = _SessionLock()
    try:
        yield from _gateway(lock)
    finally:
        lock.close()


def _gateway(lock: _SessionLock) -> Iterator[CephS3]:
    if os.environ.get("TRACKER_SAVER_CEPH") == "1":
        missing = [
            n for n in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(n)
        ]
        if missing:
            _unavailable(f'TRACKER_SAVER_CEPH=1 but {", ".join(missing)} not set: eval "$(scripts/ceph-s3.sh env)"')
        gw = CephS3(
            endpoint_url=os.environ["AWS_ENDPOINT_URL"],
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            lock=gateway_use(),
        )
        lock.shared()
        if not _answers(gw.endpoint_url):
            gw.ensure_up()  # a previous session may have stopped it mid-test
            if not _answers(gw.endpoint_url):
                _unavailable(f"TRACKER_SAVER_CEPH=1 but nothing answers at {gw.endpoint_url}")
        yield gw
        return
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("radosgw")):
        _unavailable(
            "TRACKER_SAVER_CEPH is not set and this session cannot start one (needs root and radosgw "
            "on PATH: sudo scripts/ceph-s3.sh install)"
        )
    t0 = time.monotonic()
    lock.shared()
    port = os.environ.get("CEPH_S3_PORT", "7480")
    if (_state_dir() / "ceph.conf").exists() and _answers(f"http://127.0.0.1:{port}"):
        result = _script("env")  # another session (or the developer) started it: share it
        started_here = False
    else:
        # Alone, so that no other session's tests run against a cluster being (re)started;
        # after a minute go ahead anyway (start is idempotent when the gateway is up).
        lock.exclusive(timeout=60)
        try:
            result = _script("start")
        finally:
            lock.shared()
        started_here = "already running" not in result.stderr
        if started_here and result.returncode == 0:
            _started_marker().touch()
    if result.returncode != 0:
        _unavailable(f"scripts/ceph-s3.sh start failed:\n{result.stderr[-3000:]}")
    env = _parse_exports(result.stdout)
    gw = CephS3(
        endpoint_url=env["AWS_ENDPOINT_URL"],
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env.get("AWS_DEFAULT_REGION", "us-east-1"),
        started_here=started_here,
        script_env=env,
        lock=gateway_use(),
    )
    print(
        f"\nceph_s3: gateway at {gw.endpoint_url} ({'started' if started_here else 'reused'} in {time.monotonic() - t0:.1f} s)"
    )
    try:
        yield gw
    finally:
        # Stop only a gateway that a pytest session started (never the developer's), and only
        # when no other session still uses it: the last session out stops it.
        if _started_marker().exists() and lock.exclusive():
            _script("stop", timeout=60)
            _started_marker().unlink(missing_ok=True)


def empty_and_remove(client: Any, bucket: str) -> None:
    """Abort a bucket's uploads, delete its objects, then the bucket (best effort)."""
    with contextlib.suppress(Exception):
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
            for up in page.get("Uploads", []):
                client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def s3_bucket(ceph_s3: CephS3) -> Iterator[str]:
    """A fresh, empty bucket on the gateway for this test module; removed afterwards."""
    client = ceph_s3.client()
    bucket = f"ts-test-{uuid.uuid4().hex[:12]}"
    with gateway_use().using():
        ceph_s3.ensure_up()
        client.create_bucket(Bucket=bucket)
    yield bucket
    with gateway_use().using():  # maybe in the teardown of a test without the ceph mark
        ceph_s3.ensure_up()
        empty_and_remove(client, bucket)


@pytest.fixture
def s3_env(
    ceph_s3: CephS3, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Point boto3's own configuration chain at the gateway, and at nothing else.

    Subprocesses started by the test inherit it.
    """
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_S3",
        "AWS_MAX_ATTEMPTS",
        "AWS_RETRY_MODE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    nowhere = tmp_path_factory.getbasetemp() / "no-aws-config"
    env = {
        **ceph_s3.env(),
        "AWS_CONFIG_FILE": str(nowhere),
        "AWS_SHARED_CREDENTIALS_FILE": str(nowhere),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_output_uri(s3_bucket: str, s3_env: dict[str, str]) -> str:
    """``s3://<bucket>/<unique prefix>``: an empty output_uri on the gateway, env already set."""
    return f"s3://{s3_bucket}/t-{uuid.uuid4().hex[:10]}"
