"""fsck checks everything a record can point at, and the registry itself (issue 51, cases 1 and 5).

Pinned and archive records whose object is gone, changed or shared with another record; a path
at a record's key that is not a regular file (never opened: a FIFO would block); a SQLite
registry with damaged pages, found by SQLite's own check and never written to. Each runs a real
training through Ignite's ``Checkpoint``, a real folder and SQLite file, and the CLI's ``main``.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Target, model, train
from tracker_saver import find_models, pin_model
from tracker_saver.cli.main import main
from tracker_saver.core.records import Record, StreamId, UploadInfo
from tracker_saver.fsck import Report, check
from tracker_saver.registry import open_registry
from tracker_saver.save.ownership import owner_key

#: The most a call may take before the test calls it hung (a bound, never asserted as a duration).
BOUND_S = 60


def _trained(target: Target, **saver_options: Any) -> None:
    saver = target.saver(**saver_options)
    train(saver, {"model": model()}, epochs=2)
    saver.close()


def _pinned(target: Target) -> Record:
    """A person's pin of the live record, as `tracker-saver models pin` makes it."""
    (live,) = find_models(project="p", live=True, registry=target.registry)
    return pin_model(live.id, registry=target.registry)


def _path(target: Target, record: Record) -> Path:
    assert record.key is not None
    return Path(target.output_uri, record.key)


def _check(target: Target, *, deep: bool = False) -> Report:
    with open_registry(target.registry, create=False) as registry:
        return check(registry, deep=deep)


def _fsck(target: Target, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["--registry", target.registry, *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _kinds(report: Report) -> list[tuple[str, str | None]]:
    return [(f.kind, f.record_id) for f in report.problems]


# -- pinned and archive records ---------------------------------------------------------------


def test_a_deleted_pin_file_is_a_pin_missing_problem_that_repair_leaves_to_a_person(local_target, capsys) -> None:
    _trained(local_target)
    pin = _pinned(local_target)
    _path(local_target, pin).unlink()
    code, report = _fsck(local_target, capsys, "fsck")
    assert code == 1 and [(f["kind"], f["record_id"]) for f in report["findings"]] == [("pin-missing", pin.id)]
    (finding,) = report["findings"]
    assert "its object is missing" in finding["detail"] and f"models unpin {pin.id}" in finding["fix"]
    assert main(["--registry", local_target.registry, "repair"]) == 1
    out = capsys.readouterr().out
    assert f"leave pinned record {pin.id}" in out and "pin-missing" in out
    assert _kinds(_check(local_target, deep=True)) == [("pin-missing", pin.id)]  # repair changed nothing


def test_a_changed_pin_file_is_found_by_its_stat_and_with_its_stat_put_back_by_deep(local_target) -> None:
    _trained(local_target)
    pin = _pinned(local_target)
    path = _path(local_target, pin)
    before = path.stat()
    with open(path, "r+b") as f:  # same size, same inode: only the bytes and the mtime change
        f.seek(100)
        f.write(b"\xff" * 8)
    report = _check(local_target)
    assert _kinds(report) == [("pin-differs", pin.id)] and "replaced since its commit" in report.problems[0].detail
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the store's fingerprint is the recorded one again
    assert _check(local_target).problems == []  # a cheap check trusts the fingerprint
    report = _check(local_target, deep=True)
    assert _kinds(report) == [("pin-differs", pin.id)] and "sha256 differs" in report.problems[0].detail


def test_an_archive_entry_whose_file_is_gone_is_a_pin_missing_problem(local_target) -> None:
    _trained(local_target, keep_every="1 epochs")
    entries = find_models(project="p", states=["pinned"], registry=local_target.registry)
    assert [e.metadata["kept_by"] for e in entries] == ["every 1 epoch"] * 2
    _path(local_target, entries[-1]).unlink()
    report = _check(local_target)
    assert _kinds(report) == [("pin-missing", entries[-1].id)]
    assert "(an archive entry, kept every 1 epoch)" in report.problems[0].detail


def test_two_records_that_share_one_pin_object_are_a_shared_pin_problem(local_target) -> None:
    _trained(local_target)
    pin = _pinned(local_target)
    assert pin.key is not None and pin.sha256 is not None and pin.size is not None
    with open_registry(local_target.registry, create=False) as registry:  # a racing pin that chose the same key
        info = UploadInfo(
            "p",
            "r",
            "model",
            pin.filename,
            metadata=dict(pin.metadata),
            slot=None,
            key=pin.key,
            output_uri=pin.output_uri,
        )
        twin = registry.labels.create_pinned(info, uri=pin.uri or "", sha256=pin.sha256, size=pin.size)
    report = _check(local_target, deep=True)
    assert _kinds(report) == [("shared-pin", twin.id)]
    (finding,) = report.problems
    assert f"pinned record {pin.id}" in finding.detail and "unpinning one deletes the bytes" in finding.detail


# -- a path that is not a regular file ----------------------------------------------------------


def _bounded(call: Callable[[], Any], release: Path) -> Any:
    """``call()``, in a thread: if it is still running after ``BOUND_S`` (an open of the FIFO at
    ``release`` waits for a writer), the FIFO is opened for writing to let it go, and the test fails."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        os.close(os.open(release, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(BOUND_S)
        pytest.fail(f"the call waited on the FIFO at {release}")
    return result[0]


def _replace(path: Path, kind: str) -> None:
    """Put a FIFO, a symlink to a copy of the same bytes out of the folder, or a folder at ``path``."""
    if kind == "symlink":
        outside = path.parents[3] / "outside.pt"
        outside.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(outside)
        return
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize(
    ("kind", "at"), [("fifo", "slot"), ("symlink", "slot"), ("folder", "slot"), ("fifo", "pin"), ("fifo", "owner")]
)
def test_a_path_that_is_not_a_regular_file_is_reported_never_read_and_left_by_repair(
    local_target, capsys, kind: str, at: str
) -> None:
    _trained(local_target)
    (live,) = find_models(project="p", live=True, registry=local_target.registry)
    record = _pinned(local_target) if at == "pin" else live
    key = owner_key(StreamId(live.output_uri or "", "p", "r", "model")) if at == "owner" else record.key
    path = Path(local_target.output_uri, key or "")
    _replace(path, kind)
    code, report = _bounded(lambda: _fsck(local_target, capsys, "fsck", "--deep"), path)
    assert code == 1 and [(f["kind"], f["key"]) for f in report["findings"]] == [("not-regular", key)]
    (finding,) = report["findings"]
    assert "remove it by hand" in finding["fix"]
    if at != "owner":  # the records that point at it are named
        assert f"{record.state.value} record {record.id}" in finding["detail"]
    assert _bounded(lambda: main(["--registry", local_target.registry, "repair"]), path) == 1
    assert f"leave {path}" in capsys.readouterr().out.replace("'", "")
    assert os.path.lexists(path) and path.is_dir() == (kind == "folder")  # left as found


# -- the registry itself ------------------------------------------------------------------------


def _page_size(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def _history_pages(db: Path) -> list[int]:
    """The first 4 pages (from 0) of the event and webhook tables: what fsck's own queries never read."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT pageno - 1 FROM dbstat WHERE name LIKE 'events%' OR name LIKE '%webhook%' ORDER BY pageno"
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows[:4]]


@pytest.mark.parametrize("where", ["middle", "header", "history"])
def test_a_damaged_sqlite_registry_is_reported_never_written_and_repair_leaves_it(local_target, capsys, where) -> None:
    for run in ("r", "r2"):
        saver = local_target.saver(run=run)
        train(saver, {"model": model()}, epochs=3, n_saved=2)
        saver.close()
    db = Path(local_target.registry)
    size, total = _page_size(db), db.stat().st_size // _page_size(db)
    pages = {"middle": range(total // 2 - 2, total // 2 + 2), "header": [0], "history": _history_pages(db)}[where]
    assert len(pages) == (1 if where == "header" else 4)
    data, noise = bytearray(db.read_bytes()), random.Random(51)
    for page in pages:
        data[page * size : (page + 1) * size] = noise.randbytes(size)
    db.write_bytes(bytes(data))
    for args in (["fsck"], ["fsck", "--deep", "--project", "p"]):
        code, report = _fsck(local_target, capsys, *args)
        assert code == 1 and [f["kind"] for f in report["findings"]] == ["damaged-registry"], report
        (finding,) = report["findings"]
        assert f"the registry file {str(db)!r} is damaged" in finding["detail"]
        assert "restore it from a backup" in finding["fix"] and f"sqlite3 {db} .recover" in finding["fix"]
    assert main(["--registry", local_target.registry, "repair"]) == 1
    assert "is damaged" in capsys.readouterr().out
    assert db.read_bytes() == data  # never written: kept as it is for .recover or a restore


@pytest.mark.clearml
def test_a_pinned_record_whose_file_is_gone_is_a_pin_missing_problem_on_clearml(
    clearml_server, clearml_project, tmp_path
) -> None:
    target = Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
    _trained(target)
    pin = _pinned(target)
    _path(target, pin).unlink()
    assert _kinds(_check(target)) == [("pin-missing", pin.id)]
