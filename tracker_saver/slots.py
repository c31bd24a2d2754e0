"""The slot allocator: the first pre-upload callback; it rebuilds each stream from the registry.

A save takes, in order: a slot freed by Ignite's ``remove``; else the slot of an *inherited*
record (live in the registry from an earlier process, not adopted); else a new slot.
A record is *adopted* when a restored ``Checkpoint`` still keeps it: ``resume()`` adopts the
records it puts back into each handler's ``_saved``, and a ``remove`` for a record this process
never saved adopts (and evicts) it. An adopted record's slot is never taken for another save
until Ignite removes it, so a record that Ignite keeps is never overwritten (invariant 4).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from tracker_saver.naming import slot_key
from tracker_saver.records import Record, RecordState, UploadInfo
from tracker_saver.registry.base import Query, Registry

__all__ = ["SlotAllocator"]

LOADABLE = (RecordState.LIVE, RecordState.REVIVED)


@dataclass
class _Held:
    stream: str
    slot: int
    record_id: str | None  # None between allocation and create_pending


@dataclass
class _Stream:
    free: list[int] = field(default_factory=list)
    inherited: list[Record] = field(default_factory=list)
    used: set[int] = field(default_factory=set)


class SlotAllocator:
    """Chooses each checkpoint's slot and key; knows which record holds which slot.

    Args:
        registry: where inherited records are found and evicted.
        project: the run's project.
        run: the run.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> alloc = SlotAllocator(open_registry(":memory:"), "p", "r")
        >>> info = alloc(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt", metadata={"ext": ".pt"}))
        >>> info.slot, info.key
        (0, 'p/r/checkpoint.slot0.pt')
    """

    def __init__(self, registry: Registry, project: str, run: str) -> None:
        self.registry = registry
        self.project = project
        self.run = run
        self._streams: dict[str, _Stream] = {}
        self._held: dict[str, _Held] = {}  # Ignite filename -> what holds its slot
        self._lock = threading.Lock()

    def _stream(self, name: str) -> _Stream:
        stream = self._streams.get(name)
        if stream is None:
            live = self.registry.query(Query(project=self.project, run=self.run, stream=name, states=LOADABLE))
            stream = _Stream(inherited=[r for r in live if r.slot is not None])
            stream.used = {r.slot for r in stream.inherited if r.slot is not None}
            self._streams[name] = stream
        return stream

    def __call__(self, info: UploadInfo) -> UploadInfo:
        """Pre-upload callback: set ``info.slot`` and ``info.key``."""
        with self._lock:
            stream = self._stream(info.stream)
            if stream.free:
                slot = stream.free.pop(0)
            elif stream.inherited:
                # A fresh Checkpoint in an old run: Ignite will never remove these records,
                # so reuse their slots oldest first instead of growing past n_saved.
                oldest = stream.inherited.pop(0)
                self.registry.evict(oldest.id)
                slot = oldest.slot  # type: ignore[assignment]
            else:
                slot = next(k for k in range(len(stream.used) + 1) if k not in stream.used)
            stream.used.add(slot)
            self._held[info.filename] = _Held(info.stream, slot, None)
        info.slot = slot
        info.key = slot_key(self.project, self.run, info.stream, slot, str(info.metadata.get("ext") or ""))
        return info

    def bind(self, filename: str, record_id: str) -> None:
        """Remember the record now holding ``filename``'s slot."""
        with self._lock:
            self._held[filename].record_id = record_id

    def release(self, info: UploadInfo) -> None:
        """Give back the slot of a save that was skipped or failed: it is free again."""
        with self._lock:
            held = self._held.pop(info.filename, None)
            if held is not None:
                self._streams[held.stream].free.insert(0, held.slot)

    def adopt(self, stream_name: str, filenames: Iterable[str]) -> list[str]:
        """Mark inherited records of a stream as kept by a restored ``Checkpoint``; return them."""
        wanted = set(filenames)
        with self._lock:
            stream = self._stream(stream_name)
            adopted = [r for r in stream.inherited if r.filename in wanted]
            stream.inherited = [r for r in stream.inherited if r.filename not in wanted]
            for record in adopted:
                self._held[record.filename] = _Held(stream_name, record.slot, record.id)  # type: ignore[arg-type]
        return [r.filename for r in adopted]

    def remove(self, filename: str) -> str | None:
        """Free ``filename``'s slot; return the id of the record to evict, if any.

        Ignite calls ``remove`` *before* the save that reuses the slot, and may name a file
        whose save never finished (it updates ``_saved`` before calling the handler): an unknown
        name is harmless and returns ``None``.
        """
        with self._lock:
            held = self._held.pop(filename, None)
            if held is None:
                held = self._adopt_by_filename(filename)
            if held is None:
                return None
            self._streams[held.stream].free.append(held.slot)
            return held.record_id

    def _adopt_by_filename(self, filename: str) -> _Held | None:
        # A Checkpoint whose _saved was restored without resume(): Ignite removes a record
        # from an earlier process. Find it among the inherited ones.
        for name, stream in self._streams.items():
            for record in stream.inherited:
                if record.filename == filename:
                    stream.inherited.remove(record)
                    return _Held(name, record.slot, record.id)  # type: ignore[arg-type]
        found = self.registry.query(Query(project=self.project, run=self.run, filename=filename, states=LOADABLE))
        if not found or found[-1].slot is None:
            return None
        record = found[-1]
        stream = self._stream(record.stream)
        stream.inherited = [r for r in stream.inherited if r.id != record.id]
        return _Held(record.stream, record.slot, record.id)  # type: ignore[arg-type]
