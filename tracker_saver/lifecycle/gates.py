"""Promotion gates: move an alias only to a record that passes a check against the alias's holder.

A gate is a :data:`~tracker_saver.registry.events.Check`; :func:`better` makes the common one.
:func:`move_alias` runs it as a compare-and-set: on a registry with ``history`` (SQLite) the
check and the move are one transaction there; elsewhere the holder is read again around the write.
"""

from __future__ import annotations

from tracker_saver.core.errors import RegistryError
from tracker_saver.core.query import is_number
from tracker_saver.core.records import Record
from tracker_saver.registry.base import Query, Registry
from tracker_saver.registry.events import Check, HistoryLog, refused

__all__ = ["Check", "better", "move_alias", "refused"]


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


def _holder(registry: Registry, project: str, alias: str) -> Record | None:
    found = registry.records.query(Query(project=project, alias=alias, limit=1))
    return found[0] if found else None


def _id(record: Record | None) -> str | None:
    return None if record is None else record.id
