"""Aliases that keep what they name: an alias set on a slot record goes on a pinned copy of it.

A slot record is evicted when its slot is reused, so an alias left on it would soon name
nothing loadable. Setting an alias on a live (or revived) slot record therefore pins the
checkpoint first (:func:`~tracker_saver.save.keep.keep_copy`, ``kept_by="alias <name>"``) and
sets the alias on the pinned record; an alias on a pinned record is just set. Removing the last
alias of such a copy keeps the copy: deleting bytes is a separate, explicit ``unpin``. A gated
move (``check``, a promotion gate) checks the record named before anything is copied, so a
refused gate pins nothing; the move itself is :func:`~tracker_saver.registry.history.move_alias`'s
compare-and-set.

Examples:
    >>> from tracker_saver.core.records import Record, RecordState
    >>> slot = Record("7", "p", "r", "s", "s_3.pt", "s_3.pt", RecordState.LIVE, 0, "p/r/s.slot0.pt", "file:///o")
    >>> pin = Record("9", "p", "r", "s", "s_3.pt", "s_3.pt", RecordState.PINNED, None, "p/r/+pinned/9f2c-s_3.pt",
    ...              "file:///o", aliases=("production",))
    >>> alias_note(slot, pin, "production")
    "record 7 ('s_3.pt') pinned as record 9, alias p@production now on record 9: later saves never evict it"
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from tracker_saver.core.errors import PromotionRefusedError, RecordNotFoundError
from tracker_saver.core.records import ALIAS_PATTERN, LOADABLE, Record, RecordState, check_alias
from tracker_saver.find import RegistryArg
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.history import Check, move_alias, refused
from tracker_saver.registry.shared import shared_registry
from tracker_saver.save.keep import KEPT_BY, alias_reason, drop_pin, is_archived, keep_copy, kept_for_alias
from tracker_saver.save.locate import locate

__all__ = ["alias_note", "drop_alias", "keep_alias", "unalias_note"]


def keep_alias(
    record_id: str | int,
    alias: str,
    *,
    registry: RegistryArg = None,
    storage_options: Mapping[str, Any] | None = None,
    check: Check | None = None,
) -> Record:
    """Point ``alias`` at the record, pinning it first when it is a slot record; returns the record it now names.

    A live or revived slot record is copied to a pin key (server-side on S3, verified) unless a
    pin of the same record exists; the alias goes on that pinned record, whose ``pinned_from`` is
    the slot record. A pinned record gets the alias as it is. With ``check``, the record named is
    checked against the alias's holder first, and the move is a compare-and-set; a copy made for a
    move that someone else's move then beat is deleted again.

    Raises:
        ConfigError: a derived or malformed alias; nothing is copied.
        RegistryError: the record is not loadable (evicted, failed, pending).
        IntegrityError: the slot was overwritten while it was copied; nothing is aliased.
        PromotionRefusedError: ``check`` refused; nothing is copied, the alias stays where it is.
    """
    check_alias(alias)
    reg = shared_registry(registry, create=False)
    source = reg.records.get(str(record_id))
    if check is not None:
        _gate(reg, source, alias, check)
    if source.state not in LOADABLE or source.slot is None:
        return (
            reg.labels.set_alias(source.id, alias) if check is None else move_alias(reg, source.id, alias, check=check)
        )
    storage, _ = locate(source, storage_options=storage_options)
    before = {
        r.id for r in reg.records.query(Query(project=source.project, run=source.run, states=(RecordState.PINNED,)))
    }
    target = keep_copy(storage, reg, source, extra={KEPT_BY: alias_reason(alias)})
    if check is None:
        return reg.labels.set_alias(target.id, alias)
    try:
        return move_alias(reg, target.id, alias, check=check)
    except PromotionRefusedError:
        if target.id not in before:  # the copy this move made, unless another alias went on it meanwhile
            with contextlib.suppress(RecordNotFoundError):
                drop_pin(storage, reg, target, unless_aliased=True)
        raise


def _gate(registry: Registry, source: Record, alias: str, check: Check) -> None:
    """Refuse before any copy when ``check`` refuses ``source`` against the alias's holder (unless the
    holder is ``source`` or a pin of it: setting the alias again is no move)."""
    found = registry.records.query(Query(project=source.project, alias=alias, limit=1))
    holder = found[0] if found else None
    if holder is not None and source.id in (holder.id, str(holder.metadata.get("pinned_from"))):
        return
    reason = check(source, holder)
    if reason is not None:
        raise refused(source, alias, reason)


def drop_alias(project: str, alias: str, *, registry: RegistryArg = None) -> Record | None:
    """Delete ``project``'s alias ``alias``; the record it named, as it is now (``None`` if it is gone).

    Raises:
        RecordNotFoundError: the project has no such alias.
    """
    reg = shared_registry(registry, create=False)
    named = reg.records.query(Query(project=project, alias=alias)) if ALIAS_PATTERN.fullmatch(alias) else []
    reg.labels.remove_alias(project, alias)
    try:
        return reg.records.get(named[0].id) if named else None
    except RecordNotFoundError:
        return None


def alias_note(source: Record, record: Record, alias: str) -> str:
    """What setting ``alias`` on ``source`` did, ``record`` being where it went: a sentence for people."""
    if record.id == source.id:
        return f"{record.project}@{alias} is now record {record.id} ({record.name!r})"
    return (
        f"record {source.id} ({source.name!r}) pinned as record {record.id}, alias {record.project}@{alias} now on "
        f"record {record.id}: later saves never evict it"
    )


def unalias_note(project: str, alias: str, record: Record | None) -> str:
    """What removing ``project@alias`` did, ``record`` being the record it named: whether a copy stays.

    Examples:
        >>> unalias_note("p", "production", None)
        'alias p@production removed'
    """
    done = f"alias {project}@{alias} removed"
    if record is None or record.aliases:
        return done
    if is_archived(record):
        return (
            f"{done}; record {record.id} ({record.name!r}) is an archive entry with no alias again: keep_every_max "
            f"may delete it (`tracker-saver models pin {record.id}` keeps a copy of your own)"
        )
    if not kept_for_alias(record):
        return done
    return (
        f"{done}; record {record.id} ({record.name!r}), the copy pinned when an alias was set, stays pinned "
        f"with no alias: `tracker-saver models unpin {record.id}` deletes it"
    )
