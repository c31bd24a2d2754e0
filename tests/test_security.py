"""Safe by construction (DESIGN invariant 7): keys stay inside output_uri, secrets never show, queries are parametrized."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from tests.helpers import ROOT, process_env
from tracker_saver import TrackerSaver, find_models
from tracker_saver.cli.main import main as cli_main
from tracker_saver.core.errors import CallbackError, ConfigError, StorageError, TrackerSaverError
from tracker_saver.core.naming import check_key, slot_key
from tracker_saver.core.query import is_number, matches, parse_where
from tracker_saver.core.records import Record, UploadInfo
from tracker_saver.core.text import first_refused
from tracker_saver.registry import Query
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.storage import Storage, open_storage

# ====================================================================== keys never escape

#: Names that try to leave output_uri, in every spelling we know of.
NASTY = [
    "..", "../..", "../../etc", "/abs", "/etc/passwd", "\\..\\..\\x", "..\\x", "C:\\Windows", "~", "~/x",
    ".", "./x", "a/../../b", "a//b", "%2e%2e%2f", "%2e%2e/%2e%2e/x", "..%2f..%2fx", "..%c0%af..",
    "\u2215..\u2215x",  # DIVISION SLASH
    "\uff0e\uff0e", "\uff0e\uff0e/\uff0e\uff0e/x",  # FULLWIDTH FULL STOP
    "\u2024\u2024", "\u2024\u2024\u2215x",  # ONE DOT LEADER
    "\uff0f..\uff0fx",  # FULLWIDTH SOLIDUS
    ".. /..\\/\uff0e\uff0e%2f\u2215x",  # all of it at once
]  # fmt: skip
#: Names the text rule refuses wherever a name is taken (a NUL, an RLO override, not UTF-8).
REFUSED = ["a\x00b", "\x00", "../\x00/x", "\u202e..", "p\udcff"]
#: Keys given to the storage seam directly: every one must be refused.
ESCAPING_KEYS = [
    "../x.pt", "../../x.pt", "/abs.pt", "/etc/passwd", "a/../../x.pt", "a/../b.pt", "./x.pt", "a//b.pt", "",
    "..", ".", "/", "x.pt/..", "..\\x.pt", "a\\..\\..\\x.pt", "%2e%2e%2fx.pt", "%2e%2e/x.pt", "\u2215..\u2215x.pt",
    "\uff0e\uff0e/x.pt", "\u2024\u2024/x.pt", "a\x00b.pt", "a/\x00/b.pt",
]  # fmt: skip
_PIECES = [
    "..",
    ".",
    "/",
    "\\",
    "%2e",
    "%2f",
    "%",
    "\uff0e",
    "\u2215",
    "\u2024",
    "\uff0f",
    "~",
    " ",
    "a",
    "Z9",
    "é",
    ":",
]
#: Hypothesis: the known attacks, any mix of their pieces, and any text at all.
names = st.one_of(
    st.sampled_from(NASTY),
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8).map("".join),
    st.text(min_size=1, max_size=30),
)


def assert_inside(key: str) -> None:
    """``key`` is a plain relative path: whatever joins it to a root stays under that root."""
    assert check_key(key) == key
    assert key.isascii() and "\\" not in key and "\x00" not in key and "%" not in key
    path = PurePosixPath(key)
    assert not path.is_absolute() and all(part not in ("", ".", "..") for part in key.split("/"))
    assert os.path.normpath(f"/srv/output/{key}").startswith("/srv/output/")


@settings(max_examples=400, deadline=None)
@given(project=names | st.sampled_from(REFUSED), run=names, stream=names, slot=st.integers(0, 99))
def test_a_slot_key_from_any_names_stays_inside_output_uri(project, run, stream, slot) -> None:
    key = slot_key(project, run, stream, slot, ".pt")
    assert_inside(key)
    assert key.endswith(f".slot{slot}.pt") and key.count("/") == project.count("/") + 2


def test_a_project_nested_too_deep_for_a_key_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"storage key 'x+\.\.\.' is \d+ characters long: at most 1000.*shorter"):
        slot_key("/".join(["x" * 150] * 8), "r", "s", 0, ".pt")


class Place:
    """An output_uri under test, and what exists around it (files, or the bucket's keys)."""

    def __init__(self, output_uri: str, registry: str, list_all: Callable[[], set[str]]) -> None:
        self.output_uri = output_uri
        self.registry = registry
        self._list_all = list_all
        self.before = list_all()

    def storage(self) -> Storage:
        return open_storage(self.output_uri)  # Ceph: endpoint and keys from the environment (s3_env)

    def saver(self, project: str = "p", run: str = "r", **kwargs: Any) -> TrackerSaver:
        return TrackerSaver(self.output_uri, project=project, run=run, registry=self.registry, **kwargs)

    def created(self) -> set[str]:
        """Everything that appeared since the place was made: local paths, or s3://bucket/key."""
        return self._list_all() - self.before

    def assert_nothing_outside(self) -> set[str]:
        """Every new file or key is under output_uri (or is the registry); returns the objects."""
        created = self.created()
        registry_files = {p for p in created if p.startswith(os.path.dirname(self.registry) + "/")}
        objects = created - registry_files
        outside = sorted(p for p in objects if not p.startswith(self.output_uri + "/"))
        assert not outside, f"created outside {self.output_uri}: {outside}"
        return objects


def _files_under(folder: Path) -> set[str]:
    """Files and links under ``folder``, but an output_uri's owner objects (``.tracker_saver/``: who owns each
    stream, never a checkpoint; ``tests/test_shared_bucket.py`` checks they stay inside output_uri)."""
    return {str(p) for p in folder.rglob("*") if (p.is_file() or p.is_symlink()) and ".tracker_saver" not in p.parts}


@pytest.fixture(scope="module")
def bucket_client(ceph_s3: Any) -> Any:
    """One boto3 client that lists the module's bucket for every Ceph test: a new boto3 session
    reads botocore's service data again (0.3 s of CPU each, most of a Ceph test's cost here)."""
    return ceph_s3.client()


@pytest.fixture(params=["local", pytest.param("ceph", marks=pytest.mark.ceph)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    """A local folder three levels below tmp_path, or a fresh prefix on Ceph."""
    registry = str(tmp_path / "registry" / "registry.db")
    if request.param == "local":
        siblings = {p.name for p in tmp_path.parent.iterdir()}

        def list_all() -> set[str]:
            # A key with '..' lands in tmp_path (three levels up) or beside it: both are seen.
            extra = {str(tmp_path.parent / n) for n in os.listdir(tmp_path.parent)} - {
                str(tmp_path.parent / n) for n in siblings
            }
            return _files_under(tmp_path) | extra

        return Place(str(tmp_path / "a" / "b" / "output"), registry, list_all)
    uri: str = request.getfixturevalue("s3_output_uri")
    bucket: str = request.getfixturevalue("s3_bucket")
    client = request.getfixturevalue("bucket_client")

    def list_bucket() -> set[str]:
        keys = {
            f"s3://{bucket}/{o['Key']}"
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])
            if "/.tracker_saver/" not in f"/{o['Key']}"  # owner objects: never a checkpoint, as _files_under
        }
        return keys | _files_under(tmp_path)

    return Place(uri, registry, list_bucket)


def _engine_with(saver: TrackerSaver, value: str) -> Engine:
    """Two streams whose names, prefix and filename pattern all carry ``value``."""
    torch.manual_seed(0)
    net, other = torch.nn.Linear(2, 1), torch.nn.Linear(1, 1)
    trainer = Engine(lambda engine, batch: None)
    epoch = lambda engine, _: engine.state.epoch  # noqa: E731
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED,
        Checkpoint({value: net}, saver, n_saved=2, filename_prefix=value, global_step_transform=epoch),
    )
    pattern = f"{value}/{{name}}_{{global_step}}.{{ext}}"  # no value holds a brace
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED,
        Checkpoint(
            {"net": net, "other": other}, saver, n_saved=1, filename_pattern=pattern, global_step_transform=epoch
        ),
    )
    return trainer


@pytest.mark.parametrize("value", NASTY)
def test_names_that_try_to_escape_get_keys_inside_output_uri(value, place) -> None:
    saver = place.saver(project=value, run=value)
    try:
        _engine_with(saver, value).run([0], max_epochs=3)
        records = saver.records()
        live = saver.records(live=True)
        store = saver.storage
    finally:
        saver.close()
    assert len(records) == 6 and len(live) == 3
    assert {(r.project, r.run) for r in records} == {(value, value)}  # records keep the names as typed
    for record in records:
        assert record.key is not None
        assert_inside(record.key)
        assert record.uri == store.url(record.key)
    for record in live:
        assert store.stat(record.key or "") is not None
    objects = place.assert_nothing_outside()
    assert objects == {f"{place.output_uri}/{r.key}" for r in live}


@pytest.mark.parametrize("where", ["project", "run", "filename_prefix", "to_save name"])
@pytest.mark.parametrize("value", REFUSED)
def test_a_name_the_text_rule_refuses_is_refused_naming_it_and_nothing_is_written(where, value, place) -> None:
    if where in ("project", "run"):
        with pytest.raises(ConfigError, match=rf"^{where} '.*' holds U\+[0-9A-F]{{4}}.* at character \d+"):
            place.saver(**{where: value})
    else:
        saver = place.saver()
        trainer = Engine(lambda engine, batch: None)
        prefix, name = (value, "model") if where == "filename_prefix" else ("", value)
        trainer.add_event_handler(
            Events.EPOCH_COMPLETED, Checkpoint({name: torch.nn.Linear(1, 1)}, saver, filename_prefix=prefix)
        )
        try:
            with pytest.raises(
                ConfigError,
                match=r"^stream \(Ignite's basename, from filename_prefix and to_save\) '.*' holds U\+",
            ):
                trainer.run([0], max_epochs=1)
            assert saver.records() == []
        finally:
            saver.close()
    assert place.assert_nothing_outside() == set()


#: What a pre-upload callback may try: every field that places the upload belongs to the allocator.
MOVES = [
    ("key", "../../escape.slot0.pt"), ("key", "/etc/passwd"), ("key", "..\\..\\x.pt"), ("key", "%2e%2e%2fx.pt"),
    ("key", "\uff0e\uff0e/x.pt"), ("key", "p/r/other.slot0.pt"), ("project", ".."), ("run", "/abs"),
    ("stream", "\u2215..\u2215x"), ("output_uri", "/"), ("filename", "../../x.pt"), ("slot", 99),
]  # fmt: skip


@pytest.mark.parametrize("how", ["mutate", "replace"])
@pytest.mark.parametrize(("field", "value"), MOVES)
def test_a_callback_that_moves_the_upload_is_refused_and_nothing_is_written(field, value, how, place) -> None:
    def move(info: UploadInfo) -> UploadInfo:
        if how == "replace":
            return dataclasses.replace(info, **{field: value})
        setattr(info, field, value)
        return info

    saver = place.saver(pre_upload=[move])
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(1, 1)}, saver))
    try:
        with pytest.raises(CallbackError, match=rf"changed {field} of .*: those belong to the slot allocator"):
            trainer.run([0], max_epochs=1)
        assert saver.records() == []
    finally:
        saver.close()
    assert place.assert_nothing_outside() == set()


def test_a_callback_may_name_and_tag_a_record_with_any_text_but_its_key_stays_a_slot(place) -> None:
    def rename(info: UploadInfo) -> UploadInfo:
        info.name = "../../../etc/passwd"
        info.metadata.update(path="/abs/../../x", ext="/../../x.pt")
        info.tags.append("..\\..\\x")
        return info

    saver = place.saver(pre_upload=[rename])
    try:
        _engine_with(saver, "model").run([0], max_epochs=2)
        records = saver.records()
    finally:
        saver.close()
    assert {r.name for r in records} == {"../../../etc/passwd"} and len(records) == 4
    for record in records:
        assert_inside(record.key or "")
        assert record.key and record.key.startswith("p/r/")
    assert len(place.assert_nothing_outside()) == 3


def _seam_calls(store: Storage, key: str, src: Path) -> dict[str, Callable[[], object]]:
    """Every storage method that takes a key, called with ``key``."""

    def write() -> None:
        with store.writer(key) as f:
            f.write(b"x")

    def read() -> None:
        with store.get(key) as f:
            f.read()

    return {
        "writer": write,
        "put_stream": lambda: store.put_stream(key, io.BytesIO(b"x")),
        "put_file": lambda: store.put_file(key, src),
        "get": read,
        "stat": lambda: store.stat(key),
        "delete": lambda: store.delete(key),
        "url": lambda: store.url(key),
    }


@pytest.mark.parametrize("key", ESCAPING_KEYS)
def test_the_storage_seam_refuses_every_key_that_could_escape(key, place, tmp_path) -> None:
    store = place.storage()
    src = tmp_path / "registry" / "src.bin"  # "registry/": a file the place does not count as an object
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(b"x")
    for name, call in _seam_calls(store, key, src).items():
        with pytest.raises(ConfigError, match="escape output_uri") as caught:
            call()
        assert repr(key) in str(caught.value), name
    store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
    # list() takes a prefix, not a key: whatever it is given, it only ever sees the root.
    # (Ceph answers a NUL in a list prefix with HTTP 500: that is a StorageError, not an escape.)
    if "\x00" not in key:
        assert [s.key for s in store.list(key)] in ([], ["p/r/s.slot0.pt"])
    assert place.assert_nothing_outside() == {f"{place.output_uri}/p/r/s.slot0.pt"}


keys = st.one_of(
    st.sampled_from(ESCAPING_KEYS),
    st.lists(st.sampled_from([*_PIECES, "x.pt", "/"]), min_size=1, max_size=8).map("".join),
    st.text(max_size=30),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys)
def test_any_key_given_to_local_storage_is_refused_or_lands_inside_the_root(key, tmp_path) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    root = folder / "a" / "b" / "root"
    store = open_storage(str(root))
    try:
        store.put_stream(key, io.BytesIO(b"x"))
    except ConfigError as exc:
        assert "escape output_uri" in str(exc)
        assert _files_under(folder) == set()
        return
    assert_inside(key)
    assert _files_under(folder) == {str(root / key)}
    assert [s.key for s in store.list()] == [key]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(project=names, run=names, prefix=names)
def test_any_project_run_and_prefix_through_a_real_checkpoint_stay_inside_output_uri(
    project, run, prefix, tmp_path
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    output = folder / "a" / "b" / "output"
    registry = str(tmp_path / "registry.db")
    if not all(name.strip() and first_refused(name) is None for name in (project, run)):
        with pytest.raises(ConfigError, match="is not a usable name|holds U\\+"):
            TrackerSaver(output, project=project, run=run, registry=registry)
        assert _files_under(folder) == set()
        return
    saver = TrackerSaver(output, project=project, run=run, registry=registry)
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(1, 1)}, saver, n_saved=1, filename_prefix=prefix)
    )
    try:
        if first_refused(prefix) is not None:
            with pytest.raises(ConfigError, match="stream .* holds U\\+"):
                trainer.run([0], max_epochs=2)
            assert saver.records() == []
            return
        trainer.run([0], max_epochs=2)
        live = saver.records(live=True)
    finally:
        saver.close()
    assert len(live) == 1
    assert_inside(live[0].key or "")
    assert _files_under(folder) == {str(output / (live[0].key or ""))}


@pytest.mark.parametrize("uri", ["s3://b/../x", "s3://b/a/../../x", "s3://b/\uff0e\uff0e/x", "s3://b/%2e%2e/x"])
def test_an_s3_prefix_that_could_escape_is_refused(uri, offline_env) -> None:
    with pytest.raises(ConfigError, match="has an unsafe prefix"):
        open_storage(uri)


# ====================================================================== credentials never show

SENTINEL = "SENTINEL-5ecret-7f3a"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_userinfo(endpoint: str) -> str:
    scheme, _, rest = endpoint.partition("://")
    return f"{scheme}://u:{SENTINEL}@{rest}"


class Seen:
    """Everything a user could see: exceptions (chains, tracebacks, attributes), reprs, logs, output."""

    def __init__(self, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
        caplog.set_level(logging.DEBUG)  # the root logger: every library's records propagate here
        self._caplog = caplog
        self._capfd = capfd
        self.texts: list[tuple[str, str]] = []

    def exception(self, exc: BaseException) -> None:
        self.texts.append(("traceback.format_exception", "".join(traceback.format_exception(exc))))
        stack: list[BaseException | None] = [exc]
        seen: set[int] = set()
        while stack:
            e = stack.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            label = f"{type(e).__module__}.{type(e).__name__}"
            self.texts += [(f"str({label})", str(e)), (f"repr({label})", repr(e))]
            self.texts.append((f"vars({label})", repr(vars(e))))  # what a debugger or Sentry shows
            stack += [e.__cause__, e.__context__]

    def add(self, label: str, text: str) -> None:
        self.texts.append((label, text))

    def assert_clean(self, *, third_party_debug: bool = True) -> None:
        """No sentinel anywhere; ``third_party_debug=False`` skips other libraries' DEBUG/INFO records."""
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        for record in self._caplog.records:
            ours = record.name.startswith("tracker_saver")
            if third_party_debug or ours or record.levelno >= logging.WARNING:
                self.texts.append((f"log {record.name} {record.levelname}", formatter.format(record)))
        out, err = self._capfd.readouterr()
        self.texts += [("stdout", out), ("stderr", err)]
        leaks = [f"{label}:\n{text}" for label, text in self.texts if SENTINEL in text or "5ecret-7f3a" in text]
        assert not leaks, "the secret shows in:\n\n" + "\n\n".join(leaks)[:6000]
        assert self.texts


@pytest.fixture
def seen(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> Seen:
    return Seen(caplog, capfd)


def _fail_every_way(store: Storage, seen: Seen, tmp_path: Path) -> list[BaseException]:
    """Call every storage operation; records what each failure showed. Writes must fail."""
    src = tmp_path / "src.bin"
    src.write_bytes(b"x")
    calls = {"check": store.check, **_seam_calls(store, "p/r/s.slot0.pt", src), "list": store.list}
    del calls["url"]
    failures = []
    for name, call in calls.items():
        try:
            call()
        except TrackerSaverError as exc:
            seen.exception(exc)
            failures.append(exc)
            assert exc.__cause__ is not None, f"{name}: the cause must stay chained"
        else:
            # HEAD and DELETE of a key in a missing bucket answer 404 / 204 on Ceph: no failure.
            assert name in ("stat", "delete"), f"{name} did not fail"
    seen.add("repr(storage)", repr(store))
    seen.add("str(storage)", str(store))
    seen.add("vars(storage)", repr(vars(store)))
    return failures


@pytest.mark.ceph
@pytest.mark.parametrize("how", ["storage_options", "environment", "session token"])
def test_a_wrong_secret_never_shows_anywhere(how, s3_output_uri, ceph_s3, monkeypatch, seen, tmp_path) -> None:
    options: dict[str, Any] = {}
    if how == "environment":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SENTINEL)
    else:
        options = {"aws_access_key_id": ceph_s3.access_key, "aws_secret_access_key": SENTINEL}
        if how == "session token":
            options["aws_session_token"] = SENTINEL
    with pytest.raises(ConfigError, match="credentials were refused|refused the request") as caught:
        TrackerSaver(s3_output_uri, registry=str(tmp_path / "r.db"), storage_options=options)
    seen.exception(caught.value)
    failures = _fail_every_way(open_storage(s3_output_uri, **options), seen, tmp_path)
    assert all(re.search("refused|HTTP 403|SignatureDoesNotMatch|InvalidToken", str(f)) for f in failures)
    # botocore logs every request's headers at DEBUG, a session token (X-Amz-Security-Token)
    # included: that is the library's own DEBUG output (docs/security.md), not ours.
    seen.assert_clean(third_party_debug=how != "session token")


@pytest.mark.parametrize("how", ["storage_options", "AWS_ENDPOINT_URL"])
def test_a_secret_in_the_endpoint_url_never_shows_when_the_endpoint_is_down(
    how, offline_env, monkeypatch, seen, tmp_path
) -> None:
    endpoint = _with_userinfo(f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SENTINEL)
    options: dict[str, Any] = {"max_attempts": 1, "connect_timeout": 1}
    if how == "AWS_ENDPOINT_URL":
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    else:
        options["endpoint_url"] = endpoint
    with pytest.raises(
        ConfigError, match=r"cannot reach endpoint http://127\.0\.0\.1:\d+ \(EndpointConnectionError\)"
    ) as caught:
        TrackerSaver("s3://bucket/team", registry=str(tmp_path / "r.db"), storage_options=options)
    seen.exception(caught.value)
    failures = _fail_every_way(open_storage("s3://bucket/team", **options), seen, tmp_path)
    assert all("EndpointConnectionError" in str(f) for f in failures)
    seen.assert_clean()


@pytest.mark.ceph
def test_a_secret_in_the_endpoint_url_never_shows_for_a_missing_bucket(s3_env, ceph_s3, seen, tmp_path) -> None:
    options = {"endpoint_url": _with_userinfo(ceph_s3.endpoint_url)}
    uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/team"
    with pytest.raises(ConfigError, match="does not exist at endpoint") as caught:
        TrackerSaver(uri, registry=str(tmp_path / "r.db"), storage_options=options)
    seen.exception(caught.value)
    _fail_every_way(open_storage(uri, **options), seen, tmp_path)
    seen.assert_clean()


class Forwarder:
    """A TCP port in front of the gateway that can go away for real: an endpoint going down."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition("/")[2].partition(":")
        self._target = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = int(self._server.getsockname()[1])
        self._open: list[socket.socket] = []
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(self._target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        self._stopped.set()
        self._server.close()
        for sock in self._open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracker_saver", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.ceph
def test_an_endpoint_that_goes_down_mid_training_shows_no_secret_in_errors_logs_records_or_the_cli(
    s3_output_uri, s3_env, ceph_s3, monkeypatch, seen, tmp_path
) -> None:
    forwarder = Forwarder(ceph_s3.endpoint_url)
    registry = str(tmp_path / "r.db")
    options = {
        "endpoint_url": _with_userinfo(f"http://127.0.0.1:{forwarder.port}"),
        "max_attempts": 1,
        "connect_timeout": 1,
    }
    saver = TrackerSaver(s3_output_uri, project="p", run="r", registry=registry, storage_options=options)
    seen.add("repr(saver)", repr(saver))
    seen.add("repr(saver.storage)", repr(saver.storage))
    seen.add("vars(saver.storage)", repr(vars(saver.storage)))
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_STARTED(once=2), forwarder.stop)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": torch.nn.Linear(2, 1)}, saver, n_saved=1))
    try:
        with pytest.raises(StorageError, match="cannot reach endpoint http://127.0.0.1") as caught:
            trainer.run([0], max_epochs=2)
        seen.exception(caught.value)
        records = saver.records()
    finally:
        forwarder.stop()
        saver.close()
    assert len(records) == 2  # the first, and the one that failed (settled at the next start)
    for record in records:
        seen.add(f"record {record.id}", json.dumps(record.to_dict()) + repr(record))
    # The CLI, with the secret in its environment too, reading those records, and failing.
    env = {
        **process_env(),
        "AWS_SECRET_ACCESS_KEY": SENTINEL,
        "AWS_ENDPOINT_URL": _with_userinfo(ceph_s3.endpoint_url),
        "CLEARML_API_SECRET_KEY": SENTINEL,
    }
    for args, status in ((["models", "list"], 0), (["models", "show", "424242"], 2)):
        done = _cli(["--registry", registry, *args], env)
        assert done.returncode == status, done.stderr
        seen.add(f"tracker-saver {' '.join(args)}", done.stdout + done.stderr)
    for args in (["models", "list", "--json"], ["models", "show", records[-1].id], ["models", "show", "424242"]):
        cli_main(["--registry", registry, *args])  # its output is in what `seen` reads from stdout/stderr
    seen.assert_clean()


@pytest.mark.clearml
def test_a_clearml_secret_never_shows_in_the_cli(clearml_standin, seen) -> None:
    # Both ways at once (one process start each costs seconds): the secret key, and the API
    # host with user:secret@, which the ClearML SDK puts in its LoginError message.
    env = {**process_env(), "CLEARML_API_SECRET_KEY": SENTINEL}
    env["CLEARML_API_HOST"] = _with_userinfo(env["CLEARML_API_HOST"])
    done = _cli(["--registry", "clearml", "models", "list"], env)
    assert done.returncode == 2 and "refused the credentials" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1  # one clear line, no traceback
    seen.add("tracker-saver --registry clearml models list", done.stdout + done.stderr)
    seen.assert_clean()


@pytest.mark.clearml
def test_a_clearml_secret_never_shows_in_an_in_process_traceback(clearml_standin, seen) -> None:
    # The SDK's LoginError names the API host as configured: the registry chains a masked copy.
    env = {**process_env(), "CLEARML_API_SECRET_KEY": SENTINEL}
    env["CLEARML_API_HOST"] = _with_userinfo(env["CLEARML_API_HOST"])
    script = (
        "import traceback\n"
        "from tracker_saver.integrations.clearml.registry import ClearMLRegistry\n"
        "try:\n    ClearMLRegistry()\n"
        "except Exception as exc:\n    print(''.join(traceback.format_exception(exc)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "refused the credentials" in done.stdout and "LoginError" in done.stdout, done.stdout + done.stderr
    seen.add("traceback of ClearMLRegistry() with user:secret@ in CLEARML_API_HOST", done.stdout + done.stderr)
    seen.assert_clean()


def test_the_error_boundary_chains_a_masked_copy_of_the_cause_of_the_same_type(monkeypatch, seen) -> None:
    botocore = pytest.importorskip("botocore.exceptions")
    from tracker_saver.storage.s3.errors import ErrorBoundary

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SENTINEL)
    boundary = ErrorBoundary("s3://b/p", "b", "p", "http://127.0.0.1:9", None)
    raw = botocore.EndpointConnectionError(endpoint_url=f"http://u:{SENTINEL}@127.0.0.1:9/b/p/k")
    with pytest.raises(StorageError) as caught:
        with boundary("uploading to", "k"):
            try:
                raise OSError(f"the socket said {SENTINEL}")
            except OSError as inner:
                raise raw from inner
    exc = caught.value
    seen.exception(exc)
    seen.assert_clean()
    cause = exc.__cause__
    assert type(cause) is botocore.EndpointConnectionError and cause is not raw
    assert exc.__context__ is cause  # not the raw exception either
    assert str(cause) == 'Could not connect to the endpoint URL: "http://127.0.0.1:9/b/p/k"'
    assert type(cause.__cause__) is OSError and str(cause.__cause__) == "the socket said ***"
    assert cause.__traceback__ is not None  # where botocore failed is still shown


def test_a_cause_that_cannot_be_copied_is_chained_as_a_masked_stand_in(monkeypatch, seen) -> None:
    botocore = pytest.importorskip("botocore.exceptions")
    from tracker_saver.storage.s3.errors import ErrorBoundary

    class Opaque(botocore.BotoCoreError):
        def __init__(self, secret: object) -> None:
            super().__init__()
            self.secret = secret

        def __str__(self) -> str:
            return f"opaque failure with {self.secret}"

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SENTINEL)
    with pytest.raises(StorageError, match=r"Opaque: opaque failure with \*\*\*") as caught:
        with ErrorBoundary("s3://b/p", "b", "p", "http://127.0.0.1:9", None)("reading", "k"):
            raise Opaque(SENTINEL)
    seen.exception(caught.value)
    seen.assert_clean()
    assert "Opaque: opaque failure with ***" in str(caught.value.__cause__)


#: Shapes of real credentials: AWS key ids, 40-character AWS secrets, a random-looking assigned secret.
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_ASSIGNED = re.compile(r"(?i)(?:secret|password|passwd|token)[\w-]*[\"']?\s*[:=]\s*[\"']?([^\s\"'`,;)}]+)")
#: What an assigned value may be: a placeholder, a variable, or a test value that says so.
_PLACEHOLDER = re.compile(
    r"(?i)^(?:\.\.\.|…|\*+|<.*|\$.*|\{.*|.*(?:test|example|fake|dummy|not-a-real|never-shown).*)$"
)


def _random_looking(text: str) -> bool:
    """Mixed case and digits: what a generated key looks like, and prose or a hex digest does not."""
    return all(re.search(cls, text) for cls in ("[A-Z]", "[a-z]", "[0-9]"))


def _secret_lookalikes(text: str) -> list[str]:
    found = [m.group(0) for m in _AWS_KEY_ID.finditer(text) if not m.group(0).endswith("EXAMPLE")]
    found += [
        m.group(0) for m in _AWS_SECRET.finditer(text) if _random_looking(m.group(0)) and "EXAMPLE" not in m.group(0)
    ]
    found += [
        m.group(0)
        for m in _ASSIGNED.finditer(text)
        if len(m.group(1)) >= 12 and _random_looking(m.group(1)) and not _PLACEHOLDER.match(m.group(1))
    ]
    return found


def test_the_secret_detector_finds_real_looking_keys() -> None:
    assert _secret_lookalikes("aws_access_key_id = AKIAZ3XQ4M5N6P7Q8R9S")
    assert _secret_lookalikes("export AWS_SECRET_ACCESS_KEY=q8Zr2vLx0bN5mP7kT1wY3cF6hJ9dS4gA2eR0uI8o")
    assert _secret_lookalikes('clearml: {secret: "h7Gk2pLq9xZw4Tb"}')
    assert not _secret_lookalikes("AWS_SECRET_ACCESS_KEY=... CLEARML_API_SECRET_KEY=$SECRET_KEY secret: '...'")
    assert not _secret_lookalikes("AWS_SECRET_ACCESS_KEY=wrong; the secret: the key; s3cr3t-never-shown-Zq81xVb=1")
    assert not _secret_lookalikes("sha1 0123456789abcdef0123456789abcdef01234567, AKIAIOSFODNN7EXAMPLE")


def test_the_docs_and_scripts_show_no_real_looking_credentials() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "scripts").glob("*.sh"))]
    found = {str(f.relative_to(ROOT)): hits for f in files if (hits := _secret_lookalikes(f.read_text()))}
    assert found == {}


# ====================================================================== queries are parametrized

#: Values and keys with SQL metacharacters, LIKE wildcards and JSON-path characters.
SQL_VALUES = [
    "'", '"', ";", "--", "/*", "*/", "') OR 1=1 --", '" OR ""="', "x'; DROP TABLE records; --", "%", "_", "a%",
    "a_c", "abc", "\\", "NULL", "1 OR 1=1", "'; SELECT sqlite_version(); --", "$.x", "[0]",
]  # fmt: skip
SQL_KEYS = ["it's", 'a"b', "x; DROP TABLE metadata; --", "k') OR 1=1 --", "%", "_", "a.b", "$.x", "[0]", "m.key"]


class RecordingConnection:
    """Wraps a ``sqlite3.Connection``: every SQL text the registry runs, and its parameters."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.sql: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.sql.append(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.sql.append(sql)
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.fixture(scope="module")
def sql_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Record]]]:
    """A registry whose records carry every nasty value (``note``) and key, through real saves."""
    root = tmp_path_factory.mktemp("sql")
    registry = str(root / "registry.db")
    home = pytest.MonkeyPatch()
    home.setenv("HOME", str(root / "home"))  # like conftest's _private_home, for this module fixture

    def tag(info: UploadInfo) -> UploadInfo:
        i = int(info.metadata["global_step"] or 0) - 1
        info.metadata["note"] = SQL_VALUES[i]
        info.metadata[SQL_KEYS[i % len(SQL_KEYS)]] = i
        return info

    saver = TrackerSaver(root / "output", project="sql", run="r", registry=registry, pre_upload=[tag])
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED,
        Checkpoint(
            {"model": torch.nn.Linear(1, 1)}, saver, n_saved=None, global_step_transform=lambda e, _: e.state.epoch
        ),
    )
    try:
        trainer.run([0], max_epochs=len(SQL_VALUES))
        records = saver.records()
    finally:
        saver.close()
        home.undo()
    assert len(records) == len(SQL_VALUES)
    yield registry, records


def _schema(registry: str) -> list[tuple[str, str]]:
    with sqlite3.connect(registry) as conn:
        return conn.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall()


def _wheres() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for value in SQL_VALUES:
        out += [{"note": value}, {"note": ("!=", value)}]
    out.append({"note": ("in", SQL_VALUES[:6])})
    for i, key in enumerate(SQL_KEYS):
        out += [{key: i}, {key: (">=", 0)}, {key: ("in", [i, i + len(SQL_KEYS)])}, {key: ("!=", i)}]
    return out


def test_where_values_and_keys_with_sql_metacharacters_match_exactly_and_never_reach_the_sql(sql_registry) -> None:
    registry, records = sql_registry
    schema = _schema(registry)
    reg = SQLiteRegistry(registry)
    recording = RecordingConnection(reg._db._conn)
    reg._db._conn = recording  # type: ignore[assignment]
    try:
        for where in _wheres():
            found = find_models(project="sql", where=where, registry=reg)
            expected = [r.id for r in records if matches(r.metadata, parse_where(where))]
            assert [r.id for r in found] == expected, where
    finally:
        reg._db._conn = recording._conn
        reg.close()
    assert any(len(find_models(project="sql", where={"note": v}, registry=registry)) == 1 for v in SQL_VALUES)
    for value in SQL_VALUES:  # a range needs a number: refused before any SQL is built
        if not is_number(value):
            with pytest.raises(ConfigError, match="is not a number"):
                find_models(project="sql", where={"note": (">", value)}, registry=registry)
    texts = "\n".join(recording.sql)
    distinctive = [t for t in [*SQL_VALUES, *SQL_KEYS] if len(t) > 1 and any(c in t for c in "'\";%$[")]
    assert recording.sql and not [t for t in distinctive if t in texts]
    assert "--" not in texts and "DROP" not in texts and "/*" not in texts
    assert _schema(registry) == schema and len(SQLiteRegistry(registry).records.query(Query())) == len(records)


@pytest.mark.parametrize("value", SQL_VALUES)
def test_the_cli_where_with_sql_metacharacters_lists_exactly_the_matching_records(value, sql_registry, capsys) -> None:
    registry, records = sql_registry
    schema = _schema(registry)
    expected = [r.id for r in records if r.metadata.get("note") == value]
    assert cli_main(["--registry", registry, "models", "list", "--where", f"note='{value}'", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == expected and len(expected) == 1
    # Unquoted, "OR 1=1" is no SQL and no text either: where-expressions have no 'or', and say so.
    assert cli_main(["--registry", registry, "models", "list", "--where", f"note = {value} OR 1=1", "--json"]) == 2
    assert "joins conditions with 'or'" in capsys.readouterr().err
    assert _schema(registry) == schema


@pytest.mark.parametrize(
    "args",
    [
        ["--where", "x'; DROP TABLE records; --=1"],
        ["--where", "note=1; DROP TABLE records"],
        ["--sort", "-x'; DROP TABLE records; --"],
        ["--sort", "note) --"],
    ],
)
def test_the_cli_refuses_keys_with_sql_metacharacters_in_one_line(args, sql_registry, capsys) -> None:
    registry, records = sql_registry
    schema = _schema(registry)
    status = cli_main(["--registry", registry, "models", "list", *args, "--json"])
    out, err = capsys.readouterr()
    if status == 0:  # a value, not a key: it simply matches nothing
        assert json.loads(out) == []
    else:
        assert status == 2 and err.startswith("tracker-saver: error: ") and err.count("\n") == 1
    assert _schema(registry) == schema and len(SQLiteRegistry(registry).records.query(Query())) == len(records)


def test_a_listing_prefix_never_walks_outside_the_root(tmp_path) -> None:
    """``list``/``staged`` walk only the prefix's folder; an absolute or ``..`` prefix, or one
    through a symlink that leaves the root, falls back to walking the root (which never follows it)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pt").write_bytes(b"x")
    (outside / ".tmp-secret.pt.1").write_bytes(b"x")
    store = open_storage(str(tmp_path / "root"))
    store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
    (tmp_path / "root" / "link").symlink_to(outside, target_is_directory=True)
    for prefix in (f"{outside}/", "../outside/", "link/", "p/../../outside/", "/"):
        assert [s.key for s in store.list(prefix)] == [], prefix
        assert store.staged(prefix) == [], prefix
    assert [s.key for s in store.list("p/r/")] == ["p/r/s.slot0.pt"]
