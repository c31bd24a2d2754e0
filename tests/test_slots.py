"""The slot allocator against Ignite's exact call sequence (real SQLite, no storage)."""

from __future__ import annotations

import pytest

from tests.contracts.registry import live
from tracker_saver.records import RecordState, UploadInfo
from tracker_saver.registry.sqlite import SQLiteRegistry
from tracker_saver.slots import SlotAllocator


@pytest.fixture
def registry(tmp_path):
    return SQLiteRegistry(tmp_path / "r.db")


def save(alloc: SlotAllocator, filename: str, stream: str = "best_model") -> int:
    info = alloc(UploadInfo("p", "r", stream, filename, metadata={"ext": ".pt"}))
    alloc.bind(filename, f"id-{filename}")
    return info.slot


def test_remove_before_save_reuses_the_freed_slot(registry) -> None:
    alloc = SlotAllocator(registry, "p", "r")
    assert [save(alloc, "a.pt"), save(alloc, "b.pt")] == [0, 1]
    # Ignite (n_saved=2, full): remove the worst, then save the new one.
    assert alloc.remove("a.pt") == "id-a.pt"
    assert save(alloc, "c.pt") == 0
    assert alloc.remove("b.pt") == "id-b.pt"
    assert save(alloc, "d.pt") == 1


def test_resaving_the_same_filename_takes_its_own_slot_back(registry) -> None:
    alloc = SlotAllocator(registry, "p", "r")
    save(alloc, "a.pt")
    save(alloc, "b.pt")
    # Ignite finds the filename already in _saved: remove(it), then save(it) again.
    assert alloc.remove("b.pt") == "id-b.pt"
    assert save(alloc, "b.pt") == 1
    assert save(alloc, "c.pt") == 2


def test_remove_of_an_unknown_name_is_a_no_op(registry) -> None:
    alloc = SlotAllocator(registry, "p", "r")
    assert alloc.remove("never-saved.pt") is None
    assert save(alloc, "a.pt") == 0


def test_a_released_slot_is_used_next(registry) -> None:
    alloc = SlotAllocator(registry, "p", "r")
    info = alloc(UploadInfo("p", "r", "s", "x.pt", metadata={"ext": ".pt"}))
    alloc.release(info)
    assert save(alloc, "y.pt", stream="s") == info.slot == 0


def test_streams_have_separate_slots(registry) -> None:
    alloc = SlotAllocator(registry, "p", "r")
    assert save(alloc, "a.pt", "best_model") == 0
    assert save(alloc, "b.pt", "checkpoint") == 0


def test_inherited_records_are_reused_oldest_first_and_evicted(registry) -> None:
    old = [live(registry, f"best_model_{i}.pt", slot=i) for i in range(2)]
    alloc = SlotAllocator(registry, "p", "r")
    assert save(alloc, "new1.pt") == 0
    assert registry.get(old[0].id).state is RecordState.EVICTED
    assert registry.get(old[1].id).state is RecordState.LIVE
    assert save(alloc, "new2.pt") == 1
    assert save(alloc, "new3.pt") == 2


def test_adopted_records_are_never_overwritten(registry) -> None:
    old = [live(registry, f"best_model_{i}.pt", slot=i) for i in range(2)]
    alloc = SlotAllocator(registry, "p", "r")
    assert alloc.adopt("best_model", ["best_model_0.pt", "best_model_1.pt"]) == ["best_model_0.pt", "best_model_1.pt"]
    assert save(alloc, "new.pt") == 2  # Ignite's _saved not full yet: a new slot
    assert alloc.remove("best_model_0.pt") == old[0].id
    assert save(alloc, "newer.pt") == 0


def test_remove_of_a_record_from_an_earlier_process_adopts_it(registry) -> None:
    old = live(registry, "best_model_0.pt", slot=0)
    alloc = SlotAllocator(registry, "p", "r")
    assert alloc.remove("best_model_0.pt") == old.id
    assert save(alloc, "new.pt") == 0
