"""The registry's history part: what the lifecycle asks a registry to do inside its transactions.

A registry that keeps history exposes a :class:`HistoryLog` as its ``history`` attribute (the
SQLite registry: :mod:`tracker_saver.registry.sqlite_history`). Only what must share a
transaction with the change it is about lives behind it: an :class:`Event` written with each
alias move, pin, unpin, rename and record becoming live; a gated alias move's check-and-move;
a prune's deletes (by a :class:`PruneRule`); a webhook outbox's bookkeeping. What the lifecycle
does with them (archive keeps, retention rules, gates, the webhook relay) is
:mod:`tracker_saver.lifecycle`'s. ClearML and MLflow have no ``history``: they have no
transaction to write an event with its change, and the registry seam deletes only pinned
records there (:func:`history_of` says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tracker_saver.core.errors import PromotionRefusedError, RegistryError
from tracker_saver.core.jsonout import dumps
from tracker_saver.core.records import Record, RecordState, StreamId
from tracker_saver.registry.base import Query, Registry

__all__ = [
    "EVENT_TYPES",
    "Check",
    "DeadEvent",
    "Event",
    "HistoryLog",
    "Outbox",
    "PruneRule",
    "Pruned",
    "history_of",
    "refused",
]

#: What an event says happened. ``record.live``: a save committed, or recovery made a record
#: live or revived it.
EVENT_TYPES = ("record.live", "record.pinned", "record.unpinned", "record.renamed", "alias.moved", "alias.removed")
#: A promotion gate: the record and the alias's holder (``None``: the alias names nothing) →
#: why the move is refused, or ``None`` to allow it.
Check = Callable[[Record, "Record | None"], "str | None"]


@dataclass(frozen=True)
class Event:
    """One change a registry recorded, in the transaction that made it.

    Attributes:
        id: ``evt_`` and 32 hex digits, unique across registries: what a receiver deduplicates by.
        seq: the order of events within this registry (1, 2, …).
        type: one of :data:`EVENT_TYPES`.
        time: when, in seconds since the epoch.
        project: the project of the record (or alias) it is about.
        record_id: the record it is about (an alias move: the new holder; a removal: the old one).
        alias: the alias, for ``alias.*`` events.
        before: what was there before (``None``: nothing), e.g. ``{"record_id": "3", "name": …}``.
        after: what is there after (``None``: nothing).

    Examples:
        >>> e = Event("evt_1", 1, "record.renamed", 0.0, "p", "3", None, {"name": "a"}, {"name": "b"})
        >>> e.body()
        b'{"after":{"name":"b"},"alias":null,"before":{"name":"a"},"id":"evt_1","project":"p","record_id":"3","seq":1,"time":0.0,"type":"record.renamed"}'
    """

    id: str
    seq: int
    type: str
    time: float
    project: str
    record_id: str | None
    alias: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready values (what ``tracker-saver events --json`` prints)."""
        return {
            "id": self.id,
            "seq": self.seq,
            "type": self.type,
            "time": self.time,
            "project": self.project,
            "record_id": self.record_id,
            "alias": self.alias,
            "before": self.before,
            "after": self.after,
        }

    def body(self) -> bytes:
        """The event as compact standard JSON, keys sorted, UTF-8 (a score of ``±inf``: ``"Infinity"``)."""
        return dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Pruned:
    """A record a prune deleted (or, in a dry run, would delete)."""

    record_id: str
    stream: StreamId
    state: RecordState
    created_at: float
    filename: str


@dataclass(frozen=True)
class Outbox:
    """A webhook's undelivered events, oldest first, and how delivering the first one went so far.

    Attributes:
        events: the events it has not taken yet, in order (up to the limit asked).
        attempts: failed tries of the first of them.
        due: when the next try may be (seconds since the epoch; 0: now).
        error: why the last try failed.
    """

    events: list[Event]
    attempts: int = 0
    due: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class DeadEvent:
    """An event a webhook's receiver refused, set aside so that the events behind it flow.

    Attributes:
        event: the event.
        endpoint: the webhook's outbox (a hash of its URL).
        shown: the webhook's scheme, host and port.
        error: its last try's answer (``HTTP 400``).
        attempts: the tries it failed.
        time: when it was set aside, in seconds since the epoch.
    """

    event: Event
    endpoint: str
    shown: str
    error: str
    attempts: int
    time: float

    def to_dict(self) -> dict[str, Any]:
        """What ``tracker-saver events --dead --json`` prints: the event and why it was set aside."""
        why = {"webhook": self.shown, "error": self.error, "attempts": self.attempts, "set_aside": self.time}
        return {"event": self.event.to_dict(), **why}


class PruneRule(Protocol):
    """Which history records a prune deletes (:class:`tracker_saver.lifecycle.retention.Retention` is one)."""

    @property
    def keep_last(self) -> int | None:
        """Keep the newest this many evicted and failed records of each stream (``None``: no such limit)."""

    @property
    def cutoff(self) -> float:
        """Delete only records created before this time (seconds since the epoch; ``inf``: no age limit)."""


@runtime_checkable
class HistoryLog(Protocol):
    """What a registry does for the lifecycle in its own transactions (the SQLite registry's ``history``)."""

    def events(self, *, after: int = 0, project: str | None = None, limit: int | None = None) -> list[Event]:
        """Events with ``seq`` above ``after``, oldest first (of ``project`` only, when given)."""

    def prune(self, scope: Query, rule: PruneRule, *, dry_run: bool = False, batch: int = 500) -> list[Pruned]:
        """Delete what ``rule`` names in ``scope``'s streams, ``batch`` records a transaction; oldest first."""

    def move_alias(self, record_id: str, alias: str, *, check: Check) -> Record:
        """Check the record against the alias's holder and move the alias, in one transaction."""

    def outbox(self, endpoint: str, shown: str, *, limit: int = 100) -> Outbox:
        """The outbox of webhook ``endpoint`` (a hash of its URL; ``shown``: its host), made the first time."""

    def delivered(self, endpoint: str, seq: int) -> None:
        """Events up to ``seq`` reached ``endpoint``."""

    def failed(self, endpoint: str, *, due: float, error: str) -> None:
        """The first event of ``endpoint``'s outbox did not get through; try again at ``due``."""

    def set_aside(self, endpoint: str, seq: int, *, error: str, attempts: int) -> None:
        """``endpoint``'s receiver refused event ``seq``: out of its outbox, into its dead letters."""

    def dead(self, endpoint: str | None = None) -> list[DeadEvent]:
        """Events set aside (for ``endpoint`` only, when given), oldest first."""

    def resent(self, endpoint: str, seq: int) -> None:
        """Dead event ``seq`` reached ``endpoint`` when sent again: out of its dead letters."""


def history_of(registry: Registry, what: str) -> HistoryLog:
    """The registry's :class:`HistoryLog`, or an error saying that ``what`` (``"tracker-saver events"``)
    needs the SQLite registry.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> history_of(open_registry(":memory:"), "tracker-saver events").events()
        []
    """
    found = getattr(registry, "history", None)
    if isinstance(found, HistoryLog):
        return found
    raise RegistryError(
        f"{what} is not available on {registry.uri}: only the SQLite registry keeps events and deletes old records "
        "(ClearML and MLflow have no transaction to write an event with its change, and the registry seam deletes "
        "only pinned records there); use a SQLite registry (--registry PATH.db)"
    )


def refused(record: Record, alias: str, reason: str) -> PromotionRefusedError:
    """The error of a gate that refused to move ``alias`` to ``record``."""
    return PromotionRefusedError(
        f"alias {record.project}@{alias} stays where it is: record {record.id} ({record.name!r}) {reason}",
        record_id=record.id,
        reason=reason,
    )
