"""Aliases that keep what they name: at alias time and when a save evicts an aliased slot record.

A slot record is evicted when its slot is reused, so an alias left on it would soon name
nothing loadable. Setting an alias on a live (or revived) slot record therefore pins the
checkpoint first (:func:`~tracker_saver.lifecycle.pins.keep_copy`, ``kept_by="alias <name>"``)
and sets the alias on the pinned record; an alias on a pinned record is just set. Removing the
last alias of such a copy keeps the copy: deleting bytes is a separate, explicit ``unpin``. A
gated move (``check``, a promotion gate) checks the record named before anything is copied, so a
refused gate pins nothing; the move itself is :func:`~tracker_saver.lifecycle.gates.move_alias`'s
compare-and-set.

An alias set another way stays on the slot record: one set by an earlier release (0.1.0 aliased
slot records as they were), by the registry's own API, by a tracker's web UI or SDK. So the save
that replaces a slot calls :func:`keep_aliased` at the last moment before the slot's bytes change
(before DESIGN's step 6, in the saver that holds the stream's claim): if the record it evicts
holds a user alias, the bytes are copied to a pin key and each alias moves to that pin
(``kept_by: "alias NAME"``, as at alias time). A save that then fails leaves the pin and the
alias on it: the same bytes, kept.

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
import logging
from collections.abc import Callable

from tracker_saver.core.errors import PromotionRefusedError, RecordNotFoundError
from tracker_saver.core.records import ALIAS_PATTERN, LOADABLE, Record, RecordState, check_alias
from tracker_saver.lifecycle.gates import move_alias
from tracker_saver.lifecycle.pins import (
    KEPT_BY,
    OwnerCheck,
    alias_reason,
    drop_pin,
    is_archived,
    keep_copy,
    kept_for_alias,
)
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.events import Check, refused
from tracker_saver.storage import Storage

__all__ = ["Locate", "alias_note", "drop_alias", "keep_alias", "keep_aliased", "unalias_note"]

log = logging.getLogger(__name__)

#: The storage a record's bytes are in (the callers pass :func:`tracker_saver.save.locate.locate`'s).
Locate = Callable[[Record], Storage]


def keep_alias(
    registry: Registry,
    source: Record,
    alias: str,
    *,
    locate: Locate,
    owner: OwnerCheck,
    check: Check | None = None,
) -> Record:
    """Point ``alias`` at the record, pinning it first when it is a slot record; returns the record it now names.

    A live or revived slot record is copied to a pin key (server-side on S3, verified) unless a
    pin of the same record exists; the alias goes on that pinned record, whose ``pinned_from`` is
    the slot record. A pinned record gets the alias as it is. With ``check``, the record named is
    checked against the alias's holder first, and the move is a compare-and-set; a copy made for a
    move that someone else's move then beat is deleted again.

    Args:
        registry: the record's registry.
        source: the record named.
        alias: the user alias.
        locate: opens the storage of ``source``'s bytes, when a copy is made.
        owner: checks the stream's owner before a copy is written (:data:`~tracker_saver.lifecycle.pins.OwnerCheck`).
        check: a promotion gate.

    Raises:
        ConfigError: a derived or malformed alias; nothing is copied.
        RegistryError: the record is not loadable (evicted, failed, pending).
        IntegrityError: the slot was overwritten while it was copied; nothing is aliased.
        PromotionRefusedError: ``check`` refused; nothing is copied, the alias stays where it is.
    """
    check_alias(alias)
    if check is not None:
        _gate(registry, source, alias, check)
    if source.state not in LOADABLE or source.slot is None:
        return (
            registry.labels.set_alias(source.id, alias)
            if check is None
            else move_alias(registry, source.id, alias, check=check)
        )
    storage = locate(source)
    before = {
        r.id
        for r in registry.records.query(Query(project=source.project, run=source.run, states=(RecordState.PINNED,)))
    }
    target = keep_copy(storage, registry, source, owner=owner, extra={KEPT_BY: alias_reason(alias)})
    if check is None:
        return registry.labels.set_alias(target.id, alias)
    try:
        return move_alias(registry, target.id, alias, check=check)
    except PromotionRefusedError:
        if target.id not in before:  # the copy this move made, unless another alias went on it meanwhile
            with contextlib.suppress(RecordNotFoundError):
                drop_pin(storage, registry, target, unless_aliased=True)
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


def keep_aliased(storage: Storage, registry: Registry, replaced: Record, *, owner: OwnerCheck) -> Record | None:
    """Pin the slot record a save is about to evict if it holds a user alias, and move its aliases to the pin.

    The registry is asked for the record's user aliases now (the slot allocator's copy may predate
    an alias someone set since): one request on MLflow. Only when there is one is the record read
    again, for the name and tags the pin copies. The caller holds the stream's claim and has not
    changed the slot's bytes yet, so the copy is checked by size, not hashed again
    (``keep_copy(verify=False)``). A pin of the same record made before (a person's pin, say) is reused.

    Args:
        storage: the stream's storage.
        registry: the stream's registry.
        replaced: the live record whose slot the save writes.
        owner: checks the stream's owner before the copy is written (the saver's ``ensure_owner``).

    Returns:
        The pinned record the aliases now name, or ``None`` when the record holds no user alias.

    Raises:
        StorageError: the copy could not be made; the save fails before its commit point and the
            record stays live with its aliases.
        IntegrityError: the copy differs from the record (the slot was changed behind the claim).

    Note:
        Runs where the save's step 6 runs: on the upload worker with ``async_upload``.
    """
    try:
        aliases = registry.labels.user_aliases(replaced)
        if not aliases:
            return None
        current = registry.records.get(replaced.id)
    except RecordNotFoundError:  # deleted behind our back (a tracker's UI): it holds no alias; the save goes on
        return None
    if current.state not in LOADABLE or current.slot is None:
        return None
    pin = current
    for alias in aliases:  # the first alias makes the copy; the others find it (reuse)
        pin = keep_copy(storage, registry, current, owner=owner, extra={KEPT_BY: alias_reason(alias)}, verify=False)
        pin = registry.labels.set_alias(pin.id, alias)
    what = "record %s (%r) holds alias %s and its slot is saved over: pinned as record %s, which the alias now names"
    log.info(what, current.id, current.name, ", ".join(aliases), pin.id)
    return pin


def drop_alias(registry: Registry, project: str, alias: str) -> Record | None:
    """Delete ``project``'s alias ``alias``; the record it named, as it is now (``None`` if it is gone).

    Raises:
        RecordNotFoundError: the project has no such alias.
    """
    named = registry.records.query(Query(project=project, alias=alias)) if ALIAS_PATTERN.fullmatch(alias) else []
    registry.labels.remove_alias(project, alias)
    try:
        return registry.records.get(named[0].id) if named else None
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
