"""Which of torch.save's buffers a writer may keep: a checkpoint's CPU storages, nothing else."""

from __future__ import annotations

import hashlib
import io
import os
import threading

import pytest
import torch

from tracker_saver.core.pools import shared_pool
from tracker_saver.save.hashing import HASHER, PARALLEL_HASH_BYTES, HashingWriter, hash_alongside
from tracker_saver.save.memory import StableMemory


class Recorder(io.RawIOBase):
    """A nameless, unseekable writer (as the pipeline's) that notes each write and whether it is stable."""

    def __init__(self, stable: StableMemory) -> None:
        self.stable = stable
        self.writes: list[tuple[int, bool]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        view = memoryview(data)  # type: ignore[arg-type]
        self.writes.append((view.nbytes, view in self.stable))
        return view.nbytes


def test_only_the_storages_of_cpu_tensors_are_stable_never_headers_or_the_pickle() -> None:
    weight = torch.randn(300, 200)
    bias = torch.zeros(200)
    tied = {"a": weight, "b": weight}  # one storage, written once
    window = torch.arange(1000.0)[100:200]  # a view: torch.save writes its whole storage
    checkpoint = {"model": {"w": weight, "b": bias}, "tied": tied, "window": window, "epoch": 3, "name": "x" * 10}
    recorder = Recorder(StableMemory.of(checkpoint))
    torch.save(checkpoint, recorder)
    stable_sizes = sorted(size for size, stable in recorder.writes if stable)
    assert stable_sizes == sorted([weight.nbytes, bias.nbytes, 1000 * 4])
    assert any(not stable for _, stable in recorder.writes)  # headers, data.pkl, version: copied


def test_nothing_is_stable_without_cpu_tensors() -> None:
    assert not StableMemory.of({"epoch": 1, "lr": [0.1, 0.01]})
    assert memoryview(b"x" * 100) not in StableMemory.of({"w": torch.ones(25)})
    assert memoryview(b"") not in StableMemory.of({"w": torch.ones(25)})


def test_a_large_buffer_that_is_not_stable_is_hashed_before_write_returns() -> None:
    # Such a buffer (data.pkl of a big optimizer, a GPU tensor's CPU copy) may be freed or
    # reused as soon as write returns: its hash must not trail it.
    buffer = bytearray(b"a" * (4 * PARALLEL_HASH_BYTES))
    expected = hashlib.sha256(bytes(buffer)).hexdigest()
    writer = HashingWriter(io.BytesIO(), stable=StableMemory.of({"w": torch.ones(4)}))
    writer.write(buffer)
    buffer[:] = b"b" * len(buffer)  # the caller reuses it at once
    assert writer.sha256 == expected


def test_the_hash_of_a_checkpoint_is_the_same_whether_its_storages_are_stable_or_not() -> None:
    checkpoint = {"w": torch.randn(3 * PARALLEL_HASH_BYTES // 4), "b": torch.randn(10), "step": 7}
    digests = []
    for stable in (StableMemory.of(checkpoint), StableMemory()):
        target = io.BytesIO()
        writer = HashingWriter(target, stable=stable)
        torch.save(checkpoint, writer)
        assert writer.sha256 == hashlib.sha256(target.getvalue()).hexdigest()
        digests.append(writer.sha256)
    assert digests[0] == digests[1]


def test_a_writer_that_hashes_inline_never_waits_on_the_hashing_thread() -> None:
    # The hashing thread is held busy: an inline writer still finishes, a parallel one waits.
    release = threading.Event()
    shared_pool(HASHER).submit(release.wait, 30)
    buffer = bytes(4 * PARALLEL_HASH_BYTES)
    results: dict[bool, str] = {}

    def write(parallel: bool) -> None:
        writer = HashingWriter(io.BytesIO(), parallel=parallel)
        writer.write(buffer)
        results[parallel] = writer.sha256

    try:
        threads = {parallel: threading.Thread(target=write, args=(parallel,)) for parallel in (False, True)}
        for thread in threads.values():
            thread.start()
        threads[False].join(10)
        assert results.get(False) == hashlib.sha256(buffer).hexdigest()
        assert True not in results  # queued behind the busy hashing thread
    finally:
        release.set()
    threads[True].join(10)
    assert results[True] == results[False]


@pytest.mark.parametrize(("cores", "torch_threads", "expected"), [(2, 1, False), (2, 2, False), (4, 2, True)])
def test_a_background_save_hashes_beside_its_write_only_with_two_cores_to_spare(
    monkeypatch: pytest.MonkeyPatch, cores: int, torch_threads: int, expected: bool
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))  # the machine's size, chosen
    before = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        assert hash_alongside(background=True) is expected
        assert hash_alongside(background=False) is True  # the training thread waits for it anyway
    finally:
        torch.set_num_threads(before)
