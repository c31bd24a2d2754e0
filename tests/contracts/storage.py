"""The storage contract: written once, run against every backend (local folder, Ceph RGW).

A backend opts in with ``class TestX(StorageContract)`` and a ``storage`` fixture that yields
an empty storage of that backend.
"""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.storage import Storage


class _Boom(Exception):
    pass


class StorageContract:
    def test_put_stream_then_get_returns_the_same_bytes(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"hello"))
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"hello"

    def test_put_file_streams_a_file_without_changing_it(self, storage: Storage, tmp_path) -> None:
        data = os.urandom(3 * 1024 * 1024 + 17)
        src = tmp_path / "big.bin"
        src.write_bytes(data)
        storage.put_file("p/r/s.slot1.pt", src)
        with storage.get("p/r/s.slot1.pt") as f:
            assert hashlib.sha256(f.read()).hexdigest() == hashlib.sha256(data).hexdigest()
        assert storage.stat("p/r/s.slot1.pt").size == len(data)

    def test_local_root_holds_the_objects_as_files_or_is_none(self, storage: Storage) -> None:
        with storage.writer("p/r/s.slot0.pt") as f:
            f.write(b"on disk?")
        root = storage.local_root
        local = storage.uri.startswith("file://")
        assert (root is not None) == local
        assert root is None or (root / "p/r/s.slot0.pt").read_bytes() == b"on disk?"

    def test_writer_commits_on_clean_exit(self, storage: Storage) -> None:
        with storage.writer("p/r/s.slot0.pt") as f:
            f.write(b"abc")
            f.write(b"def")
        assert storage.stat("p/r/s.slot0.pt").size == 6

    def test_a_failed_write_leaves_the_previous_object_intact(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"previous"))
        with pytest.raises(_Boom):
            with storage.writer("p/r/s.slot0.pt") as f:
                f.write(b"half of the new bytes")
                raise _Boom()
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"previous"
        assert [s.key for s in storage.list("p/")] == ["p/r/s.slot0.pt"]

    def test_a_failed_first_write_leaves_no_object(self, storage: Storage) -> None:
        with pytest.raises(_Boom):
            with storage.writer("p/r/new.slot0.pt") as f:
                f.write(b"partial")
                raise _Boom()
        assert storage.stat("p/r/new.slot0.pt") is None
        assert storage.list("p/") == []

    def test_a_staged_write_changes_the_key_only_at_its_commit(self, storage: Storage) -> None:
        """DESIGN's steps 5 and 7: written and finished, the key still holds the previous bytes
        and nothing is listed; ``commit`` replaces them; ``abort`` afterwards says they changed."""
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"previous"))
        staged = storage.stage("p/r/s.slot0.pt")
        staged.file.write(b"the new ")
        staged.file.write(b"bytes")
        staged.finish()
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"previous"
        assert [s.key for s in storage.list("p/")] == ["p/r/s.slot0.pt"]
        staged.commit()
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"the new bytes"
        assert staged.abort() is True

    @pytest.mark.parametrize("finished", [False, True], ids=["mid-write", "finished"])
    def test_an_aborted_staged_write_proves_the_key_unchanged_and_leaves_nothing(
        self, storage: Storage, finished: bool
    ) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"previous"))
        staged = storage.stage("p/r/s.slot0.pt")
        staged.file.write(b"x" * 100_000)
        if finished:
            staged.finish()
        assert staged.abort() is False  # no commit was attempted
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"previous"
        assert storage.staged("p/") == []
        assert [s.key for s in storage.list("p/")] == ["p/r/s.slot0.pt"]

    def test_overwrite_replaces_bytes(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"one"))
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"two!"))
        with storage.get("p/r/s.slot0.pt") as f:
            assert f.read() == b"two!"
        assert len(storage.list("p/r/")) == 1

    def test_stat_of_a_missing_key_is_none(self, storage: Storage) -> None:
        assert storage.stat("p/r/missing.slot0.pt") is None

    def test_get_of_a_missing_key_raises_storage_error_naming_it(self, storage: Storage) -> None:
        with pytest.raises(StorageError, match="missing.slot0.pt"):
            with storage.get("p/r/missing.slot0.pt") as f:
                f.read()

    def test_list_filters_by_prefix_and_sorts(self, storage: Storage) -> None:
        for key in ("b/r/x.slot0.pt", "a/r/y.slot1.pt", "a/r/y.slot0.pt"):
            storage.put_stream(key, io.BytesIO(b"1"))
        assert [s.key for s in storage.list("a/")] == ["a/r/y.slot0.pt", "a/r/y.slot1.pt"]
        assert len(storage.list()) == 3

    def test_delete_removes_and_tolerates_missing(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"1"))
        storage.delete("p/r/s.slot0.pt")
        storage.delete("p/r/s.slot0.pt")
        assert storage.stat("p/r/s.slot0.pt") is None

    @pytest.mark.parametrize("key", ["../escape.pt", "/abs.pt", "a/../../b.pt", "a//b.pt", "a/./b.pt", "", "a\\b.pt"])
    def test_keys_can_never_escape_the_root(self, storage: Storage, key: str) -> None:
        with pytest.raises(ConfigError, match="escape output_uri"):
            storage.put_stream(key, io.BytesIO(b"x"))
        with pytest.raises(ConfigError, match="escape output_uri"):
            storage.url(key)

    def test_url_is_root_plus_key(self, storage: Storage) -> None:
        assert storage.url("p/r/s.slot0.pt") == storage.uri + "/p/r/s.slot0.pt"

    def test_check_passes_on_a_usable_root(self, storage: Storage) -> None:
        storage.check()

    def test_repr_names_the_root(self, storage: Storage) -> None:
        assert storage.uri in repr(storage)

    def test_stat_and_list_give_one_fingerprint_for_a_committed_object(self, storage: Storage) -> None:
        with storage.writer("p/r/s.slot0.pt") as f:
            f.write(b"first bytes")
        first = storage.stat("p/r/s.slot0.pt")
        assert first is not None and first.fingerprint
        assert [s.fingerprint for s in storage.list("p/r/")] == [first.fingerprint]

    def test_other_bytes_of_the_same_size_get_another_fingerprint(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"alice's bytes"))
        alice = storage.stat("p/r/s.slot0.pt")
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"bob's bytes!!"))  # same size, as two checkpoints are
        bob = storage.stat("p/r/s.slot0.pt")
        assert alice is not None and bob is not None and alice.size == bob.size
        assert alice.fingerprint != bob.fingerprint

    def test_put_if_absent_writes_once_and_never_replaces(self, storage: Storage) -> None:
        assert storage.put_if_absent(".tracker_saver/p/r/s.owner", b"alice") is True
        assert storage.put_if_absent(".tracker_saver/p/r/s.owner", b"bob") is False
        with storage.get(".tracker_saver/p/r/s.owner") as f:
            assert f.read() == b"alice"
        assert [s.key for s in storage.list(".tracker_saver/")] == [".tracker_saver/p/r/s.owner"]
        assert storage.staged() == []

    def test_copy_makes_a_new_object_and_never_replaces_one(self, storage: Storage) -> None:
        storage.put_stream("p/r/s.slot0.pt", io.BytesIO(b"slot bytes"))
        storage.put_stream("p/r/+pinned/ab12-s.pt", io.BytesIO(b"an earlier pin"))
        with pytest.raises(StorageError, match="never replaces"):
            storage.copy("p/r/s.slot0.pt", "p/r/+pinned/ab12-s.pt")
        storage.copy("p/r/s.slot0.pt", "p/r/+pinned/cd34-s.pt")
        with storage.get("p/r/+pinned/ab12-s.pt") as kept, storage.get("p/r/+pinned/cd34-s.pt") as made:
            assert (kept.read(), made.read()) == (b"an earlier pin", b"slot bytes")
        assert storage.staged() == []

    def test_read_small_reads_a_small_object_or_says_it_is_missing(self, storage: Storage) -> None:
        assert storage.read_small("p/r/s.json") is None
        storage.put_stream("p/r/s.json", io.BytesIO(b'{"owner": 1}'))
        storage.put_stream("p/r/empty.json", io.BytesIO(b""))
        assert storage.read_small("p/r/s.json") == b'{"owner": 1}' and storage.read_small("p/r/s.json", 3) == b'{"o'
        assert storage.read_small("p/r/empty.json") == b""
