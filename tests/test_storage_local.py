"""The local-folder storage: the contract, plus what only a local folder does."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from tests.contracts.storage import StorageContract
from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.storage import open_storage
from tracker_saver.storage.local import TEMP_PREFIX, LocalStorage


class TestLocalStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path):
        return open_storage(tmp_path / "out")


def test_writes_go_through_a_temp_file_in_the_same_folder(tmp_path) -> None:
    store = LocalStorage(tmp_path)
    seen = []
    with store.writer("p/r/s.slot0.pt") as f:
        f.write(b"x")
        seen = os.listdir(tmp_path / "p" / "r")
    assert len(seen) == 1 and seen[0].startswith(TEMP_PREFIX)
    assert os.listdir(tmp_path / "p" / "r") == ["s.slot0.pt"]


def test_temp_files_are_not_objects(tmp_path) -> None:
    store = LocalStorage(tmp_path)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / (TEMP_PREFIX + "s.slot0.pt.abc")).write_bytes(b"crash leftover")
    assert store.list() == []


def test_file_uri_and_path_open_the_same_folder(tmp_path) -> None:
    assert open_storage(tmp_path.as_uri()).uri == open_storage(str(tmp_path)).uri


def test_unwritable_output_uri_is_a_config_error_naming_it(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="a-file/sub.*not a writable folder"):
        open_storage(blocker / "sub").check()


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown scheme 'gs'.*s3://BUCKET/PREFIX"):
        open_storage("gs://bucket/x")


def test_storage_options_on_a_local_folder_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="endpoint_url"):
        open_storage(tmp_path, endpoint_url="http://x")


def test_an_os_error_while_writing_is_a_storage_error_with_the_cause(tmp_path) -> None:
    store = LocalStorage(tmp_path)
    (tmp_path / "p").write_text("a file where the run folder should be")
    with pytest.raises(StorageError, match="cannot write") as caught:
        store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"new"))
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.key == "p/r/s.slot0.pt"


def test_a_write_longer_than_the_writeback_span_lands_whole_and_starts_writeback_on_linux(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracker_saver.storage import files

    assert (files._START_WRITEBACK is not None) == sys.platform.startswith("linux")
    monkeypatch.setattr(files, "WRITEBACK_BYTES", 1000)
    started: list[tuple[int, int]] = []
    real = files._START_WRITEBACK

    def noting(fd: int, offset: int, length: int, flags: int) -> int:
        started.append((offset, length))
        return real(fd, offset, length, flags) if real is not None else 0

    monkeypatch.setattr(files, "_START_WRITEBACK", noting)
    store = LocalStorage(tmp_path)
    data = os.urandom(3500)
    staged = store.stage("p/r/m.slot0.pt")
    for i in range(0, len(data), 700):
        staged.file.write(data[i : i + 700])
    staged.finish()
    staged.commit()
    assert (tmp_path / "p/r/m.slot0.pt").read_bytes() == data
    assert started == [(0, 1400), (1400, 1400)]  # each span once, in order; the fsync writes the rest


def resident_pages(path: Path) -> int:
    """How many of ``path``'s pages are in the page cache (Linux's ``mincore`` on a mapping of it)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vec = (ctypes.c_ubyte * pages)()
        try:
            assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec)


def test_a_write_over_a_slot_lets_the_replaced_bytes_pages_go_and_keeps_the_bytes_until_the_commit(
    tmp_path: Path,
) -> None:
    store = LocalStorage(tmp_path)
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    store.put_stream("p/r/m.slot0.pt", io.BytesIO(old))  # fsynced: its pages are clean
    slot = tmp_path / "p/r/m.slot0.pt"
    assert slot.read_bytes() == old and resident_pages(slot) > 0  # read back: cached

    staged = store.stage("p/r/m.slot0.pt")
    assert resident_pages(slot) == 0  # the new bytes take those pages, not more memory
    staged.file.write(new)
    staged.finish()
    assert slot.read_bytes() == old  # untouched on disk until the commit (invariant 6)
    staged.commit()
    assert slot.read_bytes() == new
