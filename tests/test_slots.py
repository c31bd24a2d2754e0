"""The slot allocator against Ignite's exact call sequences: pure logic, no storage or registry."""

from __future__ import annotations

import itertools

from tracker_saver.core.records import Record, RecordState, StreamId
from tracker_saver.save.slots import SlotAllocator

BEST = StreamId("file:///out", "p", "r", "best_model")
LAST = StreamId("file:///out", "p", "r", "checkpoint")
_ids = itertools.count(1)


def record(filename: str, slot: int, stream: StreamId = BEST) -> Record:
    n = next(_ids)
    return Record(str(n), stream.project, stream.run, stream.stream, filename, filename, RecordState.LIVE,
                  slot, f"k{slot}", f"u{slot}", created_at=float(n), output_uri=stream.output_uri)  # fmt: skip


def save(alloc: SlotAllocator, filename: str, stream: StreamId = BEST) -> int:
    """What the pipeline does for one successful save."""
    choice = alloc.choose(stream, filename)
    alloc.committed(stream, choice, record(filename, choice.slot, stream))
    return choice.slot


def test_remove_before_save_reuses_the_removed_slot() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [])
    assert [save(alloc, "a.pt"), save(alloc, "b.pt")] == [0, 1]
    # Ignite (n_saved=2, full): remove the worst, then save the new one.
    assert alloc.remove("a.pt")
    choice = alloc.choose(BEST, "new.pt")
    assert choice.slot == 0 and choice.replaces is not None and choice.replaces.filename == "a.pt"


def test_resaving_the_same_filename_takes_its_own_slot_back() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [])
    save(alloc, "a.pt")
    save(alloc, "b.pt")
    # Ignite finds the filename already in _saved: remove(it), then save(it) again.
    assert alloc.remove("b.pt")
    assert save(alloc, "b.pt") == 1
    assert save(alloc, "c.pt") == 2


def test_remove_of_an_unknown_name_says_so_and_changes_nothing() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [])
    assert not alloc.remove("never-saved.pt")
    assert save(alloc, "a.pt") == 0


def test_an_abandoned_save_puts_the_removed_slot_back_first() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [])
    save(alloc, "a.pt")
    save(alloc, "b.pt")
    alloc.remove("a.pt")
    failed = alloc.choose(BEST, "new.pt")
    alloc.abandon(BEST, failed)
    retry = alloc.choose(BEST, "new.pt")
    assert retry.slot == failed.slot == 0 and retry.replaces is not None and retry.replaces.filename == "a.pt"


def test_streams_have_separate_slots() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [])
    alloc.load(LAST, [])
    assert save(alloc, "a.pt", BEST) == 0
    assert save(alloc, "b.pt", LAST) == 0


def test_the_same_names_at_another_output_uri_are_another_stream() -> None:
    other = StreamId("file:///elsewhere", "p", "r", "best_model")
    alloc = SlotAllocator()
    alloc.load(BEST, [record("old.pt", 0, BEST)])
    alloc.load(other, [])
    assert alloc.choose(other, "new.pt").replaces is None


def test_inherited_records_are_reused_oldest_first() -> None:
    old = [record(f"best_model_{i}.pt", i) for i in range(2)]
    alloc = SlotAllocator()
    alloc.load(BEST, old)
    first = alloc.choose(BEST, "new.pt")
    assert (first.slot, first.replaces) == (0, old[0])
    alloc.committed(BEST, first, record("new1.pt", 0))
    assert save(alloc, "new2.pt") == 1
    assert save(alloc, "new3.pt") == 2


def test_adopted_records_are_never_overwritten() -> None:
    old = [record(f"best_model_{i}.pt", i) for i in range(2)]
    alloc = SlotAllocator()
    alloc.load(BEST, old)
    alloc.adopt(BEST, ["best_model_0.pt", "best_model_1.pt"])
    assert save(alloc, "new.pt") == 2  # Ignite's _saved not full yet: a new slot
    assert alloc.remove("best_model_0.pt")
    assert save(alloc, "newer.pt") == 0


def test_a_busy_slot_is_never_chosen_twice() -> None:
    alloc = SlotAllocator()
    alloc.load(BEST, [record("a.pt", 0)])
    first, second = alloc.choose(BEST, "b.pt"), alloc.choose(BEST, "c.pt")
    assert first.slot == 0 and second.slot == 1 and second.replaces is None


def test_an_inherited_record_of_the_same_name_is_replaced_first() -> None:
    old = [record(f"checkpoint_{i}.pt", i, LAST) for i in (1, 2)]
    alloc = SlotAllocator()
    alloc.load(LAST, old)
    assert alloc.choose(LAST, "checkpoint_2.pt").replaces == old[1]


def test_reloading_keeps_what_ignite_said() -> None:
    old = [record(f"best_model_{i}.pt", i) for i in range(3)]
    alloc = SlotAllocator()
    alloc.load(BEST, old)
    alloc.adopt(BEST, ["best_model_1.pt", "best_model_2.pt"])
    alloc.remove("best_model_1.pt")
    alloc.forget(BEST)
    assert not alloc.loaded(BEST)
    alloc.load(BEST, old)
    assert alloc.choose(BEST, "new.pt").replaces == old[1]  # removed first
    assert alloc.choose(BEST, "new.pt").replaces == old[0]  # then the inherited one; slot 2 stays kept
    assert alloc.choose(BEST, "new.pt").slot == 3
