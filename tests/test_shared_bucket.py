"""A team's shared bucket: a stream's objects belong to the registry named at output_uri (issue 41).

Alice trains with her registry; Bob, with his own, runs the same script on the same
output_uri. Bob must get one clear error before any of Alice's bytes are touched, fsck must
see bytes another writer swapped without ``--deep``, and no record may point a read or a
delete at a file outside its stream. Each case runs on a local folder and on Ceph RGW.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tests.helpers import Target, model, train
from tracker_saver import (
    IntegrityError,
    RecordState,
    StreamOwnedError,
    download_model,
    find_models,
    unpin_model,
)
from tracker_saver.cli.main import main
from tracker_saver.core.records import StreamId
from tracker_saver.fsck import check, repair
from tracker_saver.registry import open_registry
from tracker_saver.save.ownership import owner_key, read_owner, take_over
from tracker_saver.storage import open_storage


def _bytes(target: Target) -> dict[str, str]:
    """sha256 of every object at output_uri (owner objects included), by key."""
    storage = target.storage()
    out = {}
    for obj in storage.list() + storage.list(".tracker_saver/"):
        with storage.get(obj.key) as f:
            out[obj.key] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(params=["local", pytest.param("ceph", marks=pytest.mark.ceph)])
def bucket(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One output_uri that two people share: a folder, or a prefix in a Ceph RGW bucket."""
    if request.param == "local":
        return str(tmp_path / "shared")
    return str(request.getfixturevalue("s3_output_uri"))


def _alice_and_bob(bucket: str, tmp_path: Path) -> tuple[Target, Target]:
    return Target(bucket, str(tmp_path / "alice" / "registry.db")), Target(
        bucket, str(tmp_path / "bob" / "registry.db")
    )


def test_a_second_registry_refuses_before_it_writes_or_deletes_a_byte(bucket: str, tmp_path: Path) -> None:
    alice, bob = _alice_and_bob(bucket, tmp_path)
    saver = alice.saver()
    train(saver, {"model": model()}, n_saved=2, epochs=3)
    saver.close()
    storage = alice.storage()
    leftover = storage.stage("p/r/model.slot0.pt")  # an unfinished write of Alice's, as a kill leaves one
    leftover.file.write(b"half")  # locally a temp file; on S3 nothing yet (less than one part)
    staged = [s.key for s in storage.staged("p/")]
    before = _bytes(alice)
    alice_id = open_registry(alice.registry).claims.registry_id("p")
    with pytest.raises(
        StreamOwnedError,
        match=rf"stream p/r/model at .* belongs to another registry: sqlite:///.*alice/registry.db \(registry id {alice_id}.*take-over .* --from {alice_id}",
    ):
        train(bob.saver(), {"model": model()}, n_saved=2, epochs=1)
    assert _bytes(alice) == before and [s.key for s in storage.staged("p/")] == staged
    assert find_models(registry=bob.registry) == []  # nor a record in Bob's registry
    assert [f.kind for f in check(open_registry(alice.registry)).problems] == ["staged"] * len(staged)
    leftover.abort()


def test_two_registries_at_the_same_path_on_two_machines_are_two_owners(bucket: str, tmp_path: Path) -> None:
    # Each machine's default registry is ~/.tracker_saver/registry.db: the path names nobody.
    path = tmp_path / "home" / ".tracker_saver" / "registry.db"
    path.parent.parent.mkdir()
    machine_a = Target(bucket, str(path))
    train(machine_a.saver(), {"model": model()}, n_saved=1).save_handler.close()
    shutil.move(path.parent, tmp_path / "machine-a")  # machine A keeps its registry; machine B has its own
    with pytest.raises(StreamOwnedError, match="belongs to another registry"):
        train(Target(bucket, str(path)).saver(), {"model": model()}, n_saved=1)


def test_the_owner_object_is_not_among_the_streams_objects(bucket: str, tmp_path: Path) -> None:
    alice, _ = _alice_and_bob(bucket, tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=1, epochs=3).save_handler.close()
    stream = StreamId(alice.storage().uri, "p", "r", "model")
    owner = read_owner(alice.storage(), stream)
    assert owner is not None and owner.registry_id == open_registry(alice.registry).claims.registry_id("p")
    assert [o.key for o in alice.storage().list()] == ["p/r/model.slot0.pt"]  # one slot, n_saved=1
    assert [o.key for o in alice.storage().list(".tracker_saver/")] == [owner_key(stream)]


def test_a_stream_written_before_owners_goes_to_the_registry_that_knows_its_bytes(bucket: str, tmp_path: Path) -> None:
    alice, bob = _alice_and_bob(bucket, tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()
    storage = alice.storage()
    stream = StreamId(storage.uri, "p", "r", "model")
    storage.delete(owner_key(stream))  # as a stream saved before this release
    with pytest.raises(StreamOwnedError, match="already has objects that registry .*bob.* has no record of"):
        train(bob.saver(), {"model": model()}, n_saved=2)
    assert read_owner(storage, stream) is None  # Bob claimed nothing
    train(alice.saver(), {"model": model()}, n_saved=2).save_handler.close()  # Alice's records match: hers
    owner = read_owner(storage, stream)
    assert owner is not None and owner.registry_id == open_registry(alice.registry).claims.registry_id("p")


def test_a_deliberate_take_over_hands_the_stream_on_and_keeps_the_footprint(
    bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob = _alice_and_bob(bucket, tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()
    alice_id = open_registry(alice.registry).claims.registry_id("p")
    storage = alice.storage()
    refused_saver = bob.saver()  # closed after: an open one holds the stream's claim until GC collects it
    with pytest.raises(StreamOwnedError, match=f"--from {alice_id}"):  # Bob is refused: his registry exists
        train(refused_saver, {"model": model()}, n_saved=2)
    refused_saver.close()
    base = ["streams", "take-over", storage.uri, "--project", "p", "--run", "r", "--stream", "model",
            "--registry", bob.registry]  # fmt: skip
    assert main([*base, "--from", "0" * 32]) == 2  # not the owner: nothing changes
    assert f"is owned by {storage.uri}" not in capsys.readouterr().err
    assert main([*base, "--from", alice_id]) == 0
    assert "now owned by" in capsys.readouterr().out
    train(bob.saver(), {"model": model()}, n_saved=2, epochs=3).save_handler.close()
    assert bob.counts() == {"model": 2}  # Alice's two slots reused, never a third object
    with pytest.raises(StreamOwnedError, match="belongs to another registry"):
        train(alice.saver(), {"model": model()}, n_saved=2)


def test_plain_fsck_sees_the_bytes_another_writer_put_in_a_slot(bucket: str, tmp_path: Path) -> None:
    alice, _ = _alice_and_bob(bucket, tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()
    storage = alice.storage()
    for record in find_models(live=True, registry=alice.registry):  # Bob's bytes: same size, as every checkpoint
        with storage.get(record.key) as f:
            data = bytearray(f.read())
        data[-1] ^= 1
        storage.put_stream(record.key, io.BytesIO(bytes(data)))
    report = check(open_registry(alice.registry))  # not --deep
    assert [f.kind for f in report.problems] == ["lie", "lie"]
    assert all("fingerprint" in f.detail for f in report.problems)


def _forged(target: Target, secret: Path) -> str:
    """A pinned record written straight into the registry, naming a file outside any stream."""
    train(target.saver(), {"model": model()}, n_saved=1).save_handler.close()
    with sqlite3.connect(target.registry) as conn:
        row = conn.execute(
            "INSERT INTO records (project, run, stream, filename, name, state, slot, key, uri, output_uri, sha256, "
            "size, created_at, updated_at) VALUES ('p', 'r', 'model', 'id_rsa', 'id_rsa', 'pinned', NULL, 'id_rsa', "
            "?, ?, ?, ?, ?, ?)",
            (secret.as_uri(), secret.parent.as_uri(), hashlib.sha256(secret.read_bytes()).hexdigest(),
             secret.stat().st_size, time.time(), time.time()),
        )  # fmt: skip
        return str(row.lastrowid)


def test_a_record_never_decides_which_file_is_read_or_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
    forged = _forged(target, secret)
    with pytest.raises(
        IntegrityError, match=f"record {forged} \\('id_rsa'\\) is refused: key 'id_rsa' is not a pin key"
    ):
        unpin_model(forged, registry=target.registry)
    with pytest.raises(IntegrityError, match="is refused"):
        download_model(forged, tmp_path / "copy", registry=target.registry)
    assert main(["models", "unpin", forged, "--registry", target.registry]) == 2
    assert "is refused" in capsys.readouterr().err
    assert secret.exists() and not (tmp_path / "copy").exists()
    report = check(open_registry(target.registry))
    assert [(f.kind, f.record_id) for f in report.problems] == [("misplaced", forged)]
    repair(open_registry(target.registry), echo=lambda line: None)
    assert secret.exists()


def test_a_record_whose_uri_disagrees_with_its_key_is_refused(tmp_path: Path) -> None:
    target = Target(str(tmp_path / "out"), str(tmp_path / "registry.db"))
    train(target.saver(), {"model": model()}, n_saved=1).save_handler.close()
    (record,) = find_models(live=True, registry=target.registry)
    with sqlite3.connect(target.registry) as conn:
        conn.execute("UPDATE records SET uri = ? WHERE id = ?", ((tmp_path / "elsewhere.pt").as_uri(), record.id))
    with pytest.raises(IntegrityError, match=r"its uri .*elsewhere.pt' is not '.*p/r/model.slot0.pt'"):
        download_model(record.id, tmp_path / "x.pt", registry=target.registry)


def test_every_commit_records_the_fingerprint_the_store_gives(bucket: str, tmp_path: Path) -> None:
    alice, _ = _alice_and_bob(bucket, tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=2, epochs=2).save_handler.close()
    storage = open_storage(bucket, **alice.storage_options)
    for record in find_models(states=[RecordState.LIVE], registry=alice.registry):
        found = storage.stat(record.key or "")
        assert found is not None and record.fingerprint == found.fingerprint


def test_take_over_refuses_when_the_owner_changed_since(tmp_path: Path) -> None:
    alice, bob = _alice_and_bob(str(tmp_path / "shared"), tmp_path)
    train(alice.saver(), {"model": model()}, n_saved=1).save_handler.close()
    stream = StreamId(alice.storage().uri, "p", "r", "model")
    with pytest.raises(StreamOwnedError, match="not by no registry: nothing was changed"):
        take_over(alice.storage(), open_registry(bob.registry), stream, from_id=None)
    assert os.path.exists(tmp_path / "shared" / owner_key(stream))


@pytest.mark.clearml
def test_a_clearml_stream_refuses_a_saver_with_another_registry(
    clearml_server, clearml_project: str, tmp_path: Path
) -> None:
    tracker = Target(str(tmp_path / "shared"), f"clearml:{clearml_project}")
    train(tracker.saver(), {"model": model()}, n_saved=1).save_handler.close()
    owner = read_owner(tracker.storage(), StreamId(tracker.storage().uri, "p", "r", "model"))
    assert owner is not None and owner.registry.endswith(clearml_project)  # clearml://HOST/ROOT; id: the project's
    with pytest.raises(
        StreamOwnedError, match=rf"belongs to another registry: clearml://\S*{clearml_project} \(registry"
    ):
        train(Target(tracker.output_uri, str(tmp_path / "mine.db")).saver(), {"model": model()}, n_saved=1)
