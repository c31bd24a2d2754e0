"""The slot allocator: which slot each save takes, from Ignite's calls and the stream's live records.

A save takes, in order (DESIGN, "Slots across restarts"):

1. the slot of a record Ignite removed (its record stays live until the save replaces it);
2. else the slot of an *inherited* record: live, from an earlier process, and kept by nothing
   (the one with the same filename first, so a stream never has two live records of one name;
   then the oldest);
3. else a new slot, the smallest index no live record holds.

A record is *kept* while Ignite's ``Checkpoint`` holds its filename in ``_saved``: the allocator
learns that from the saves it made, from :meth:`SlotAllocator.adopt` (the resume helper, and
the ``checkpointer`` entry of every checkpoint written with ``include_self=True``, which is how
``Checkpoint.load_objects`` restores show up) and loses it on Ignite's ``remove``. A kept record's
slot is never taken by another save, so a record that Ignite keeps is never overwritten.

What Ignite said (kept, removed) lives here; which record is live in which slot is a cache of
the registry that the pipeline reloads with :meth:`SlotAllocator.load` after any doubt. No I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from tracker_saver.core.records import Record, StreamId

__all__ = ["Choice", "SlotAllocator"]


@dataclass(frozen=True)
class Choice:
    """The slot one save writes, and the live record whose bytes it replaces (if any)."""

    slot: int
    replaces: Record | None
    removed: str | None = None  # the filename Ignite removed, when the slot came from a remove


@dataclass
class _Stream:
    live: dict[int, Record] | None = None  # slot -> live record; None until loaded
    kept: set[str] = field(default_factory=set)  # filenames Ignite keeps
    removed: list[str] = field(default_factory=list)  # removed by Ignite, oldest first, still live
    busy: set[int] = field(default_factory=set)  # slots being written


class SlotAllocator:
    """Chooses each save's slot; knows which records Ignite keeps and which it removed.

    Examples:
        >>> alloc = SlotAllocator()
        >>> s = StreamId("file:///out", "p", "r", "checkpoint")
        >>> alloc.load(s, [])
        >>> choice = alloc.choose(s, "checkpoint_1.pt")
        >>> choice.slot, choice.replaces
        (0, None)
    """

    def __init__(self) -> None:
        self._streams: dict[StreamId, _Stream] = {}
        self._lock = threading.Lock()

    def _get(self, stream: StreamId) -> _Stream:
        return self._streams.setdefault(stream, _Stream())

    def loaded(self, stream: StreamId) -> bool:
        """Whether the stream's live records are cached."""
        with self._lock:
            return self._get(stream).live is not None

    def load(self, stream: StreamId, live: Iterable[Record]) -> None:
        """Cache the stream's live records (read from the registry)."""
        with self._lock:
            state = self._get(stream)
            state.live = {r.slot: r for r in live if r.slot is not None}
            names = {r.filename for r in state.live.values()}
            state.removed = [f for f in state.removed if f in names]

    def forget(self, stream: StreamId) -> None:
        """Drop the cached records (the registry may say otherwise now); Ignite's view stays."""
        with self._lock:
            self._get(stream).live = None

    def adopt(self, stream: StreamId, filenames: Iterable[str]) -> None:
        """Ignite keeps these filenames (a restored ``_saved``): their slots are not for reuse."""
        with self._lock:
            self._get(stream).kept.update(filenames)

    def remove(self, filename: str) -> bool:
        """Ignite removed ``filename``: its slot is the next one its stream replaces.

        Ignite calls ``remove`` *before* the save that reuses the slot, and may name a file
        whose save never finished (it updates ``_saved`` before calling the handler): a name
        no loaded stream holds live is ignored, and ``False`` tells the caller to look further.
        """
        with self._lock:
            for state in self._streams.values():
                state.kept.discard(filename)
                if any(r.filename == filename for r in (state.live or {}).values()):
                    if filename not in state.removed:
                        state.removed.append(filename)
                    return True
        return False

    def choose(self, stream: StreamId, filename: str) -> Choice:
        """Pick the slot of the save of ``filename`` into a loaded ``stream``; mark it busy."""
        with self._lock:
            state = self._get(stream)
            live = state.live
            assert live is not None, "load the stream first"
            by_name = {r.filename: r for r in live.values() if r.slot not in state.busy}
            choice: Choice | None = None
            while state.removed and choice is None:
                name = state.removed.pop(0)
                if name in by_name:
                    choice = Choice(by_name[name].slot, by_name[name], removed=name)  # type: ignore[arg-type]
            if choice is None:
                # A fresh Checkpoint in an old run: Ignite will never remove these records,
                # so reuse their slots oldest first instead of growing past n_saved.
                inherited = [r for r in by_name.values() if r.filename not in state.kept]
                if inherited:
                    oldest = min(inherited, key=lambda r: (r.filename != filename, r.created_at, r.slot))
                    choice = Choice(oldest.slot, oldest)  # type: ignore[arg-type]
            if choice is None:
                taken = set(live) | state.busy
                choice = Choice(next(k for k in range(len(taken) + 1) if k not in taken), None)
            state.busy.add(choice.slot)
            return choice

    def committed(self, stream: StreamId, choice: Choice, record: Record) -> None:
        """The save of ``choice`` made ``record`` live: Ignite keeps it now."""
        with self._lock:
            state = self._get(stream)
            state.busy.discard(choice.slot)
            state.kept.add(record.filename)
            if state.live is not None:
                state.live[choice.slot] = record

    def abandon(self, stream: StreamId, choice: Choice) -> None:
        """The save of ``choice`` was skipped or failed: the slot is as it was."""
        with self._lock:
            state = self._get(stream)
            state.busy.discard(choice.slot)
            if choice.removed is not None:
                state.removed.insert(0, choice.removed)
