"""Bad inputs that others wrote: a registry file, a record or a slot's bytes changed outside this saver.

DESIGN's "Others write too": a registry of random bytes or of a newer release, a lock another
process holds, an object damaged at output_uri, a record another program renamed with terminal
escapes, and two renames at once. Each is refused, shown safely or settled, never misread.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.bad_inputs import (
    Row,
    World,
    case,
    fit,
    raises,
    row_of,
    run_cli,
)
from tracker_saver import (
    find_models,
    load_checkpoint,
    rename_model,
)
from tracker_saver.registry.sqlite import SQLiteRegistry


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.under(tmp_path)


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Row:
    return row_of(request)


REGISTRIES = "Registry files"


@case(
    group=REGISTRIES,
    id="registry-corrupt",
    input='TrackerSaver("./ckpt", registry="registry.db")  # 4 KiB of random bytes',
    error="ConfigError",
    message="registry '…/registry.db' is not a SQLite database (file is not a database): pass the path of a registry "
    "file, or move this file away to start a new registry there",
    left="the file as it was; no output folder",
)
def test_a_registry_file_of_random_bytes_is_refused_and_left_as_it_was(row: Row, world: World) -> None:
    world.db.write_bytes(random.Random(0).randbytes(4096))
    before = world.files()
    with raises(row):
        world.saver()
    assert world.files() == before


@case(
    group=REGISTRIES,
    id="registry-newer-schema",
    input='TrackerSaver("./ckpt", registry="registry.db")  # written by a newer tracker-saver',
    error="ConfigError",
    message="registry '…/registry.db': schema version 99 is newer than this tracker_saver knows (…): "
    "upgrade tracker-saver (git pull in its clone, then pip install -e . there), or use another registry file",
    left="the registry as it was; no output folder",
)
def test_a_registry_of_a_newer_schema_is_refused_and_left_as_it_was(row: Row, world: World) -> None:
    SQLiteRegistry(world.db).close()
    with contextlib.closing(sqlite3.connect(world.db)) as conn, conn:
        conn.execute("INSERT INTO schema_migrations VALUES (99, 0)")
    before = world.files()
    with raises(row):
        world.saver()
    assert world.files() == before


@case(
    group=REGISTRIES,
    id="registry-locked",
    input="registry=SQLiteRegistry(path, timeout=0.2), while another process holds BEGIN IMMEDIATE on it",
    error="RegistryError",
    message="registry 'sqlite:///…/registry.db' is locked by another process for longer than the busy timeout (0.2 s): "
    "let that process finish (`fuser …` names it), or wait longer with registry=SQLiteRegistry(path, timeout=SECONDS)",
    left="the saver's empty output folder; no record, no object (raised at the first save: "
    "readers are never blocked in WAL mode). Once the lock is gone the same saver saves",
)
def test_a_registry_locked_by_another_process_fails_the_save_until_the_lock_is_gone(row: Row, world: World) -> None:
    SQLiteRegistry(world.db).close()
    hold = (
        "import sqlite3, sys\n"
        f"conn = sqlite3.connect({str(world.db)!r}, isolation_level=None)\n"
        "conn.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\nsys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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


OBJECTS = "Objects at output_uri"


def _damage(world: World, how: Callable[[bytes], bytes]) -> Any:
    saver = world.saver()
    fit(saver)
    (record,) = saver.records(live=True)
    slot = world.out / record.key
    slot.write_bytes(how(slot.read_bytes()))
    return record


LEFT_DAMAGED = "the damaged object and its record as they were: nothing loaded into the model"


@case(
    group=OBJECTS,
    id="load-a-truncated-object",
    input="load_checkpoint(id, to_load)  # the slot file lost its second half",
    error="IntegrityError",
    message="record … ('model_1.pt'): file:///…/p/r/model.slot0.pt has … bytes with sha256 …, expected … bytes with "
    "sha256 …: the slot was probably overwritten or corrupted; load another record",
    left=LEFT_DAMAGED + "; the error carries `record_id` and `key`",
)
def test_loading_a_truncated_object_fails_its_integrity_check_and_loads_nothing(row: Row, world: World) -> None:
    record = _damage(world, lambda data: data[: len(data) // 2])
    net = torch.nn.Linear(4, 2)
    untouched = net.weight.detach().clone()
    with raises(row) as caught:
        load_checkpoint(record.id, {"model": net}, registry=world.db)
    assert (caught.value.record_id, caught.value.key) == (record.id, record.key)  # type: ignore[attr-defined]
    assert torch.equal(net.weight, untouched)


@case(
    group=OBJECTS,
    id="load-a-bit-flipped-object",
    input="load_checkpoint(id, to_load)  # one bit of the slot file flipped, same size",
    error="IntegrityError",
    message="record … ('model_1.pt'): file:///…/p/r/model.slot0.pt has … bytes with sha256 …, expected … bytes with "
    "sha256 …: the slot was probably overwritten or corrupted; load another record",
    left=LEFT_DAMAGED,
)
def test_loading_an_object_with_one_bit_flipped_fails_its_integrity_check(row: Row, world: World) -> None:
    def flip(data: bytes) -> bytes:
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]

    record = _damage(world, flip)
    with raises(row) as caught:
        load_checkpoint(record.id, {"model": torch.nn.Linear(4, 2)}, registry=world.db)
    assert f"has {record.size} bytes" in str(caught.value)
    assert caught.value.record_id == record.id  # type: ignore[attr-defined]


RECORDS = "Records"


@case(
    group=RECORDS,
    id="escape-written-by-another-writer",
    input="UPDATE records SET name = printf('x%s]0;owned%s', char(27), char(7))  -- another program; then models list, show",
    error="none",
    message="accepted: shown escaped, x\\x1b]0;owned\\x07: no 0x1b byte reaches the terminal",
    left="the record as the other writer left it; `--json` gives its exact text",
)
def test_terminal_escapes_another_writer_put_in_a_record_are_shown_escaped(
    row: Row, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    fit(world.saver())
    with contextlib.closing(sqlite3.connect(world.db)) as conn, conn:
        conn.execute("UPDATE records SET name = printf('x%s]0;owned%s', char(27), char(7))")
    for argv in (["models", "list"], ["models", "show", "1"]):
        status, out, err = run_cli(["--registry", str(world.db), *argv], capsys)
        assert status == 0 and "\x1b" not in out + err and "x\\x1b]0;owned\\x07" in out, out + err


@case(
    group=RECORDS,
    id="concurrent-renames",
    input='rename_model(id, "a") and rename_model(id, "b") at the same moment (two people, two UIs)',
    error="none",
    message="accepted: the last writer wins; both calls succeed, each returning the record as read right after its "
    "write (the first may already show the second's name); no error tells the first it was overwritten "
    "(docs/security.md, 'Concurrency')",
    left="one record, named a or b, and no other change",
)
def test_two_renames_at_once_both_succeed_and_the_last_one_wins(row: Row, world: World) -> None:
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
