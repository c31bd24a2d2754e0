"""A registry's history: its events, old records deleted by a rule, alias moves past a check.

The SQLite registry keeps a :class:`HistoryLog` (its ``history`` attribute): every alias move,
pin, unpin, rename and record becoming live is an :class:`Event`, written in the transaction of
the change; :meth:`HistoryLog.prune` deletes old evicted and failed records by a
:class:`Retention` rule; :meth:`HistoryLog.move_alias` checks and moves an alias in one
transaction. ClearML and MLflow keep no events and cannot delete a slot record through the
registry seam (:func:`history_of` says so); :func:`move_alias` gates an alias move on every
registry (a compare-and-set without transactions there).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tracker_saver.core.errors import ConfigError, PromotionRefusedError, RegistryError
from tracker_saver.core.jsonout import dumps
from tracker_saver.core.query import is_number
from tracker_saver.core.records import Record, RecordState, StreamId
from tracker_saver.registry.base import Query, Registry

__all__ = [
    "EVENT_TYPES",
    "Check",
    "DeadEvent",
    "Event",
    "HistoryLog",
    "Outbox",
    "Pruned",
    "Retention",
    "better",
    "follow",
    "history_of",
    "move_alias",
    "parse_age",
]

#: What an event says happened. ``record.live``: a save committed, or recovery made a record
#: live or revived it.
EVENT_TYPES = ("record.live", "record.pinned", "record.unpinned", "record.renamed", "alias.moved", "alias.removed")
#: A promotion gate: the record and the alias's holder (``None``: the alias names nothing) →
#: why the move is refused, or ``None`` to allow it.
Check = Callable[[Record, "Record | None"], "str | None"]
#: Seconds in each unit an age may be written in (``parse_age``).
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


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
class Retention:
    """Which history records a prune deletes: beyond the newest ``keep_last`` of their stream, and
    created more than ``older_than`` seconds before ``now``; both when both are given.

    Only evicted and failed records go, never one that was renamed or is named by an alias, and
    never the newest evicted record of a slot (recovery revives it when the save that evicted it
    died). ``keep_last`` counts every evicted and failed record of the stream, newest first.

    Examples:
        >>> Retention(keep_last=1000).keep_last
        1000
        >>> Retention()
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: a prune needs keep_last or older_than (or both), e.g. keep_last=1000 or older_than=30 * 86400
    """

    keep_last: int | None = None
    older_than: float | None = None
    now: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.keep_last is None and self.older_than is None:
            raise ConfigError(
                "a prune needs keep_last or older_than (or both), e.g. keep_last=1000 or older_than=30 * 86400"
            )
        keep = self.keep_last
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 0):
            raise ConfigError(f"keep_last must be a whole number, 0 or more, got {keep!r}: e.g. keep_last=1000")
        age = self.older_than
        if age is not None and (isinstance(age, bool) or not isinstance(age, (int, float)) or not age >= 0):
            raise ConfigError(f"older_than must be seconds, 0 or more, got {age!r}: e.g. older_than=30 * 86400")

    @property
    def cutoff(self) -> float:
        """Records created before this time may go (``inf`` without ``older_than``)."""
        return math.inf if self.older_than is None else self.now - self.older_than


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


@runtime_checkable
class HistoryLog(Protocol):
    """A registry's events, history deletion and gated alias moves (the SQLite registry's ``history``)."""

    def events(self, *, after: int = 0, project: str | None = None, limit: int | None = None) -> list[Event]:
        """Events with ``seq`` above ``after``, oldest first (of ``project`` only, when given)."""

    def prune(self, scope: Query, rule: Retention, *, dry_run: bool = False, batch: int = 500) -> list[Pruned]:
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


def parse_age(text: str) -> float:
    """An age as seconds: a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w`` (``30d``, ``12h``).

    Examples:
        >>> parse_age("30d"), parse_age("90m")
        (2592000.0, 5400.0)
        >>> parse_age("30 days")
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: age '30 days' is not understood: write a number and a unit (s, m, h, d or w), e.g. 30d or 12h
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhdw])\s*", text)
    if found is None:
        raise ConfigError(
            f"age {text!r} is not understood: write a number and a unit (s, m, h, d or w), e.g. 30d or 12h"
        )
    return float(found[1]) * _UNITS[found[2]]


def follow(log: HistoryLog, *, wait: Callable[[], bool], after: int = 0, project: str | None = None) -> Iterator[Event]:
    """Every event after ``after``, then each new one as it comes: read, then ``wait()`` (``False``: stop).

    ``wait`` is the clock: the CLI's sleeps a second; a test's adds events or stops, and never sleeps.

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> list(follow(open_registry(":memory:").history, wait=lambda: False))
        []
    """
    while True:
        for event in log.events(after=after, project=project):
            after = event.seq
            yield event
        if not wait():
            return


def better(key: str, *, lower: bool = False) -> Check:
    """A gate: the record's ``key`` must beat the holder's (higher wins; ``lower=True``: lower wins).

    A record without the key is refused; so is a move over a holder without it (nothing to
    compare: move it without a gate); an alias that names nothing is free.

    Examples:
        >>> from tracker_saver.core.records import Record, RecordState
        >>> def rec(i, score):
        ...     return Record(i, "p", "r", "s", "f.pt", "f.pt", RecordState.LIVE, 0, "k", "u", metadata={"score": score})
        >>> better("score")(rec("2", 0.91), rec("1", 0.93))
        "has score 0.91, which does not beat score 0.93 of record 1 ('f.pt')"
        >>> better("score")(rec("2", 0.95), rec("1", 0.93)) is None
        True
    """
    tail = " (lower wins)" if lower else ""

    def check(record: Record, holder: Record | None) -> str | None:
        mine = record.metadata.get(key)
        if not is_number(mine):
            return f"has no numeric {key!r} to compare (the gate needs one)"
        if holder is None:
            return None
        theirs = holder.metadata.get(key)
        if not is_number(theirs):
            return (
                f"cannot be compared: record {holder.id} ({holder.name!r}), which the alias names, has no numeric "
                f"{key!r}; move the alias without the gate"
            )
        assert isinstance(mine, (int, float)) and isinstance(theirs, (int, float))
        wins = mine < theirs if lower else mine > theirs
        if wins:
            return None
        return f"has {key} {mine:g}, which does not beat {key} {theirs:g} of record {holder.id} ({holder.name!r}){tail}"

    return check


def move_alias(registry: Registry, record_id: str, alias: str, *, check: Check) -> Record:
    """Point ``alias`` at the record only if ``check(record, holder)`` allows it, as a compare-and-set.

    On SQLite the check and the move are one transaction. Without transactions (ClearML, MLflow)
    this reads the holder, checks, reads it again right before the write and once after: a move by
    someone else in between is seen and the check runs again; two writes within the same few
    milliseconds can still both pass there.

    Raises:
        PromotionRefusedError: ``check`` refused (the alias did not move); its message names both records.
        RegistryError: the alias kept moving under this call (others are moving it: try again).

    Examples:
        >>> from tracker_saver.registry import open_registry
        >>> move_alias(open_registry(":memory:"), "1", "production", check=better("score"))
        Traceback (most recent call last):
        tracker_saver.core.errors.RecordNotFoundError: record 1 does not exist in sqlite://:memory:: see `tracker-saver models list` for ids
    """
    found = getattr(registry, "history", None)
    if isinstance(found, HistoryLog):
        return found.move_alias(record_id, alias, check=check)
    for _ in range(3):
        record = registry.records.get(record_id)
        holder = _holder(registry, record.project, alias)
        if holder is not None and holder.id == record.id:
            return record
        reason = check(record, holder)
        if reason is not None:
            raise refused(record, alias, reason)
        if _id(_holder(registry, record.project, alias)) != _id(holder):
            continue  # moved while we checked: check against the new holder
        moved = registry.labels.set_alias(record_id, alias)
        if _id(_holder(registry, record.project, alias)) == record_id:
            return moved
    raise RegistryError(
        f"alias {alias!r} kept moving while record {record_id} was promoted: someone else is moving it; try again",
        record_id=record_id,
    )


def refused(record: Record, alias: str, reason: str) -> PromotionRefusedError:
    """The error of a gate that refused to move ``alias`` to ``record``."""
    return PromotionRefusedError(
        f"alias {record.project}@{alias} stays where it is: record {record.id} ({record.name!r}) {reason}",
        record_id=record.id,
        reason=reason,
    )


def _holder(registry: Registry, project: str, alias: str) -> Record | None:
    found = registry.records.query(Query(project=project, alias=alias, limit=1))
    return found[0] if found else None


def _id(record: Record | None) -> str | None:
    return None if record is None else record.id
