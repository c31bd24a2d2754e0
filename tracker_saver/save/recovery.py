"""Start-up recovery: settle a stream's unfinished saves by what its slots really hold.

A save that died leaves a ``pending`` record, and maybe its slot's previous record
``evicted`` (a kill between DESIGN's steps 6 and 7). For each such slot, with the stream's claim
held (so every pending record is stale):

* a live record holds the slot: the commit point was never reached; pending records fail;
* else the slot's bytes match a pending record's staged sha256: the commit point was passed,
  so that record is promoted to ``live`` (others fail);
* else they match an evicted record: it is restored (``revived`` at start-up, ``live`` when a
  save in this process failed after its commit point was attempted); pending records fail.

Sizes are compared first; the object is hashed only when a size matches. The same code runs
after a failed save in this process, so no live record ever points at other bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tracker_saver.core.naming import key_problem, parse_slot_key, stream_path
from tracker_saver.core.records import LOADABLE, Record, RecordState, StreamId
from tracker_saver.registry.base import Registry, stream_query
from tracker_saver.storage.base import Staged, Storage

__all__ = ["Action", "Settled", "leftovers", "owner_of", "plan_slot", "settle_stream"]


@dataclass(frozen=True)
class Action:
    """One state change recovery made, for logs and reports."""

    record_id: str
    filename: str
    slot: int
    change: str  # "promoted", "restored" or "failed"

    def __str__(self) -> str:
        return f"{self.change} record {self.record_id} ({self.filename!r}, slot {self.slot})"


def owner_of(key: str, streams: Iterable[StreamId]) -> StreamId | None:
    """The stream among ``streams`` whose slot ``key`` is, by the one reading of a slot key; ``None`` if none.

    A stream named ``"a.slot1.pt"`` does not own the keys of a stream ``"a"``, nor the other way round.
    """
    parsed = parse_slot_key(key)
    if parsed is None:
        return None
    return next((s for s in streams if stream_path(s.project, s.run, s.stream) == parsed.stream_path), None)


def leftovers(storage: Storage, stream: StreamId, slot: int | None = None) -> list[Staged]:
    """The unfinished writes (temp files, open multipart uploads) to ``stream``'s slots, or to one ``slot``."""
    path = stream_path(stream.project, stream.run, stream.stream)
    found = []
    for item in storage.staged(path + ".slot"):
        parsed = parse_slot_key(item.key)
        if parsed is not None and parsed.stream_path == path and slot in (None, parsed.slot):
            found.append(item)
    return found


@dataclass(frozen=True)
class Settled:
    """What :func:`settle_stream` changed: records it settled, unfinished writes it removed."""

    actions: list[Action]
    removed: list[Staged]

    def lines(self) -> list[str]:
        """One line per change, for the log."""
        return [str(a) for a in self.actions] + [f"removed unfinished write {item.ref}" for item in self.removed]


def settle_stream(
    storage: Storage,
    registry: Registry,
    stream: StreamId,
    *,
    slot: int | None = None,
    restored: RecordState = RecordState.REVIVED,
) -> Settled:
    """Settle ``stream``'s unfinished saves (or one ``slot``'s), then remove its unfinished writes.

    The one place where unfinished writes are aborted: the caller holds the stream's claim, so
    every pending record is stale and nothing else writes the slots (a save's open, start-up
    recovery, a failed save's clean-up, repair). Each slot with a pending record (or ``slot``)
    is settled against the bytes it holds (:func:`plan_slot`); ``restored`` is the state an
    evicted record whose bytes the slot still holds gets back (``live`` after a failed save in
    this process, else ``revived``).
    """
    if slot is None:
        pending = registry.records.query(stream_query(stream, states=(RecordState.PENDING,)))
        slots = sorted({r.slot for r in pending if r.slot is not None})
    else:
        slots = [slot]
    actions: list[Action] = []
    for each in slots:
        actions += _settle_slot(storage, registry, stream, each, restored)
    removed = leftovers(storage, stream, slot)
    for item in removed:
        storage.abort_staged(item)
    return Settled(actions, removed)


def _settle_slot(
    storage: Storage, registry: Registry, stream: StreamId, slot: int, restored: RecordState
) -> list[Action]:
    """Settle one slot's pending and evicted records against the bytes the slot holds."""
    records = registry.records.query(stream_query(stream, slot=slot))
    plan = plan_slot(storage, records)
    for record, change in plan:
        if change == "promoted":
            assert record.sha256 is not None and record.size is not None and record.key is not None
            found = storage.stat(record.key)
            registry.records.make_live(
                record.id,
                sha256=record.sha256,
                size=record.size,
                fingerprint=found.fingerprint if found is not None else None,
            )
        elif change == "restored":
            registry.records.restore(record.id, restored)
        else:
            registry.records.fail(record.id, "its bytes never reached the slot (settled by recovery)")
    return [Action(record.id, record.filename, slot, change) for record, change in plan]


def plan_slot(storage: Storage, records: list[Record]) -> list[tuple[Record, str]]:
    """What recovery does to one slot's records (``promoted``, ``restored`` or ``failed``); changes nothing.

    ``fsck`` reports this plan and ``repair`` runs it through :func:`settle_stream`. A record whose
    key is not its stream's slot key (:func:`~tracker_saver.core.naming.key_problem`: someone else
    wrote it) is left out: its key is never read.
    """
    records = [r for r in records if key_problem(r.project, r.run, r.stream, r.slot, r.key) is None]
    newest_first = sorted(records, key=lambda r: r.created_at, reverse=True)
    pending = [r for r in newest_first if r.state is RecordState.PENDING]
    live = [r for r in newest_first if r.state in LOADABLE]
    evicted = [r for r in newest_first if r.state is RecordState.EVICTED]
    key = next((r.key for r in newest_first if r.key), None)
    if key is None or (not pending and (live or not evicted)):
        return []
    found = storage.stat(key)
    digest: list[str] = []

    def holds(record: Record) -> bool:
        if found is None or record.sha256 is None or record.size != found.size:
            return False
        if not digest:
            digest.append(storage.digest(key)[1])
        return digest[0] == record.sha256

    plan: list[tuple[Record, str]] = []
    winner: Record | None = None
    for record in pending:
        if not live and winner is None and holds(record):
            winner = record
            plan.append((record, "promoted"))
        else:
            plan.append((record, "failed"))
    if not live and winner is None:
        restorable = next((r for r in evicted if holds(r)), None)
        if restorable is not None:
            plan.append((restorable, "restored"))
    return plan
