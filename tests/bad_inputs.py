"""The bad-input catalogue's machinery: a row per input, the real world each test breaks, the docs table.

A row is an input as a user writes it, the error it gets, and what is left. Each row is checked by one
test in the file of the door the input comes in by (:data:`DOORS`): ``tests/test_bad_inputs_<door>.py``.
``@case(...)`` registers the row and marks its test, run against real things: Ignite's ``Checkpoint``
and ``Engine``, SQLite files, folders, tmpfs mounts, the Ceph gateway (``ceph``) and the ClearML
stand-in (``clearml``). A row's message is the error's text with ``…`` where it varies; the test
matches it as a regex (``Row.pattern``) and checks the exact error type. Most tests also snapshot the
files and the registry records before and after: nothing is created before validation, nothing is
half-written, and no record lies.

``docs/bad-inputs.md`` shows the same rows, generated from the four files:
``python -m tests.test_bad_inputs_catalogue`` rewrites its tables, and the test there fails when the
two differ.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import re
import socket
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

import tracker_saver.core.errors
from tests.helpers import model
from tracker_saver import TrackerSaver

WRONG_SECRET = "wr0ng-s3cret-never-shown-Pq7Zx"
LEFT_SAVER = "only the empty output folder and registry of the valid `TrackerSaver(...)`; no object, no record"
LEFT_NOTHING = "nothing: no output folder, no registry file"
RULE = "(names, tags and metadata follow one text rule: docs/security.md)"

#: The doors a bad input comes in by, in the order the docs show them: each has its test file,
#: ``tests/test_bad_inputs_<door>.py``, and a title in docs/bad-inputs.md.
DOORS = {
    "saver": "The saver: TrackerSaver, Checkpoint, their saves and load_checkpoint",
    "cli": "The models commands: tracker-saver models and the functions it calls",
    "ui": "The web UI",
    "records": "What others wrote: registries, records and objects",
}

F = TypeVar("F", bound=Callable[..., Any])


# ------------------------------------------------------------------ the catalogue


@dataclass(frozen=True)
class Row:
    """One bad input: its door and group, what the user writes, what they get, what is left."""

    door: str
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


def door_file(door: str) -> str:
    """The test file of a door, as the docs name it."""
    return f"tests/test_bad_inputs_{door}.py"


def case(*, group: str, id: str, input: str, error: str, message: str, left: str) -> Callable[[F], F]:
    """Register a row and mark the test that checks it; the test's file names the row's door."""

    def mark(test: F) -> F:
        door = test.__module__.rpartition(".test_bad_inputs_")[2]
        assert door in DOORS, f"{test.__name__} checks row {id!r} outside a door's file ({door_file('DOOR')})"
        assert id not in CATALOGUE, f"two rows are called {id!r}"
        assert test.__name__.count("_") >= 5, f"{test.__name__}: name the case as a sentence"
        row = Row(door, group, id, input, error, message, left)
        CATALOGUE[id] = row
        test.row = row  # type: ignore[attr-defined]
        return test

    return mark


def row_of(request: pytest.FixtureRequest) -> Row:
    """The row the running test checks (each door's ``row`` fixture)."""
    return request.function.row  # type: ignore[no-any-return]


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
    """The catalogue as the docs show it: per door, its test file and one table per group."""
    lines: list[str] = []
    for door, title in DOORS.items():
        rows = [r for r in CATALOGUE.values() if r.door == door]
        lines += [f"### {title}", "", f"Checked by `{door_file(door)}`.", ""]
        for group in dict.fromkeys(r.group for r in rows):
            lines += [
                f"#### {group}",
                "",
                "| id | input | error | message | left behind |",
                "| --- | --- | --- | --- | --- |",
            ]
            for r in (r for r in rows if r.group == group):
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

    @classmethod
    def under(cls, tmp_path: Path) -> World:
        """A fresh world in a test's temporary folder (each door's ``world`` fixture)."""
        root = tmp_path / "world"
        root.mkdir()
        return cls(root)


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


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``tracker-saver ARGV`` run in-process: its exit status, stdout and stderr."""
    from tracker_saver.cli.main import main

    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err
