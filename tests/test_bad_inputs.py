"""The bad-input catalogue: each row is an input as a user writes it, the error it gets, and what is left.

Every row is one test below (``@case(...)`` registers the row and marks its test), run against
real things: Ignite's ``Checkpoint`` and ``Engine``, SQLite files, folders, tmpfs mounts, the
Ceph gateway (``ceph``) and the ClearML stand-in (``clearml``). A row's message is the error's
text with ``…`` where it varies; the test matches it as a regex (``Row.pattern``) and checks the
exact error type. Most tests also snapshot the files and the registry records before and after:
nothing is created before validation, nothing is half-written, and no record lies.

``docs/bad-inputs.md`` shows the same rows, generated from this module:
``python -m tests.test_bad_inputs`` rewrites its table, and ``test_the_docs_table_is_the_catalogue``
fails when the two differ.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import hashlib
import io
import json
import math
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

import tracker_saver.core.errors
from tests.helpers import chained, exception_texts, model
from tracker_saver import (
    RecordState,
    TrackerSaver,
    find_models,
    load_checkpoint,
    rename_model,
)
from tracker_saver.core.records import UploadInfo
from tracker_saver.registry.sqlite import SQLiteRegistry

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bad-inputs.md"
START, END = "<!-- catalogue:start (python -m tests.test_bad_inputs) -->", "<!-- catalogue:end -->"
WRONG_SECRET = "wr0ng-s3cret-never-shown-Pq7Zx"

F = TypeVar("F", bound=Callable[..., Any])


# ------------------------------------------------------------------ the catalogue


@dataclass(frozen=True)
class Row:
    """One bad input: where it belongs, what the user writes, what they get, what is left."""

    group: str
    id: str
    input: str
    error: str  # the exception's class name, exactly; "none" when the input is accepted
    message: str  # the message, "…" where it varies; for an accepted input, what happens instead
    left: str  # what is left behind

    def pattern(self) -> str:
        """The message as a regex: ``…`` matches anything."""
        return ".*?".join(re.escape(part) for part in self.message.split("…"))


CATALOGUE: dict[str, Row] = {}


def case(group: str, id: str, input: str, error: str, message: str, left: str) -> Callable[[F], F]:
    """Register a row and mark the test that checks it (named ``test_<id>``)."""
    row = Row(group, id, input, error, message, left)
    assert id not in CATALOGUE, f"two rows are called {id!r}"
    CATALOGUE[id] = row

    def mark(test: F) -> F:
        assert test.__name__ == "test_" + id.replace("-", "_"), f"{test.__name__} checks row {id!r}"
        test.row = row  # type: ignore[attr-defined]
        return test

    return mark


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Row:
    """The row the running test checks."""
    return request.function.row


def error_type(name: str) -> type[BaseException]:
    """The class a row names: one of tracker_saver's errors, or a builtin (Ignite's own errors)."""
    found = getattr(tracker_saver.core.errors, name, None) or getattr(builtins, name)
    assert isinstance(found, type) and issubclass(found, BaseException), name
    return found


@contextlib.contextmanager
def raises(row: Row) -> Iterator[pytest.ExceptionInfo[BaseException]]:
    """``pytest.raises`` for the row: its exact error type, its message."""
    with pytest.raises(error_type(row.error), match=row.pattern()) as caught:
        yield caught
    assert type(caught.value).__name__ == row.error, f"{type(caught.value).__name__}: {caught.value}"


def texts(exc: BaseException | None) -> str:
    """str and repr of an exception and of everything chained to it."""
    out: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out += [str(exc), repr(exc)]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(out)


def markdown() -> str:
    """The catalogue as the docs show it: one table per group."""
    lines: list[str] = []
    for group in dict.fromkeys(r.group for r in CATALOGUE.values()):
        lines += [
            f"### {group}",
            "",
            "| id | input | error | message | left behind |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in (r for r in CATALOGUE.values() if r.group == group):
            error = r.error if r.error != "none" else "none: accepted"
            lines.append(f"| `{r.id}` | {_code(r.input)} | {error} | {_code(r.message)} | {r.left} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# ------------------------------------------------------------------ a real world to break


@dataclass
class World:
    """A folder with an output_uri and a registry inside, and what they hold."""

    root: Path

    def __post_init__(self) -> None:
        self.out = self.root / "out"
        self.db = self.root / "registry.db"

    def saver(self, output_uri: Any = None, **kwargs: Any) -> TrackerSaver:
        kwargs.setdefault("registry", self.db)
        return TrackerSaver(self.out if output_uri is None else output_uri, project="p", run="r", **kwargs)

    def files(self) -> dict[str, str]:
        """Every folder and file under the root: its sha256 (a registry file: only that it exists)."""
        found: dict[str, str] = {}
        for folder, dirs, names in os.walk(self.root):
            for name in dirs:
                found[os.path.relpath(os.path.join(folder, name), self.root) + "/"] = ""
            for name in names:
                path = Path(folder) / name
                if name.endswith(("-wal", "-shm", "-journal")):
                    continue  # SQLite's working files come and go with connections
                found[str(path.relative_to(self.root))] = (
                    "sqlite" if name.endswith(".db") else hashlib.sha256(path.read_bytes()).hexdigest()
                )
        return found

    def records(self) -> list[tuple[Any, ...]]:
        """``(id, state, key, sha256, size)`` of every record in the registry, read-only."""
        if not self.db.exists():
            return []
        conn = sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT id, state, key, sha256, size FROM records ORDER BY id").fetchall()
        finally:
            conn.close()

    def snapshot(self) -> tuple[dict[str, str], list[tuple[Any, ...]]]:
        return self.files(), self.records()

    def assert_truthful(self) -> None:
        """No record lies and nothing is half-written: each loadable record's slot holds its bytes."""
        for rid, state, key, sha, size in self.records():
            if state in ("live", "revived"):
                data = (self.out / key).read_bytes()
                assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha), f"record {rid} lies"
        assert list(self.root.rglob(".tmp-*")) == [], "a temp file was left behind"

    def assert_one_failed_record_added(self, before: tuple[dict[str, str], list[tuple[Any, ...]]]) -> None:
        """A failed save: every file as it was, every record as it was, plus one ``failed`` record."""
        files, records = self.snapshot()
        assert files == before[0]
        assert records[: len(before[1])] == before[1]
        assert [r[1] for r in records[len(before[1]) :]] == ["failed"]
        self.assert_truthful()


@pytest.fixture
def world(tmp_path: Path) -> World:
    root = tmp_path / "world"
    root.mkdir()
    return World(root)


def fit(saver: TrackerSaver, to_save: dict[str, Any] | None = None, *, epochs: int = 1, **kwargs: Any) -> Engine:
    """A real ``Checkpoint`` (n_saved=1 unless given) on a real ``Engine``, run for ``epochs``."""
    kwargs.setdefault("n_saved", 1)
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint(to_save or {"model": model()}, saver, **kwargs))
    trainer.run([0], max_epochs=epochs)
    return trainer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _needs_root(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"this check needs root to mount a tmpfs, and CI runs as root: {reason}", pytrace=False)
    pytest.skip(f"needs root to mount a tmpfs: {reason}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m") -> Iterator[Path]:
    """A small tmpfs mounted at ``path`` for the block (root only: skipped otherwise, failed in CI)."""
    if os.geteuid() != 0:
        _needs_root("not running as root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        _needs_root(f"mount failed: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def remount_read_only(path: Path) -> None:
    """Make a tmpfs refuse every write, root's included (file modes do not stop root)."""
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


# ------------------------------------------------------------------ names and n_saved

NAMES = "Names and n_saved"
LEFT_SAVER = "only the empty output folder and registry of the valid `TrackerSaver(...)`; no object, no record"
LEFT_NOTHING = "nothing: no output folder, no registry file"


@case(
    NAMES, "n-saved-zero",
    'Checkpoint(to_save, saver, n_saved=0)',
    "ValueError", "n_saved must be a positive integer or None, got 0",
    LEFT_SAVER + " (Ignite's own error, raised in `Checkpoint(...)` before the saver is called)",
)  # fmt: skip
def test_n_saved_zero(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved=0)
    assert world.snapshot() == before and before[1] == []


@case(
    NAMES, "n-saved-negative",
    'Checkpoint(to_save, saver, n_saved=-1)',
    "ValueError", "n_saved must be a positive integer or None, got -1",
    LEFT_SAVER + " (Ignite's own error)",
)  # fmt: skip
def test_n_saved_negative(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved=-1)
    assert world.snapshot() == before


@case(
    NAMES, "n-saved-string",
    'Checkpoint(to_save, saver, n_saved="2")',
    "TypeError", "'<' not supported between instances of 'str' and 'int'",
    LEFT_SAVER + " (Ignite's own comparison fails in `Checkpoint(...)`; pass an int)",
)  # fmt: skip
def test_n_saved_string(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        Checkpoint({"model": model()}, saver, n_saved="2")  # type: ignore[arg-type]
    assert world.snapshot() == before


@case(
    NAMES, "n-saved-float",
    'Checkpoint(to_save, saver, n_saved=1.5)',
    "none", "accepted by Ignite, which then keeps 2 checkpoints (len(_saved) < 1.5); the saver keeps the same 2 slots",
    "2 objects and 2 live records after 3 saves, exactly what Ignite keeps; pass an int to mean it",
)  # fmt: skip
def test_n_saved_float(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda engine, batch: None)
    handler = Checkpoint({"model": model()}, saver, n_saved=1.5)  # type: ignore[arg-type]
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    trainer.run([0], max_epochs=3)
    live = [r.filename for r in saver.records(live=True)]
    assert live == [item.filename for item in handler._saved] == ["model_2.pt", "model_3.pt"]
    assert sorted(p.name for p in (world.out / "p" / "r").iterdir()) == ["model.slot0.pt", "model.slot1.pt"]
    world.assert_truthful()


@case(
    NAMES, "prefix-slash",
    'Checkpoint(to_save, saver, filename_prefix="team/best")',
    "none", "accepted: the record is named team/best_model_1.pt as typed; its key is p/r/team-best_model-….slot0.pt",
    "one object inside output_uri (the `/` never makes a folder of the key) and its live record",
)  # fmt: skip
def test_prefix_slash(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="team/best")
    (record,) = saver.records(live=True)
    assert record.name == "team/best_model_1.pt"
    assert record.key is not None and record.key.startswith("p/r/team-best_model-") and record.key.count("/") == 2
    world.assert_truthful()


@case(
    NAMES, "prefix-dotdot",
    'Checkpoint(to_save, saver, filename_prefix="../../outside")',
    "none", "accepted: the record keeps the name ../../outside_model_1.pt; the key is a slug, p/r/outside_model-….slot0.pt",
    "one object inside output_uri, nothing outside it: keys can never escape output_uri",
)  # fmt: skip
def test_prefix_dotdot(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="../../outside")
    (record,) = saver.records(live=True)
    assert record.name == "../../outside_model_1.pt"
    assert record.key is not None and ".." not in record.key and record.key.startswith("p/r/outside_model-")
    files = [f for f in world.files() if not f.endswith("/")]
    assert sorted(f for f in files if "/.tracker_saver/" not in f) == [f"out/{record.key}", "registry.db"]
    assert [f for f in files if "/.tracker_saver/" in f] == [
        f"out/.tracker_saver/owners/{record.key[: -len('.slot0.pt')]}.json"
    ]
    world.assert_truthful()


@case(
    NAMES, "prefix-nul",
    'Checkpoint(to_save, saver, filename_prefix="a\\x00b")',
    "ConfigError",
    "stream (Ignite's basename, from filename_prefix and to_save) 'a\\x00b_model' holds U+0000 (NUL) at "
    "character 2, a NUL, which no file name or C string can hold: remove it (names, tags and metadata follow "
    "one text rule: docs/security.md)",
    LEFT_SAVER + " (raised at the first save, before a record or a byte is written)",
)  # fmt: skip
def test_prefix_nul(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, filename_prefix="a\x00b")
    assert world.snapshot() == before and before[1] == []


@case(
    NAMES, "prefix-300-characters",
    'Checkpoint(to_save, saver, filename_prefix="x" * 300)',
    "none", "accepted: the record keeps the 300-character name; the key's segment is an 80-character slug plus a hash",
    "one object whose file name stays far below the 255-byte limit of file systems, and its record",
)  # fmt: skip
def test_prefix_300_characters(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="x" * 300)
    (record,) = saver.records(live=True)
    assert record.name == "x" * 300 + "_model_1.pt"
    assert record.key is not None and len(record.key.rsplit("/", 1)[1]) < 100
    world.assert_truthful()


@case(
    NAMES, "prefix-too-long",
    'Checkpoint(to_save, saver, filename_prefix="x" * 1001)',
    "ConfigError",
    "stream (Ignite's basename, from filename_prefix and to_save) 'xxx…_model' is not a usable name: "
    "pass a non-empty string of at most 1000 characters, without NUL",
    LEFT_SAVER + " (raised at the first save)",
)  # fmt: skip
def test_prefix_too_long(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, filename_prefix="x" * 1001)
    assert world.snapshot() == before


@case(
    NAMES, "prefix-unicode",
    'Checkpoint(to_save, saver, filename_prefix="résnet 模型")',
    "none", "accepted: the record is named résnet 模型_model_1.pt as typed; the key is an ASCII slug, p/r/resnet-_model-….slot0.pt",
    "one object and its live record; `find_models` and the CLI show the name as typed",
)  # fmt: skip
def test_prefix_unicode(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, filename_prefix="résnet 模型")
    (record,) = saver.records(live=True)
    assert record.name == "résnet 模型_model_1.pt"
    assert record.key is not None and record.key.isascii() and record.key.startswith("p/r/resnet-_model-")
    world.assert_truthful()


@case(
    NAMES, "project-dotdot",
    'TrackerSaver("./ckpt", project="..")',
    "none", "accepted: records keep the project .. as typed; keys start with x-…/, a slug, never ../",
    "objects inside output_uri only",
)  # fmt: skip
def test_project_dotdot(row: Row, world: World) -> None:
    saver = TrackerSaver(world.out, project="..", run="r", registry=world.db)
    fit(saver)
    (record,) = saver.records(live=True)
    assert record.project == ".." and record.key is not None and record.key.startswith("x-")
    assert (world.out / record.key).is_file()
    world.assert_truthful()


@case(
    NAMES, "run-nul",
    'TrackerSaver("./ckpt", run="r\\x00")',
    "ConfigError",
    "run 'r\\x00' holds U+0000 (NUL) at character 2, a NUL, which no file name or C string can hold: remove it "
    "(names, tags and metadata follow one text rule: docs/security.md)",
    LEFT_NOTHING,
)  # fmt: skip
def test_run_nul(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, run="r\x00", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    NAMES, "run-empty",
    'TrackerSaver("./ckpt", run="")',
    "ConfigError", "run '' is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    LEFT_NOTHING + " (leave run out, or pass None, for the default run)",
)  # fmt: skip
def test_run_empty(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, run="", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    NAMES, "project-not-text",
    'TrackerSaver("./ckpt", project=3)',
    "ConfigError", "project 3 is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    LEFT_NOTHING,
)  # fmt: skip
def test_project_not_text(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project=3, registry=world.db)  # type: ignore[arg-type]
    assert world.snapshot() == ({}, [])


@case(
    NAMES, "project-blank",
    'TrackerSaver("./ckpt", project=" ")',
    "ConfigError", "project ' ' is not a usable name: pass a non-empty string of at most 1000 characters, without NUL",
    LEFT_NOTHING,
)  # fmt: skip
def test_project_blank(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project=" ", registry=world.db)
    assert world.snapshot() == ({}, [])


# ------------------------------------------------------------------ output_uri

OUTPUT = "output_uri"


@case(
    OUTPUT, "output-empty",
    'TrackerSaver("")',
    "ConfigError",
    "TrackerSaver needs an output_uri: pass a folder or s3://BUCKET/PREFIX "
    "(with registry='clearml' it defaults to the task's output_uri)",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_empty(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-nul",
    'TrackerSaver("ckpt\\x00")',
    "ConfigError", "output_uri 'ckpt\\x00' contains NUL: pass a folder or s3://BUCKET/PREFIX",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_nul(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(world.root)
    with raises(row):
        TrackerSaver("ckpt\x00", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-relative-dotdot",
    'TrackerSaver("../ckpt")',
    "none", "accepted: resolved against the current folder once; records hold the absolute file:///…/ckpt/… uri",
    "the folder ../ckpt, its objects and their records, loadable from any working folder",
)  # fmt: skip
def test_output_relative_dotdot(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    (world.root / "work").mkdir()
    monkeypatch.chdir(world.root / "work")
    saver = TrackerSaver("../ckpt", project="p", run="r", registry=world.db)
    assert saver.storage.uri == (world.root / "ckpt").as_uri()
    fit(saver)
    (record,) = saver.records(live=True)
    assert record.uri == (world.root / "ckpt" / "p" / "r" / "model.slot0.pt").as_uri()
    monkeypatch.chdir(world.root)
    load_checkpoint(record, {"model": model()})


@case(
    OUTPUT, "output-file-uri-host",
    'TrackerSaver("file://../ckpt")',
    "ConfigError",
    "output_uri 'file://../ckpt' names the host '..': a file URI is file:///ABSOLUTE/PATH (three slashes); "
    "pass a relative folder as a plain path",
    LEFT_NOTHING + " (before the fix, it wrote to the folder /ckpt)",
)  # fmt: skip
def test_output_file_uri_host(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("file://../ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-unknown-scheme",
    'TrackerSaver("hdfs://namenode/ckpt")',
    "ConfigError",
    "output_uri 'hdfs://namenode/ckpt' has the unknown scheme 'hdfs': use a local folder, file:///path or s3://BUCKET/PREFIX",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_unknown_scheme(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver("hdfs://namenode/ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-s3-no-bucket",
    'TrackerSaver("s3:///team/ckpt")',
    "ConfigError", "output_uri 's3:///team/ckpt' has no bucket: use s3://BUCKET/PREFIX",
    LEFT_NOTHING + " (nothing is sent to any endpoint)",
)  # fmt: skip
def test_output_s3_no_bucket(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3:///team/ckpt", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-s3-dotdot",
    'TrackerSaver("s3://ckpts/team/../other")',
    "ConfigError",
    "output_uri 's3://ckpts/team/../other' has an unsafe prefix 'team/../other': use s3://BUCKET/PREFIX where "
    "PREFIX has plain segments (letters, digits, . _ - = +, no '..', no '//')",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_s3_dotdot(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3://ckpts/team/../other", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-s3-credentials-in-uri",
    'TrackerSaver("s3://AKIA…:SECRET@ckpts/team")',
    "ConfigError",
    "output_uri must not contain credentials (user:secret@ before the bucket): use s3://BUCKET/PREFIX and "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an instance role",
    LEFT_NOTHING + "; the message does not repeat the URI, so the secret is never shown",
)  # fmt: skip
def test_output_s3_credentials_in_uri(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row) as caught:
        TrackerSaver(f"s3://AKIAEXAMPLE:{WRONG_SECRET}@ckpts/team", registry=world.db)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-s3-unknown-option",
    'TrackerSaver("s3://ckpts/team", storage_options={"multipart_chunk_size": 8 << 20})',
    "ConfigError", "unknown storage option 'multipart_chunk_size' for s3://ckpts/team: use endpoint_url, …",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_s3_unknown_option(row: Row, world: World) -> None:
    pytest.importorskip("boto3")
    with raises(row):
        TrackerSaver("s3://ckpts/team", storage_options={"multipart_chunk_size": 8 << 20}, registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-local-with-storage-options",
    'TrackerSaver("./ckpt", storage_options={"endpoint_url": "http://ceph:7480"})',
    "ConfigError",
    "storage_options ['endpoint_url'] do not apply to a local output_uri: remove them, or use an s3:// output_uri",
    LEFT_NOTHING,
)  # fmt: skip
def test_output_local_with_storage_options(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, storage_options={"endpoint_url": "http://ceph:7480"}, registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    OUTPUT, "output-is-a-file",
    'TrackerSaver("notes.txt/ckpt")  # notes.txt is a file',
    "ConfigError", "output_uri '…/notes.txt/ckpt' is not a writable folder (Not a directory): pass a folder you can write to",
    "the file as it was; no folder, no registry file",
)  # fmt: skip
def test_output_is_a_file(row: Row, world: World) -> None:
    (world.root / "notes.txt").write_text("x")
    before = world.snapshot()
    with raises(row):
        TrackerSaver(world.root / "notes.txt" / "ckpt", registry=world.db)
    assert world.snapshot() == before


@case(
    OUTPUT, "output-read-only",
    'TrackerSaver("/mnt/ro/ckpt")  # a read-only mount; even root cannot write',
    "ConfigError",
    "output_uri '…/ckpt' is not a writable folder (Read-only file system): pass a folder you can write to",
    LEFT_NOTHING + " (the registry is checked, not opened, before the folder)",
)  # fmt: skip
def test_output_read_only(row: Row, world: World) -> None:
    with tmpfs(world.root / "ro") as mount:
        remount_read_only(mount)
        before = world.snapshot()
        with raises(row):
            TrackerSaver(mount / "ckpt", registry=world.db)
        assert world.snapshot() == before and "registry.db" not in before[0]


@case(
    OUTPUT, "output-no-longer-writable",
    'saver.check()  # after output_uri was replaced by a file',
    "ConfigError", "output_uri '…/out' is not a writable folder (…): pass a folder you can write to",
    "the file that replaced the folder; the registry as it was",
)  # fmt: skip
def test_output_no_longer_writable(row: Row, world: World) -> None:
    saver = world.saver()
    world.out.rmdir()
    world.out.write_text("now a file")
    before = world.snapshot()
    with raises(row):
        saver.check()
    assert world.snapshot() == before


@case(
    OUTPUT, "output-full-disk",
    "a 4 MB checkpoint into a 2 MiB tmpfs (n_saved=1, the previous one fits)",
    "StorageError",
    "writing file:///…/p/r/model.slot0.pt failed: [Errno 28] No space left on device: "
    "free space there, or pass an output_uri with room",
    "the previous checkpoint's bytes and live record, intact and loadable; the new record `failed`; no temp file",
)  # fmt: skip
def test_output_full_disk(row: Row, world: World) -> None:
    class Grows:
        """A state that fits the disk on the first save and not on the second."""

        def __init__(self) -> None:
            self.saves = 0

        def state_dict(self) -> dict[str, Any]:
            self.saves += 1
            return {"w": torch.ones(1_000 if self.saves == 1 else 1_000_000)}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.loaded = state

    with tmpfs(world.root / "small", size="2m") as mount:
        world.out = mount / "out"
        saver = world.saver()
        grows = Grows()
        trainer = fit(saver, {"model": grows})
        before = world.snapshot()
        with raises(row) as caught:
            trainer.run([0], max_epochs=2)
        assert isinstance(caught.value.__cause__, OSError)
        world.assert_one_failed_record_added(before)
        (previous,) = find_models(project="p", live=True, registry=saver.registry)
        load_checkpoint(previous, {"model": grows}, storage=saver.storage)
        assert grows.loaded["w"].shape == (1_000,)
        saver.close()


# ------------------------------------------------------------------ outages and preemption

OUTAGES = "Outages and preemption"


@case(
    OUTAGES, "timeout-zero",
    'TrackerSaver("./ckpt", timeout=0)',
    "ConfigError",
    "timeout=0: pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    LEFT_NOTHING,
)  # fmt: skip
def test_timeout_zero(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout=0)
    assert world.snapshot() == ({}, [])


@case(
    OUTAGES, "timeout-text",
    'TrackerSaver("./ckpt", timeout="60")',
    "ConfigError",
    "timeout='60': pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    LEFT_NOTHING,
)  # fmt: skip
def test_timeout_text(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout="60")
    assert world.snapshot() == ({}, [])


@case(
    OUTAGES, "timeout-infinite",
    'TrackerSaver("./ckpt", timeout=float("inf"))',
    "ConfigError",
    "timeout=inf: pass the seconds a save may wait on a back end that stopped answering, a number > 0 (default 60)",
    LEFT_NOTHING + " (no wait is unbounded: pass a large number to mean a long one)",
)  # fmt: skip
def test_timeout_infinite(row: Row, world: World) -> None:
    with raises(row):
        world.saver(timeout=float("inf"))
    assert world.snapshot() == ({}, [])


@case(
    OUTAGES, "save-on-sigterm-not-callable",
    'saver.attach(trainer, save_on_sigterm="checkpoint")',
    "ConfigError", "save_on_sigterm='checkpoint' is not callable: pass the Checkpoint handler to run once",
    LEFT_SAVER + "; no signal handler installed",
)  # fmt: skip
def test_save_on_sigterm_not_callable(row: Row, world: World) -> None:
    saver = world.saver()
    before = signal.getsignal(signal.SIGTERM)
    with raises(row):
        saver.attach(Engine(lambda e, b: None), save_on_sigterm="checkpoint")  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGTERM) is before and world.records() == []
    saver.close()


@case(
    OUTAGES, "sigterm-grace-zero",
    "saver.attach(trainer, save_on_sigterm=checkpoint, sigterm_grace=0)",
    "ConfigError", "sigterm_grace=0: pass the seconds from SIGTERM to exit, a number > 0",
    LEFT_SAVER + "; no signal handler installed",
)  # fmt: skip
def test_sigterm_grace_zero(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda e, b: None)
    with raises(row):
        saver.attach(trainer, save_on_sigterm=Checkpoint({"m": torch.nn.Linear(1, 1)}, saver), sigterm_grace=0)
    assert world.records() == []
    saver.close()


@case(
    OUTAGES, "save-on-sigterm-in-a-thread",
    "threading.Thread(target=lambda: saver.attach(trainer, save_on_sigterm=checkpoint)).start()",
    "ConfigError",
    "save_on_sigterm needs attach() to be called from the main thread (signals arrive there)",
    LEFT_SAVER + "; no signal handler installed",
)  # fmt: skip
def test_save_on_sigterm_in_a_thread(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = Engine(lambda e, b: None)
    caught: list[BaseException] = []

    def attach() -> None:
        try:
            saver.attach(trainer, save_on_sigterm=Checkpoint({"m": torch.nn.Linear(1, 1)}, saver))
        except BaseException as exc:
            caught.append(exc)

    worker = threading.Thread(target=attach)
    worker.start()
    worker.join()
    with raises(row):
        raise caught[0]
    saver.close()


# ------------------------------------------------------------------ the registry

REGISTRY = "The registry"


@case(
    REGISTRY, "registry-is-a-folder",
    'TrackerSaver("./ck1", registry="/tmp")',
    "ConfigError", "registry path '/tmp' is a folder: pass a file path such as '/tmp/registry.db'",
    LEFT_NOTHING + " (before the fix, `ck1/` was created first)",
)  # fmt: skip
def test_registry_is_a_folder(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(world.root)
    with raises(row):
        TrackerSaver("./ck1", registry="/tmp")
    assert world.snapshot() == ({}, [])


@case(
    REGISTRY, "registry-in-a-file",
    'TrackerSaver("./ckpt", registry="notes.txt/registry.db")  # notes.txt is a file',
    "ConfigError",
    "registry folder '…/notes.txt' cannot be created ('…/notes.txt' is not a folder): pass a registry path in a writable folder",
    "the file as it was; no output folder",
)  # fmt: skip
def test_registry_in_a_file(row: Row, world: World) -> None:
    (world.root / "notes.txt").write_text("x")
    before = world.snapshot()
    with raises(row):
        world.saver(registry=world.root / "notes.txt" / "registry.db")
    assert world.snapshot() == before


@case(
    REGISTRY, "registry-inside-output",
    'TrackerSaver("./ckpt", registry="./ckpt/registry.db")',
    "ConfigError",
    "registry '…/ckpt/registry.db' is inside output_uri '…/ckpt', which holds checkpoint objects only: "
    "put the registry elsewhere (default ~/.tracker_saver/registry.db)",
    LEFT_NOTHING,
)  # fmt: skip
def test_registry_inside_output(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.root / "ckpt", registry=world.root / "ckpt" / "registry.db")
    assert world.snapshot() == ({}, [])


@case(
    REGISTRY, "registry-unknown-scheme",
    'TrackerSaver("./ckpt", registry="postgres://db/ckpts")',
    "ConfigError",
    "registry 'postgres://db/ckpts' is not understood: use 'sqlite', a file path, sqlite:///PATH, 'clearml' or 'mlflow[:http://HOST:PORT]'",
    LEFT_NOTHING,
)  # fmt: skip
def test_registry_unknown_scheme(row: Row, world: World) -> None:
    with raises(row):
        world.saver(registry="postgres://db/ckpts")
    assert world.snapshot() == ({}, [])


@case(
    REGISTRY, "registry-corrupt",
    'TrackerSaver("./ckpt", registry="registry.db")  # 4 KiB of random bytes',
    "ConfigError",
    "registry '…/registry.db' is not a SQLite database (file is not a database): pass the path of a registry "
    "file, or move this file away to start a new registry there",
    "the file as it was; no output folder",
)  # fmt: skip
def test_registry_corrupt(row: Row, world: World) -> None:
    world.db.write_bytes(random.Random(0).randbytes(4096))
    before = world.files()
    with raises(row):
        world.saver()
    assert world.files() == before


@case(
    REGISTRY, "registry-read-only",
    'TrackerSaver("./ckpt", registry="/mnt/ro/registry.db")  # a read-only mount',
    "ConfigError",
    "registry '…/registry.db' is read-only (Read-only file system): SQLite writes the registry and its -wal "
    "and -shm files there; pass a registry path you can write to",
    "the registry as it was; no output folder (root ignores file modes, so the test uses a read-only tmpfs)",
)  # fmt: skip
def test_registry_read_only(row: Row, world: World) -> None:
    with tmpfs(world.root / "ro") as mount:
        SQLiteRegistry(mount / "registry.db").close()
        remount_read_only(mount)
        before = world.files()
        with raises(row):
            world.saver(registry=mount / "registry.db")
        assert world.files() == before


@case(
    REGISTRY, "registry-locked",
    "registry=SQLiteRegistry(path, timeout=0.2), while another process holds BEGIN IMMEDIATE on it",
    "RegistryError",
    "registry 'sqlite:///…/registry.db' is locked by another process for longer than the busy timeout (0.2 s): "
    "let that process finish (`fuser …` names it), or wait longer with registry=SQLiteRegistry(path, timeout=SECONDS)",
    "the saver's empty output folder; no record, no object (raised at the first save: "
    "readers are never blocked in WAL mode). Once the lock is gone the same saver saves",
)  # fmt: skip
def test_registry_locked(row: Row, world: World) -> None:
    SQLiteRegistry(world.db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         f"conn = sqlite3.connect({str(world.db)!r}, isolation_level=None)\n"
         "conn.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        saver = world.saver(registry=SQLiteRegistry(world.db, timeout=0.2))
        before = world.snapshot()
        with raises(row):
            fit(saver)
        assert world.snapshot() == before and before[1] == []
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    fit(saver)
    assert [r.filename for r in saver.records(live=True)] == ["model_1.pt"]


@case(
    REGISTRY, "registry-newer-schema",
    'TrackerSaver("./ckpt", registry="registry.db")  # written by a newer tracker-saver',
    "ConfigError",
    "registry '…/registry.db': schema version 99 is newer than this tracker_saver knows (…): "
    "upgrade tracker-saver (git pull in its clone, then pip install -e . there), or use another registry file",
    "the registry as it was; no output folder",
)  # fmt: skip
def test_registry_newer_schema(row: Row, world: World) -> None:
    SQLiteRegistry(world.db).close()
    with contextlib.closing(sqlite3.connect(world.db)) as conn, conn:
        conn.execute("INSERT INTO schema_migrations VALUES (99, 0)")
    before = world.files()
    with raises(row):
        world.saver()
    assert world.files() == before


# ------------------------------------------------------------------ scores and metadata

SCORES = "Scores and metadata"


def _scored(world: World, score: Any) -> TrackerSaver:
    saver = world.saver()
    fit(saver, score_function=lambda engine: score, score_name="val_acc")
    return saver


@case(
    SCORES, "score-nan",
    'Checkpoint(..., score_function=lambda e: float("nan"), score_name="val_acc")',
    "none", "accepted: the record's score and priority are absent (None), so range queries never match it",
    "the object and its live record, named model_val_acc=nan.pt as Ignite names it",
)  # fmt: skip
def test_score_nan(row: Row, world: World) -> None:
    (record,) = _scored(world, math.nan).records(live=True)
    assert record.name == "model_val_acc=nan.pt"
    assert (record.score, record.metadata["priority"]) == (None, None)
    world.assert_truthful()


@case(
    SCORES, "score-inf",
    'Checkpoint(..., score_function=lambda e: float("inf"), score_name="val_acc")',
    "none", "accepted: the record keeps score and priority inf exactly, as Ignite compares them",
    "the object and its live record; a resumed run ranks it as Ignite did",
)  # fmt: skip
def test_score_inf(row: Row, world: World) -> None:
    (record,) = _scored(world, math.inf).records(live=True)
    assert record.score == math.inf and record.metadata["priority"] == math.inf
    world.assert_truthful()


@case(
    SCORES, "score-minus-inf",
    'Checkpoint(..., score_function=lambda e: float("-inf"), score_name="val_acc")',
    "none", "accepted: the record keeps score and priority -inf exactly",
    "the object and its live record",
)  # fmt: skip
def test_score_minus_inf(row: Row, world: World) -> None:
    (record,) = _scored(world, -math.inf).records(live=True)
    assert record.score == -math.inf and record.metadata["priority"] == -math.inf
    world.assert_truthful()


@case(
    SCORES, "score-tensor",
    'Checkpoint(..., score_function=lambda e: torch.tensor(0.9))',
    "ValueError", "Output of score_function should be a number",
    LEFT_SAVER + " (Ignite's own check, before the saver is called: return `.item()`)",
)  # fmt: skip
def test_score_tensor(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: torch.tensor(0.9), score_name="val_acc")
    assert world.snapshot() == before


@case(
    SCORES, "score-string",
    'Checkpoint(..., score_function=lambda e: "0.9")',
    "ValueError", "Output of score_function should be a number",
    LEFT_SAVER + " (Ignite's own check, before the saver is called: return a float)",
)  # fmt: skip
def test_score_string(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: "0.9", score_name="val_acc")
    assert world.snapshot() == before


def _with_metadata(key: Any, value: Any) -> Callable[[UploadInfo], UploadInfo]:
    def add(info: UploadInfo) -> UploadInfo:
        info.metadata[key] = value
        return info

    return add


@case(
    SCORES, "metadata-dict",
    'pre_upload=[lambda info: info.metadata.update(config={"lr": 0.1}) or info]',
    "ConfigError",
    "metadata['config'] = {'lr': 0.1} has type dict, which a record cannot hold: use an int, float, str or bool "
    "(json.dumps(value) for a structure)",
    LEFT_SAVER + " (raised before the pending record: nothing half-written)",
)  # fmt: skip
def test_metadata_dict(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata("config", {"lr": 0.1})])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before and before[1] == []


@case(
    SCORES, "metadata-datetime",
    "pre_upload=[lambda info: info.metadata.update(when=datetime.now()) or info]",
    "ConfigError",
    "metadata['when'] = datetime.datetime(…) has type datetime, which a record cannot hold: use an int, float, "
    "str or bool (json.dumps(value) for a structure)",
    LEFT_SAVER,
)  # fmt: skip
def test_metadata_datetime(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata("when", datetime.datetime.now())])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


@case(
    SCORES, "metadata-key-not-text",
    'pre_upload=[lambda info: info.metadata.update({("lr", 1): 0.1}) or info]',
    "ConfigError", "metadata key ('lr', 1) is not a non-empty string: name metadata keys with text",
    LEFT_SAVER,
)  # fmt: skip
def test_metadata_key_not_text(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=[_with_metadata(("lr", 1), 0.1)])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


# ------------------------------------------------------------------ what is saved, and loading it

CHECKPOINTS = "Checkpoints and loading"


class LambdaOnSecondSave:
    """A to_save object whose state holds a lambda from its second save on."""

    def __init__(self) -> None:
        self.saves = 0

    def state_dict(self) -> dict[str, Any]:
        self.saves += 1
        return {"fn": (lambda x: x) if self.saves > 1 else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@case(
    CHECKPOINTS, "checkpoint-with-a-lambda",
    "to_save={'model': model, 'extra': obj}  # obj.state_dict() holds a lambda",
    "SerializationError",
    "torch.save could not serialize the checkpoint for 'p/r/checkpoint.slot0.pt': …; put only "
    "state_dict()-able objects in Checkpoint's to_save",
    "the previous checkpoint's bytes and live record; the new record `failed`; no temp file. "
    "Never a TypeError, which Ignite would swallow by retrying without metadata",
)  # fmt: skip
def test_checkpoint_with_a_lambda(row: Row, world: World) -> None:
    saver = world.saver()
    trainer = fit(saver, {"model": model(), "extra": LambdaOnSecondSave()})
    before = world.snapshot()
    with raises(row):
        trainer.run([0], max_epochs=2)
    world.assert_one_failed_record_added(before)


def _gpu_machine_save(real_save: Callable[..., None]) -> Callable[..., None]:
    """``torch.save`` as on a machine with CUDA: the archive places every storage on ``cuda:0``.

    A CUDA tensor cannot be made here, so the one thing that differs in the bytes, the storage
    location in ``data.pkl``, is written as such a machine would write it.
    """

    def save(obj: Any, f: Any) -> None:
        buf = io.BytesIO()
        real_save(obj, buf)
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                body = src.read(info.filename)
                if info.filename.endswith("/data.pkl"):
                    assert b"X\x03\x00\x00\x00cpu" in body
                    body = body.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
                dst.writestr(info, body)
        f.write(out.getvalue())

    return save


def _cuda_record(world: World, monkeypatch: pytest.MonkeyPatch) -> tuple[str, torch.nn.Module]:
    """A live record whose bytes are a checkpoint written on a CUDA machine; its model."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: a CUDA checkpoint loads here with any map_location")
    saver = world.saver()
    net = model()
    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", _gpu_machine_save(torch.save))
        fit(saver, {"model": net})
    (record,) = saver.records(live=True)
    return record.id, net


@case(
    CHECKPOINTS, "cuda-save-on-a-cpu-only-machine",
    "to_save={'model': model.cuda()}  # on a machine without CUDA",
    "none", "cannot happen: torch refuses to make a CUDA tensor there (…), so no such checkpoint can be saved",
    "nothing (with CUDA, the checkpoint saves as any other and loads on a CPU with the default map_location)",
)  # fmt: skip
def test_cuda_save_on_a_cpu_only_machine(row: Row, world: World) -> None:
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            model().cuda()
        return
    saver = world.saver()
    fit(saver, {"model": model().cuda()})
    net = model()
    load_checkpoint(saver.records(live=True)[0], {"model": net}, registry=saver.registry)
    assert net.weight.device.type == "cpu"


@case(
    CHECKPOINTS, "cuda-load-on-a-cpu-only-machine",
    "load_checkpoint(id, {'model': model})  # saved with CUDA tensors, loaded without CUDA",
    "none", "accepted: load_checkpoint's default map_location='cpu' maps every tensor to the CPU",
    "the model loaded with the saved weights; the record and its object unchanged",
)  # fmt: skip
def test_cuda_load_on_a_cpu_only_machine(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    record_id, saved = _cuda_record(world, monkeypatch)
    net = torch.nn.Linear(4, 2)
    load_checkpoint(record_id, {"model": net}, registry=world.db)
    assert torch.equal(net.weight, saved.weight) and net.weight.device.type == "cpu"


@case(
    CHECKPOINTS, "cuda-load-with-map-location-none",
    "load_checkpoint(id, {'model': model}, map_location=None)  # CUDA tensors, no CUDA",
    "SerializationError",
    "torch.load could not read record … ('model_1.pt'): Attempting to deserialize object on a CUDA device but "
    "torch.cuda.is_available() is False. …; the checkpoint holds CUDA tensors and this machine has no CUDA: "
    "load it with map_location='cpu' (load_checkpoint's default)",
    "the model untouched; the record and its object unchanged",
)  # fmt: skip
def test_cuda_load_with_map_location_none(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    record_id, _ = _cuda_record(world, monkeypatch)
    net = torch.nn.Linear(4, 2)
    untouched = net.weight.detach().clone()
    before = world.snapshot()
    with raises(row):
        load_checkpoint(record_id, {"model": net}, registry=world.db, map_location=None)
    assert torch.equal(net.weight, untouched) and world.snapshot() == before


@case(
    CHECKPOINTS, "record-does-not-exist",
    "load_checkpoint(99, {'model': model})",
    "RecordNotFoundError", "record 99 does not exist in sqlite:///…/registry.db: see `tracker-saver models list` for ids",
    "the registry as it was",
)  # fmt: skip
def test_record_does_not_exist(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    with raises(row):
        load_checkpoint(99, {"model": model()}, registry=world.db)
    assert world.snapshot() == before


@case(
    CHECKPOINTS, "record-id-not-a-number",
    'rename_model("best", "v2")  # SQLite record ids are integers',
    "RecordNotFoundError",
    "record id 'best' is not a SQLite record id (an integer): see `tracker-saver models list` for ids",
    "the registry as it was",
)  # fmt: skip
def test_record_id_not_a_number(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    with raises(row):
        rename_model("best", "v2", registry=world.db)
    assert world.snapshot() == before


@case(
    CHECKPOINTS, "rename-to-nothing",
    'rename_model(id, "  ")',
    "ConfigError", "new name '  ' for record … is empty: give a non-empty name",
    "the record with its name as it was",
)  # fmt: skip
def test_rename_to_nothing(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        rename_model(record.id, "  ", registry=world.db)
    assert saver.registry.records.get(record.id).name == "model_1.pt"


@case(
    CHECKPOINTS, "load-into-a-model-of-the-wrong-shape",
    "load_checkpoint(id, {'model': nn.Linear(8, 2)})  # saved from nn.Linear(4, 2)",
    "ConfigError",
    "record … ('model_1.pt') does not fit to_load, so nothing was loaded: to_load['model'] (Linear): weight is "
    "(2, 4) in the checkpoint, (2, 8) in the model: build the objects as they were when the checkpoint was "
    "saved, or load another record",
    "the model untouched (checked before load_state_dict, which would copy the bias and then raise)",
)  # fmt: skip
def test_load_into_a_model_of_the_wrong_shape(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    wider = torch.nn.Linear(8, 2)
    untouched = {k: v.clone() for k, v in wider.state_dict().items()}
    with raises(row):
        load_checkpoint(saver.records(live=True)[0], {"model": wider}, storage=saver.storage)
    assert all(torch.equal(v, untouched[k]) for k, v in wider.state_dict().items())


@case(
    CHECKPOINTS, "load-an-object-the-checkpoint-lacks",
    "load_checkpoint(id, {'model': m, 'optimizer': o, 'trainer': t})  # saved without the trainer",
    "ConfigError",
    "record … ('checkpoint_1.pt') does not fit to_load, so nothing was loaded: to_load['trainer'] is not in "
    "the checkpoint, which holds ['model', 'optimizer']: build the objects as they were when …",
    "the model and the optimizer untouched",
)  # fmt: skip
def test_load_an_object_the_checkpoint_lacks(row: Row, world: World) -> None:
    saver = world.saver()
    net = model()
    fit(saver, {"model": net, "optimizer": torch.optim.SGD(net.parameters(), lr=0.1)})
    other = torch.nn.Linear(4, 2)
    untouched = other.weight.detach().clone()
    to_load = {"model": other, "optimizer": torch.optim.SGD(other.parameters(), lr=0.5), "trainer": Engine(print)}
    with raises(row):
        load_checkpoint(saver.records(live=True)[0], to_load, storage=saver.storage)
    assert torch.equal(other.weight, untouched) and to_load["optimizer"].param_groups[0]["lr"] == 0.5


def _damage(world: World, how: Callable[[bytes], bytes]) -> Any:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    slot = world.out / record.key
    slot.write_bytes(how(slot.read_bytes()))
    return record


LEFT_DAMAGED = "the damaged object and its record as they were: nothing loaded into the model"


@case(
    CHECKPOINTS, "load-a-truncated-object",
    "load_checkpoint(id, to_load)  # the slot file lost its second half",
    "IntegrityError",
    "record … ('model_1.pt'): file:///…/p/r/model.slot0.pt has … bytes with sha256 …, expected … bytes with "
    "sha256 …: the slot was probably overwritten or corrupted; load another record",
    LEFT_DAMAGED + "; the error carries `record_id` and `key`",
)  # fmt: skip
def test_load_a_truncated_object(row: Row, world: World) -> None:
    record = _damage(world, lambda data: data[: len(data) // 2])
    net = torch.nn.Linear(4, 2)
    untouched = net.weight.detach().clone()
    with raises(row) as caught:
        load_checkpoint(record.id, {"model": net}, registry=world.db)
    assert (caught.value.record_id, caught.value.key) == (record.id, record.key)  # type: ignore[attr-defined]
    assert torch.equal(net.weight, untouched)


@case(
    CHECKPOINTS, "load-a-bit-flipped-object",
    "load_checkpoint(id, to_load)  # one bit of the slot file flipped, same size",
    "IntegrityError",
    "record … ('model_1.pt'): file:///…/p/r/model.slot0.pt has … bytes with sha256 …, expected … bytes with "
    "sha256 …: the slot was probably overwritten or corrupted; load another record",
    LEFT_DAMAGED,
)  # fmt: skip
def test_load_a_bit_flipped_object(row: Row, world: World) -> None:
    def flip(data: bytes) -> bytes:
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]

    record = _damage(world, flip)
    with raises(row) as caught:
        load_checkpoint(record.id, {"model": torch.nn.Linear(4, 2)}, registry=world.db)
    assert f"has {record.size} bytes" in str(caught.value)
    assert caught.value.record_id == record.id  # type: ignore[attr-defined]


@case(
    CHECKPOINTS, "load-an-evicted-record",
    "load_checkpoint(old_id, to_load)  # Ignite has since replaced it (n_saved=1)",
    "RegistryError",
    "record … ('model_1.pt') is evicted: its slot may hold other bytes; use a live record "
    "(tracker-saver models list --live)",
    "the newer record and its object, live; the model untouched",
)  # fmt: skip
def test_load_an_evicted_record(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver, epochs=2)
    first = saver.records()[0]
    assert first.state is RecordState.EVICTED
    with raises(row):
        load_checkpoint(first.id, {"model": model()}, registry=world.db)
    world.assert_truthful()


# ------------------------------------------------------------------ S3 (the Ceph gateway)

S3 = "S3 (Ceph RGW)"
LEFT_S3 = "nothing: no registry file, no object under the prefix (raised by `check()` in the constructor)"


def _objects(client: Any, bucket: str, prefix: str = "") -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def _prefix(uri: str) -> str:
    return uri.split("/", 3)[3] + "/"


@pytest.mark.ceph
@case(
    S3, "s3-bad-secret",
    'AWS_SECRET_ACCESS_KEY=wrong  TrackerSaver("s3://BUCKET/PREFIX")',
    "ConfigError",
    "checking output_uri: writing s3://…/.tracker-saver-check failed: credentials were refused by http://… "
    "(SignatureDoesNotMatch): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile",
    LEFT_S3 + "; the secret appears in no message, repr or cause",
)  # fmt: skip
def test_s3_bad_secret(
    row: Row, world: World, s3_output_uri: str, s3_bucket: str, ceph_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    with raises(row) as caught:
        world.saver(s3_output_uri)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, []) and _objects(ceph_s3.client(), s3_bucket, _prefix(s3_output_uri)) == []


@pytest.mark.ceph
@case(
    S3, "s3-access-denied",
    'TrackerSaver("s3://BUCKET/PREFIX", storage_options={"aws_access_key_id": …})  # a user without rights on BUCKET',
    "ConfigError",
    "access denied by http://… (AccessDenied on PutObject): grant the credentials s3:PutObject on s3://…/*, "
    "or use other credentials",
    LEFT_S3,
)  # fmt: skip
def test_s3_access_denied(row: Row, world: World, s3_output_uri: str, s3_bucket: str, ceph_s3: Any) -> None:
    access, secret = ceph_s3.create_user(f"stranger-{uuid.uuid4().hex[:6]}")
    options = {"aws_access_key_id": access, "aws_secret_access_key": secret}
    with raises(row) as caught:
        world.saver(s3_output_uri, storage_options=options)
    assert secret not in texts(caught.value)
    assert world.snapshot() == ({}, []) and _objects(ceph_s3.client(), s3_bucket, _prefix(s3_output_uri)) == []


@pytest.mark.ceph
@case(
    S3, "s3-missing-bucket",
    'TrackerSaver("s3://no-such-bucket/team")',
    "ConfigError",
    "bucket 'no-such-bucket-…' does not exist at endpoint http://…: create it (aws s3 mb s3://no-such-bucket-…) "
    "or fix output_uri",
    LEFT_S3 + "; the bucket is not created",
)  # fmt: skip
def test_s3_missing_bucket(row: Row, world: World, s3_env: dict[str, str], ceph_s3: Any) -> None:
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with raises(row):
        world.saver(f"s3://{bucket}/team")
    buckets = [b["Name"] for b in ceph_s3.client().list_buckets()["Buckets"]]
    assert world.snapshot() == ({}, []) and bucket not in buckets


@pytest.mark.ceph
@case(
    S3, "s3-wrong-region",
    'TrackerSaver("s3://BUCKET/PREFIX", storage_options={"region_name": "eu-west-1"})',
    "none",
    "accepted by Ceph RGW, whose single zonegroup serves any signing region (on AWS, botocore's region "
    "redirector re-signs for the bucket's region)",
    "the saved object and its live record",
)  # fmt: skip
def test_s3_wrong_region(row: Row, world: World, s3_output_uri: str) -> None:
    saver = world.saver(s3_output_uri, storage_options={"region_name": "eu-west-1"})
    trained = torch.nn.Linear(4, 2)
    fit(saver, {"model": trained})
    (record,) = saver.records(live=True)
    loaded = torch.nn.Linear(4, 2)
    load_checkpoint(record, {"model": loaded}, storage=saver.storage)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), trained.state_dict().values(), strict=True)
    )


@case(
    S3, "s3-endpoint-down",
    'TrackerSaver("s3://ckpts/team", storage_options={"endpoint_url": "http://127.0.0.1:PORT"})  # nothing listens',
    "ConfigError",
    "checking output_uri: writing s3://ckpts/team/.tracker-saver-check failed: cannot reach endpoint "
    "http://127.0.0.1:… (EndpointConnectionError): check AWS_ENDPOINT_URL / endpoint_url and that the server is up",
    LEFT_NOTHING + " (max_attempts and connect_timeout bound how long it tries)",
)  # fmt: skip
def test_s3_endpoint_down(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "max_attempts": 2, "connect_timeout": 1}
    with raises(row) as caught:
        world.saver("s3://ckpts/team", storage_options=options)
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.ceph
@case(
    S3, "s3-versioned-bucket",
    'TrackerSaver("s3://VERSIONED/team")  # bucket versioning is on; 3 saves, n_saved=1',
    "none",
    "accepted: the current-version footprint holds (1 object); each overwrite of a slot key keeps the old bytes "
    "as a noncurrent version (3 versions of the slot key)",
    "1 current object and its live record, plus noncurrent versions until a lifecycle rule "
    "(NoncurrentVersionExpiration) removes them; see below",
)  # fmt: skip
def test_s3_versioned_bucket(row: Row, world: World, s3_env: dict[str, str], ceph_s3: Any) -> None:
    client = ceph_s3.client()
    bucket = f"ts-versioned-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        saver = world.saver(f"s3://{bucket}/team")
        fit(saver, epochs=3)
        assert _objects(client, bucket, "team/p/") == ["team/p/r/model.slot0.pt"]
        versions = client.list_object_versions(Bucket=bucket, Prefix="team/p/")["Versions"]
        assert [(v["Key"], v["IsLatest"]) for v in versions].count(("team/p/r/model.slot0.pt", False)) == 2
        assert len(versions) == 3
        (record,) = saver.records(live=True)
        load_checkpoint(record, {"model": model()}, storage=saver.storage)
    finally:
        listing = client.list_object_versions(Bucket=bucket)
        for item in listing.get("Versions", []) + listing.get("DeleteMarkers", []):
            client.delete_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])
        client.delete_bucket(Bucket=bucket)


# ------------------------------------------------------------------ ClearML (the stand-in)

CLEARML = "ClearML registry"


def _fresh_clearml_login(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next registry log in again (the SDK keeps one session per process)."""
    from clearml.backend_interface.base import InterfaceBase

    monkeypatch.setattr(InterfaceBase, "_default_session", None)
    monkeypatch.delenv("CLEARML_AUTH_TOKEN", raising=False)


@pytest.mark.clearml
@case(
    CLEARML, "clearml-server-down",
    'TrackerSaver("./ckpt", registry="clearml")  # CLEARML_API_HOST answers nothing',
    "ConfigError",
    "ClearML registry cannot connect (…): check that the ClearML server is up, and run `clearml-init` or set "
    "CLEARML_API_HOST, CLEARML_API_ACCESS_KEY and CLEARML_API_SECRET_KEY",
    LEFT_NOTHING + " (the ClearML registry is opened before output_uri is checked)",
)  # fmt: skip
def test_clearml_server_down(row: Row, world: World, clearml_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh_clearml_login(monkeypatch)
    monkeypatch.setenv("CLEARML_API_HOST", f"http://127.0.0.1:{free_port()}")
    with raises(row) as caught:
        world.saver(registry="clearml")
    assert os.environ["CLEARML_API_SECRET_KEY"] not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.clearml
@case(
    CLEARML, "clearml-wrong-credentials",
    'CLEARML_API_SECRET_KEY=wrong  TrackerSaver("./ckpt", registry="clearml")',
    "ConfigError",
    "the ClearML server refused the credentials (LoginError: …401…): check CLEARML_API_ACCESS_KEY and "
    "CLEARML_API_SECRET_KEY, or the api.credentials of clearml.conf (`clearml-init` writes them)",
    LEFT_NOTHING + "; the secret appears in no message",
)  # fmt: skip
def test_clearml_wrong_credentials(
    row: Row, world: World, clearml_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_clearml_login(monkeypatch)
    monkeypatch.setenv("CLEARML_API_SECRET_KEY", WRONG_SECRET)
    with raises(row) as caught:
        world.saver(registry="clearml")
    assert WRONG_SECRET not in texts(caught.value)
    assert world.snapshot() == ({}, [])


@pytest.mark.clearml
@case(
    CLEARML, "clearml-read-only-project",
    'TrackerSaver("./ckpt", project="shared", registry="clearml")  # the user may read "shared", not write it',
    "RegistryError",
    "ClearML registry clearml://…: claiming stream shared/r/model at file://… failed with 403/21 (Forbidden "
    "(modification not allowed)): the ClearML user of these credentials may not change this project; ask its "
    "owner for write access, or save to a project you own (TrackerSaver(project=...) or ClearMLRegistry(project_root=...))",
    "the saver's empty output folder; no model in the project (raised at the first save, by the stream claim, "
    "before a byte is written)",
)  # fmt: skip
def test_clearml_read_only_project(row: Row, world: World, clearml_standin: Any) -> None:
    from tracker_saver.integrations.clearml.registry import ClearMLRegistry

    root = f"tracker_saver-tests/{uuid.uuid4().hex[:12]}"
    clearml_standin.read_only(f"{root}/shared")
    saver = TrackerSaver(world.out, project="shared", run="r", registry=ClearMLRegistry(project_root=root))
    before = world.files()
    with raises(row):
        fit(saver)
    assert world.files() == before and clearml_standin.models_in(f"{root}/shared") == []


# ------------------------------------------------------------------ text, the CLI and the web UI

TEXT = "Text, the CLI and the web UI"
RULE = "(names, tags and metadata follow one text rule: docs/security.md)"


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``tracker-saver ARGV`` run in-process: its exit status, stdout and stderr."""
    from tracker_saver.cli.main import main

    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _ui(world: World, base_url: str = "http://127.0.0.1:8765", **kwargs: Any) -> Any:
    """The UI's app over the world's registry, as ``tracker-saver ui --host 0.0.0.0`` serves it, and a client."""
    from fastapi.testclient import TestClient

    from tracker_saver.ui.app import create_app
    from tracker_saver.ui.server import host_names

    app = create_app(world.db, allowed_hosts=host_names("0.0.0.0"), **kwargs)
    return TestClient(app, base_url=base_url, raise_server_exceptions=False)


@case(
    TEXT, "score-name-nul",
    'Checkpoint(..., score_function=lambda e: 0.9, score_name="s\\x00n")',
    "ConfigError",
    "score_name (Checkpoint's) 's\\x00n' holds U+0000 (NUL) at character 2, a NUL, which no file name or C string "
    "can hold: remove it " + RULE,
    LEFT_SAVER + " (raised at the first save, before a record or a byte is written; before the fix the record went "
    "live, then the dirname view failed, and every later save of the stream with it)",
)  # fmt: skip
def test_score_name_nul(row: Row, world: World) -> None:
    saver = world.saver()
    before = world.snapshot()
    with raises(row):
        fit(saver, score_function=lambda engine: 0.9, score_name="s\x00n")
    assert world.snapshot() == before
    fit(saver, score_function=lambda engine: 0.9, score_name="val_acc")  # the stream is not broken
    assert [r.name for r in saver.records(live=True)] == ["model_val_acc=0.9000.pt"]
    world.assert_truthful()


@case(
    TEXT, "project-not-utf8",
    'TrackerSaver("./ckpt", project="p\\ud800")  # a lone surrogate: how Python holds bytes that are not UTF-8',
    "ConfigError",
    "project 'p\\ud800' holds U+D800 at character 2, a lone surrogate: the text is not valid UTF-8 (bytes Python "
    "could not decode): pass it as UTF-8 text " + RULE,
    LEFT_NOTHING + " (before the fix: UnicodeEncodeError)",
)  # fmt: skip
def test_project_not_utf8(row: Row, world: World) -> None:
    with raises(row):
        TrackerSaver(world.out, project="p\ud800", registry=world.db)
    assert world.snapshot() == ({}, [])


@case(
    TEXT, "cli-rename-not-utf8",
    "tracker-saver models rename ID $'bad\\xffbyte'  # tag, list --name and --where alike",
    "ConfigError",
    "tracker-saver: error: new name for record …: 'bad\\udcffbyte' holds U+DCFF at character 4, a lone surrogate: "
    "the text is not valid UTF-8 (bytes Python could not decode): pass it as UTF-8 text " + RULE,
    "the record as it was; one line on stderr, exit status 2 (before the fix: a traceback)",
)  # fmt: skip
def test_cli_rename_not_utf8(row: Row, world: World, capsys: pytest.CaptureFixture[str]) -> None:
    fit(world.saver())
    before = world.snapshot()
    bad = os.fsdecode(b"bad\xffbyte")  # what Python makes of the bytes a shell passes
    status, out, err = _cli(["--registry", str(world.db), "models", "rename", "1", bad], capsys)
    assert (status, out) == (2, "") and re.fullmatch(row.pattern() + "\n", err), err
    for argv in (["tag", "1", bad], ["list", "--name", bad], ["list", "--where", f"name={bad}"]):
        status, out, err = _cli(["--registry", str(world.db), "models", *argv], capsys)
        assert (status, out, err.count("\n")) == (2, "", 1) and "holds U+DCFF" in err, err
    assert world.snapshot() == before


@case(
    TEXT, "ui-rename-lone-surrogate",
    'PATCH /api/models/ID {"name": "\\ud800"}',
    "HTTP 422",
    "new name for record …: '\\ud800' holds U+D800 at character 1, a lone surrogate: the text is not valid UTF-8 "
    "(bytes Python could not decode): pass it as UTF-8 text " + RULE,
    "the record as it was (before the fix: 500)",
)  # fmt: skip
def test_ui_rename_lone_surrogate(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    body = b'{"name": "\\ud800"}'  # JSON's escape of a lone surrogate: what a client can send
    response = _ui(world).patch("/api/models/1", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and re.fullmatch(row.pattern(), response.json()["detail"]), response.text
    assert world.snapshot() == before


@case(
    TEXT, "saved-name-with-escape-sequences",
    'pre_upload=[lambda info: setattr(info, "name", "best\\x1b[1A\\rfake") or info]',
    "ConfigError",
    "record name of 'model_1.pt' 'best\\x1b[1A\\rfake' holds U+001B (ESC) at character 5, a control character, "
    "which can rewrite what a terminal shows: remove it " + RULE,
    LEFT_SAVER + " (the rule `rename` follows: before the fix a save took ESC, CR and LF that a rename refused)",
)  # fmt: skip
def test_saved_name_with_escape_sequences(row: Row, world: World) -> None:
    def name(info: UploadInfo) -> UploadInfo:
        info.name = "best\x1b[1A\rfake"
        return info

    saver = world.saver(pre_upload=[name])
    before = world.snapshot()
    with raises(row):
        fit(saver)
    assert world.snapshot() == before


@case(
    TEXT, "tag-with-an-osc-8-link",
    'add_tags(id, ["ok\\x1b]8;;http://evil.example/\\x1b\\\\"])  # the same from the CLI and the UI',
    "ConfigError",
    "tag of record … 'ok\\x1b]8;;http://evil.example/\\x1b\\\\' holds U+001B (ESC) at character 3, a control "
    "character, which can rewrite what a terminal shows: remove it " + RULE,
    "the record with its tags as they were",
)  # fmt: skip
def test_tag_with_an_osc_8_link(row: Row, world: World) -> None:
    from tracker_saver import add_tags

    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        add_tags(record.id, ["ok\x1b]8;;http://evil.example/\x1b\\"], registry=world.db)
    assert saver.registry.records.get(record.id).tags == ()


@case(
    TEXT, "rename-with-a-bidi-override",
    'rename_model(id, "model\\u202egpj.exe")  # shows as model‮gpj.exe, read right to left',
    "ConfigError",
    "new name for record …: 'model\\u202egpj.exe' holds U+202E at character 6, a bidirectional control, which "
    "reorders how the text around it is shown: remove it " + RULE,
    "the record with its name as it was (joiners such as U+200D, which emoji need, are allowed)",
)  # fmt: skip
def test_rename_with_a_bidi_override(row: Row, world: World) -> None:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    with raises(row):
        rename_model(record.id, "model\u202egpj.exe", registry=world.db)
    assert rename_model(record.id, "🧑\u200d🔬 ship it", registry=world.db).name == "🧑\u200d🔬 ship it"


@case(
    TEXT, "escape-written-by-another-writer",
    "UPDATE records SET name = printf('x%s]0;owned%s', char(27), char(7))  -- another program; then models list, show",
    "none",
    "accepted: shown escaped, x\\x1b]0;owned\\x07: no 0x1b byte reaches the terminal",
    "the record as the other writer left it; `--json` gives its exact text",
)  # fmt: skip
def test_escape_written_by_another_writer(row: Row, world: World, capsys: pytest.CaptureFixture[str]) -> None:
    fit(world.saver())
    with contextlib.closing(sqlite3.connect(world.db)) as conn, conn:
        conn.execute("UPDATE records SET name = printf('x%s]0;owned%s', char(27), char(7))")
    for argv in (["models", "list"], ["models", "show", "1"]):
        status, out, err = _cli(["--registry", str(world.db), *argv], capsys)
        assert status == 0 and "\x1b" not in out + err and "x\\x1b]0;owned\\x07" in out, out + err


@case(
    TEXT, "ui-rebinding-host",
    "PATCH /api/models/ID with Host and Origin evil.example:8765  # a DNS-rebinding page; tracker-saver ui --host 0.0.0.0",
    "HTTP 400",
    "this server answers only its own host names: open it at the address it printed, or start it with "
    "--allow-host NAME for a name it should answer to (a reverse proxy's)",
    "the record's name as it was (before the fix: renamed, 200)",
)  # fmt: skip
def test_ui_rebinding_host(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    client = _ui(world, base_url="http://evil.example:8765")
    response = client.patch("/api/models/1", json={"name": "owned"}, headers={"Origin": "http://evil.example:8765"})
    assert response.status_code == 400 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert world.snapshot() == before


@case(
    TEXT, "ui-cross-site-download",
    "GET /api/models/ID/download with only Referer: http://evil.example/  # a link on another site",
    "HTTP 403",
    "cross-origin request refused: a page of another site may not download records; use the UI itself",
    "no byte sent (before the fix: served, with one verified copy in /tmp per request)",
)  # fmt: skip
def test_ui_cross_site_download(row: Row, world: World) -> None:
    fit(world.saver())
    client = _ui(world)
    response = client.get("/api/models/1/download", headers={"Referer": "http://evil.example/"})
    assert response.status_code == 403 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert client.get("/api/models/1/download").status_code == 200  # curl sends no Referer: answered


@case(
    TEXT, "ui-large-body",
    "PATCH /api/models/ID with a 50 MB body",
    "HTTP 413",
    "request body over 256 KiB refused: the API takes names and tags only",
    "the record as it was; the body is never read past 256 KiB (before the fix: accepted, 210 MB of memory)",
)  # fmt: skip
def test_ui_large_body(row: Row, world: World) -> None:
    fit(world.saver())
    before = world.snapshot()
    body = b'{"name": "' + b"x" * (50 << 20) + b'"}'
    response = _ui(world).patch("/api/models/1", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and re.fullmatch(row.pattern(), response.json()["detail"])
    assert world.snapshot() == before


@case(
    TEXT, "ui-too-many-downloads",
    "a third GET /api/models/ID/download while two are being sent",
    "HTTP 429",
    "2 downloads are being sent, the most this server sends at once: retry when one ends",
    "the two downloads go on; each streams from the verified object (locally the slot file itself), no copy per request",
)  # fmt: skip
def test_ui_too_many_downloads(row: Row, world: World) -> None:
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


@case(
    TEXT, "mlflow-secret-in-the-chain",
    'TrackerSaver("./ckpt", registry="mlflow:http://user:SECRET@127.0.0.1:PORT", timeout=1)  # nothing listens',
    "RegistryError",
    "MLflow registry mlflow:http://127.0.0.1:…: looking up experiment 'p' failed: the tracking server does not "
    "answer (…); check that `mlflow server` runs at that URI (MLFLOW_TRACKING_URI), or allow a longer wait with "
    "TrackerSaver(timeout=...)",
    "the checked output folder, no record; SECRET in no message, argument, cause or context of the chain, where "
    "a masked copy of MLflow's error is chained (before the fix: raised from None, MLflow's error with "
    "http://user:SECRET@… kept in __context__)",
)  # fmt: skip
def test_mlflow_secret_in_the_chain(row: Row, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", WRONG_SECRET + "-env")
    with raises(row) as caught:
        world.saver(registry=f"mlflow:http://user:{WRONG_SECRET}@127.0.0.1:{free_port()}", timeout=1)
    chain = chained(caught.value)
    assert any("MlflowException" in type(e).__name__ or "mlflow" in type(e).__module__ for e in chain[1:])
    assert WRONG_SECRET not in "\n".join(exception_texts(e) for e in chain)
    assert world.records() == []


@case(
    TEXT, "pre-upload-none",
    'TrackerSaver("./ckpt", pre_upload=None)',
    "none",
    "accepted: no callbacks, as Ignite's own optional arguments take None (before the fix: TypeError: "
    "'NoneType' object is not iterable)",
    "the saved object and its live record",
)  # fmt: skip
def test_pre_upload_none(row: Row, world: World) -> None:
    saver = world.saver(pre_upload=None, post_upload=None)
    fit(saver)
    assert len(saver.records(live=True)) == 1


@case(
    TEXT, "pre-upload-one-callable",
    'TrackerSaver("./ckpt", pre_upload=add_tag)  # one callable, not a list',
    "ConfigTypeError",
    "pre_upload=<function …> is not a list of callbacks: pass a list, pre_upload=[callback], or None for none",
    LEFT_NOTHING,
)  # fmt: skip
def test_pre_upload_one_callable(row: Row, world: World) -> None:
    def add_tag(info: UploadInfo) -> UploadInfo:
        info.tags.append("x")
        return info

    with raises(row):
        world.saver(pre_upload=add_tag)
    assert world.snapshot() == ({}, [])


@case(
    TEXT, "concurrent-renames",
    'rename_model(id, "a") and rename_model(id, "b") at the same moment (two people, two UIs)',
    "none",
    "accepted: the last writer wins; both calls succeed, each returning the record as read right after its "
    "write (the first may already show the second's name); no error tells the first it was overwritten "
    "(docs/security.md, 'Concurrency')",
    "one record, named a or b, and no other change",
)  # fmt: skip
def test_concurrent_renames(row: Row, world: World) -> None:
    fit(world.saver())
    start = threading.Barrier(2)
    returned: dict[str, str] = {}

    def rename(name: str) -> None:
        start.wait()
        returned[name] = rename_model("1", name, registry=str(world.db)).name

    threads = [threading.Thread(target=rename, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (record,) = find_models(registry=world.db)
    assert sorted(returned) == ["a", "b"] and set(returned.values()) <= {"a", "b"}  # both told success
    assert record.name in ("a", "b")  # one name kept, nothing else


# ------------------------------------------------------------------ the catalogue itself


def test_the_catalogue_has_at_least_forty_rows_each_checked_by_its_test() -> None:
    tests = {name: fn for name, fn in globals().items() if name.startswith("test_") and hasattr(fn, "row")}
    assert len(CATALOGUE) >= 40
    assert sorted(fn.row.id for fn in tests.values()) == sorted(CATALOGUE)
    for r in CATALOGUE.values():
        if r.error != "none" and not re.fullmatch(r"HTTP \d{3}", r.error):  # the UI's answers: a status
            error_type(r.error)
        assert "|" not in r.input + r.message + r.left, f"{r.id}: a | would split the docs table"


def test_the_docs_table_is_the_catalogue() -> None:
    text = DOC.read_text()
    assert START in text and END in text, f"{DOC} lost its catalogue markers"
    shown = text.split(START, 1)[1].split(END, 1)[0].strip("\n")
    assert shown == markdown(), "docs/bad-inputs.md differs from the catalogue: run python -m tests.test_bad_inputs"


def write_docs() -> None:
    """Put the catalogue's tables between the markers of docs/bad-inputs.md."""
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}\n{markdown()}\n{END}{tail}")


if __name__ == "__main__":
    write_docs()
